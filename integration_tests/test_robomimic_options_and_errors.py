"""compressed_cache options (cache_dir, max_memory) and clear errors on bad input, with real robomimic."""

import dataclasses
import gc
import glob
import os
import re
import shutil

import h5py
import numpy as np
import pytest
from robomimic_helpers import assert_same_sample, make_config, obs_keys

from robo_loaders_plugin import BackendOptionError, RoboLoadersError, UnknownBackendError
from robo_loaders_plugin.robomimic import dataset_factory
from robo_loaders_plugin.storage import ramfile


def _cc(path, **kw):
    cfg = make_config(path, backend="compressed_cache", seq_length=5, **kw)
    return cfg


def test_cache_dir_persists_and_is_reused(tiny_hdf5, tmp_path, capsys):
    cfg = _cc(tiny_hdf5, backend_kwargs={"cache_dir": str(tmp_path / "cache")})
    first = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")
    files = glob.glob(str(tmp_path / "cache" / "*" / "*.rlc"))
    # one entry, its store file, no temporary left behind
    assert len(files) == 1 and files[0].endswith("/store.rlc") and len(glob.glob(str(tmp_path / "cache" / "*"))) == 1
    mtime = os.path.getmtime(files[0])
    second = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")
    assert "reused" in second.serving.summary and "reused" not in first.serving.summary
    assert os.path.getmtime(files[0]) == mtime
    with cfg.values_unlocked():
        cfg.train.data_backend = None
        cfg.train.data_backend_kwargs = {}
    native = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")
    for i in range(0, len(first), 7):
        assert_same_sample(second[i], native[i])
    # other options -> another cache file; the dataset file changing -> rebuilt
    cfg2 = _cc(tiny_hdf5, backend_kwargs={"cache_dir": str(tmp_path / "cache")}, hdf5_cache_mode=None)
    dataset_factory(cfg2, obs_keys(cfg2), filter_by_attribute="train")
    assert len(glob.glob(str(tmp_path / "cache" / "*" / "store.rlc"))) == 2
    copy = str(tmp_path / "copy.hdf5")
    shutil.copy(tiny_hdf5, copy)
    cfg3 = _cc(copy, backend_kwargs={"cache_dir": str(tmp_path / "cache3")})
    dataset_factory(cfg3, obs_keys(cfg3))
    with h5py.File(copy, "r+") as f:
        f["data/demo_0/actions"][0, 0] += 1.0
    os.utime(copy, ns=(os.stat(copy).st_atime_ns, os.stat(copy).st_mtime_ns + 10**9))
    again = dataset_factory(cfg3, obs_keys(cfg3))
    assert "reused" not in again.serving.summary
    assert again[0]["actions"][0, 0] == np.float32(h5py.File(copy, "r")["data/demo_0/actions"][0, 0])
    assert glob.glob(str(tmp_path / "cache3" / "*")) == [again.frames.directory]  # the stale copy was removed
    # changed again, this time with its mtime restored (cp -p, rsync -t): still rebuilt, not served stale
    st = os.stat(copy)
    with h5py.File(copy, "r+") as f:
        f["data/demo_1/actions"][2, 3] = 123.0
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(copy).st_size == st.st_size
    del again
    fourth = dataset_factory(cfg3, obs_keys(cfg3))
    assert "reused" not in fourth.serving.summary
    demo1 = fourth.windows.first[1] + 2  # demo_1's sample 2 starts at step 2
    assert fourth[int(demo1)]["actions"][0, 3] == np.float32(123.0)
    assert glob.glob(str(tmp_path / "cache3" / "*")) == [fourth.frames.directory]


def test_a_file_replaced_while_its_store_is_built_keeps_no_store(tmp_path, monkeypatch):
    """A reviewer's reproduction: the file replaced (mv) while its compressed store was written left a store named
    for the first version holding the second's actions, reused without a word for the first version moved back
    with its mtime. Now the build is refused in one line and nothing is kept; the next start builds from the file
    as it is. Control: the store built from the unchanged file is kept and reused."""
    from robo_loaders_plugin import StaleSourceError
    from robo_loaders_plugin.backends.compressed_cache import episode_store
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    path = write_robomimic_hdf5(
        str(tmp_path / "data.hdf5"), demos=2, image_size=16, cameras=1, seed=3, next_obs=False, progress=False
    )
    v2 = str(tmp_path / "v2.hdf5")
    shutil.copyfile(path, v2)
    with h5py.File(v2, "r+") as f:
        f["data/demo_0/actions"][...] += 100.0
    cfg = make_config(
        path,
        backend="compressed_cache",
        rgb=["agentview_image"],
        seq_length=1,
        backend_kwargs={"cache_dir": str(tmp_path / "cache")},
        hdf5_load_next_obs=False,
    )
    writer_init = episode_store.StoreWriter.__init__

    def swapped_as_written(self, *a, **k):
        os.replace(path, str(tmp_path / "v1.hdf5"))
        os.replace(v2, path)
        writer_init(self, *a, **k)

    monkeypatch.setattr(episode_store.StoreWriter, "__init__", swapped_as_written)
    with pytest.raises(StaleSourceError, match=r"data\.hdf5 changed while the .* was built from it"):
        dataset_factory(cfg, obs_keys(cfg))
    monkeypatch.setattr(episode_store.StoreWriter, "__init__", writer_init)
    assert [p for p in glob.glob(str(tmp_path / "cache" / "*")) if "compressed" in os.path.basename(p)] == []
    built = dataset_factory(cfg, obs_keys(cfg))  # control: the file as it is now, built and kept
    assert "reused" not in built.serving.summary and float(built[0]["actions"][0, 0]) > 50
    assert "reused" in dataset_factory(cfg, obs_keys(cfg)).serving.summary


def test_a_frame_the_old_digest_did_not_sample_edited_with_the_mtime_restored_rebuilds(tmp_path):
    """Issue 23 A5: the digest sampled the first, middle and last frame of each camera; one pixel of another frame
    changed with the mtime restored (cp -p, rsync -t) reused the cache and served the old frame. Now the stat
    differs (ctime), the whole file is hashed, the cache is rebuilt and the new pixel served."""
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    path = write_robomimic_hdf5(
        str(tmp_path / "frames.hdf5"),
        demos=3,
        image_size=32,
        cameras=1,
        seed=5,
        min_length=20,
        max_length=20,
        valid_fraction=0.34,
        next_obs=False,
        progress=False,
    )
    cfg = make_config(
        path,
        backend="compressed_cache",
        rgb=["agentview_image"],
        seq_length=1,
        backend_kwargs={"cache_dir": str(tmp_path / "cache")},
        hdf5_load_next_obs=False,
    )
    first = dataset_factory(cfg, obs_keys(cfg))
    assert "reused" in dataset_factory(cfg, obs_keys(cfg)).serving.summary  # negative control: unchanged, reused
    step = 7  # not frame 0, 10 or 19 of demo_0 (20 steps): bytes the sampled digest never read
    old = first[step]["obs"]["agentview_image"].copy()
    st = os.stat(path)
    with h5py.File(path, "r+") as f:
        f["data/demo_0/obs/agentview_image"][step, 5, 5, 0] ^= 0xFF
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns
    del first
    again = dataset_factory(cfg, obs_keys(cfg))
    assert "reused" not in again.serving.summary
    new = again[step]["obs"]["agentview_image"]
    assert not np.array_equal(new, old)  # the edited frame, not the cached one
    with cfg.values_unlocked():
        cfg.train.data_backend = None
        cfg.train.data_backend_kwargs = {}
    assert_same_sample(again[step], dataset_factory(cfg, obs_keys(cfg))[step])
    assert glob.glob(str(tmp_path / "cache" / "*")) == [again.frames.directory]  # the stale copy was removed


def test_cache_dir_that_is_a_file_is_refused(tiny_hdf5, tmp_path):
    (tmp_path / "file").write_text("x")
    cfg = _cc(tiny_hdf5, backend_kwargs={"cache_dir": str(tmp_path / "file")})
    with pytest.raises(
        RoboLoadersError,
        match=r"train.data_backend_kwargs.cache_dir must be a directory you can "
        r"write to: '.*file' is a file, not a directory",
    ):
        dataset_factory(cfg, obs_keys(cfg))


BUILD = """
import sys, time
sys.path.insert(0, sys.argv[3])
from robomimic_helpers import make_config, obs_keys
from robo_loaders_plugin.robomimic import dataset_factory
cfg = make_config(sys.argv[1], backend="compressed_cache", backend_kwargs={"cache_dir": sys.argv[2]}, seq_length=5)
ds = dataset_factory(cfg, obs_keys(cfg))
print("RESULT", "reused" in ds.serving.summary, ds.frames.directory, flush=True)
"""


def test_two_runs_started_together_build_once(tiny_hdf5, tmp_path):
    """Two training runs with the same cache_dir: one builds, the other waits for it and reuses its cache."""
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILD, tiny_hdf5, str(tmp_path / "cache"), here],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    results = [next(line.split()[1:] for line in o.splitlines() if line.startswith("RESULT")) for o in outs]
    assert sorted(r[0] for r in results) == ["False", "True"], outs  # one built, one reused
    assert results[0][1] == results[1][1] and glob.glob(str(tmp_path / "cache" / "*")) == [results[0][1]]


@pytest.mark.parametrize("where", ["cache_dir", "kept by default"])
def test_corrupt_persisted_cache_is_rebuilt(tiny_hdf5, tmp_path, monkeypatch, where):
    """A store damaged between runs, in a given cache_dir or kept in the default cache root (``keep``): the next
    start rebuilds it rather than serving it."""
    if where == "cache_dir":
        cfg = _cc(tiny_hdf5, backend_kwargs={"cache_dir": str(tmp_path)})
    else:
        monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path))
        cfg = _cc(tiny_hdf5)
    ds = dataset_factory(cfg, obs_keys(cfg))
    path = ds.frames.inner.store.path
    assert path.startswith(str(tmp_path)), path
    with open(path, "r+b") as f:
        f.seek(-20, os.SEEK_END)
        f.write(b"garbage!garbage!")
    again = dataset_factory(cfg, obs_keys(cfg))
    assert "reused" not in again.serving.summary
    assert_same_sample(again[3], ds[3])


def test_ram_cache_file_is_removed_with_the_dataset(tiny_hdf5):
    import gc

    cfg = _cc(tiny_hdf5, backend_kwargs={"keep": False})
    ds = dataset_factory(cfg, obs_keys(cfg))
    path = ds.frames.inner.store.path
    assert path.startswith("/dev/shm") and os.path.exists(path)
    del ds
    gc.collect()
    assert not os.path.exists(path)


def test_max_memory(tiny_hdf5, capsys):
    """A RAM cache (``keep: false``) max_memory cannot hold is not refused any more (issue 21): it is file-backed on
    disk, said in the log, nothing left in /dev/shm (integration_tests/test_scale_footprint.py checks its
    samples)."""
    cfg = _cc(tiny_hdf5, backend_kwargs={"max_memory": "10KB", "keep": False})
    spilled = dataset_factory(cfg, obs_keys(cfg))
    assert "spilled to disk: train.data_backend_kwargs.max_memory=10.0 kB" in capsys.readouterr().out
    assert not spilled.frames.inner.store.path.startswith(ramfile.ram_root())
    # this process's temporaries only: the directory is shared with every other process of this user (another
    # pytest worker building its own RAM cache had one there when CI ran this)
    assert not glob.glob(os.path.join(ramfile.ram_root(), f"*.tmp-{os.getpid()}-*"))
    cfg = _cc(tiny_hdf5, backend_kwargs={"max_memory": "1GB", "keep": False})
    assert dataset_factory(cfg, obs_keys(cfg)).frames.inner.store.path.startswith(ramfile.ram_root())


def test_unknown_backend_lists_registered_names(tiny_hdf5):
    cfg = make_config(tiny_hdf5, backend="compresed_cache")
    with pytest.raises(UnknownBackendError) as e:
        dataset_factory(cfg, obs_keys(cfg))
    assert str(e.value).startswith(
        "train.data_backend: unknown data backend 'compresed_cache' (did you mean 'compressed_cache'?)"
    ) and "native" in str(e.value)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"codek": "lz4"}, "unknown option.*codek.*valid options.*codec"),
        (
            {"level": "high"},
            r"train.data_backend_kwargs.level must be an integer, got str 'high' \(backend 'compressed_cache'\)",
        ),
        ({"max_memory": True}, "max_memory"),
        ({"max_memory": "lots"}, "max_memory"),
        ({"codec": "brotli"}, "codec must be one of 'lz4hc', 'lz4', 'zstd', 'blosclz', got 'brotli'"),
        ({"level": 42}, r"level must be 0\.\.9, got 42"),
        ({"build_workers": 0}, "build_workers must be 1..256, got 0"),
        ({"loader": "processes"}, "loader must be one of 'threads', 'dataloader'"),
    ],
)
def test_bad_backend_kwargs(tiny_hdf5, kwargs, match, monkeypatch):
    """Refused before any data is read: the HDF5 is never opened."""
    from robo_loaders_plugin.sources import robomimic_hdf5

    def no_reads(*a, **k):
        raise AssertionError("the source was opened before the options were checked")

    monkeypatch.setattr(robomimic_hdf5, "open_hdf5", no_reads)
    cfg = make_config(tiny_hdf5, backend="compressed_cache", backend_kwargs=kwargs)
    with pytest.raises(BackendOptionError, match=match):
        dataset_factory(cfg, obs_keys(cfg))


def test_native_rejects_kwargs(tiny_hdf5):
    cfg = make_config(tiny_hdf5, backend="native", backend_kwargs={"codec": "lz4"})
    with pytest.raises(BackendOptionError, match="native"):
        dataset_factory(cfg, obs_keys(cfg))


def test_missing_obs_key(tiny_hdf5):
    cfg = make_config(tiny_hdf5, backend="compressed_cache", low_dim=["robot0_eef_pos", "no_such_key"])
    with pytest.raises(RoboLoadersError, match=r"obs/no_such_key is missing.*robot0_eef_pos"):
        dataset_factory(cfg, obs_keys(cfg))


def test_missing_mask_key(tiny_hdf5):
    cfg = make_config(tiny_hdf5, backend="compressed_cache")
    with pytest.raises(RoboLoadersError, match=r"filter key 'nope' not found.*train.*valid"):
        dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="nope")


@pytest.mark.parametrize("backend", ["compressed_cache", "datapipe", "gpu_resampler", "video_stream"])
def test_a_mask_listing_a_demo_twice_is_refused_naming_it(tiny_hdf5, tmp_path, backend):
    """robomimic indexes a demo listed twice from its second listing's start and serves other windows (a reviewer's
    reproduction: every backend served the demo twice, silently other samples than robomimic's). Control: the same
    mask listing each demo once is served."""
    import shutil

    import h5py

    path = str(tmp_path / "dup.hdf5")
    shutil.copy(tiny_hdf5, path)
    with h5py.File(path, "a") as f:
        f["mask/dup"] = np.array([b"demo_2", b"demo_1", b"demo_2"])
        f["mask/once"] = np.array([b"demo_2", b"demo_1"])
    cfg = make_config(path, backend=backend)
    with pytest.raises(RoboLoadersError, match=r"dup\.hdf5: mask/dup lists \['demo_2'\] more than once"):
        dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="dup")
    assert len(dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="once")) > 0


def test_missing_next_obs(tmp_path):
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    path = write_robomimic_hdf5(str(tmp_path / "nonext.hdf5"), demos=2, image_size=8, next_obs=False, progress=False)
    cfg = make_config(path, backend="compressed_cache", hdf5_load_next_obs=True)
    with pytest.raises(RoboLoadersError, match="next_obs"):
        dataset_factory(cfg, obs_keys(cfg))


def test_missing_dataset_key_without_cache_mode(tiny_hdf5):
    cfg = make_config(
        tiny_hdf5, backend="compressed_cache", hdf5_cache_mode=None, dataset_keys=("actions", "not_in_file")
    )
    with pytest.raises(RoboLoadersError, match="not_in_file"):
        dataset_factory(cfg, obs_keys(cfg))


def test_truncated_hdf5(tiny_hdf5, tmp_path):
    path = str(tmp_path / "truncated.hdf5")
    with open(tiny_hdf5, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read(os.path.getsize(tiny_hdf5) // 2))
    cfg = make_config(path, backend="compressed_cache")
    with pytest.raises(RoboLoadersError, match=r"truncated\.hdf5.*(truncated|corrupt)"):
        dataset_factory(cfg, obs_keys(cfg))


def test_corrupt_hdf5(tiny_hdf5, tmp_path):
    path = str(tmp_path / "corrupt.hdf5")
    shutil.copy(tiny_hdf5, path)
    with open(path, "r+b") as f:
        f.write(b"\0" * 64)  # superblock gone
    cfg = make_config(path, backend="compressed_cache")
    with pytest.raises(RoboLoadersError, match=r"corrupt\.hdf5.*truncated, corrupt"):
        dataset_factory(cfg, obs_keys(cfg))


def test_missing_file(tmp_path):
    cfg = make_config(str(tmp_path / "nope.hdf5"), backend="compressed_cache")
    with pytest.raises(RoboLoadersError, match=re.escape("nope.hdf5 does not exist")):
        dataset_factory(cfg, obs_keys(cfg))


def test_normalize_obs_is_refused(tiny_hdf5):
    cfg = make_config(tiny_hdf5, backend="compressed_cache", hdf5_normalize_obs=True)
    with pytest.raises(RoboLoadersError, match="hdf5_normalize_obs"):
        dataset_factory(cfg, obs_keys(cfg))


@pytest.mark.parametrize("backend", ["compressed_cache", "datapipe", "video_stream", "gpu_resampler"])
@pytest.mark.parametrize(
    "settings,match",
    [
        (dict(frame_stack=5, pad_frame_stack=False, seq_length=1), r"has 3 steps: shorter than frame_stack=5"),
        (dict(seq_length=5, pad_seq_length=False), r"has 3 steps: too short for frame_stack=1, seq_length=5"),
    ],
)
def test_a_demo_too_short_without_padding_is_refused_naming_it_before_anything_is_built(
    tmp_path, backend, settings, match
):
    """robomimic's SequenceDataset asserts on such a demo; every backend refuses it in one line naming the file, the
    demo and the train.* settings (a reviewer's reproduction: "a demo of length 3", in a file of thousands), before
    it builds a store or converts the file. Control: the demo after it, long enough, is served."""
    import h5py

    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    path = write_robomimic_hdf5(
        str(tmp_path / "short.hdf5"), demos=3, image_size=8, min_length=12, max_length=12, progress=False
    )
    with h5py.File(path, "r+") as f:  # demo_1 cut to 3 steps
        demo = f["data/demo_1"]
        for name in list(_datasets_of(demo)):
            data = demo[name][:3]
            del demo[name]
            demo[name] = data
        demo.attrs["num_samples"] = 3
    cache = tmp_path / "cache"
    kwargs = {"device": "cpu"} if backend == "gpu_resampler" else {}
    cfg = make_config(path, backend=backend, backend_kwargs={**kwargs, "cache_dir": str(cache)}, **settings)
    with pytest.raises(RoboLoadersError, match=f"short.hdf5: demo_1 {match}.*train.hdf5_filter_key") as err:
        dataset_factory(cfg, obs_keys(cfg))
    assert "\n" not in str(err.value)
    built = [p.name for p in cache.iterdir() if p.name != ".validated"] if cache.exists() else []
    assert built == []  # nothing built or converted (the file's validation record only)
    with h5py.File(path, "r+") as f:  # control: without demo_1 the file is served
        f["mask/long"] = np.array([b"demo_0", b"demo_2"])
    with cfg.values_unlocked():
        cfg.train.hdf5_filter_key = "long"
    assert len(dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="long")) > 0


def _datasets_of(group, prefix=""):
    for name, item in group.items():
        if isinstance(item, h5py.Dataset):
            yield prefix + name
        else:
            yield from _datasets_of(item, prefix + name + "/")


def test_inconsistent_dtype_across_demos(tiny_hdf5, tmp_path):
    path = str(tmp_path / "mixed.hdf5")
    shutil.copy(tiny_hdf5, path)
    with h5py.File(path, "r+") as f:
        a = f["data/demo_2/obs/object"][()]
        del f["data/demo_2/obs/object"]
        f["data/demo_2/obs/object"] = a.astype(np.float32)
    cfg = make_config(path, backend="compressed_cache", low_dim=["object"])
    with pytest.raises(RoboLoadersError, match="demo_2/obs/object"):
        dataset_factory(cfg, obs_keys(cfg))


@pytest.mark.parametrize("extra", [30, -5])
def test_num_samples_that_disagree_with_the_arrays_are_refused_by_every_backend(tiny_hdf5, tmp_path, extra):
    """Issue 23 A6: robomimic indexes a demo by its num_samples attribute, the shards by its arrays, so a file where
    they disagree was served as two datasets (datapipe 148 windows, native 1124); compressed_cache alone refused
    it. One validation of the source (RobomimicHdf5) now refuses it for every backend and for convert."""
    path = str(tmp_path / "lying.hdf5")
    shutil.copy(tiny_hdf5, path)
    with h5py.File(path, "r+") as f:
        rows = f["data/demo_3/actions"].shape[0]
        f["data/demo_3"].attrs["num_samples"] = rows + extra
    native_cfg = make_config(path, seq_length=5, hdf5_cache_mode=None)  # "all" would crash caching the windows
    arrays_cfg = make_config(tiny_hdf5, seq_length=5, hdf5_cache_mode=None)
    if extra > 0:  # the attack is real: native robomimic serves windows the arrays do not have
        assert (
            len(dataset_factory(native_cfg, obs_keys(native_cfg)))
            == len(dataset_factory(arrays_cfg, obs_keys(arrays_cfg))) + extra
        )
    message = (
        rf"lying\.hdf5: data/demo_3/actions has {rows} rows \(shape \({rows}, 7\)\) but data/demo_3 has "
        rf"num_samples={rows + extra}; .*fix the attribute or the arrays"
    )
    for backend in ("compressed_cache", "datapipe", "gpu_resampler", "video_stream"):
        cfg = make_config(path, backend=backend, seq_length=5)
        with pytest.raises(RoboLoadersError, match=message):
            dataset_factory(cfg, obs_keys(cfg))
    from robo_loaders_plugin.robomimic.convert import convert_robomimic

    with pytest.raises(RoboLoadersError, match=message):
        convert_robomimic(path, str(tmp_path / "shards"), progress=False)
    assert not os.path.exists(tmp_path / "shards" / "index.json")
    cfg = make_config(tiny_hdf5, backend="datapipe", seq_length=5)  # negative control: the intact file serves
    assert len(dataset_factory(cfg, obs_keys(cfg))) == len(dataset_factory(arrays_cfg, obs_keys(arrays_cfg)))


@pytest.mark.parametrize("backend", ["compressed_cache", "datapipe", "gpu_resampler", "video_stream"])
def test_per_demo_metadata_of_another_length_is_served_as_robomimic_serves_the_file(tiny_hdf5, tmp_path, backend):
    """MimicGen writes ``data/demo_i/src_demo_inds`` (one entry per subtask) beside the per-step arrays; robomimic
    never reads it and trains on the file, which every backend refused as inconsistent (a reviewer's
    reproduction). Served as robomimic serves it (video_stream's frames are lossy: its other keys); the same
    dataset named in ``train.dataset_keys`` is refused naming it (control)."""
    path = str(tmp_path / "mimicgen.hdf5")
    shutil.copy(tiny_hdf5, path)
    with h5py.File(path, "r+") as f:
        for demo in f["data"]:
            f[f"data/{demo}"].create_dataset("src_demo_inds", data=np.array([3, 7]))
            # an observation the config does not serve, of another length: datapipe's and video_stream's conversion
            # on first use refused it (a reviewer's reproduction)
            f[f"data/{demo}"].create_dataset("obs/extra", data=np.zeros((3, 2), np.float32))
    native_cfg = make_config(path, seq_length=5)
    theirs = dataset_factory(native_cfg, obs_keys(native_cfg))
    cfg = make_config(path, backend=backend, seq_length=5)
    ours = dataset_factory(cfg, obs_keys(cfg))
    assert len(ours) == len(theirs)
    for i in (0, len(theirs) // 2, len(theirs) - 1):
        mine, want = ours[i], theirs[i]
        if backend == "video_stream":
            for part in [p for p in ("obs", "next_obs", "goal_obs") if p in want]:
                mine[part] = {k: v for k, v in mine[part].items() if "image" not in k}
                want[part] = {k: v for k, v in want[part].items() if "image" not in k}
        assert_same_sample(mine, want, f"{backend}[{i}]")
    named = make_config(path, backend=backend, seq_length=5, dataset_keys=("actions", "src_demo_inds"))
    with pytest.raises(RoboLoadersError, match=r"data/demo_\d+/src_demo_inds has 2 rows \(shape \(2,\)\)"):
        dataset_factory(named, obs_keys(named))


@pytest.mark.parametrize("value,shown", [("abc", "'abc'"), (np.array([40, 41]), "array([40, 41])")])
def test_a_num_samples_that_is_no_number_is_one_line_naming_file_demo_and_attribute(tiny_hdf5, tmp_path, value, shown):
    """Issue 30 item 10b: ``num_samples="abc"`` said "invalid literal for int() with base 10: 'abc'" naming no
    file, and ``robo-loaders convert`` printed a traceback for it. Every backend and ``convert`` (the command: one
    line on stderr, a non-zero status) name the file, the demo and the attribute. Control: the intact file
    converts."""
    import subprocess
    import sys

    path = str(tmp_path / "abc.hdf5")
    shutil.copy(tiny_hdf5, path)
    with h5py.File(path, "r+") as f:
        f["data/demo_2"].attrs["num_samples"] = value
    message = (
        f"{path}: data/demo_2 has num_samples={shown}, not a number of steps; robomimic indexes the demo by "
        "it: set it to the demo's number of steps (the rows of its arrays)"
    )
    for backend in ("compressed_cache", "datapipe", "gpu_resampler", "video_stream"):
        cfg = make_config(path, backend=backend, seq_length=5)
        with pytest.raises(RoboLoadersError) as exc:
            dataset_factory(cfg, obs_keys(cfg))
        assert str(exc.value) == message, backend
    cli = os.path.join(os.path.dirname(sys.executable), "robo-loaders")
    p = subprocess.run(
        [cli, "convert", "robomimic", path, str(tmp_path / "out")], capture_output=True, text=True, timeout=300
    )
    assert (p.returncode, p.stdout, p.stderr) == (2, "", f"error: {message}\n")
    p = subprocess.run(
        [cli, "convert", "robomimic", tiny_hdf5, str(tmp_path / "out")], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0 and "wrote" in p.stdout, p.stdout + p.stderr


def test_batch_arrays_are_recycled_for_every_field_of_a_shape(tiny_hdf5):
    """Two cameras of one size: two same-shape arrays per batch share a pool key. Ten batches held at once (20 such
    arrays, as prefetching workers and a training step can hold) and then dropped are all kept for reuse, so the next
    ten are assembled into them (a pool of 12 per shape page-faulted fresh arrays for the rest)."""
    cfg = _cc(tiny_hdf5)
    ds = dataset_factory(cfg, obs_keys(cfg))
    cams = ("agentview_image", "robot0_eye_in_hand_image")
    batches = [list(range(b * 4, b * 4 + 4)) for b in range(10)]

    def pointers(held):
        return {b["obs"][k].data_ptr() for b in held for k in cams}

    held = [ds.collate(ix) for ix in batches]
    assert len(pointers(held)) == 20 and ds[0]["obs"][cams[0]].shape == ds[0]["obs"][cams[1]].shape
    del held
    again = [ds.collate(ix) for ix in batches]
    pooled = {buf.ctypes.data for bufs in ds.buffer_pool._free.values() for buf in bufs}
    assert len(pointers(again)) == 20 and pointers(again) <= pooled, (
        f"{len(pointers(again) - pooled)} of 20 image arrays are not the pool's (allocated fresh, never reused)"
    )
    for b in (0, 9):  # and written again with the right samples
        for j, i in enumerate(batches[b]):
            for k in cams:
                assert np.array_equal(again[b]["obs"][k][j].numpy(), ds[i]["obs"][k])


def test_without_cache_dir_the_store_is_kept_on_disk_and_reused_at_the_next_start(tiny_hdf5, tmp_path, monkeypatch):
    """Issue 45 item 2: ``keep`` (default): the store goes into the default cache root and the next start maps it
    (nothing read again), its samples the native ones. Control: ``keep: false`` builds a RAM store, in no cache
    root, rebuilt at every start."""
    root = tmp_path / "default-root"
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(root))
    cfg = _cc(tiny_hdf5)
    first = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")
    stores = glob.glob(str(root / "*" / "store.rlc"))
    assert len(stores) == 1 and first.frames.directory == os.path.dirname(stores[0])
    assert "kept between runs" in first.serving.summary and "reused" not in first.serving.summary
    second = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")
    assert "reused" in second.serving.summary and second.frames.directory == first.frames.directory
    with cfg.values_unlocked():
        cfg.train.data_backend = None
        cfg.train.data_backend_kwargs = {}
    native = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")
    for i in range(0, len(second), 5):
        assert_same_sample(second[i], native[i])
    ram = _cc(tiny_hdf5, backend_kwargs={"keep": False})
    for _ in range(2):  # one run after the other: the RAM file goes with its last user
        ds = dataset_factory(ram, obs_keys(ram), filter_by_attribute="train")
        assert "RAM file" in ds.serving.summary and "reused" not in ds.serving.summary, ds.serving.summary
        assert not ds.frames.directory.startswith(str(root))
        ds.close()
    assert glob.glob(str(root / "*" / "store.rlc")) == stores  # the control wrote nothing there


def test_arrays_stored_in_another_file_are_refused_naming_them(tmp_path):
    """A reviewer's reproduction: a demo's actions behind an ``h5py.ExternalLink`` were read through the link, but
    the caches were keyed by this file's stat and bytes, so an edit of the linked file was served stale. Arrays
    stored elsewhere (an external link, a virtual dataset) are refused in one line naming them. Control: the same
    file with the arrays copied in is served."""
    from robo_loaders_plugin import SourceError

    ext = tmp_path / "actions.hdf5"
    with h5py.File(ext, "w") as f:
        f["demo_0"] = np.zeros((5, 7))
    files = {}
    for how in ("link", "virtual", "copied"):
        path = str(tmp_path / f"{how}.hdf5")
        with h5py.File(path, "w") as f:
            g = f.create_group("data/demo_0")
            g.attrs["num_samples"] = 5
            if how == "link":
                g["actions"] = h5py.ExternalLink(str(ext), "demo_0")
            elif how == "virtual":
                layout = h5py.VirtualLayout(shape=(5, 7), dtype="f8")
                layout[:] = h5py.VirtualSource(str(ext), "demo_0", shape=(5, 7))
                g.create_virtual_dataset("actions", layout)
            else:
                g["actions"] = np.zeros((5, 7))
            for group in ("obs", "next_obs"):
                g[f"{group}/robot0_eef_pos"] = np.arange(15.0).reshape(5, 3)
        files[how] = path
    for how, kind in (("link", "an external link"), ("virtual", "a virtual dataset or external storage")):
        cfg = make_config(files[how], rgb=[], low_dim=["robot0_eef_pos"], backend="compressed_cache",
                          backend_kwargs={"cache_dir": str(tmp_path / "cache")}, seq_length=2)  # fmt: skip
        with pytest.raises(SourceError, match=rf"data/demo_0/actions is stored in another file \({kind}\)"):
            dataset_factory(cfg, obs_keys(cfg))
    cfg = make_config(files["copied"], rgb=[], low_dim=["robot0_eef_pos"], backend="compressed_cache",
                      backend_kwargs={"cache_dir": str(tmp_path / "cache")}, seq_length=2)  # fmt: skip
    assert dataset_factory(cfg, obs_keys(cfg))[0]["actions"].shape == (2, 7)


def _ram_machine(tmp_path, monkeypatch):
    """A RAM directory of its own (``tmp_path/ram``) and a cache root, and ``measure_with(shm)``: ``Available.measure``
    as measured but for the RAM directory's free bytes (``shm``) and ample host memory, to patch in."""
    from robo_loaders_plugin.core.footprint import Available

    real = Available.measure.__func__

    def measure_with(shm):
        def measure(cls, **kw):
            return dataclasses.replace(real(cls, **kw), shm_bytes=shm, shm_dir=str(tmp_path / "ram"), host_bytes=10**12)

        return classmethod(measure)

    (tmp_path / "ram").mkdir()
    monkeypatch.setenv("ROBO_LOADERS_RAM_DIR", str(tmp_path / "ram"))
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "cache"))
    return measure_with


def test_a_ram_store_that_fits_only_without_the_sdks_records_goes_to_disk_not_refused(tiny_hdf5, tmp_path, monkeypatch):
    """A reviewer's reproduction on a small tmpfs: the store's worst case fit the RAM directory, the store plus the
    SDK's records (a few kB) did not, so the store was placed in RAM and then refused ("needs 6.8 MB, ... at most
    90% = 6.8 MB may be used") instead of going to disk as docs/scale.md says. The store is now placed with the
    records' room taken out. Control: with room for both it stays in RAM."""
    from robo_loaders_plugin.core.footprint import HEADROOM, Available
    from robo_loaders_plugin.robomimic.integration import choose
    from robo_loaders_plugin.sdk.records import records_bytes
    from robo_loaders_plugin.sdk.serve import _robomimic_source

    cfg = make_config(tiny_hdf5, backend="compressed_cache", backend_kwargs={"keep": False})
    options = choose("compressed_cache", keep=False).options
    src, _, _ = _robomimic_source(cfg, obs_keys(cfg), None, None, options)
    upper = src.size.store_upper_bytes()
    records = records_bytes(len(src.size.lengths), len(src.size.frame_step_bytes) + src.size.other_fields)
    measure_with = _ram_machine(tmp_path, monkeypatch)
    monkeypatch.setattr(Available, "measure", measure_with(int((upper + records / 2) / HEADROOM)))
    ds = dataset_factory(cfg, obs_keys(cfg))
    assert "file-backed cache on local disk" in ds.serving.summary, ds.serving.summary
    monkeypatch.setattr(Available, "measure", measure_with(int((upper + 2 * records) / HEADROOM)))  # control
    assert "a RAM file of at most" in dataset_factory(cfg, obs_keys(cfg)).serving.summary


def test_a_second_run_takes_the_ram_store_another_run_holds_instead_of_a_copy_on_disk(tiny_hdf5, tmp_path, monkeypatch):
    """A reviewer's reproduction on an 8 MB tmpfs: a second run of the same source and options placed its store
    against the RAM left beside the first run's RAM store, found no room, and built a second copy on disk (one
    cache per host, docs/multi-process.md). The store found in RAM is now taken as it is. Control: with no store in
    RAM the same machine places it on disk."""
    from robo_loaders_plugin.core.footprint import Available

    measure_with = _ram_machine(tmp_path, monkeypatch)
    cfg = make_config(tiny_hdf5, backend="compressed_cache", backend_kwargs={"keep": False})
    monkeypatch.setattr(Available, "measure", measure_with(10**10))
    first = dataset_factory(cfg, obs_keys(cfg))
    assert "a RAM file of at most" in first.serving.summary and not first.serving.reused
    monkeypatch.setattr(Available, "measure", measure_with(10**4))  # the RAM left beside it: no room for another
    second = dataset_factory(cfg, obs_keys(cfg))
    assert "another run of this host built and holds" in second.serving.summary, second.serving.summary
    assert second.serving.reused and not list((tmp_path / "cache").glob("compressed-cache-*"))
    for i in (0, len(first) - 1):
        assert_same_sample(second[i], first[i], f"[{i}]")
    del first, second  # the RAM store goes with its last user
    gc.collect()
    control = dataset_factory(cfg, obs_keys(cfg))
    assert "file-backed cache on local disk" in control.serving.summary, control.serving.summary


def test_a_ram_store_of_many_short_demos_and_fields_stays_within_its_worst_case(tmp_path, monkeypatch):
    """A reviewer's reproduction: 60 demos of 5-6 steps with 23 low-dim observations, no camera: the RAM store was
    2.4x the worst case it was placed by (its header's entry per episode and field, and the alignment of 26 fields,
    were counted for 12), so ``max_memory`` set to that worst case, placed in RAM as fitting, was refused half-way
    through the build. Control: a max_memory below the worst case places it on disk."""
    from robo_loaders_plugin.robomimic.integration import choose
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5
    from robo_loaders_plugin.sdk.serve import _robomimic_source
    from robo_loaders_plugin.storage import cache

    monkeypatch.setenv("ROBO_LOADERS_RAM_DIR", str(tmp_path / "ram"))
    (tmp_path / "ram").mkdir()
    path = str(tmp_path / "fields.hdf5")
    write_robomimic_hdf5(path, demos=60, image_size=8, cameras=0, seed=1, min_length=5, max_length=6, progress=False)
    rng = np.random.default_rng(0)
    with h5py.File(path, "r+") as f:
        for d in f["data"]:
            n = f[f"data/{d}/actions"].shape[0]
            for i in range(20):
                for g in ("obs", "next_obs"):
                    f[f"data/{d}/{g}/extra_{i:02d}"] = rng.normal(size=(n, 1)).astype(np.float32)
    low = ["robot0_eef_pos", "robot0_eef_quat", "object"] + [f"extra_{i:02d}" for i in range(20)]

    def config(**kw):
        return make_config(path, backend="compressed_cache", rgb=[], low_dim=low, backend_kwargs={"keep": False, **kw})

    cfg = config()
    src, _, _ = _robomimic_source(cfg, obs_keys(cfg), None, None, choose("compressed_cache", keep=False).options)
    upper = src.size.store_upper_bytes()
    ds = dataset_factory(config(max_memory=upper), obs_keys(cfg))
    assert "a RAM file of at most" in ds.serving.summary and cache.path_bytes(ds.location) <= upper
    ds.close()
    on_disk = dataset_factory(config(max_memory=upper // 4), obs_keys(cfg))  # control: below it, placed on disk
    assert "file-backed cache on local disk" in on_disk.serving.summary
    on_disk.close()


def _restored_as(path: str, key: str, dtype) -> np.dtype:
    """``key`` of ``path`` (``data/<demo>/...``) stored again in ``dtype``, the same values; its dtype before."""
    with h5py.File(path, "a") as f:
        values = f[key][()]
        del f[key]
        f.create_dataset(key, data=values.astype(dtype))
    return values.dtype


@pytest.mark.parametrize("backend,units", [("datapipe", False), ("datapipe", True), ("video_stream", False)])
def test_a_key_some_demos_store_in_another_dtype_is_refused_naming_it(tmp_path, backend, units, monkeypatch):
    """A reviewer's reproduction: a key stored in another dtype by a later demo (merged files: a depth map uint16
    in one demo, float32 in [0, 1) in the next) was copied into a batch of the first demo's dtype by datapipe and
    video_stream, the fractions served as zeros, silently (compressed_cache and gpu_resampler refuse the file).
    Refused in one line naming the file, the demo and the key, for a low-dim observation and a camera (32x32, held
    as frames), whole demos and demos buffered in parts (``units``, datapipe's). Control: the same file before the
    change serves native's samples."""
    from robo_loaders_plugin.frames import chunks
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5
    from robo_loaders_plugin.storage.shards import format as shard_format

    step = 2 * 32 * 32 * 3  # decoded camera bytes of one step: 2 cameras (no next_obs here)
    if units:  # stored in parts of 2 steps, buffered in units of 4 (as large cameras make long demos)
        monkeypatch.setattr(shard_format, "FRAMES_PART_BYTES", 2 * step)
        monkeypatch.setattr(chunks, "UNIT_BYTES", 4 * step)
    path = write_robomimic_hdf5(
        str(tmp_path / "dtypes.hdf5"), demos=3, image_size=32, cameras=2, seed=5, min_length=20, max_length=24
    )
    cfg = make_config(path, backend=backend, seq_length=3, backend_kwargs={"cache_dir": str(tmp_path / "c")})
    native = dataset_factory(make_config(path, seq_length=3), obs_keys(cfg))
    ds = dataset_factory(cfg, obs_keys(cfg))
    assert (type(ds.frames).__name__ == "EpisodeUnits") == units
    for i in (0, len(ds) - 1):  # control (video_stream's frames are lossy: its other fields)
        if backend == "datapipe":
            assert_same_sample(ds[i], native[i], f"{backend}[{i}]")
        else:
            np.testing.assert_array_equal(ds[i]["obs"]["robot0_eef_pos"], native[i]["obs"]["robot0_eef_pos"])
    for key, dtype in (("obs/robot0_eef_pos", np.float32), ("obs/agentview_image", np.uint16)):
        before = _restored_as(path, f"data/demo_2/{key}", dtype)
        assert before != dtype
        with pytest.raises(RoboLoadersError, match=rf"dtypes.hdf5: demo_2: {key} is stored as {np.dtype(dtype)}, "
                           rf"in demo_0 as {before}; every demo must store a key in one dtype"):  # fmt: skip
            ds = dataset_factory(cfg, obs_keys(cfg))
            for i in range(len(ds)):
                ds[i]
        _restored_as(path, f"data/demo_2/{key}", before)


@pytest.mark.parametrize("backend", ["datapipe", "video_stream"])
def test_a_dataset_key_some_demos_lack_is_refused_naming_it(tiny_hdf5, tmp_path, backend):
    """A reviewer's finding: robomimic serves zeros of shape (steps, 1) for a dataset key a demo lacks, so a key
    some demos lack has another step shape there; datapipe and video_stream failed with numpy's bare broadcast
    error at the first batch mixing them. Refused in one line naming the demo, the key and what to do. Control: the
    same file with the key in every demo serves the same samples as native (the check passes on good data)."""
    path = str(tmp_path / "lacks.hdf5")
    shutil.copy(tiny_hdf5, path)
    cfg = make_config(path, backend=backend, seq_length=5, backend_kwargs={"cache_dir": str(tmp_path / "c")})
    ds = dataset_factory(cfg, obs_keys(cfg))
    native = dataset_factory(make_config(path, seq_length=5), obs_keys(cfg))
    for i in (0, len(ds) - 1):
        assert sorted(ds[i]) == sorted(native[i])
        np.testing.assert_array_equal(ds[i]["actions"], native[i]["actions"])
    with h5py.File(path, "a") as f:
        del f["data/demo_3/dones"]
    ds = dataset_factory(cfg, obs_keys(cfg))
    message = (  # naming the file the user edits (a reviewer found the shards' directory named)
        r"lacks.hdf5: demo_3 lacks dones \(robomimic serves zeros of shape \(steps, 1\) for a dataset key a demo "
        r"lacks\), demo_0 holds it of step shape \(\): add 'dones' to every demo or remove it from train.dataset_keys"
    )
    with pytest.raises(RoboLoadersError, match=message):
        for i in range(len(ds)):
            ds[i]
    with h5py.File(path, "a") as f:  # present, of another width: not called lacking (a reviewer's reproduction)
        n = int(f["data/demo_3"].attrs["num_samples"])
        f.create_dataset("data/demo_3/dones", data=np.zeros((n, 2)))
    ds = dataset_factory(cfg, obs_keys(cfg))
    with pytest.raises(RoboLoadersError, match=r"demo_3: dones has step shape \(2,\), demo_0 \(\); every demo must"):
        for i in range(len(ds)):
            ds[i]


@pytest.mark.parametrize("backend", ["datapipe", "video_stream"])
def test_a_per_step_string_dataset_the_config_does_not_serve_is_left_out(tiny_hdf5, tmp_path, backend):
    """A reviewer's reproduction: a per-step dataset of variable-length strings (a language annotation per step),
    which robomimic never reads, failed the conversions of datapipe and video_stream ("object dtype (it would need
    pickle)") where native serves the file. Left out of the shards now: the samples are native's. Control: a
    config naming it is refused before any data is read, naming the file, the key and what to change (left out of
    the shards, it was served as the zeros robomimic substitutes for a missing key; robomimic fails on it)."""
    path = str(tmp_path / "language.hdf5")
    shutil.copy(tiny_hdf5, path)
    with h5py.File(path, "a") as f:  # demo_0 without it: its absence there hid it (served as zeros: a reviewer's)
        for d in [d for d in f["data"] if d != "demo_0"]:
            n = int(f[f"data/{d}"].attrs["num_samples"])
            f[f"data/{d}"].create_dataset("language", data=["pick the cube"] * n, dtype=h5py.string_dtype())
    cfg = make_config(path, backend=backend, seq_length=5, backend_kwargs={"cache_dir": str(tmp_path / "c")})
    ds = dataset_factory(cfg, obs_keys(cfg))
    native = dataset_factory(make_config(path, seq_length=5), obs_keys(cfg))
    assert len(ds) == len(native)
    for i in (0, len(ds) // 2, len(ds) - 1):
        assert sorted(ds[i]) == sorted(native[i])
        for k in ("actions", "rewards", "dones"):
            np.testing.assert_array_equal(ds[i][k], native[i][k])
        np.testing.assert_array_equal(ds[i]["obs"]["robot0_eef_pos"], native[i]["obs"]["robot0_eef_pos"])
    served = make_config(path, backend=backend, seq_length=5, backend_kwargs={"cache_dir": str(tmp_path / "c")})
    with served.values_unlocked():
        served.train.dataset_keys = ["actions", "language"]
    from robo_loaders_plugin.robomimic.convert import convert_robomimic, verify_robomimic

    out = str(tmp_path / "converted")  # a conversion of it verifies against it (the strings were called missing)
    convert_robomimic(path, out, progress=False)
    assert verify_robomimic(out, path) == []
    refused = r"language.hdf5: data/demo_\d+/language holds strings or other objects .* remove 'language' from the"
    for b in (backend, "compressed_cache"):
        with served.values_unlocked():
            served.train.data_backend = b
        with pytest.raises(RoboLoadersError, match=refused):
            dataset_factory(served, obs_keys(served))
    # held only by demos the filter key leaves out: robomimic serves the zeros of a missing key, and so does the
    # backend (a reviewer found it refused)
    with h5py.File(path, "a") as f:
        for d in [bytes(x).decode() for x in f["mask/train"][:]]:
            if "language" in f[f"data/{d}"]:
                del f[f"data/{d}/language"]
    with served.values_unlocked():
        served.train.data_backend = backend
    ours = dataset_factory(served, obs_keys(served), filter_by_attribute="train")
    native_cfg = make_config(path, seq_length=5)
    with native_cfg.values_unlocked():
        native_cfg.train.dataset_keys = ["actions", "language"]
    theirs = dataset_factory(native_cfg, obs_keys(native_cfg), filter_by_attribute="train")
    assert len(ours) == len(theirs)
    np.testing.assert_array_equal(ours[0]["language"], theirs[0]["language"])


def test_an_observation_key_with_a_tilde_is_served(tiny_hdf5, tmp_path):
    """A reviewer's reproduction: an observation named ``eef~pos`` was stored under a member name read back as
    ``eef/pos`` ("~" stands for "/" in member names), so datapipe said it was missing. A literal "~" is escaped.
    Control: every sample equals native's."""
    from robomimic_helpers import LOW_DIM

    path = str(tmp_path / "tilde.hdf5")
    shutil.copy(tiny_hdf5, path)
    with h5py.File(path, "a") as f:
        for d in f["data"]:
            for group in ("obs", "next_obs"):
                f.move(f"data/{d}/{group}/robot0_eef_pos", f"data/{d}/{group}/eef~pos")
    low_dim = ["eef~pos" if k == "robot0_eef_pos" else k for k in LOW_DIM]
    native = dataset_factory(
        make_config(path, low_dim=low_dim, seq_length=5), obs_keys(make_config(path, low_dim=low_dim))
    )
    cfg = make_config(
        path, backend="datapipe", low_dim=low_dim, seq_length=5, backend_kwargs={"cache_dir": str(tmp_path)}
    )
    ds = dataset_factory(cfg, obs_keys(cfg))
    served = sorted((ds[i]["actions"].tobytes(), ds[i]["obs"]["eef~pos"].tobytes()) for i in range(len(ds)))
    assert served == sorted(
        (native[i]["actions"].tobytes(), native[i]["obs"]["eef~pos"].tobytes()) for i in range(len(native))
    )


@pytest.mark.parametrize(
    "backend, options",
    [("compressed_cache", {}), ("datapipe", {}), ("gpu_resampler", {"device": "cpu"}), ("video_stream", {})],
)
def test_an_empty_demo_or_another_group_a_filter_key_leaves_out_is_served_as_robomimic_does(
    tiny_hdf5, tmp_path, backend, options
):
    """A reviewer's reproductions: an empty demo (an aborted recording, num_samples=0) and a group that is not a demo
    (``data/zz_info``) beside the demos were refused by every backend even when the filter key leaves them out,
    where robomimic trains on the file (it reads the demos the mask names); the second refusal did not name the
    file. Served now, equal to native. Controls: without a filter key the other group is refused naming the file
    (robomimic fails on it too), and a mask selecting the empty demo is refused naming it (robomimic asserts)."""
    path = str(tmp_path / "odd.hdf5")
    shutil.copy(tiny_hdf5, path)
    with h5py.File(path, "a") as f:
        empty = f["data"].create_group("demo_99")
        empty.attrs["num_samples"] = 0
        for name, ds in [(n, d) for n, d in f["data/demo_0"].items() if isinstance(d, h5py.Dataset)]:
            empty.create_dataset(name, shape=(0, *ds.shape[1:]), dtype=ds.dtype)
        for group in ("obs", "next_obs"):
            for name, ds in f[f"data/demo_0/{group}"].items():
                empty.create_dataset(f"{group}/{name}", shape=(0, *ds.shape[1:]), dtype=ds.dtype)
        f["data"].create_group("zz_info").attrs["note"] = "not a demo"
        train = [bytes(n) for n in f["mask/train"][:]]
        f.create_dataset("mask/with_empty", data=np.array(train[:2] + [b"demo_99"]))
    kw = {"backend_kwargs": dict(options, cache_dir=str(tmp_path / "c")), "seq_length": 5}
    cfg = make_config(path, backend=backend, **kw)
    native = dataset_factory(make_config(path, seq_length=5), obs_keys(cfg), filter_by_attribute="train")
    ds = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")
    assert len(ds) == len(native)
    for i in (0, len(ds) // 2, len(ds) - 1):
        if backend != "video_stream":  # lossy frames: compared in its own tests
            assert_same_sample(ds[i], native[i])
        np.testing.assert_array_equal(ds[i]["actions"], native[i]["actions"])
    with pytest.raises(RoboLoadersError, match=r"odd\.hdf5: demo names must look like demo_<int> .*'zz_info'"):
        dataset_factory(cfg, obs_keys(cfg))
    with pytest.raises(RoboLoadersError, match=r"odd\.hdf5: data/demo_99 has num_samples=0; robomimic needs"):
        dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="with_empty")


@pytest.mark.parametrize(
    "backend, options",
    [("compressed_cache", {}), ("datapipe", {}), ("gpu_resampler", {"device": "cpu"}), ("video_stream", {})],
)
def test_an_observation_of_no_values_per_step_is_served_as_robomimic_serves_it(tiny_hdf5, tmp_path, backend, options):
    """An observation of shape (N, 0), which robomimic serves as (T, 0) arrays, failed the compressed_cache and
    gpu_resampler builds (``memoryview`` cannot cast a view with a zero in its shape; gpu_resampler then mapped no
    rows back). Served now, built and reused, every sample's fields native's."""
    from robomimic_helpers import LOW_DIM

    path = str(tmp_path / "empty_obs.hdf5")
    shutil.copy(tiny_hdf5, path)
    with h5py.File(path, "a") as f:
        for d in f["data"]:
            n = int(f[f"data/{d}"].attrs["num_samples"])
            for group in ("obs", "next_obs"):
                f[f"data/{d}/{group}"].create_dataset("empty", data=np.zeros((n, 0), np.float32))
    kw = {"low_dim": [*LOW_DIM, "empty"], "seq_length": 5, "hdf5_load_next_obs": True}
    native = dataset_factory(make_config(path, **kw), obs_keys(make_config(path, **kw)))
    cfg = make_config(path, backend=backend, backend_kwargs=dict(options, cache_dir=str(tmp_path / "c")), **kw)
    for _ in range(2):  # built, then reused
        ds = dataset_factory(cfg, obs_keys(cfg))
        assert len(ds) == len(native)
        for i in (0, len(ds) // 2, len(ds) - 1):
            a, b = ds[i], native[i]
            assert a["obs"]["empty"].shape == b["obs"]["empty"].shape == (5, 0)
            assert a["next_obs"]["empty"].dtype == b["next_obs"]["empty"].dtype
            if backend != "video_stream":  # lossy frames: compared in its own tests
                assert_same_sample(a, b)
