"""gpu_resampler's tiers kept in the cache (issue 45 item 1): an entry written by ``stored_tiers.write_tiers`` and
mapped by ``TieredFrames.from_entry`` serves the same bytes as the episodes it was written from, whichever tier
holds a row (raw mapped, compressed in memory, compressed read from the entry's file); a damaged entry (cut short,
a flipped byte in any file, a stale manifest) fails its check, and a frame damaged after the check is an error
naming the file, the episode and the field, never other pixels. Episodes, fields and the parity check are
``test_spill_tiers``'s."""

import os

import numpy as np
import pytest
from test_spill_tiers import CPU, INFOS, LENGTHS, _check_parity, _episodes, _size

from robo_loaders_plugin.backends.gpu_resampler import stored_tiers
from robo_loaders_plugin.backends.gpu_resampler.footprint import plan_tiers
from robo_loaders_plugin.backends.gpu_resampler.tiers import TieredFrames
from robo_loaders_plugin.frames.base import gather
from robo_loaders_plugin.storage.cache import CacheError
from robo_loaders_plugin.storage.integrity import StoreError


def _entry(tmp_path, host_budget=None, spilled=False, eps=None):
    """An entry of the test episodes under a plan of ``host_budget`` (spilled: the compressed tier in the entry's
    file), checked; returns ``(directory, plan)``."""
    plan = plan_tiers(
        _size(), device_budget=None, host_budget=host_budget, spill_dir=str(tmp_path) if spilled else None
    )
    directory = str(tmp_path / "entry")
    os.makedirs(directory)
    stored_tiers.write_tiers(directory, LENGTHS, plan.raw, iter(eps or _episodes()), lambda first: INFOS)
    assert stored_tiers.problem(directory, LENGTHS, blobs_checked=not spilled) == ""
    return directory, plan


def _mapped(directory, plan):
    entry = stored_tiers.OpenedTiers(directory)
    try:
        return TieredFrames.from_entry(entry, LENGTHS, plan, CPU, spill_dir=plan.spill_dir)
    finally:
        entry.close()


@pytest.mark.parametrize(
    "host_budget,spilled,tiers",
    [(None, False, "raw"), (65_000, False, "raw+compressed"), (10, False, "compressed"), (10, True, "on disk")],
)
def test_an_entry_mapped_serves_the_same_bytes_in_every_tier(tmp_path, host_budget, spilled, tiers):
    directory, plan = _entry(tmp_path, host_budget, spilled)
    frames = _mapped(directory, plan)
    comp = frames.parts["cam"][2]
    assert (comp is None) == (tiers == "raw") and (comp is not None and comp.on_disk) == spilled, tiers
    assert frames.filled.all()
    _check_parity(frames, _episodes())


def test_the_parity_check_fails_on_other_episodes(tmp_path):
    """Control: the entry's check above tells other data from the episodes (a different seed)."""
    directory, plan = _entry(tmp_path, 65_000, eps=_episodes(seed=5))
    with pytest.raises(AssertionError):
        _check_parity(_mapped(directory, plan), _episodes())


def _flip(path, offset=0):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def _cut(path):
    os.truncate(path, os.path.getsize(path) - 3)


def _edited(edit):
    """A manifest edited by ``edit``, its own checksum written again (``resummed``) or kept (damage)."""

    def damage(path, resummed=True):
        import json

        with open(path) as f:
            m = json.load(f)
        edit(m)
        if resummed:
            from robo_loaders_plugin.storage.integrity import json_checksum

            m["checksum"] = json_checksum(m)
        with open(path, "w") as f:
            json.dump(m, f)

    return damage


def _longer(m):
    m["lengths"][0] += 1


def _swapped(m):
    m["fields"][0]["name"], m["fields"][1]["name"] = m["fields"][1]["name"], m["fields"][0]["name"]


def _big_endian(m):
    m["fields"][0]["dtype"] = m["fields"][0]["dtype"].replace("<", ">")


def _bit_flipped(edit):
    def damage(path):
        _edited(edit)(path, resummed=False)

    return damage


_stale = _edited(_longer)


@pytest.mark.parametrize(
    "file,damage,named",
    [
        ("raw/0.bin", _cut, "raw/0.bin (a) has another size"),
        ("raw/0.bin", _flip, "raw/0.bin (a) does not match its checksum"),
        ("raw/1.bin", _flip, "raw/1.bin (cam) does not match its checksum"),
        ("compressed/1.blobs", _flip, "compressed/1.blobs (cam): frame 0 does not match its checksum"),
        ("compressed/1.blobs", _cut, "compressed/1.blobs (cam) has another size"),
        ("compressed/1.index.bin", _flip, "compressed/1.index.bin (cam) does not match its checksum"),
        ("compressed/1.index.bin", _cut, "compressed/1.index.bin (cam) has another size than"),
        ("compressed/1.index.bin", os.unlink, "compressed/1.index.bin (cam) cannot be read"),
        ("tiers.json", _stale, "other episode lengths"),
        ("tiers.json", os.unlink, "tiers.json is missing"),
        ("tiers.json", _bit_flipped(_big_endian), "damaged (it does not match its checksum)"),
        ("tiers.json", _bit_flipped(_swapped), "damaged (it does not match its checksum)"),
        ("tiers.json", _edited(_big_endian), "are not in this machine's byte order"),
    ],
)
def test_a_damaged_entry_fails_its_check_naming_the_file(tmp_path, file, damage, named):
    """A reviewer's reproductions among them: the manifest was checked by its size only, so one flipped bit in it
    (``<f8`` read as ``>f8``: every start crashed in torch) or two camera names exchanged (every frame served under
    the other's name) passed; it now matches its own checksum, and its dtypes are native."""
    directory, _ = _entry(tmp_path, 65_000)
    damage(os.path.join(directory, file))
    assert named in stored_tiers.problem(directory, LENGTHS, blobs_checked=True)


def test_an_index_damaged_between_the_check_and_the_open_is_refused_naming_it(tmp_path):
    """The index is read once, checked and parsed from the same bytes; opened again under the lock, its bytes are
    checked again, so a copy changed after the check is never served. Control: the undamaged entry opens."""
    from robo_loaders_plugin.storage.cache import CacheError

    directory, _ = _entry(tmp_path, 65_000)
    assert stored_tiers.problem(directory, LENGTHS, blobs_checked=True) == ""
    stored_tiers.OpenedTiers(directory).close()
    _flip(os.path.join(directory, "compressed", "1.index.bin"), 9)
    with pytest.raises(CacheError, match=r"compressed/1\.index\.bin \(cam\) does not match its checksum"):
        stored_tiers.OpenedTiers(directory)


def test_an_entry_of_other_fields_fails_its_check(tmp_path):
    """The fields a run serves are the entry's: another set is refused, naming both. Control: the same names in
    any order pass."""
    directory, _ = _entry(tmp_path, 65_000)
    assert "it holds the fields ['a', 'cam'], this run serves ['a', 'other']" in stored_tiers.problem(
        directory, LENGTHS, blobs_checked=True, names=["a", "other"]
    )
    assert stored_tiers.problem(directory, LENGTHS, blobs_checked=True, names=["cam", "a"]) == ""


def test_an_entry_rebuilt_by_another_run_after_its_check_serves_what_was_checked(tmp_path):
    """A reviewer's reproduction: a run checked an entry, then read its files by path field by field; another run
    with a smaller memory budget built the entry again meanwhile (another raw/compressed boundary), and the first
    served its old raw rows beside the new index: other rows' frames, each matching its checksum. What a run reads
    is now opened at once under the entry's lock (``OpenedTiers``), so the rebuild changes nothing it serves.
    Control: the new entry's index beside the old raw rows is refused (``CompressedRows.from_entry``), never
    served."""
    import shutil

    directory, plan = _entry(tmp_path, 65_000)
    entry = stored_tiers.OpenedTiers(directory)
    other = plan_tiers(_size(), device_budget=None, host_budget=10)
    assert other.raw != plan.raw
    shutil.rmtree(directory)  # as build_or_reuse rebuilds an entry in place
    os.makedirs(directory)
    stored_tiers.write_tiers(directory, LENGTHS, other.raw, iter(_episodes()), lambda first: INFOS)
    try:
        _check_parity(TieredFrames.from_entry(entry, LENGTHS, plan, CPU), _episodes())
    finally:
        entry.close()
    mixed = stored_tiers.OpenedTiers(directory)
    mixed.raw = entry.raw  # the old raw rows beside the new index
    with pytest.raises(StoreError, match="does not match the entry's raw rows"):
        TieredFrames.from_entry(mixed, LENGTHS, plan, CPU)
    mixed.close()


def test_a_raw_byte_flipped_after_the_check_is_refused_by_the_copy_that_checks_itself(tmp_path):
    """A raw file is read into host memory and checked there (``OpenedTiers.copy_raw``), so a byte written in place
    between the start's check and the copy is refused, naming the file and the field, and the entry is discarded
    (the next start builds it again); never served. Control: the damage is real: the mapped rows hold the flipped
    byte, so served from the map (as before the copy checked itself) they would differ from the source."""
    directory, plan = _entry(tmp_path, 65_000)
    raw_path = os.path.join(directory, "raw", "0.bin")
    with open(raw_path, "rb") as f:
        written = np.frombuffer(f.read(), dtype=np.uint8)
    _flip(raw_path, 0)
    name = stored_tiers.read_manifest(directory)["fields"][0]["name"]
    mapped = stored_tiers.OpenedTiers(directory)
    served = np.asarray(mapped.raw[name]).reshape(-1).view(np.uint8)
    assert np.flatnonzero(served != written).tolist() == [0]
    mapped.close()
    with pytest.raises(CacheError, match=rf"raw/0\.bin \({name}\) does not match its checksum since it was checked"):
        _mapped(directory, plan)
    assert stored_tiers.read_manifest(directory) is None  # discarded: the next start's check fails, it is rebuilt


def test_a_raw_file_cut_after_the_check_is_refused_by_the_copy(tmp_path):
    """The same for a raw file cut short between the check and the copy (a shorter read, not a checksum over
    fewer bytes). Control: the entry as written maps (the parity tests above)."""
    directory, plan = _entry(tmp_path)
    entry = stored_tiers.OpenedTiers(directory)
    _cut(os.path.join(directory, "raw", "0.bin"))
    try:
        with pytest.raises(CacheError, match=r"raw/0\.bin \(.*\) is shorter than its rows since it was checked"):
            TieredFrames.from_entry(entry, LENGTHS, plan, CPU, spill_dir=plan.spill_dir)
    finally:
        entry.close()


def test_a_start_leaving_raw_checksums_to_the_copies_still_compares_sizes_and_every_copy_checks(tmp_path):
    """``problem(raw_checked_when_copied=True)`` (a CPU run, whose copies read every raw file whole and check it)
    skips the raw files' checksums only: a cut raw file is still refused at the start. A flipped one passes the
    start (control: the default check refuses it) and is refused where its rows are taken: by ``copy_raw`` (the
    message no longer says it was checked before), and by ``check_raw`` before any copy from the map (the path a
    GPU tier takes), which discards the entry; an intact file passes ``check_raw`` once."""
    directory, _ = _entry(tmp_path, 65_000)
    raw_path = os.path.join(directory, "raw", "0.bin")
    _flip(raw_path, 0)
    assert "raw/0.bin (a) does not match its checksum" in stored_tiers.problem(directory, LENGTHS, True)
    assert stored_tiers.problem(directory, LENGTHS, True, raw_checked_when_copied=True) == ""
    entry = stored_tiers.OpenedTiers(directory)
    entry.raw_unchecked = set(entry.raw_files)
    out = np.empty_like(np.asarray(entry.raw["a"]))
    with pytest.raises(stored_tiers.RawCopyRefused, match=r"raw/0\.bin \(a\) does not match its checksum; run"):
        entry.copy_raw("a", out)
    entry.check_raw("cam")  # intact: checked, then not again
    assert entry.raw_unchecked == {"a"}
    with pytest.raises(stored_tiers.RawCopyRefused, match=r"raw/0\.bin \(a\) does not match its checksum"):
        entry.check_raw("a")
    entry.close()
    assert stored_tiers.read_manifest(directory) is None  # discarded: built again
    directory, _ = _entry(tmp_path / "cut", 65_000)
    _cut(os.path.join(directory, "raw", "0.bin"))
    assert "raw/0.bin (a) has another size" in stored_tiers.problem(directory, LENGTHS, True, None, True)


def test_raw_rows_written_in_place_after_the_start_are_never_served(tmp_path):
    """A reviewer's reproduction: the raw files are checked once, at the start; served where they lie (mapped, on
    the CPU), a byte written into one in place afterwards by another process was served unchecked, every later
    sample differing from the source. The rows are copied at the start, after the check: what is served is what was
    checked. Control: the same flip before the rows are taken is served (test above), so the flip reaches them."""
    directory, plan = _entry(tmp_path)  # every episode raw
    frames = _mapped(directory, plan)
    raw = os.path.join(directory, "raw")
    for name in sorted(os.listdir(raw)):
        for offset in range(0, os.path.getsize(os.path.join(raw, name)), 97):
            _flip(os.path.join(raw, name), offset)
    _check_parity(frames, _episodes())


def test_an_entry_built_under_another_budget_is_mapped_with_its_own_boundary(tmp_path):
    """The raw/compressed boundary follows the free memory of the run that built the entry, so it is no part of the
    key (a key holding it made a new multi-GB entry at every run reading another free memory): an entry built under
    a smaller budget passes its check in a run whose plan holds every episode raw, and is mapped with its own
    boundary (``entry_plan``), serving the same bytes. Control: mapped under today's plan instead (the rows past the
    entry's boundary are not in its raw files) or under a smaller boundary (its compressed rows start elsewhere),
    the mapping is refused naming the entry; never other rows' bytes."""
    directory, small = _entry(tmp_path, 65_000)
    today = plan_tiers(_size(), device_budget=None, host_budget=None)
    assert today.raw == len(LENGTHS) > small.raw  # another boundary than the entry's
    assert stored_tiers.problem(directory, LENGTHS, blobs_checked=True) == ""
    kept = stored_tiers.entry_plan(stored_tiers.OpenedTiers(directory), today)
    assert kept.raw == small.raw and kept.compressed_bytes > 0
    _check_parity(_mapped(directory, kept), _episodes())
    for other in (today, plan_tiers(_size(), device_budget=None, host_budget=10)):
        assert other.raw != kept.raw
        with pytest.raises(ValueError, match="map it with its own boundary"):
            _mapped(directory, other)


def test_an_entry_of_another_boundary_too_large_for_this_budget_is_said_so(tmp_path):
    """A reused entry whose raw rows exceed this run's host budget is not mapped beyond it: the check names both
    (one line) and the entry is built again under this run's plan. Control: the same entry within the budget, or
    with this run's own boundary, is used."""
    directory, _ = _entry(tmp_path)  # every episode raw
    today = plan_tiers(_size(), device_budget=None, host_budget=65_000)
    why = stored_tiers._too_large(directory, today, 65_000, "train.data_backend_kwargs")
    assert "exceed this run's host memory for the tiers" in why and "train.data_backend_kwargs.max_memory" in why
    assert "\n" not in why
    assert stored_tiers._too_large(directory, today, 10**9, "w") == ""
    assert stored_tiers._too_large(directory, plan_tiers(_size(), device_budget=None, host_budget=None), 10, "w") == ""


def test_the_entry_kind_carries_the_format_version_so_an_older_format_is_retired(tmp_path):
    """``storage.cached_dir``'s convention: a kind ending in ``-<version>``; an entry written under an earlier
    version of the same key is removed (never read as this format). Control: an unversioned kind retires nothing."""
    from robo_loaders_plugin.storage import cache
    from robo_loaders_plugin.storage.cached_dir import retire_earlier_versions

    assert stored_tiers.KIND.endswith(f"-{stored_tiers.FORMAT}") and stored_tiers.KIND.startswith("gpu_resampler-")
    key = {"path": "/x"}
    root = str(tmp_path)
    old = os.path.join(root, f"gpu_resampler-tiers-{stored_tiers.FORMAT - 1}-{cache.short_hash(key)}-0123456789abcdef")
    os.makedirs(old)
    os.makedirs(os.path.join(root, ".locks"))  # as cache_root makes it
    assert retire_earlier_versions(root, "gpu_resampler-tiers", key) == [] and os.path.isdir(old)  # the control
    assert retire_earlier_versions(root, stored_tiers.KIND, key) == [old] and not os.path.exists(old)


def test_a_spilled_entry_damaged_after_its_check_is_an_error_naming_it_and_marks_it_for_rebuilding(tmp_path):
    """Served from the entry's file, each frame is checked when read (its blobs are not hashed at the start: the
    file may exceed memory); a flipped frame names the file, the episode and the field, and the entry's manifest
    goes so that the next start builds it again. Control: the undamaged entry serves every row."""
    directory, plan = _entry(tmp_path, 10, spilled=True)
    frames = _mapped(directory, plan)
    eps = _episodes()
    last = len(LENGTHS) - 1
    np.testing.assert_array_equal(
        gather(frames, "cam", np.array([last]), np.array([[0]]))[0, 0].numpy(), eps[-1]["cam"][0]
    )
    blobs = os.path.join(directory, "compressed", "1.blobs")
    offsets = np.fromfile(os.path.join(directory, "compressed", "1.index.bin"), dtype=np.int64)  # offsets first
    first_of_last = sum(LENGTHS[:-1])
    _flip(blobs, int(offsets[first_of_last]) + 20)
    with pytest.raises(StoreError) as err:
        gather(frames, "cam", np.array([last]), np.array([[0]]))
    msg = str(err.value)
    assert f"the cache's file {blobs}" in msg and "cam of episode 4 step 0" in msg and "\n" not in msg, msg
    assert "tiers.json is missing" in stored_tiers.problem(directory, LENGTHS, blobs_checked=False)
    frames.close()


@pytest.mark.parametrize("size", [0, 1, 4096, 10_007])
def test_a_files_checksum_is_its_whole_bytes_xxh3_read_in_blocks(tmp_path, monkeypatch, size):
    """``file_checksum`` reads into one buffer of at most a block (a small block here, so a file spans several and
    ends in a partial one): the value is the xxh3 of the whole file, as recorded when the entry was written.
    Control: one byte changed changes it."""
    import xxhash

    monkeypatch.setattr(stored_tiers, "_HASH_BLOCK", 1000)
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    assert stored_tiers.file_checksum(str(path)) == xxhash.xxh3_64_intdigest(data)
    if size:
        _flip(str(path), size - 1)
        assert stored_tiers.file_checksum(str(path)) != xxhash.xxh3_64_intdigest(data)
