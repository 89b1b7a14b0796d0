"""gpu_resampler's tiers kept in the cache (issue 45 item 1), through the frameworks' factories: the second start
maps the entry the first built and reads nothing of the source (no HDF5 dataset read, no video decoded), and serves
what the native loader serves (SequenceDataset, LeRobotDataset); an edited source or a damaged entry is built again;
the cache commands list and clear the entry; a disk that cannot hold it is refused before anything is written."""

import os
import shutil

import h5py
import numpy as np
import pytest
from lerobot_helpers import REPO, random_indices, same_item, serve
from robomimic_helpers import assert_same_sample, make_config, obs_keys

from robo_loaders_plugin.robomimic import dataset_factory
from robo_loaders_plugin.sources.lerobot_v3 import LeRobotEpisodes
from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5
from robo_loaders_plugin.storage import cache


def _counted(monkeypatch, cls, name):
    """Count the calls of ``cls.name`` (the reads of the source's data)."""
    calls = []
    original = getattr(cls, name)
    static = isinstance(cls.__dict__[name], staticmethod)

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(cls, name, staticmethod(counted) if static else counted)
    return calls


def _robomimic(path, cache_dir, **kwargs):
    cfg = make_config(path, backend="gpu_resampler", backend_kwargs={"cache_dir": cache_dir, **kwargs}, seq_length=5)
    return dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")


def _native_robomimic(path):
    cfg = make_config(path, seq_length=5)
    return dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")


def _same_as_native(ours, reference):
    assert len(ours) == len(reference)
    for i in range(0, len(ours), 7):
        assert_same_sample(ours[i], reference[i], f"[{i}]")


def _entries(root):
    return [e for e in cache.entries(root) if e.name.startswith("gpu_resampler-tiers-")]


@pytest.fixture
def hdf5_copy(tiny_hdf5, tmp_path):
    """A copy of the tiny file a test may edit, and a cache root of its own."""
    path = str(tmp_path / "tiny.hdf5")
    shutil.copy(tiny_hdf5, path)
    return path, str(tmp_path / "cache")


def test_robomimic_second_start_maps_the_tiers_reads_nothing_and_equals_sequence_dataset(hdf5_copy, monkeypatch):
    path, root = hdf5_copy
    reads = _counted(monkeypatch, RobomimicHdf5, "read")
    first = _robomimic(path, root)
    assert reads and "built in" in first.location
    reference = _native_robomimic(path)
    reads.clear()
    second = _robomimic(path, root)
    assert not reads, f"{len(reads)} reads of {path} on the second start"
    assert "mapped from" in second.location and len(_entries(root)) == 1
    _same_as_native(second, reference)


def test_robomimic_a_cpu_start_reads_each_kept_raw_file_once_and_a_refused_copy_is_built_again_at_once(
    hdf5_copy, monkeypatch, caplog
):
    """A CPU run's start leaves the kept raw files' checksums to the copies that read them whole into memory
    (``OpenedTiers.copy_raw``): each raw file is read once, not checked by the start and read again (control: a
    run that leaves them to nobody, ``raw_checked_when_copied=False``, checks every one at the start). A raw byte
    flipped at rest is then refused by its copy, and the same start builds the entry again and serves the source
    (one line names the file), never the flipped byte."""
    from robo_loaders_plugin.backends.gpu_resampler import stored_tiers

    path, root = hdf5_copy
    _robomimic(path, root)
    (entry,) = _entries(root)
    raw = sorted(os.path.join(entry.path, "raw", n) for n in os.listdir(os.path.join(entry.path, "raw")))
    checked = []
    original = stored_tiers.file_checksum
    monkeypatch.setattr(stored_tiers, "file_checksum", lambda p, *a: checked.append(p) or original(p, *a))
    assert not stored_tiers.problem(entry.path, _robomimic(path, root).frames.lengths, True, None)
    assert raw and set(raw) <= set(checked)  # control: the start's own check reads every raw file
    checked.clear()
    second = _robomimic(path, root)
    assert "mapped from" in second.location and not [p for p in checked if p in raw]
    _same_as_native(second, _native_robomimic(path))
    _flip_raw(entry.path)
    reads = _counted(monkeypatch, RobomimicHdf5, "read")
    caplog.set_level("INFO", logger="robo_loaders_plugin")
    again = _robomimic(path, root)
    assert reads and "built in" in again.location
    assert "raw/0.bin" in caplog.text and "rebuilding the kept tiers" in caplog.text
    _same_as_native(again, _native_robomimic(path))


def test_robomimic_entries_of_earlier_formats_keyed_by_their_format_are_retired(hdf5_copy):
    """Formats 1 and 2 hashed their format into the entry's key as well as its kind, so no later format found them
    by their key and they stayed on disk for good (400 of them beside a 400-component mixture's new entries, every
    start listing them). Now the kind alone carries the format, and a start retires what the earlier formats wrote
    under their keys. Control: an entry of another source's key stays."""
    import json

    from robo_loaders_plugin.backends.gpu_resampler import stored_tiers

    path, root = hdf5_copy
    _robomimic(path, root)
    (entry,) = _entries(root)
    with open(os.path.join(entry.path, "robo-loaders-source.json")) as f:
        key = json.load(f)["key"]
    assert "format" not in key and entry.name.startswith(f"{stored_tiers.KIND}-{cache.short_hash(key)}-")
    former = [os.path.join(root, f"gpu_resampler-tiers-{v}-{cache.short_hash({**key, 'format': v})}-0123456789abcdef")
              for v in range(1, stored_tiers.FORMAT)]  # fmt: skip
    other = os.path.join(root, f"gpu_resampler-tiers-2-{cache.short_hash({**key, 'root': '/x', 'format': 2})}-0")
    for d in (*former, other):
        os.makedirs(d)
    second = _robomimic(path, root)
    assert "mapped from" in second.location
    assert not any(os.path.exists(d) for d in former) and os.path.isdir(other)


def test_robomimic_an_edited_source_is_built_again_and_served_as_edited(hdf5_copy, monkeypatch):
    """Control of the test above: with the source changed the tiers are built again from it (the fingerprint
    differs) and serve the edited values, equal to SequenceDataset on the edited file."""
    path, root = hdf5_copy
    before = _robomimic(path, root)
    with h5py.File(path, "r+") as f:
        demo = sorted(f["mask/train"][()].astype(str))[0]
        f[f"data/{demo}/actions"][0] += 1.0
    reads = _counted(monkeypatch, RobomimicHdf5, "read")
    after = _robomimic(path, root)
    assert reads and "built in" in after.location
    reference = _native_robomimic(path)
    _same_as_native(after, reference)
    assert not np.array_equal(before[0]["actions"], after[0]["actions"])  # the edit is in what is served


def _flip_raw(entry):
    with open(os.path.join(entry, "raw", "0.bin"), "r+b") as f:
        b = f.read(1)
        f.seek(0)
        f.write(bytes([b[0] ^ 0xFF]))


def _cut_raw(entry):
    p = os.path.join(entry, "raw", "0.bin")
    os.truncate(p, os.path.getsize(p) - 4)


def _flip_raw_silently(entry):
    """A flipped byte the files' version stamp does not see (a disk's bit rot, another NFS client's write): the
    entry's stamp says its files were verified as they are now."""
    from robo_loaders_plugin.storage.cached_dir import mark_verified

    _flip_raw(entry)
    mark_verified(entry)


@pytest.mark.parametrize(
    "damage", [_flip_raw, _cut_raw, _flip_raw_silently], ids=["flipped byte", "cut short", "flipped, stamp kept"]
)
def test_robomimic_a_damaged_entry_is_built_again_never_served(hdf5_copy, monkeypatch, caplog, damage):
    path, root = hdf5_copy
    _robomimic(path, root)
    (entry,) = _entries(root)
    damage(entry.path)
    reads = _counted(monkeypatch, RobomimicHdf5, "read")
    again = _robomimic(path, root)
    assert reads and "built in" in again.location
    # a size that differs is found by the entry's manifest (storage.cached_dir: "...; rebuilding"), a flipped byte
    # by the tiers' checksums ("...; building them again"): either names the file
    assert "raw/0.bin" in caplog.text and "rebuilding" in caplog.text
    _same_as_native(again, _native_robomimic(path))


def test_robomimic_a_disk_that_cannot_hold_the_tiers_serves_from_memory_with_one_line(hdf5_copy, monkeypatch, caplog):
    """A run whose tiers fit in RAM worked before the tiers were kept: a disk that cannot hold the entry does not
    refuse it, the tiers are filled in memory as before (one line says they were not kept and why, naming
    cache_dir), nothing is left in the cache. Control: with the disk's room back the next start keeps them."""
    from robo_loaders_plugin.core import footprint

    path, root = hdf5_copy
    monkeypatch.setattr(footprint, "disk_reserve", lambda _: 1 << 60)
    ds = _robomimic(path, root)
    assert "not kept (disk full)" in ds.location and not _entries(root)
    (line,) = [r.getMessage() for r in caplog.records if "not kept for the next start" in r.getMessage()]
    assert "train.data_backend_kwargs.cache_dir" in line and "\n" not in line, line
    assert not [n for n in os.listdir(root) if ".tmp-" in n]
    _same_as_native(ds, _native_robomimic(path))
    monkeypatch.undo()
    assert "built in" in _robomimic(path, root).location and len(_entries(root)) == 1


def test_robomimic_a_write_failing_for_space_serves_from_memory_like_a_full_disk(hdf5_copy, monkeypatch, caplog):
    """A quota, or another writer filling the disk, is seen by no free-space check: the tiers' write fails with
    ENOSPC/EDQUOT. That is the same shortfall as a disk seen full (tiers held in memory, one line naming cache_dir),
    not a bare ``OSError: [Errno 28]`` (a reviewer's reproduction), and nothing partial is left. Control: another
    OSError is raised as it is."""
    import errno

    from robo_loaders_plugin.backends.gpu_resampler import stored_tiers

    path, root = hdf5_copy
    write = stored_tiers.write_tiers

    def failing(code):
        def write_then_fail(directory, *args, **kwargs):
            write(directory, *args, **kwargs)
            raise OSError(code, os.strerror(code))

        return write_then_fail

    monkeypatch.setattr(stored_tiers, "write_tiers", failing(errno.EDQUOT))
    ds = _robomimic(path, root)
    assert "not kept (disk full)" in ds.location and not _entries(root)
    (line,) = [r.getMessage() for r in caplog.records if "not kept for the next start" in r.getMessage()]
    assert "train.data_backend_kwargs.cache_dir" in line and "quota" in line and "\n" not in line, line
    assert not [n for n in os.listdir(root) if ".tmp-" in n]
    _same_as_native(ds, _native_robomimic(path))
    monkeypatch.setattr(stored_tiers, "write_tiers", failing(errno.EIO))
    with pytest.raises(OSError, match="Input/output error"):
        _robomimic(path, root)


def _lerobot_act(lerobot_datasets):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    from robo_loaders_plugin.lerobot.presets import delta_timestamps

    root = lerobot_datasets["av1_1cam"]
    return LeRobotDataset(
        REPO, root=root, delta_timestamps=delta_timestamps("act", LeRobotDatasetMetadata(REPO, root=root))
    )


def test_lerobot_a_spilled_plan_on_a_full_disk_is_refused_before_decoding_and_a_reuse_is_not(
    lerobot_datasets, tmp_path, monkeypatch
):
    """A plan whose compressed tier must be on disk (max_memory below even the compressed frames) needs the disk
    anyway: refused before anything is decoded or written, naming cache_dir. A start that reuses such an entry
    writes nothing, so the same full disk does not refuse it (the spill file counted again refused it: the
    control is the refusal of the fresh cache directory with the same disk)."""
    from robo_loaders_plugin.core import footprint
    from robo_loaders_plugin.core.footprint import ResourceRefused

    nat = _lerobot_act(lerobot_datasets)
    kept = str(tmp_path / "kept")
    assert "built in" in serve("gpu_resampler", nat, cache_dir=kept, max_memory="1.5MB").location
    monkeypatch.setattr(footprint, "disk_reserve", lambda _: 1 << 60)
    decoded = _counted(monkeypatch, LeRobotEpisodes, "read")
    again = serve("gpu_resampler", nat, cache_dir=kept, max_memory="1.5MB")
    assert "mapped from" in again.location and "compressed in a file on local disk" in again.location
    assert not decoded
    for i in random_indices(len(nat), 30):
        same_item(again[i], nat[i], f"[{i}]")
    fresh = str(tmp_path / "fresh")
    with pytest.raises(ResourceRefused) as err:
        serve("gpu_resampler", nat, cache_dir=fresh, max_memory="1.5MB")
    msg = str(err.value)
    assert ".cache_dir" in msg and "nothing was written" in msg and "\n" not in msg, msg
    assert not decoded and not _entries(fresh)


def test_lerobot_an_entry_built_under_another_budget_is_mapped_not_built_again(
    lerobot_datasets, tmp_path, monkeypatch, caplog
):
    """The raw/compressed boundary follows the free memory when the entry is built; a run with another budget maps
    the entry as it is when it fits (one line says so), decoding nothing and making no second entry (a key holding
    the boundary made one per free-memory reading). An entry whose raw rows exceed this run's budget is built again
    under this run's plan (one line names both): the control that the fit is checked."""
    nat = _lerobot_act(lerobot_datasets)
    root = str(tmp_path / "cache")
    small = serve("gpu_resampler", nat, cache_dir=root, max_memory="3.5MB")
    assert "built in" in small.location and "compressed in host memory" in small.location
    boundary = small.frames.plan.raw
    small.close()
    decoded = _counted(monkeypatch, LeRobotEpisodes, "read")
    large = serve("gpu_resampler", nat, cache_dir=root)  # its own plan: every episode raw
    assert not decoded and "mapped from" in large.location and len(_entries(root)) == 1
    assert large.frames.plan.raw == boundary
    assert any("mapped as they are" in r.getMessage() for r in caplog.records)
    # the bound describes the entry's tiers, not this run's plan ("every episode held uncompressed": a reviewer's)
    assert large.serving.summary.count("bounded: frames of") == 1 and "held uncompressed" not in large.serving.summary
    for i in random_indices(len(nat), 40):
        same_item(large[i], nat[i], f"[{i}]")
    large.close()
    caplog.clear()
    for e in _entries(root):  # an entry with every episode raw, then a run that cannot hold it raw
        e.remove()
    serve("gpu_resampler", nat, cache_dir=root).close()
    decoded.clear()
    tight = serve("gpu_resampler", nat, cache_dir=root, max_memory="3.5MB")
    assert decoded and "built in" in tight.location and tight.frames.plan.raw == boundary
    (line,) = [r.getMessage() for r in caplog.records if "exceed this run's host memory" in r.getMessage()]
    assert "rebuilding" in line and "\n" not in line, line
    assert "integrity" not in caplog.text  # an intact entry that does not fit: not said to be damaged (a reviewer's)
    for i in random_indices(len(nat), 40):
        same_item(tight[i], nat[i], f"[{i}]")


def test_the_cache_commands_list_and_clear_the_tiers(hdf5_copy):
    from click.testing import CliRunner

    from robo_loaders_plugin.cli import main

    path, root = hdf5_copy
    ds = _robomimic(path, root)
    (entry,) = _entries(root)
    r = CliRunner().invoke(main, ["cache", "list", "--cache-dir", root])
    assert r.exit_code == 0 and entry.name in r.output, r.output
    r = CliRunner().invoke(main, ["cache", "clear", "--cache-dir", root])
    assert r.exit_code == 0 and os.path.isdir(entry.path), "an entry in use is kept"  # control: the run holds it
    ds.close()  # its use lock released (Serving.hold)
    r = CliRunner().invoke(main, ["cache", "clear", "--cache-dir", root])
    assert r.exit_code == 0 and not os.path.exists(entry.path), r.output


@pytest.mark.parametrize(
    "max_memory,tiers",
    [
        (None, "raw"),
        ("1.5MB", "planned in the entry's file"),  # even compressed the frames exceed the budget
        ("3.5MB", "planned in memory, read from the entry's file"),  # they compress worse than planned
    ],
)
def test_lerobot_second_start_decodes_nothing_and_equals_lerobot_dataset(
    lerobot_datasets, tmp_path, monkeypatch, max_memory, tiers
):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    from robo_loaders_plugin.lerobot.presets import delta_timestamps

    options = {"cache_dir": str(tmp_path / "cache")}
    if max_memory:
        options["max_memory"] = max_memory
    meta_root = lerobot_datasets["av1_1cam"]
    meta = LeRobotDatasetMetadata(REPO, root=meta_root)
    nat = LeRobotDataset(REPO, root=meta_root, delta_timestamps=delta_timestamps("act", meta))
    decoded = _counted(monkeypatch, LeRobotEpisodes, "read")
    first = serve("gpu_resampler", nat, **options)
    assert decoded and "built in" in first.location
    decoded.clear()
    second = serve("gpu_resampler", nat, **options)
    assert not decoded and "mapped from" in second.location
    where = second.location
    if tiers == "raw":
        assert "compressed" not in where, where
    elif tiers == "planned in the entry's file":
        assert "compressed in a file on local disk" in where, where
    else:
        assert "compressed in host memory" in where and "read per batch from the kept entry's file" in where, where
    for i in random_indices(len(nat), 60):
        same_item(second[i], nat[i], f"[{i}]")
