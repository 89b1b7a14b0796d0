"""Clear errors on bad LeRobot input, naming the file and episode; the library entry points."""

import contextlib
import glob
import json
import os
import re
import shutil
import types

import numpy as np
import pyarrow.parquet as pq
import pytest
from lerobot_helpers import REPO, cfg_for, random_indices, same_item, serve

from robo_loaders_plugin import BackendOptionError, RoboLoadersError, UnknownBackendError


@pytest.fixture
def copy_of(lerobot_datasets, tmp_path):
    """A private copy (each test damages its own; LeRobot caches decoders per path, so paths stay unique)."""

    def make(name):
        dst = tmp_path / name
        shutil.copytree(lerobot_datasets[name], dst)
        return dst

    return make


def native(root, **kw):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset(REPO, root=root, **kw)


def test_missing_video_file(copy_of):
    root = copy_of("h264_3cam_multifile")
    nat = native(root)
    key = "observation.images.cam1"
    victim = nat.meta.get_video_file_path(4, key)
    first_ep = min(e for e in range(5) if nat.meta.get_video_file_path(e, key) == victim)
    os.remove(root / victim)
    with pytest.raises(RoboLoadersError, match=rf"{victim.name}.*episode {first_ep}.*cam1.*missing"):
        serve("compressed_cache", nat)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_or_truncated_mp4(copy_of, damage):
    root = copy_of("av1_1cam")
    nat = native(root)
    path = glob.glob(str(root / "videos" / "*" / "*" / "file-000.mp4"))[0]
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 3] if damage == "truncate" else b"\x00garbage" * 100)
    with pytest.raises(RoboLoadersError, match=r"file-000\.mp4.*episode \d+.*(truncated or corrupt)"):
        serve("compressed_cache", nat)


def test_timestamps_out_of_tolerance(copy_of):
    """A shifted timestamp: LeRobotDataset fails on that sample only; the backend fails at build time, naming
    the video file and the episode."""
    from lerobot.datasets.video_utils import FrameTimestampError

    root = copy_of("av1_1cam")
    data_file = glob.glob(str(root / "data" / "*" / "*.parquet"))[0]
    table = pq.read_table(data_file)
    ts = table.column("timestamp").to_pylist()
    ts[100] += 0.013  # row 100 is in episode 1
    table = table.set_column(
        table.schema.get_field_index("timestamp"),
        "timestamp",
        __import__("pyarrow").array(ts, type=table.schema.field("timestamp").type),
    )
    pq.write_table(table, data_file)
    nat = native(root)
    with pytest.raises(FrameTimestampError):
        nat[100]
    with pytest.raises(RoboLoadersError, match=r"file-000\.mp4: episode 1, observation\.images\.cam0.*tolerance"):
        serve("compressed_cache", nat)


def test_bad_options(lerobot_datasets):
    nat = native(lerobot_datasets["av1_1cam"])
    with pytest.raises(BackendOptionError, match=r"codec must be one of .*got 'brotli'"):
        serve("compressed_cache", nat, codec="brotli")
    with pytest.raises(BackendOptionError, match="robomimic only"):
        serve("gpu_resampler", nat, source_fps=20.0)  # LeRobot reads the rate from meta/info.json
    with pytest.raises(BackendOptionError, match=r"loader must be one of .*got 'processes'"):
        serve("compressed_cache", nat, loader="processes")
    with pytest.raises(BackendOptionError, match=r"max_memory must be a size like 2GB or 512MiB"):
        serve("compressed_cache", nat, max_memory="lots")


def is_store_dataset(ds) -> bool:
    """A LeRobot dataset served by compressed_cache (LeRobot items from a compressed episode store)."""
    from robo_loaders_plugin.backends.compressed_cache.frames import CompressedFrames
    from robo_loaders_plugin.lerobot.dataset import LeRobotSamples

    return isinstance(ds, LeRobotSamples) and isinstance(getattr(ds.frames, "inner", None), CompressedFrames)


def test_make_dataset_mirrors_lerobot(lerobot_datasets, tmp_path):
    from lerobot.datasets.factory import make_dataset as patched_factory

    import robo_loaders_plugin.lerobot as rl
    from robo_loaders_plugin.lerobot.compat import original

    root = lerobot_datasets["av1_1cam"]
    ours = rl.make_dataset(cfg_for(root, "compressed_cache", '{"cache_dir": "%s"}' % (tmp_path / "c")))
    theirs = original("make_dataset")(cfg_for(root))
    assert is_store_dataset(ours) and type(theirs).__name__ == "LeRobotDataset"
    assert glob.glob(str(tmp_path / "c" / "*" / "store.rlc"))
    # ImageNet stats overwrite, as LeRobot's factory does
    for k in theirs.meta.camera_keys:
        assert (ours.meta.stats[k]["mean"] == theirs.meta.stats[k]["mean"]).all()
    for i in random_indices(len(theirs), 100, seed=9):
        same_item(ours[i], theirs[i])
    assert type(patched_factory(cfg_for(root))).__name__ == "LeRobotDataset"  # native without the flag
    train, evaluation = rl.make_train_eval_datasets(cfg_for(root, "compressed_cache", eval_split=0.4))
    assert is_store_dataset(train) and is_store_dataset(evaluation)
    assert sorted(train.episodes + evaluation.episodes) == list(range(5))
    # a split leaving no training episode: LeRobot's ValueError named no dataset (a mixture's component either)
    with pytest.raises(RoboLoadersError, match=r"^--dataset.repo_id=.*: eval_split=0.99 leaves 0 training episodes"):
        rl.make_train_eval_datasets(cfg_for(root, "compressed_cache", eval_split=0.99))


def test_unknown_backend_at_parse_time(lerobot_datasets):
    from draccus.utils import DecodingError

    with pytest.raises(DecodingError, match=r"unknown data backend 'nope'.*compressed_cache"):
        cfg_for(lerobot_datasets["av1_1cam"], "nope")
    with pytest.raises(UnknownBackendError):
        from robo_loaders_plugin.lerobot.flags import backend_choice

        backend_choice(types.SimpleNamespace(backend="nope", backend_kwargs={}))
    # an empty name (`--dataset.backend=$BACKEND`, the variable unset) trained on native without a word (a
    # reviewer's reproduction): refused as any unknown name; control: no flag at all is the default
    with pytest.raises(DecodingError, match=r"unknown data backend ''"):
        cfg_for(lerobot_datasets["av1_1cam"], None, None, 0.0, "--dataset.backend=")
    assert backend_choice(types.SimpleNamespace(backend=None, backend_kwargs={})).name == "native"
    assert cfg_for(lerobot_datasets["av1_1cam"]).dataset.backend == "native"


def test_a_root_or_episodes_lerobot_cannot_train_from_is_refused_at_parsing(
    lerobot_datasets, lerobot_zero_episodes, tmp_path, monkeypatch
):
    """Issue 42 items 11 and 14: an empty --dataset.root, one that does not exist, a dataset with 0 episodes or
    --dataset.episodes naming an episode it does not have: LeRobot took each for a partial download and went to the
    Hub (off here: ~200 lines ending in OfflineModeIsEnabled), whatever the backend. Now one line at parsing naming
    the flag, the path, what is missing and what to do; ``make_dataset`` checks a config edited after parsing.
    Controls: episodes the dataset has are built; with the Hub on, an empty or missing root is left to LeRobot (it
    downloads repo_id into it), while 0 episodes or an episode it does not have are refused all the same."""
    import huggingface_hub.constants
    from draccus.utils import DecodingError

    import robo_loaders_plugin.lerobot as rl

    root, zero = lerobot_datasets["av1_1cam"], lerobot_zero_episodes  # 5 episodes; 0
    empty, missing, a_file = tmp_path / "empty", tmp_path / "missing", tmp_path / "a_file"
    empty.mkdir()
    a_file.write_text("not a dataset")
    offline = "and the Hugging Face Hub is off (HF_HUB_OFFLINE), so LeRobot cannot download local/sample into it; "
    fix = "point --dataset.root at the directory holding the dataset's meta/info.json"
    cases = [
        (empty, None, (), f"--dataset.root={empty} holds no LeRobot dataset (no meta/info.json) {offline}{fix}"),
        (missing, "compressed_cache", (), f"--dataset.root={missing} does not exist {offline}{fix}"),
        (zero, None, (), f"--dataset.root={zero}: {REPO} has 0 episodes ({zero}/meta/info.json: total_episodes 0)"),
        (
            root,
            "compressed_cache",
            ("--dataset.episodes=[0,7]",),
            f"--dataset.episodes: episode 7 of [0, 7] is not in {root}, which has 5 episodes (0..4, "
            f"{root}/meta/info.json); list only episodes 0..4",
        ),
        (root, None, ("--dataset.episodes=[]",), "--dataset.episodes is empty; list episodes 0..4"),
        (a_file, None, (), f"--dataset.root={a_file} is a file, not a dataset directory; {fix}"),
    ]
    for where, backend, extra, words in cases:
        with pytest.raises(DecodingError) as err:
            cfg_for(where, backend, None, 0.0, *extra)
        assert words in str(err.value) and "\n" not in str(err.value), (where, str(err.value))
    cfg = cfg_for(root)
    cfg.dataset.root = str(empty)  # a config changed after parsing: make_dataset checks it too
    with pytest.raises(RoboLoadersError, match=re.escape(f"--dataset.root={empty} holds no LeRobot dataset")):
        rl.make_dataset(cfg)

    # controls: the episodes the dataset has are built, LeRobot's own items
    two = rl.make_dataset(cfg_for(root, None, None, 0.0, "--dataset.episodes=[0,4]"))
    assert type(two).__name__ == "LeRobotDataset" and two.episodes == [0, 4] and len(two) == 90 + 111
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # the Hub on: LeRobot downloads there
    for where in (empty, missing):
        assert cfg_for(where).dataset.root == str(where)
    with pytest.raises(DecodingError, match="has 0 episodes"):
        cfg_for(zero)
    with pytest.raises(DecodingError, match="episode 7 of"):
        cfg_for(root, None, None, 0.0, "--dataset.episodes=[0,7]")
    # the dataset's parent folder given: LeRobot went to the Hub with it (a 34-frame connection traceback, or a
    # download into that folder) whether the Hub was on or off (a reviewer's finding)
    parent = os.path.dirname(root)
    import shutil

    home = tmp_path / "home"  # LeRobot's own layout, HF_LEROBOT_HOME/<org>/<name>: the repo_id's folder named
    shutil.copytree(root, home / REPO)
    for offline in (False, True):
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", offline)
        for given, inside in ((parent, str(root)), (str(home), str(home / REPO))):
            with pytest.raises(DecodingError) as err:
                cfg_for(given)
            words = f"--dataset.root={given} holds no LeRobot dataset (no meta/info.json) but its folder"
            assert words in str(err.value) and inside in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_lerobot_going_to_the_offline_hub_is_one_line_naming_the_dataset(copy_of, monkeypatch):
    """What parsing cannot see (no --dataset.root and no copy in LeRobot's cache, or a copy whose data files are
    missing) sends LeRobot to the Hub when the dataset is built: one line naming the dataset, where LeRobot looked
    and what to do. Negative control: without that, LeRobot's own OfflineModeIsEnabled (the ~200-line traceback)."""
    from huggingface_hub.errors import OfflineModeIsEnabled

    import robo_loaders_plugin.lerobot as rl
    from robo_loaders_plugin.lerobot import single

    absent = "local/never-downloaded"
    with pytest.raises(RoboLoadersError) as err:
        rl.make_dataset(cfg_for(None, repo=absent))
    text = str(err.value)
    assert (
        text.startswith(f"--dataset.repo_id={absent}: LeRobot found no local copy of {absent} (not in ")
        and "went to the Hugging Face Hub, which is off (HF_HUB_OFFLINE; Cannot reach https://" in text
    ), text
    assert "give --dataset.root (the directory holding its meta/, data/ and videos/)" in text and "\n" not in text
    root = copy_of("av1_1cam")
    for data_file in glob.glob(str(root / "data" / "*" / "*.parquet")):
        os.remove(data_file)
    with pytest.raises(RoboLoadersError, match=re.escape(f"LeRobot found no complete copy of {REPO} in {root} ")):
        rl.make_dataset(cfg_for(root, "compressed_cache"))
    monkeypatch.setattr(single, "local_copy_required", lambda *a: contextlib.nullcontext())
    with pytest.raises(OfflineModeIsEnabled):  # control: what LeRobot raised before
        rl.make_dataset(cfg_for(root))


def test_native_refuses_options_at_parsing_and_a_resumed_run_drops_saved_ones(lerobot_datasets, tmp_path, monkeypatch):
    """Issue 42 item 16: --dataset.backend=native (or no --dataset.backend) with --dataset.backend_kwargs trained with
    the options ignored and saved. native now refuses every option, as every backend refuses the ones it does not
    take. A run resumed with native from a config saved with another backend's options is told to drop them with
    --dataset.backend_kwargs={}, which does (LeRobot's parser merges the flag into the saved options). Controls:
    native without options parses; resumed as saved, the options are kept, and given ones are added to them."""
    import sys

    from draccus.utils import DecodingError
    from lerobot.configs.train import TrainPipelineConfig

    root = lerobot_datasets["av1_1cam"]
    refusal = "--dataset.backend_kwargs: unknown option 'codec' for backend 'native'; valid options: (none)"
    for backend in ("native", None):
        with pytest.raises(DecodingError, match=re.escape(refusal)):
            cfg_for(root, backend, '{"codec": "zstd"}')
    assert cfg_for(root, "native", "{}").dataset.backend_kwargs == {}  # control

    cfg_for(root, "compressed_cache", '{"codec": "zstd"}').save_pretrained(tmp_path)

    def resumed(*args):
        monkeypatch.setattr(sys, "argv", ["lerobot-train", f"--config_path={tmp_path}", *args])
        return TrainPipelineConfig.from_pretrained(tmp_path, cli_args=list(args)).dataset

    with pytest.raises(DecodingError) as err:
        resumed("--dataset.backend=native")
    assert f"{refusal}; these options come from the --config_path file (a resumed run keeps its saved options): " in (
        str(err.value)
    ) and str(err.value).endswith("give --dataset.backend_kwargs={} to drop them"), str(err.value)
    dataset = resumed("--dataset.backend=native", "--dataset.backend_kwargs={}")
    assert dataset.backend == "native" and dataset.backend_kwargs == {}
    assert resumed().backend_kwargs == {"codec": "zstd"}  # controls: kept as saved, or added to
    assert resumed('--dataset.backend_kwargs={"level": 5}').backend_kwargs == {"codec": "zstd", "level": 5}


def test_cache_dir_reuse_and_rebuild(copy_of, tmp_path):
    root = copy_of("av1_1cam")
    cache = tmp_path / "cache"
    first = serve("compressed_cache", native(root), cache_dir=str(cache))
    files = glob.glob(str(cache / "*" / "*.rlc"))
    assert len(files) == 1 and files[0].endswith("/store.rlc") and len(glob.glob(str(cache / "*"))) == 1
    again = serve("compressed_cache", native(root), cache_dir=str(cache))
    assert "reused" in again.serving.summary and "reused" not in first.serving.summary
    for i in random_indices(len(first), 50, seed=2):
        same_item(again[i], first[i])
    os.utime(glob.glob(str(root / "data" / "*" / "*.parquet"))[0])  # the dataset changed: rebuilt
    third = serve("compressed_cache", native(root), cache_dir=str(cache))
    assert "reused" not in third.serving.summary
    # a value changed with the mtime restored: LeRobot's own reader (its HF Arrow cache) still serves the old
    # rows; compressed_cache must neither serve the stale cache nor silently disagree with LeRobot: it refuses
    import pyarrow as pa

    data = glob.glob(str(root / "data" / "*" / "*.parquet"))[0]
    st = os.stat(data)
    table = pq.read_table(data)
    col = table.column("observation.state").to_pylist()
    col[0] = [v + 1.0 for v in col[0]]
    field = table.schema.field("observation.state")
    pq.write_table(
        table.set_column(table.schema.get_field_index(field.name), field.name, pa.array(col, type=field.type)), data
    )
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(RoboLoadersError, match=r"column 'observation.state' differs at 1 of \d+ rows \(first: row 0"):
        serve("compressed_cache", native(root), cache_dir=str(cache))


def test_without_cache_dir_the_store_is_kept_on_disk_and_reused_at_the_next_start(copy_of, tmp_path, monkeypatch):
    """Issue 45 item 2: ``keep`` (default): the store goes into the default cache root, kept between runs, and the
    next start maps it instead of decoding every video again; its items LeRobot's. Control: ``keep: false`` builds
    a RAM store, in no cache root, rebuilt at the next start."""
    root = copy_of("av1_1cam")
    cache = tmp_path / "default-root"
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(cache))
    first = serve("compressed_cache", native(root))
    stores = glob.glob(str(cache / "*" / "store.rlc"))
    assert len(stores) == 1 and "kept between runs" in first.serving.summary
    assert "reused" not in first.serving.summary
    again = serve("compressed_cache", native(root))
    assert "reused" in again.serving.summary and glob.glob(str(cache / "*" / "store.rlc")) == stores
    reference = native(root)
    for i in random_indices(len(again), 30, seed=3):
        same_item(again[i], reference[i])
    for _ in range(2):  # the control, one run after the other: the RAM file goes with its last user
        ram = serve("compressed_cache", native(root), keep=False)
        assert "RAM file" in ram.serving.summary and "reused" not in ram.serving.summary, ram.serving.summary
        ram.close()
    assert glob.glob(str(cache / "*" / "store.rlc")) == stores


def test_options_that_ask_for_two_things_or_do_not_apply_are_said(lerobot_datasets, tmp_path, caplog):
    """A reviewer's finds: ``keep: false`` beside ``cache_dir`` kept the store in ``cache_dir`` and dropped ``keep``
    without a word (refused now, at argument parsing, naming both); video_stream's ``storage_options`` for a local
    dataset were dropped without a word (said, as ``local_cache_dir`` is). Controls: each option alone."""
    from draccus.utils import DecodingError

    root = lerobot_datasets["av1_1cam"]
    both = json.dumps({"keep": False, "cache_dir": str(tmp_path / "c")})
    with pytest.raises(DecodingError, match=r"keep false .* and cache_dir .* ask for two different stores"):
        cfg_for(root, "compressed_cache", both)
    for alone in ({"keep": False}, {"cache_dir": str(tmp_path / "c")}):
        assert cfg_for(root, "compressed_cache", json.dumps(alone)).dataset.backend == "compressed_cache"
    serve("video_stream", native(root), storage_options={"anon": True})
    assert "storage_options ignored: the videos of" in caplog.text
    caplog.clear()
    serve("video_stream", native(root))
    assert "storage_options" not in caplog.text


def edit_a_row_keeping_the_mtime(data_file, row, column="action", to=None):
    """Add 0.5 to ``column`` in one row of a data parquet file (or set it ``to`` these values) and restore its mtime
    (cp -p, rsync -t): LeRobot's datasets cache, keyed by the files' mtimes, keeps serving the old table. Returns
    (old, new) values."""
    import pyarrow as pa

    st = os.stat(data_file)
    table = pq.read_table(data_file)
    values = table.column(column).to_pylist()
    old = values[row]
    values[row] = [v + 0.5 for v in old] if to is None else list(to)
    field = table.schema.field(column)
    pq.write_table(
        table.set_column(table.schema.get_field_index(column), column, pa.array(values, type=field.type)), data_file
    )
    os.utime(data_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    return old, values[row]


def test_a_value_edited_in_any_row_with_the_mtime_kept_is_refused_by_every_backend(copy_of, tmp_path):
    """Issue 23 A2: the row check compared row 0 only. A parquet value edited in another row (mtime kept) while
    LeRobot's datasets cache holds the old table: the backends read the file's new values, LeRobotDataset serves the
    old ones. Every served column is now compared whole (a digest of each side): refused, naming both places."""
    import torch

    root = copy_of("av1_1cam")
    assert native(root).hf_dataset.cache_files  # LeRobot's cached copy of the table exists
    data_file = sorted(glob.glob(str(root / "data" / "*" / "*.parquet")))[0]
    row = 200  # episode 2: far from row 0
    old, new = edit_a_row_keeping_the_mtime(data_file, row)
    nat = native(root)
    assert torch.allclose(nat[row]["action"], torch.tensor(old)) and not torch.allclose(
        nat[row]["action"], torch.tensor(new)
    )
    cache_dir = os.path.dirname(nat.hf_dataset.cache_files[0]["filename"])
    backends = ("compressed_cache", "gpu_resampler", "video_stream", "datapipe")
    for backend in backends:
        where = "the shards in" if backend == "datapipe" else "the data parquet files"
        with pytest.raises(RoboLoadersError) as err:
            serve(backend, nat)
        text = str(err.value)
        assert f"column 'action' differs at 1 of {len(nat)} rows (first: row {row}, index {row}" in text, text
        assert where in text and f"LeRobot's dataset object, read from its datasets cache ({cache_dir})" in text
        assert f"delete {cache_dir}" in text and "mtime" in text
    # negative control: once LeRobot reads the files again (its stale cache removed), both serve the new values
    shutil.rmtree(cache_dir)
    nat = native(root)
    assert torch.allclose(nat[row]["action"], torch.tensor(new))
    for backend in backends:
        ours = serve(backend, nat)
        for i in (0, row, len(nat) - 1):
            same_item(ours[i], nat[i], f"{backend}[{i}]")


def test_a_png_edited_with_the_mtime_kept_is_refused_by_every_backend(copy_of):
    """A reviewer's reproduction: the row check compared the numeric columns only, so a PNG image replaced in a
    data file with its mtime kept was served new by every backend and old by LeRobotDataset (its datasets cache),
    unnoticed. Image columns' bytes are compared too: refused, naming the column. Control: once LeRobot reads the
    files again, both serve the new image."""
    import pyarrow as pa
    import torch

    root = copy_of("png_1cam")
    nat = native(root)
    key = nat.meta.camera_keys[0]
    assert nat.hf_dataset.cache_files  # LeRobot's cached copy of the table exists
    data_file = sorted(glob.glob(str(root / "data" / "*" / "*.parquet")))[0]
    st = os.stat(data_file)
    table = pq.read_table(data_file)
    images = table.column(key).to_pylist()
    images[0] = images[5]  # row 0's PNG replaced by row 5's (same size)
    i = table.schema.get_field_index(key)
    pq.write_table(
        table.set_column(i, table.schema.field(key), pa.array(images, table.schema.field(key).type)), data_file
    )
    os.utime(data_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    nat = native(root)
    assert not torch.equal(nat[0][key], nat[5][key])  # LeRobot still serves the old row 0
    backends = ("compressed_cache", "gpu_resampler", "video_stream", "datapipe")
    for backend in backends:
        with pytest.raises(RoboLoadersError, match=rf"image column '{key}' differs at 1 of {len(nat)} rows "
                           r"\(first: row 0, index 0: other PNG bytes in the data parquet files"):  # fmt: skip
            serve(backend, nat)
    shutil.rmtree(os.path.dirname(nat.hf_dataset.cache_files[0]["filename"]))  # control
    nat = native(root)
    assert torch.equal(nat[0][key], nat[5][key])
    for backend in backends:
        same_item(serve(backend, nat)[0], nat[0], f"{backend}[0]")


def test_the_refusal_of_an_edited_row_is_one_line_however_long_its_values_print(copy_of):
    """Issue 30 item 10c: the row check's refusal printed both rows with numpy's printout, which breaks lines past
    75 characters (6 values of mixed magnitudes, as positions beside velocities, print in scientific notation): the
    one-line message came out on two. Control: the values are all shown, on one line."""
    root = copy_of("av1_1cam")
    data_file = sorted(glob.glob(str(root / "data" / "*" / "*.parquet")))[0]
    row = 100
    nat = native(root)  # LeRobot's datasets cache holds the table before the edit
    _old, new = edit_a_row_keeping_the_mtime(
        data_file, row, "observation.state", to=[123456.7, -1.234e-4, 98765.43, -2.5e-5, 3.14159, -7654.321]
    )
    with pytest.raises(RoboLoadersError) as err:
        serve("compressed_cache", native(root))
    text = str(err.value)
    assert f"column 'observation.state' differs at 1 of {len(nat)} rows (first: row {row}, index {row}: [" in text
    assert "\n" not in text, text
    shown = text.split(f"index {row}: ", 1)[1].split(" in ", 1)[0]
    assert shown.count(",") == 5 and np.allclose(eval(shown), new, rtol=1e-5)  # noqa: S307 (our own printout)


def test_negative_indices_and_other_video_backend(lerobot_datasets):
    nat = native(lerobot_datasets["av1_1cam"])
    ours = serve("compressed_cache", nat)
    same_item(ours[-1], nat[-1])
    same_item(ours[-len(nat)], nat[0])
    with pytest.raises(IndexError):
        ours[len(nat)]
    with pytest.raises(RoboLoadersError, match="video_backend='pyav'"):
        serve("compressed_cache", native(lerobot_datasets["av1_1cam"], video_backend="pyav"))


BACKENDS = ("compressed_cache", "gpu_resampler", "video_stream", "datapipe")


def keeping_the_mtime(path, edit):
    """Run ``edit(path)`` and restore the file's atime and mtime (cp -p, rsync -t)."""
    st = os.stat(path)
    edit(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def differing_frames(ours, nat, key, rows) -> int:
    """How many of ``rows`` have another ``key`` frame in ``ours`` than in ``LeRobotDataset``."""
    import torch

    return sum(not torch.equal(ours[i][key], nat[i][key]) for i in rows)


def test_meta_episodes_edited_with_the_mtime_kept_is_refused_by_every_backend(copy_of, monkeypatch):
    """Issue 30 B2: one episode's ``from_timestamp`` moved by one frame in meta/episodes, mtime kept, while
    LeRobot's datasets cache holds the old table: LeRobotDataset decoded the old boundaries, every backend the
    file's new ones (every frame of the episode differed, no message). What a backend reads of meta/ is now compared
    with LeRobot's dataset object: refused, naming the file, the episode, the column and both values."""
    import pyarrow as pa

    from robo_loaders_plugin.backends.video_stream import lerobot as video_stream_factory
    from robo_loaders_plugin.lerobot import dataset as lerobot_dataset

    root = copy_of("h264_3cam_multifile")
    key, ep = "observation.images.cam0", 2
    column = f"videos/{key}/from_timestamp"
    nat = native(root)
    assert nat.meta.episodes.cache_files  # LeRobot's cached copy of meta/episodes exists
    episodes_file = sorted(glob.glob(str(root / "meta" / "episodes" / "*" / "*.parquet")))[0]
    table = pq.read_table(episodes_file)
    values = table.column(column).to_pylist()
    old = values[ep]
    values[ep] = new = old + 1.0 / nat.meta.fps
    keeping_the_mtime(
        episodes_file,
        lambda p: pq.write_table(
            table.set_column(
                table.schema.get_field_index(column), column, pa.array(values, type=table.schema.field(column).type)
            ),
            p,
        ),
    )
    nat = native(root)
    assert nat.meta.episodes[ep][column] == old  # LeRobot still holds the old boundaries
    rows = range(nat.meta.episodes[ep]["dataset_from_index"], nat.meta.episodes[ep]["dataset_to_index"])
    cache_dir = os.path.dirname(nat.meta.episodes.cache_files[0]["filename"])
    for backend in BACKENDS:
        with pytest.raises(RoboLoadersError) as err:
            serve(backend, nat)
        text = str(err.value)
        assert (
            f"{os.path.realpath(episodes_file)}: episode {ep}'s {column} is {new!r} there, {old!r} in LeRobot's "
            f"dataset object, read from its datasets cache ({cache_dir}) (1 of 5 episodes differ in it)"
        ) in text
        assert f"delete {cache_dir}" in text and "mtime" in text and "\n" not in text
    # negative control: without the check every backend serves frames of that episode that LeRobotDataset does not
    with monkeypatch.context() as m:
        for module in (lerobot_dataset, video_stream_factory):  # every place the check runs
            m.setattr(module, "check_meta_match", lambda native, source: None)
        for backend in BACKENDS:
            assert differing_frames(serve(backend, nat), nat, key, rows) > len(rows) // 2, backend
    # the stale cache removed, LeRobot reads the file's boundaries too: every backend serves LeRobotDataset[i]
    shutil.rmtree(cache_dir)
    nat = native(root)
    assert nat.meta.episodes[ep][column] == new
    for backend in BACKENDS:
        ours = serve(backend, nat)
        for i in list(rows) + [0, len(nat) - 1]:
            same_item(ours[i], nat[i], f"{backend}[{i}]")


def test_meta_info_changed_after_lerobot_read_it_is_refused_by_every_backend(copy_of, monkeypatch):
    """Issue 30 B2, meta/info.json: LeRobot reads it when its dataset object is built; changed afterwards (here the
    video path template, pointing at a copy of the videos with cam0's and cam1's swapped), a backend would decode
    other files than LeRobotDataset. Refused naming the file, the field and both values; built again, both read the
    same file."""
    import json

    from robo_loaders_plugin.backends.video_stream import lerobot as video_stream_factory
    from robo_loaders_plugin.lerobot import dataset as lerobot_dataset

    root = copy_of("h264_3cam_multifile")
    nat = native(root)
    cam0, cam1 = (root / "swapped" / f"observation.images.cam{i}" for i in (0, 1))
    shutil.copytree(root / "videos", root / "swapped")
    cam0.rename(root / "swapped" / "tmp")
    cam1.rename(cam0)
    (root / "swapped" / "tmp").rename(cam1)
    info_file = root / "meta" / "info.json"
    info = json.loads(info_file.read_text())
    old = info["video_path"]
    assert old.startswith("videos/")
    info["video_path"] = new = "swapped/" + old[len("videos/") :]
    keeping_the_mtime(info_file, lambda p: p.write_text(json.dumps(info, indent=4)))
    for backend in BACKENDS:
        with pytest.raises(RoboLoadersError) as err:
            serve(backend, nat)
        text = str(err.value)
        assert (
            f"{os.path.realpath(info_file)}: video_path is {new!r} there, {old!r} in LeRobot's dataset object; "
            "LeRobot read meta/info.json when its dataset object was built and it changed since"
        ) in text, text
        assert "\n" not in text
    key, rows = "observation.images.cam0", range(len(nat))
    with monkeypatch.context() as m:  # negative control: without the check, cam0 is served from cam1's file
        for module in (lerobot_dataset, video_stream_factory):  # every place the check runs
            m.setattr(module, "check_meta_match", lambda native, source: None)
        for backend in BACKENDS:
            assert differing_frames(serve(backend, nat), nat, key, rows[::10]) > 0, backend
    nat = native(root)  # built again: LeRobot reads the new template too
    for backend in BACKENDS:
        ours = serve(backend, nat)
        for i in random_indices(len(nat), 20, seed=3):
            same_item(ours[i], nat[i], f"{backend}[{i}]")


def test_the_meta_check_reads_lerobots_episode_table_in_place_and_still_refuses_other_rows(
    lerobot_datasets, monkeypatch
):
    """Issue 44 item 3: ``check_meta_match`` took LeRobot's ``meta.episodes`` through ``with_format("arrow")[:]``,
    which copies the dataset object (its features deep-copied three times), per component of a mixture at every
    start (9 s of a 100-component start). It reads the columns in place now: no copy of the dataset or its
    features; LeRobot's table selecting other rows (``select``: the rows it serves, not the file's) is still
    refused, naming the episode and both values (control: the same check passes on the table as LeRobot read it)."""
    import copy

    import datasets

    from robo_loaders_plugin.core.errors import SourceError
    from robo_loaders_plugin.lerobot.dataset import check_meta_match
    from robo_loaders_plugin.sources.lerobot_v3 import LeRobotV3

    nat = native(lerobot_datasets["h264_3cam_multifile"])
    source = LeRobotV3(nat.root)
    copied, deepcopy = [], copy.deepcopy

    def counting(x, *args, **kwargs):
        if isinstance(x, (datasets.Dataset, datasets.Features)):
            copied.append(type(x).__name__)
        return deepcopy(x, *args, **kwargs)

    monkeypatch.setattr(copy, "deepcopy", counting)
    check_meta_match(nat, source)
    assert copied == []
    nat.meta.episodes.with_format("arrow")[:]  # control: the old read copies the dataset object
    assert "Dataset" in copied
    n = len(nat.meta.episodes)
    nat.meta.episodes = nat.meta.episodes.select(list(reversed(range(n))))
    with pytest.raises(SourceError, match=rf"episode 0's episode_index is 0 there, {n - 1} in LeRobot's dataset"):
        check_meta_match(nat, source)
    nat.meta.episodes = nat.meta.episodes.select(list(reversed(range(n))))  # back in the file's order: accepted
    check_meta_match(nat, source)


def test_meta_tasks_edited_every_backend_serves_lerobots_task_strings(copy_of):
    """Issue 30 B2, meta/tasks.parquet: the backends take the task strings from LeRobot's dataset object
    (``native.meta.tasks``), never from the file, so an edit LeRobot has not read (mtime kept) changes nothing they
    serve, and once LeRobot reads it both serve the new strings."""
    import pandas as pd

    root = copy_of("av1_1cam")
    nat = native(root)
    tasks_file = root / "meta" / "tasks.parquet"
    old = nat[0]["task"]

    def rename(path):
        tasks = pd.read_parquet(path)
        tasks.index = pd.Index([f"{t} (edited)" for t in tasks.index], name=tasks.index.name)
        tasks.to_parquet(path)

    keeping_the_mtime(tasks_file, rename)
    indices = random_indices(len(nat), 20, seed=4)
    for backend in BACKENDS:
        ours = serve(backend, nat)
        for i in indices:
            same_item(ours[i], nat[i], f"{backend}[{i}]")
        assert ours[0]["task"] == old
    nat = native(root)
    assert nat[0]["task"] == f"{old} (edited)"
    for backend in BACKENDS:
        ours = serve(backend, nat)
        for i in indices:
            same_item(ours[i], nat[i], f"{backend}[{i}]")


def test_a_mixture_build_checks_each_components_meta_once(lerobot_datasets, monkeypatch):
    """Issue 44 item 3: inside ``sources_checked_once`` (one mixture build: its footprint plans, then its
    backends' datasets) ``native_source`` checks a dataset object's ``meta/`` once and gives the same source after;
    outside it every call checks again (control), and another dataset object is checked on its own."""
    from robo_loaders_plugin.lerobot import dataset as lerobot_dataset

    checks = []
    real = lerobot_dataset.check_meta_match
    monkeypatch.setattr(lerobot_dataset, "check_meta_match", lambda n, s: (checks.append(n), real(n, s))[1])
    a = native(lerobot_datasets["h264_3cam_multifile"])
    b = native(lerobot_datasets["av1_1cam"])
    with lerobot_dataset.sources_checked_once():
        first = lerobot_dataset.native_source(a)
        assert lerobot_dataset.native_source(a) is first
        assert lerobot_dataset.native_source(b)[0] is not first[0]
    assert checks == [a, b]
    assert lerobot_dataset.native_source(a)[0] is not first[0]  # control: outside a build, checked again
    assert checks == [a, b, a]


def test_a_mixture_build_reads_a_stores_metadata_once_per_component(lerobot_datasets, monkeypatch):
    """Inside ``sources_checked_once`` (one mixture build) a frame store's metadata-only answer for a component
    (``sdk.serve._lerobot_meta``: sizes, key, batches in flight) is read once for its footprint plan and its build
    (``lerobot.dataset.checked_once``); another dataset object, another answer name, or a call outside the block
    reads it again (controls)."""
    from robo_loaders_plugin.lerobot import dataset as lerobot_dataset
    from robo_loaders_plugin.sdk import serve as sdk_serve

    reads = []
    real = sdk_serve._lerobot_meta_read
    monkeypatch.setattr(sdk_serve, "_lerobot_meta_read", lambda n: (reads.append(n), real(n))[1])
    a = native(lerobot_datasets["h264_3cam_multifile"])
    b = native(lerobot_datasets["av1_1cam"])
    with lerobot_dataset.sources_checked_once():
        first = sdk_serve._lerobot_meta(a, None)
        assert sdk_serve._lerobot_meta(a, None) is first
        assert sdk_serve._lerobot_meta(b, None)[0] is not first[0]
        assert lerobot_dataset.checked_once(a, "another", lambda: 7) == 7
        assert lerobot_dataset.checked_once(a, "another", lambda: 8) == 7
    assert reads == [a, b]
    again = sdk_serve._lerobot_meta(a, None)  # control: outside a build, read again
    assert again is not first and again[3] == first[3]
    assert np.array_equal(again[1].lengths, first[1].lengths)
    assert reads == [a, b, a]


def test_datapipe_records_its_row_check_of_a_table_held_in_memory_by_its_values(copy_of, tmp_path, monkeypatch):
    """A mixture's components hold their tables in memory (``compat.tables_read_directly``): no cache files for
    datapipe's record of its row check to name, so it records a digest of the values. The second start skips the
    check (same shards, same values); a row edited with the mtime kept is another digest, so the rows are checked
    again (control) and nothing stale is served: refused, or the new values on both sides."""
    import torch

    from robo_loaders_plugin.backends.datapipe import lerobot as datapipe_lerobot
    from robo_loaders_plugin.lerobot import compat

    root = copy_of("av1_1cam")
    checks = []
    real = datapipe_lerobot.check_rows_match
    monkeypatch.setattr(datapipe_lerobot, "check_rows_match", lambda *a, **k: (checks.append(1), real(*a, **k))[1])
    cache = str(tmp_path / "cache")

    def in_memory():
        with compat.tables_read_directly():
            nat = native(root)
        assert not nat.hf_dataset.cache_files
        return nat

    serve("datapipe", in_memory(), cache_dir=cache)
    serve("datapipe", in_memory(), cache_dir=cache)
    assert checks == [1]  # the second start reused the record
    row = 200
    _, new = edit_a_row_keeping_the_mtime(sorted(glob.glob(str(root / "data" / "*" / "*.parquet")))[0], row)
    nat = in_memory()
    assert torch.allclose(nat[row]["action"], torch.tensor(new))
    try:
        ours = serve("datapipe", nat, cache_dir=cache)
    except RoboLoadersError as err:
        assert "column 'action' differs" in str(err), err
    else:
        for i in (0, row, len(nat) - 1):
            same_item(ours[i], nat[i], f"datapipe[{i}]")
    assert checks == [1, 1]  # checked again: the values changed


def test_rows_in_another_column_order_than_lerobots_are_refused(lerobot_datasets):
    """``lerobot.dataset.check_rows_match`` compares the served columns with LeRobot's table's, in order (read as the
    table's column names, which datasets keeps in its features' order): LeRobot's own order passes that check (the
    next one, the ``index`` column, refuses an empty read), the same names in another order are refused."""
    from robo_loaders_plugin.core.errors import SourceError
    from robo_loaders_plugin.lerobot.dataset import check_rows_match

    nat = native(lerobot_datasets["av1_1cam"])
    columns = list(nat.hf_dataset.features)
    assert columns == nat.hf_dataset.column_names and len(columns) > 1
    with pytest.raises(SourceError, match="index column"):
        check_rows_match(nat, columns, np.zeros(0, np.int64), {})
    with pytest.raises(SourceError, match=r"columns \[.*\] differ from LeRobot's"):
        check_rows_match(nat, columns[::-1], np.zeros(0, np.int64), {})


def test_meta_episodes_rows_out_of_episode_order_are_refused_by_every_backend(copy_of, monkeypatch):
    """A reviewer's reproduction: meta/episodes with its rows out of episode order (here the first two swapped).
    LeRobot 0.6.1 takes an episode's video timestamps from the row at its index, the backends from the row holding
    its episode_index, so they served other frames than LeRobotDataset with nothing said. Refused now, naming the
    file and the first row out of order; control: without the check the frames differ."""
    from robo_loaders_plugin.backends.video_stream import lerobot as video_stream_factory
    from robo_loaders_plugin.lerobot import dataset as lerobot_dataset

    root = copy_of("h264_3cam_multifile")
    episodes_file = sorted(glob.glob(str(root / "meta" / "episodes" / "*" / "*.parquet")))[0]
    table = pq.read_table(episodes_file)
    assert table.column("episode_index").to_pylist()[:2] == [0, 1]
    pq.write_table(table.take([1, 0, *range(2, table.num_rows)]), episodes_file)
    nat = native(root)
    for backend in BACKENDS:
        with pytest.raises(RoboLoadersError) as err:
            serve(backend, nat)
        text = str(err.value)
        assert f"{os.path.realpath(episodes_file)}: row 0 holds episode 1; LeRobot reads an episode's row" in text, text
        assert "\n" not in text
    key = "observation.images.cam0"
    with monkeypatch.context() as m:
        for module in (lerobot_dataset, video_stream_factory):  # every place the check runs
            m.setattr(module, "check_meta_match", lambda native, source: None)
        for backend in BACKENDS:
            assert differing_frames(serve(backend, nat), nat, key, range(0, len(nat), 7)) > 0, backend


def test_episodes_added_after_lerobot_read_the_table_say_so(copy_of):
    """A reviewer's reproduction: an episode appended (a recorder still writing) after LeRobot built its dataset
    object was refused with the advice for a stale datasets cache ("delete ... mtime kept") alone, which does not
    apply: the line now says first that the table changed since LeRobot read it, and to run again."""
    import pyarrow as pa

    root = copy_of("h264_3cam_multifile")
    nat = native(root)
    episodes_file = sorted(glob.glob(str(root / "meta" / "episodes" / "*" / "*.parquet")))[-1]
    table = pq.read_table(episodes_file)
    last = table.slice(table.num_rows - 1)
    index = last.schema.get_field_index("episode_index")
    added = last.set_column(index, "episode_index", pa.array([len(nat.meta.episodes)], last.schema.field(index).type))
    pq.write_table(pa.concat_tables([table, added]), episodes_file)
    with pytest.raises(RoboLoadersError) as err:
        serve("compressed_cache", nat)
    text = str(err.value)
    assert "6 episodes there, 5 in LeRobot's dataset object" in text and "changed since" in text, text
    # first what applies here, then the stale datasets cache (the same count from a file edited with its mtime kept)
    assert text.index("changed since") < text.index("if no file changed since, LeRobot's datasets cache"), text


def test_a_timestamp_past_the_videos_end_is_not_called_a_corrupt_file(copy_of):
    """A reviewer's reproduction: a row's timestamp that maps past its video's last frame (LeRobot fails on that row
    too) was refused as "the file is truncated or corrupt", sending the user to re-download an intact video. The
    line now names the episode, the frame, its timestamp and the video's length."""
    import pyarrow as pa

    root = copy_of("h264_3cam_multifile")
    data_file = sorted(glob.glob(str(root / "data" / "*" / "*.parquet")))[-1]
    table = pq.read_table(data_file)
    stamps = table.column("timestamp").to_pylist()
    fps = native(root).meta.fps
    stamps[-1] += 0.6 / fps  # the last frame of the last video: now nearest to a frame after its end
    index = table.schema.get_field_index("timestamp")
    pq.write_table(table.set_column(index, "timestamp", pa.array(stamps, table.schema.field(index).type)), data_file)
    nat = native(root, tolerance_s=1.0 / fps)
    with pytest.raises(RoboLoadersError) as err:
        serve("compressed_cache", nat)
    text = str(err.value)
    assert "the data's timestamps point past the video's end" in text and "corrupt" not in text, text
