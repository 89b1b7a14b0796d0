"""robomimic on a weighted mixture (``train.data_mixture``): every served sample is its component's SequenceDataset
sample after the rename (for every backend), ``dataset_index`` names the component, the weights set the shares,
``weights: "size"`` serves every window once, bad mixtures are one line, and robomimic's unmodified training script
trains on a 3-component mixture."""

import json
import math
import os
import shutil
import sys

import h5py
import numpy as np
import pytest
import torch
from robomimic_helpers import RGB, make_config, obs_keys

from robo_loaders_plugin.core import iteration
from robo_loaders_plugin.mixtures.dataset import DATASET_INDEX
from robo_loaders_plugin.mixtures.spec import MixtureError
from robo_loaders_plugin.robomimic import dataset_factory
from robo_loaders_plugin.robomimic.mixture import RobomimicMixture
from robo_loaders_plugin.testing import assert_same

WRIST = "robot0_eye_in_hand_image"
LOW_DIM = ["robot0_eef_pos", "object"]
BACKENDS = ["native", "compressed_cache", "datapipe", "gpu_resampler", "video_stream"]
LOSSY = {"video_stream": {f"{g}/{k}": 25.0 for g in ("obs", "next_obs") for k in RGB}}


def _write(path, seed, demos, size=16, **kw):
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    return write_robomimic_hdf5(
        path, demos=demos, image_size=size, cameras=2, seed=seed, min_length=12, max_length=20,
        valid_fraction=0.34, progress=False, **kw,
    )  # fmt: skip


def _rename_camera(path, old, new):
    with h5py.File(path, "r+") as f:
        for demo in f["data"]:
            for group in ("obs", "next_obs"):
                f.move(f"data/{demo}/{group}/{old}", f"data/{demo}/{group}/{new}")
    return path


def _set_rate(path, hz):
    with h5py.File(path, "r+") as f:
        env = json.loads(f["data"].attrs["env_args"])
        env["env_kwargs"]["control_freq"] = hz
        f["data"].attrs["env_args"] = json.dumps(env)
    return path


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """Three small files: a (4 demos), b (3 demos), c (3 demos, its wrist camera stored as ``wrist_image``)."""
    d = tmp_path_factory.mktemp("mix")
    a = _write(str(d / "a.hdf5"), 1, 4)
    b = _write(str(d / "b.hdf5"), 2, 3)
    c = _rename_camera(_write(str(d / "c.hdf5"), 3, 3), WRIST, "wrist_image")
    return a, b, c


def _mixture(parts, weights=(1, 1, 2), mode="given"):
    a, b, c = parts
    comps = [{"path": a}, {"path": b}, {"path": c, "rename": {"wrist_image": WRIST}}]
    if mode == "given":
        for comp, w in zip(comps, weights, strict=True):
            comp["weight"] = w
    return {"components": comps, "weights": mode}


def _config(parts, backend=None, mixture=None, **train):
    cfg = make_config(
        parts[0],
        low_dim=LOW_DIM,
        backend=backend,
        seq_length=3,
        hdf5_cache_mode="low_dim",
        hdf5_load_next_obs=True,
        **train,
    )
    with cfg.values_unlocked():
        cfg.train.data_mixture = mixture if mixture is not None else _mixture(parts)
    return cfg


def _references(parts):
    """Each component's own SequenceDataset (robomimic's, unpatched: native, no mixture), with its own key names."""
    refs = []
    for path, rgb in zip(parts, (RGB, RGB, [RGB[0], "wrist_image"]), strict=True):
        cfg = make_config(
            path, rgb=rgb, low_dim=LOW_DIM, seq_length=3, hdf5_cache_mode="low_dim", hdf5_load_next_obs=True
        )
        refs.append(dataset_factory(cfg, obs_keys(cfg)))
    return refs


def _renamed(sample, k):
    if k != 2:
        return sample
    out = dict(sample)
    for g in ("obs", "next_obs", "goal_obs"):
        if g not in sample:
            continue
        out[g] = {(WRIST if key == "wrist_image" else key): v for key, v in sample[g].items()}
    return out


@pytest.mark.parametrize("backend", [pytest.param("native", marks=pytest.mark.fast), *BACKENDS[1:]])
def test_every_sample_is_its_components_sequence_dataset_sample(parts, backend):
    cfg = _config(parts, backend if backend != "native" else None)
    mix = dataset_factory(cfg, obs_keys(cfg))
    built = iteration.built_by(mix)
    assert isinstance(mix, RobomimicMixture) and built is not None and built.kind == "batch"
    refs = _references(parts)
    assert mix.sizes == [len(r) for r in refs] and len(mix) == sum(map(len, refs))
    min_psnr = LOSSY.get(backend)
    for i in range(len(mix)):
        k, local = mix.locate(i)
        ours = dict(mix[i])
        assert int(ours.pop(DATASET_INDEX)) == k
        assert_same(ours, _renamed(refs[k][local], k), f"{backend} mixture item {i}", min_psnr)
    # a batch across components, in its order: the components' samples collated
    idx = np.random.default_rng(0).permutation(len(mix))[:24].tolist()
    batch = mix.collate(idx)
    assert batch[DATASET_INDEX].dtype == torch.int64
    want = torch.utils.data.default_collate([_renamed(refs[k][j], k) for k, j in map(mix.locate, idx)])
    got = {key: v for key, v in batch.items() if key != DATASET_INDEX}
    assert_same(
        torch.utils.data.default_collate([mix[i] for i in idx])[DATASET_INDEX], batch[DATASET_INDEX], "dataset_index"
    )
    assert_same({k: _cpu(v) for k, v in got.items()}, want, f"{backend} mixed batch", min_psnr)


def _cpu(v):
    return {k: _cpu(x) for k, x in v.items()} if isinstance(v, dict) else v.cpu()


def _passes(cfg, mix, passes=1, batch_size=8):
    """What robomimic's run_epoch iterates for the DataLoader its train() builds over ``mix``."""
    loader = torch.utils.data.DataLoader(mix, batch_size=batch_size, shuffle=True, drop_last=False)
    source = iteration.pass_batches(loader, lambda dl, b: __import__(
        "robo_loaders_plugin.robomimic.integration", fromlist=["x"]).sampling_plan(dl, b))  # fmt: skip
    assert source is not loader
    return [list(source) for _ in range(passes)]


def test_component_shares_follow_the_weights(parts):
    cfg = _config(parts, "compressed_cache", mixture=_mixture(parts, weights=(1, 1, 6)))
    mix = dataset_factory(cfg, obs_keys(cfg))
    served = torch.cat([b[DATASET_INDEX] for p in _passes(cfg, mix, passes=3) for b in p]).numpy()
    p = np.array([1, 1, 6]) / 8
    n = len(served)
    counts = np.bincount(served, minlength=3)
    assert all(abs(counts[k] - n * p[k]) <= 4 * math.sqrt(n * p[k] * (1 - p[k])) for k in range(3)), counts
    # control: the components' sizes would put component 2 near 3/10, far outside the bound for 6/8
    sizes = np.array(mix.sizes) / len(mix)
    assert abs(counts[2] - n * sizes[2]) > 4 * math.sqrt(n * sizes[2] * (1 - sizes[2]))


def test_weighted_by_size_serves_every_window_once_per_pass(parts):
    cfg = _config(parts, "compressed_cache", mixture=_mixture(parts, mode="size"))
    mix = dataset_factory(cfg, obs_keys(cfg))
    refs = _references(parts)

    def key(actions, k):
        return (int(k), np.asarray(actions, dtype=np.float32).tobytes())

    want = sorted(key(refs[k][j]["actions"], k) for k in range(3) for j in range(len(refs[k])))
    for one_pass in _passes(cfg, mix, passes=2):
        got = sorted(key(a, k) for b in one_pass for a, k in zip(b["actions"], b[DATASET_INDEX], strict=True))
        assert got == want
    assert len(set(want)) > 0.9 * len(want)  # the check can tell windows apart (actions are distinct per window)


# -- refusals, one line each, before data is read ------------------------------------------------------------------
@pytest.fixture(scope="module")
def odd(tmp_path_factory, parts):
    d = tmp_path_factory.mktemp("odd")
    small = _write(str(d / "small.hdf5"), 4, 2, size=8)
    slow = _set_rate(shutil.copy(parts[1], d / "slow.hdf5"), 10)
    return {"small": small, "slow": str(slow)}


def _refused(cfg, match, backend=None):
    with pytest.raises(MixtureError) as err:
        dataset_factory(cfg, obs_keys(cfg))
    assert "\n" not in str(err.value) and match in str(err.value), str(err.value)
    assert str(err.value).startswith("train.data_mixture") or "train.data_backend_kwargs" in str(err.value)


def test_refusals_name_the_component_and_key(parts, odd):
    a, b, c = parts
    _refused(_config(parts, mixture=[{"path": a, "weight": 1}, {"path": c, "weight": 1}]),
             f"component 1 ({c}): has no obs/{WRIST}")  # fmt: skip
    _refused(_config(parts, mixture=[{"path": a, "weight": 1}, {"path": odd["small"], "weight": 1}]),
             "obs/agentview_image is (8, 8, 3) uint8 but (16, 16, 3) uint8 in component 0")  # fmt: skip
    onto = [{"path": a, "weight": 1}, {"path": b, "weight": 1, "rename": {"agentview_image": WRIST}}]
    _refused(_config(parts, mixture=onto), f"maps 'agentview_image' onto '{WRIST}', a key it already has")
    _refused(_config(parts, mixture=[{"path": a, "weight": 1}, {"path": b, "weight": 1, "rename": {"nope": "x"}}]),
             "rename names obs key 'nope'")  # fmt: skip
    rates = [{"path": a, "weight": 1}, {"path": odd["slow"], "weight": 1}]
    _refused(
        _config(parts, mixture=rates), "component 1 (" + odd["slow"] + ") was recorded at 10 Hz but component 0 at 20"
    )
    _refused(_config(parts, "compressed_cache", mixture={"components": rates, "target_fps": 10}),
             "target_fps needs a backend that converts rates (gpu_resampler)")  # fmt: skip
    _refused(_config(parts, mixture=[{"path": b, "weight": 1}, {"path": a, "weight": 1}]),
             "must be the mixture's first component")  # fmt: skip
    shards = os.path.dirname(a)  # a directory: the option's own check passes, the mixture's refuses it
    _refused(
        _config(parts, "datapipe", backend_kwargs={"shards": shards}), "train.data_backend_kwargs.shards names one"
    )
    _refused(_config(parts, mixture=[{"path": a, "weight": 1}, {"path": b, "weight": 0}]), "component 1 (")


def test_target_fps_converts_every_component_with_gpu_resampler(parts, odd):
    a = parts[0]
    cfg = _config(parts, "gpu_resampler", mixture={"components": [{"path": a, "weight": 1},
                  {"path": odd["slow"], "weight": 1}], "target_fps": 20})  # fmt: skip
    mix = dataset_factory(cfg, obs_keys(cfg))
    # the slow component (10 Hz) at 20 Hz: twice its windows; the 20 Hz one unchanged
    refs = _references(parts)
    assert mix.sizes[0] == len(refs[0]) and mix.sizes[1] > 1.8 * len(refs[1])


# -- robomimic's own training script ---------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", [None, *BACKENDS[1:]])
def test_unmodified_train_script_trains_on_a_mixture(parts, tmp_path, backend):
    """robomimic's own ``train.py`` on the 3-component mixture, on every backend: two epochs of training and
    validation, each split served as a mixture of 3 by the chosen backend."""
    from test_robomimic_train_script import assert_trained, run, write_config

    name = f"mix_{backend or 'native'}"
    cfg_path = write_config(tmp_path, parts[0], backend, name)
    cfg = json.loads(open(cfg_path).read())
    cfg["train"]["data_mixture"] = _mixture(parts)
    cfg["train"]["seq_length"] = 3
    cfg["algo"]["rnn"]["horizon"] = 3
    cfg["train"]["num_epochs"] = 2
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    rc, out = run([sys.executable, "-m", "robomimic.scripts.train", "--config", cfg_path])
    assert rc == 0, out[-3000:]
    line = f"[robo-loaders] robomimic data backend: {backend or 'native'} [train] mixture of 3"
    assert_trained(out, tmp_path, name, line)
    assert f"robomimic data backend: {backend or 'native'} [valid] mixture of 3" in out
    assert os.path.basename(parts[2]) in out


def _machine(monkeypatch, disk_bytes=None, host_bytes=10**12):
    """``Available.measure`` answering a machine with this disk (and host RAM), no RAM files: what every backend and
    the mixture's check measure."""
    from robo_loaders_plugin.core.footprint import Available

    def measure(cls, disk_dir=None, device=None, shm_dir=None):
        return Available(
            host_bytes=host_bytes, shm_bytes=0, shm_dir="/dev/shm", shm_is_ram=True, disk_dir=disk_dir and
            os.path.abspath(disk_dir), disk_bytes=None if disk_dir is None else disk_bytes, disk_reserve=0,
        )  # fmt: skip

    monkeypatch.setattr(Available, "measure", classmethod(measure))


def _rlc(cache):
    return sorted(str(p) for p in __import__("pathlib").Path(cache).rglob("*.rlc"))


def test_whole_mixture_footprint_is_refused_before_any_component_is_built(parts, tmp_path, monkeypatch):
    """Components whose caches each fit the disk but not together: refused in one line naming the mixture, every
    component's share and the numbers, before any cache is written; each component alone is accepted (negative
    control), and once their caches exist (reused: nothing more to write) the mixture is too."""
    from robo_loaders_plugin.core.footprint import Footprint, ResourceRefused
    from robo_loaders_plugin.core.registry import choose_backend

    cache = str(tmp_path / "cache")
    kwargs = {"cache_dir": cache}
    cfg = _config(parts, "compressed_cache", backend_kwargs=kwargs)
    choice = choose_backend(
        "robomimic",
        "compressed_cache",
        kwargs,
        name_where="train.data_backend",
        options_where="train.data_backend_kwargs",
    )
    names = [os.path.basename(p) for p in parts]
    keys = [obs_keys(cfg), obs_keys(cfg), [k if k != WRIST else "wrist_image" for k in obs_keys(cfg)]]
    disk = [choice.plan(cfg, keys[k], dataset_path=p, committed=Footprint()).footprint.disk_bytes for k, p in
            enumerate(parts)]  # fmt: skip
    assert min(disk) > 0
    usable = int((max(disk) + min(disk)) / 0.9)  # any one (any two smallest) fit, not all three together
    assert sum(disk) > 0.9 * usable
    _machine(monkeypatch, disk_bytes=usable)
    with pytest.raises(ResourceRefused) as refused:
        dataset_factory(cfg, obs_keys(cfg))
    line = str(refused.value)
    assert "\n" not in line and line.startswith("train.data_mixture: backend 'compressed_cache'"), line
    assert f"needs {__import__('robo_loaders_plugin.core.units', fromlist=['x']).format_bytes(sum(disk))}" in line
    for k, name in enumerate(names):
        assert f"[{k}] {name}: " in line, line
    assert "Would fit: the first" in line and "train.data_backend_kwargs" in line, line
    assert _rlc(cache) == [], "a component was built before the refusal"
    # negative control: each component alone fits the same machine
    for k, path in enumerate(parts):
        alone = make_config(path, rgb=[RGB[0], "wrist_image"] if k == 2 else RGB,
                            low_dim=LOW_DIM, backend="compressed_cache", backend_kwargs=kwargs, seq_length=3,
                            hdf5_cache_mode="low_dim", hdf5_load_next_obs=True)  # fmt: skip
        assert len(dataset_factory(alone, obs_keys(alone))) > 0
    assert len(_rlc(cache)) == 3
    # their caches are reused by the mixture: nothing left to write, so it fits
    mix = dataset_factory(cfg, obs_keys(cfg))
    assert isinstance(mix, RobomimicMixture) and mix.sizes == [len(d) for d in mix.datasets]


def test_a_component_whose_source_changed_is_rebuilt_alone(parts, tmp_path):
    """compressed_cache caches each component in the cache directory; editing one component's HDF5 after a first
    build rebuilds that component's cache only (the others reused) and the mixture serves the new data."""
    work = [shutil.copy(p, tmp_path / os.path.basename(p)) for p in parts]
    work = [str(p) for p in work]
    kwargs = {"cache_dir": str(tmp_path / "cache")}

    def built():
        cfg = _config(work, "compressed_cache", mixture=_mixture(work), backend_kwargs=kwargs)
        mix = dataset_factory(cfg, obs_keys(cfg))
        return mix, [iteration.summary_of(d) for d in mix.datasets]

    _, first = built()
    assert not any("reused" in s for s in first), first
    with h5py.File(work[1], "r+") as f:
        demo = sorted(f["data"])[0]
        f[f"data/{demo}/obs/robot0_eef_pos"][0] = [7.0, 8.0, 9.0]
    mix, second = built()
    assert ["reused" in s for s in second] == [True, False, True], second
    first_of_b = int(mix.offsets[1])
    assert mix.locate(first_of_b) == (1, 0)
    assert np.array_equal(mix[first_of_b]["obs"]["robot0_eef_pos"][0], np.float32([7.0, 8.0, 9.0]))


@pytest.mark.parametrize("backend", ["datapipe", "video_stream"])
def test_the_buffer_backends_count_in_the_whole_mixture_footprint(parts, monkeypatch, backend):
    """The episode-buffer backends declare their footprint too: their buffers together, not one by one, are checked
    before any component is built or converted; each buffer alone fits the same machine (negative control)."""
    from robo_loaders_plugin.core.footprint import Footprint, ResourceRefused
    from robo_loaders_plugin.core.registry import choose_backend
    from robo_loaders_plugin.mixtures.footprint import check_mixture_fits

    cfg = _config(parts, backend)
    choice = choose_backend(
        "robomimic", backend, {}, name_where="train.data_backend", options_where="train.data_backend_kwargs"
    )
    keys = [obs_keys(cfg), obs_keys(cfg), [k if k != WRIST else "wrist_image" for k in obs_keys(cfg)]]
    plans = [choice.plan(cfg, keys[k], dataset_path=p, committed=Footprint()) for k, p in enumerate(parts)]
    need = [p.footprint.host_bytes for p in plans]
    assert all(need)
    _machine(monkeypatch, host_bytes=int(max(need) / 0.9) + 1)  # any one buffer fits, not the three
    monkeypatch.setattr(type(choice), "build", lambda self, *a, **k: pytest.fail("a component was built"))
    with pytest.raises(ResourceRefused, match=rf"train.data_mixture: backend '{backend}' cannot serve these 3"):
        dataset_factory(cfg, obs_keys(cfg))
    for k in range(3):  # negative control: each alone fits
        check_mixture_fits("m", ["x"], lambda _, c, k=k: plans[k], backend=backend, option_prefix="o")


# -- recycled batch arrays -------------------------------------------------------------------------------------------
def _clone(batch):
    if isinstance(batch, dict):
        return {k: _clone(v) for k, v in batch.items()}
    return batch.clone() if isinstance(batch, torch.Tensor) else batch


def _kept_pass_intact(parts) -> list[str]:
    """One pass of a mixture's batches, every batch kept, as robomimic's loop would see them: which batches changed
    after they were handed out."""
    from robo_loaders_plugin.robomimic.integration import epoch_loader

    cfg = _config(parts, backend="compressed_cache")
    ds = dataset_factory(cfg, obs_keys(cfg))
    loader = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True, num_workers=2)
    kept = [(batch, _clone(batch)) for batch in epoch_loader(loader)]
    assert len(kept) > 8
    changed = []
    for b, (batch, copy) in enumerate(kept):
        for key in ("actions", "obs"):
            mine, theirs = batch[key], copy[key]
            if isinstance(mine, dict):
                if any(not torch.equal(mine[k], theirs[k]) for k in mine):
                    changed.append(f"batch {b} {key}")
            elif not torch.equal(mine, theirs):
                changed.append(f"batch {b} {key}")
    return changed


def test_a_loop_keeping_every_mixed_batch_sees_them_intact(parts, monkeypatch):
    """The mixed batches are scattered into recycled arrays: a loop that keeps every batch of a pass finds each as
    it was handed out; negative control: the same pass with buffers handed out again while still in use."""
    assert _kept_pass_intact(parts) == []
    from test_batch_buffers import _careless_empty

    from robo_loaders_plugin.storage import buffers

    monkeypatch.setattr(buffers.BufferPool, "empty", _careless_empty)
    assert _kept_pass_intact(parts) != []
