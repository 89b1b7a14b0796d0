"""Spill paths on the CPU with small budgets: gpu_resampler's tiers (TieredFrames: host raw, host compressed, and
the GPU tier where there is one) serve the same bytes as the arrays they were filled with, whichever tier holds a
row; video_stream's units (ChunkFrames) serve every window across unit edges from their margins."""

import itertools

import numpy as np
import pytest
import torch
from fake_machine import patch_available

from robo_loaders_plugin.backends.gpu_resampler import tensors
from robo_loaders_plugin.backends.gpu_resampler.footprint import plan_tiers
from robo_loaders_plugin.backends.gpu_resampler.tiers import CompressedRows, TieredFrames
from robo_loaders_plugin.core.data_size import DataSize
from robo_loaders_plugin.core.footprint import ResourceRefused
from robo_loaders_plugin.frames.base import FieldInfo, gather, gather_many
from robo_loaders_plugin.frames.chunks import ChunkFrames, split_runs
from robo_loaders_plugin.storage.buffers import BufferPool

CPU = torch.device("cpu")
LENGTHS = (5, 3, 7, 4, 6)


def _episodes(seed=0, noise=False):
    """Camera frames that compress (smooth gradients), or noise that does not."""
    rng = np.random.default_rng(seed)
    out = []
    for L in LENGTHS:
        if noise:
            cam = rng.integers(0, 255, (L, 3, 32, 32)).astype(np.uint8)
        else:
            ramp = np.arange(32)[None, None, None, :] * 4 + np.arange(3)[None, :, None, None] * 10
            cam = (ramp + np.arange(L)[:, None, None, None] + rng.integers(0, 50)).astype(np.uint8)
            cam = np.ascontiguousarray(np.broadcast_to(cam, (L, 3, 32, 32)))
        out.append({"a": rng.normal(size=(L, 2)).astype(np.float32), "cam": cam})
    return out


INFOS = {"a": FieldInfo(np.dtype(np.float32), (2,), False), "cam": FieldInfo(np.dtype(np.uint8), (3, 32, 32), True)}


def _size():
    return DataSize(np.array(LENGTHS), {"cam": 3 * 32 * 32}, 8)


def _tiered(plan, device=CPU, eps=None, host_limit=None):
    frames = TieredFrames(LENGTHS, INFOS, plan, device, host_limit=host_limit)
    for i, e in enumerate(eps or _episodes()):
        frames.fill(i, e)
    return frames


def _check_parity(frames, eps, pool=None):
    rng = np.random.default_rng(1)
    ep = rng.integers(0, len(LENGTHS), 64)
    steps = np.stack([np.clip(rng.integers(-1, LENGTHS[e] + 1, 3), 0, LENGTHS[e] - 1) for e in ep])
    for k in INFOS:
        got = gather(frames, k, ep, steps, pool)
        want = np.stack([eps[e][k][s] for e, s in zip(ep, steps)])
        same = got.shape == want.shape and got.numpy().tobytes() == want.tobytes()  # a bool: pytest diffs no bytes
        assert same, k
    for k, got in gather_many(frames, list(INFOS), ep, steps, pool).items():  # every field in one call
        want = np.stack([eps[e][k][s] for e, s in zip(ep, steps)])
        same = got.shape == want.shape and got.numpy().tobytes() == want.tobytes()  # a bool: pytest diffs no bytes
        assert same, k


@pytest.mark.parametrize("host_budget,tiers", [(None, "raw"), (65_000, "raw+compressed"), (10, "compressed")])
def test_every_host_tier_serves_the_same_bytes(host_budget, tiers):
    plan = plan_tiers(_size(), device_budget=None, host_budget=host_budget)
    has_raw, has_comp = plan.raw > plan.device, plan.raw < plan.episodes
    assert (has_raw, has_comp) == {"raw": (True, False), "raw+compressed": (True, True), "compressed": (False, True)}[
        tiers
    ]
    eps = _episodes()
    frames = _tiered(plan, eps=eps)
    _check_parity(frames, eps)
    _check_parity(frames, eps, BufferPool())  # batch arrays recycled from the pool: the same bytes
    if has_comp:
        assert frames.compressed_bytes > 0


def test_a_gather_across_tiers_keeps_the_order():
    plan = plan_tiers(_size(), device_budget=None, host_budget=65_000)
    assert 0 < plan.raw < plan.episodes
    eps = _episodes()
    frames = _tiered(plan, eps=eps)
    ep = np.array([plan.episodes - 1, 0, plan.raw, plan.raw - 1])  # compressed, raw, compressed, raw
    steps = np.zeros((4, 2), np.int64)
    got = gather(frames, "cam", ep, steps).numpy()
    for b, e in enumerate(ep):
        assert got[b].tobytes() == eps[e]["cam"][[0, 0]].tobytes()


def test_frames_that_compress_worse_than_planned_stop_the_fill_with_both_sizes():
    """Negative control of the runtime guard: noise does not compress, so the compressed tier outgrows it."""
    plan = plan_tiers(_size(), device_budget=None, host_budget=10)
    _tiered(plan, eps=_episodes(), host_limit=plan.footprint.host_bytes)  # frames that compress: within the plan
    with pytest.raises(ResourceRefused, match=r"compressed tier outgrew its budget .* compress 0\.\d+:1"):
        _tiered(plan, eps=_episodes(noise=True), host_limit=plan.footprint.host_bytes)


def test_frames_that_compress_worse_than_planned_move_the_compressed_tier_to_disk(tmp_path, capsys):
    plan = plan_tiers(_size(), device_budget=None, host_budget=10)
    eps = _episodes(noise=True)
    frames = TieredFrames(
        LENGTHS, INFOS, plan, torch.device("cpu"), host_limit=plan.footprint.host_bytes, overflow_dir=str(tmp_path)
    )
    for i, e in enumerate(eps):
        frames.fill(i, e)
    assert "worse than planned" in frames.spilled_while_filling and frames.parts["cam"][2].on_disk
    assert "spilled while filling episode" in capsys.readouterr().out
    _check_parity(frames, eps)
    assert list(tmp_path.iterdir()) == []  # the file is unlinked: nothing is left behind


def test_a_spilled_tier_damaged_on_disk_is_an_error_naming_the_directory_episode_and_frame(tmp_path):
    """Issue 30 item 4, gpu_resampler's side: the compressed tier spilled to disk is a mapped file; bytes changed
    under it (a failing disk, a process writing through /proc/<pid>/fd) were decoded into wrong pixels or Blosc2's
    anonymous "Cannot decompress". Each frame read from disk is checked after its decode: a StoreError naming the
    directory, the field, the episode and the step; the other frames are still served. Negative control: the
    damaged blob decoded unchecked serves the damage. The tier in host memory is this process's own: not checked."""
    from robo_loaders_plugin.storage.codec import FrameCodec
    from robo_loaders_plugin.storage.integrity import StoreError

    plan = plan_tiers(_size(), device_budget=None, host_budget=10, spill_dir=str(tmp_path))
    eps = _episodes()
    frames = TieredFrames(
        LENGTHS,
        INFOS,
        plan,
        torch.device("cpu"),
        spill_dir=str(tmp_path),
        names=[f"demo_{i}" for i in range(len(LENGTHS))],
    )
    for i, e in enumerate(eps):
        frames.fill(i, e)
    comp = frames.parts["cam"][2]
    assert comp.on_disk and comp.first_row == 0
    _check_parity(frames, eps)
    (_, begin, end, _), _ = comp._rows()
    row = sum(LENGTHS[:2]) + 1  # demo_2, step 1
    s, e = int(begin[row]), int(end[row])
    with open(f"/proc/self/fd/{comp._file.fileno()}", "r+b") as f:  # the unlinked file, as another process sees it
        f.seek((s + e) // 2)
        b = f.read(1)[0]
        f.seek((s + e) // 2)
        f.write(bytes([b ^ 0x40]))
    with pytest.raises(
        StoreError,
        match=r"gpu_resampler's compressed tier on disk \(an unlinked file in .*\): cam of "
        r"demo_2 step 1 is damaged \(checksum mismatch on read",
    ):
        gather(frames, "cam", np.array([3, 2]), np.array([[0, 1], [0, 1]]))
    got = gather(frames, "cam", np.array([2]), np.array([[0, 2]])).numpy()  # the others still served
    assert got[0].tobytes() == eps[2]["cam"][[0, 2]].tobytes()
    out = np.empty((3, 32, 32), np.uint8)
    try:  # negative control: unchecked, the damage is served or is an error naming nothing
        FrameCodec.decompress_into(comp._rows()[1][0][s:e], out)
        assert out.tobytes() != eps[2]["cam"][1].tobytes()
    except (RuntimeError, ValueError) as exc:
        assert "demo_2" not in str(exc)


def _compressed(spill_dir=None):
    """Noise frames of every episode in a CompressedRows (in memory, or moved to a file in ``spill_dir``): blobs of
    about 3 kB, so that a small read limit splits runs of them."""
    from robo_loaders_plugin.storage.codec import FrameCodec

    frames = np.concatenate([e["cam"] for e in _episodes(noise=True)])
    comp = CompressedRows(0, frames.shape[1:], frames.dtype, FrameCodec("lz4hc", 5), field="cam")
    start = 0
    for n in LENGTHS:
        comp.append(frames[start : start + n])
        start += n
    if spill_dir is not None:
        comp.to_disk(str(spill_dir))
    return comp, frames


def _check_reads(reads, rows, comp, gap):
    """The reads (``(offset, length)`` in the order issued) fetch every blob of ``rows`` whole, in the file's order,
    each byte once, and no two of them could have been one (closer than ``gap`` and within the read limit)."""
    from robo_loaders_plugin.backends.gpu_resampler import spill_reads

    (_, begin, end, _), _ = comp._rows()
    starts = [o for o, _ in reads]
    assert starts == sorted(starts), f"not in the file's order: {starts}"
    for (o, n), (o2, n2) in itertools.pairwise(reads):
        assert o + n <= o2, f"reads overlap: {(o, n)} {(o2, n2)}"
        joined = o2 + n2 - o <= spill_reads.READ_BYTES
        assert not (o2 - (o + n) <= gap and joined), f"not coalesced: {(o, n)} then {(o2, n2)}"
    for r in set(rows.tolist()):
        assert sum(o <= begin[r] and end[r] <= o + n for o, n in reads) == 1, f"row {r} not read whole once"


def test_a_spilled_tier_reads_a_batch_in_the_files_order_coalesced_and_serves_the_same_bytes(tmp_path, monkeypatch):
    """Read frame by frame through the mapping in the sampler's order, the spilled tier paged in at 150-230 MB/s
    where the disk reads 1.4 GB/s in sequence (docs/scale.md, L480). A batch's blobs are now read whole in the
    file's order, runs of adjacent ones in one read, and decoded into their places: the batch (random order,
    repeated rows, windows of adjacent rows) equals the tier in memory and the frames it was filled with. Negative
    controls: the reads the mapping made (one per row, the sampler's order) and reads not coalesced fail the check."""
    from robo_loaders_plugin.backends.gpu_resampler import spill_reads

    monkeypatch.setattr(spill_reads, "READ_GAP", 0)  # only adjacent blobs join (these are 3 kB apart at most)
    monkeypatch.setattr(spill_reads, "READ_BYTES", 8_000)  # about two blobs: long runs are split
    memory, frames = _compressed()
    disk, _ = _compressed(tmp_path)
    assert disk.on_disk and not memory.on_disk
    reads = []
    pread = disk._pread

    def recorded(fd, buf, offset):
        reads.append((offset, len(buf)))
        return pread(fd, buf, offset)

    disk._pread = recorded
    rng = np.random.default_rng(3)
    starts = rng.integers(0, len(frames) - 2, 12)
    rows = np.concatenate([starts[:, None] + np.arange(3)[None], starts[:4, None] + np.arange(3)[None]]).reshape(-1)
    rows = rng.permutation(rows)  # windows of 3 adjacent rows, 4 of them twice, in a random order
    assert len(set(rows.tolist())) < len(rows) and not np.all(np.diff(rows) >= 0)
    got_disk = np.empty((len(rows),) + frames.shape[1:], np.uint8)
    got_memory = np.empty_like(got_disk)
    disk.decode_into(rows, got_disk)
    memory.decode_into(rows, got_memory)
    assert got_disk.tobytes() == frames[rows].tobytes() == got_memory.tobytes()
    _check_reads(reads, rows, disk, gap=0)
    assert len(reads) < len(set(rows.tolist()))  # adjacent blobs were read together
    (_, begin, end, _), _ = disk._rows()
    with pytest.raises(AssertionError, match="not in the file's order"):  # the mapping's reads: the sampler's order
        _check_reads([(int(begin[r]), int(end[r] - begin[r])) for r in rows], rows, disk, gap=0)
    one_each = sorted({(int(begin[r]), int(end[r] - begin[r])) for r in rows.tolist()})
    with pytest.raises(AssertionError, match="not coalesced"):  # in order, but a read per blob
        _check_reads(one_each, rows, disk, gap=0)


def test_a_spill_file_cut_short_is_an_error_naming_the_frame_not_a_crash(tmp_path):
    """A spill file truncated while the run reads it (through ``/proc/<pid>/fd``; a full disk's filesystem after a
    failure): the rows still in it are served, a row past its end is a StoreError naming the directory, the row and
    where the file ends. Through the mapping the read was SIGBUS, the process killed."""
    from robo_loaders_plugin.storage.integrity import StoreError

    comp, frames = _compressed(tmp_path)
    _, begin, end, _ = comp._indexed()
    rows = np.arange(len(frames))
    out = np.empty((len(rows),) + frames.shape[1:], np.uint8)
    comp.decode_into(rows, out)  # the control: whole, every row served
    assert out.tobytes() == frames.tobytes()
    last = len(frames) - 1
    cut = int(begin[last]) + 10
    with open(f"/proc/self/fd/{comp._file.fileno()}", "r+b") as f:
        f.truncate(cut)
    comp.decode_into(rows[:last], out[:last])  # what is left is served
    assert out[:last].tobytes() == frames[:last].tobytes()
    with pytest.raises(
        StoreError,
        match=rf"compressed tier on disk \(an unlinked file in {tmp_path}\): cam of row {last} is damaged "
        rf"\(checksum mismatch on read; the file ends at byte {cut}, before the frame's end {int(end[last])}\)",
    ):
        comp.decode_into(rows[[0, last]], out[:2])


@pytest.mark.parametrize("where", ["memory", "disk"])
def test_a_compressed_tier_pickled_for_a_worker_serves_the_same_bytes_from_its_own_file(tmp_path, where):
    """A DataLoader's spawned worker gets the tier pickled (issue 42 item 7): it failed (``cannot pickle
    '_thread.lock'``; on disk ``'BufferedRandom'``). The copy, made after the tier served (its index, mapping and
    read buffers exist), serves the same bytes; on disk it reads the unlinked file through a descriptor of its own,
    still there once the original is closed."""
    import pickle

    comp, frames = _compressed(tmp_path if where == "disk" else None)
    rows = np.random.default_rng(3).integers(0, len(frames), 48)
    out = np.empty((len(rows),) + frames.shape[1:], np.uint8)
    comp.decode_into(rows, out)
    copy = pickle.loads(pickle.dumps(comp))
    comp.close()
    out[:] = 0
    copy.decode_into(rows, out)
    assert out.tobytes() == frames[rows].tobytes()
    assert copy.on_disk == (where == "disk")


@pytest.mark.parametrize("host_budget", [None, 65_000])
def test_tiers_pickled_for_a_worker_leave_this_process_serving_the_same_bytes(host_budget):
    """torch's pickler for workers moved a host tensor's storage into shared memory under the numpy views the
    tiers gather through: the copy got the freed memory's bytes, and this process read freed memory next (both
    served other bytes). The host tensors now go to shared memory by a copy this process switches to
    (``TensorFrames.share_host``). Every host tier: raw alone, raw and compressed."""
    import pickle
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers torch's reductions for workers on ForkingPickler)

    plan = plan_tiers(_size(), device_budget=None, host_budget=host_budget)
    assert plan.device < plan.raw and (plan.raw < plan.episodes) == (host_budget is not None)
    eps = _episodes()
    frames = _tiered(plan, eps=eps)
    _check_parity(frames, eps)  # this process has served: its numpy views exist
    copy = pickle.loads(bytes(ForkingPickler.dumps(frames)))
    junk = [np.full(1 << 16, 255, np.uint8) for _ in range(64)]  # memory freed by a move would be reused now
    _check_parity(frames, eps)
    _check_parity(copy, eps)
    assert all(t.is_shared() for t in frames.tensors.values()) and junk


@pytest.mark.cuda
def test_the_gpu_tier_and_pinned_host_tiers_serve_the_same_bytes():
    device = torch.device("cuda")
    plan = plan_tiers(_size(), device_budget=20_000, host_budget=50_000)
    assert plan.device >= 1 and plan.device < plan.raw < plan.episodes
    eps = _episodes()
    frames = _tiered(plan, device=device, eps=eps)
    rng = np.random.default_rng(2)
    ep = rng.integers(0, len(LENGTHS), 32)
    steps = np.stack([rng.integers(0, LENGTHS[e], 2) for e in ep])
    for k in INFOS:
        got = gather(frames, k, ep, steps)
        assert got.device.type == "cuda"
        want = np.stack([eps[e][k][s] for e, s in zip(ep, steps)])
        assert got.cpu().numpy().tobytes() == want.tobytes()


# -- video_stream units -------------------------------------------------------------------------------------------
def test_long_episodes_are_cut_into_units_short_ones_kept_whole():
    runs = [(0, 0, 10), (1, 10, 100), (2, 100, 114)]
    units = split_runs(runs, step_bytes=10, unit_bytes=100)  # 10 rows per unit
    assert units[0] == (0, 0, 10) and units[-1] == (2, 100, 114)  # 14 <= 1.5 units: whole
    middle = [u for u in units if u[0] == 1]
    assert middle[0][1] == 10 and middle[-1][2] == 100 and len(middle) == 9
    assert all(b == c for (_, _, b), (_, c, _) in itertools.pairwise(middle))  # contiguous, in order


def _chunked(margin, capacity=3):
    rng = np.random.default_rng(0)
    total = 60
    cam = rng.integers(0, 255, (total, 2, 4, 4), np.uint8)
    small = {"a": rng.normal(size=(total, 3)).astype(np.float32)}
    runs = [(7, 0, 25), (3, 25, 60)]
    units = split_runs(runs, step_bytes=1, unit_bytes=8)
    loads = []

    def load(ep, lo, hi):
        loads.append((ep, lo, hi))
        return {"cam": cam[lo:hi].copy()}

    infos = {"a": FieldInfo(np.dtype(np.float32), (3,), False), "cam": FieldInfo(np.dtype(np.uint8), (2, 4, 4), True)}
    frames = ChunkFrames(units, {7: (0, 25), 3: (25, 60)}, infos, small, load, margin, capacity)
    return frames, units, cam, small, loads


def test_units_serve_windows_that_reach_into_their_neighbours_from_their_margins():
    frames, units, cam, small, loads = _chunked(margin=(1, 2))
    unit_start = np.array([s for _, s, _ in units])
    bounds = {0: (0, 25), 1: (25, 60)}
    for u, (ep, s, e) in enumerate(units):
        first, end = bounds[0] if ep == 7 else bounds[1]
        rows = np.arange(s, e)[:, None] + np.array([-1, 0, 2])[None, :]
        rows = np.clip(rows, first, end - 1)  # windows are clamped into their episode (DeltaWindows)
        steps = rows - unit_start[u]
        got = gather(frames, "cam", np.full(len(rows), u), steps)
        assert got.tobytes() == cam[rows].tobytes()
        assert gather(frames, "a", np.full(len(rows), u), steps).tobytes() == small["a"][rows].tobytes()
    assert all(lo >= (0 if ep == 7 else 25) and hi <= (25 if ep == 7 else 60) for ep, lo, hi in loads)
    assert frames.cache.loads == len(units) and frames.capacity == 3


def test_a_batch_drawn_from_several_units_in_any_order_gets_each_rows_frames():
    """A batch's rows from many units, interleaved (as a shuffle buffer draws them), each with its window's frames:
    the units' rows are found for the whole batch at once, then copied unit by unit."""
    frames, units, cam, _small, loads = _chunked(margin=(1, 2), capacity=16)
    unit_start = np.array([s for _, s, _ in units])
    bounds = {7: (0, 25), 3: (25, 60)}
    rng = np.random.default_rng(1)
    picked = rng.integers(0, len(units), 48)
    at = np.array([rng.integers(units[u][1], units[u][2]) for u in picked.tolist()])
    first = np.array([bounds[units[u][0]][0] for u in picked.tolist()])
    end = np.array([bounds[units[u][0]][1] for u in picked.tolist()])
    rows = np.clip(at[:, None] + np.array([-1, 0, 2])[None, :], first[:, None], end[:, None] - 1)
    got = gather(frames, "cam", picked, rows - unit_start[picked][:, None])
    assert got.tobytes() == cam[rows].tobytes()
    assert len(loads) == len(np.unique(picked))  # each unit loaded once for the batch
    assert got.tobytes() != cam[np.clip(rows + 1, 0, len(cam) - 1)].tobytes()  # negative control: a row off


def test_a_window_beyond_the_margins_is_refused_before_any_unit_is_loaded():
    """A batch with one row outside its unit's margins is refused whole: neither that unit nor the ones after it
    are decoded for it first (only the first row's, which ``gather`` loads to see the frames' kind)."""
    frames, _units, _cam, _small, loads = _chunked(margin=(0, 0))
    with pytest.raises(IndexError, match="reach outside unit 1"):
        gather(frames, "cam", np.array([0, 1, 2]), np.array([[0, 1], [-1, 0], [0, 1]]))
    assert [lo for _, lo, _ in loads] == [0]


def test_a_window_beyond_the_margins_is_an_error_not_another_units_frames():
    """Negative control: without margins, the previous frame of a unit's first row is not loaded."""
    frames, _units, _cam, _small, _loads = _chunked(margin=(0, 0))
    u = 1
    with pytest.raises(IndexError, match="reach outside unit 1"):
        gather(frames, "cam", np.array([u]), np.array([[-1, 0]]))


def test_the_host_budget_keeps_room_for_the_episode_being_read_while_filling(monkeypatch):
    """While the tiers fill, the episode being read is held decoded (and copied by the decoder and the compressor)
    beside them: at L480 (1.66 GB episodes) max_memory 8GB held 11.4 GB. The plan keeps BUILD_EPISODES of the
    largest episode out of the budget, says so in its bound and counts it in its footprint; the control (the tiers
    alone, backends.gpu_resampler.footprint.plan_tiers with the whole budget) holds more episodes raw."""
    import types

    from robo_loaders_plugin.backends.gpu_resampler import tiers as tensors

    patch_available(monkeypatch)
    size = _size()
    frame = 3 * 32 * 32
    budget = (sum(LENGTHS) - 1) * frame  # every episode raw but the last would fit the tiers alone
    opts = types.SimpleNamespace(max_memory=budget, max_device_memory=None)
    plan, _ = tensors.plan_tiers_checked(size, torch.device("cpu"), opts, "kw")
    control = plan_tiers(size, device_budget=None, host_budget=budget)
    reserve = tensors.BUILD_EPISODES * max(LENGTHS) * frame
    assert control.raw > plan.raw and plan.footprint.host_bytes <= budget
    assert plan.footprint.host_bytes >= reserve and "being read while filling" in plan.footprint.bound


def test_a_max_memory_below_the_least_any_plan_holds_is_refused_naming_it(monkeypatch, tmp_path):
    """Issue 30 item 7: a max_memory smaller than the reserve for the episode being read was accepted with a bound
    that contradicted itself ("host memory within 200.0 kB (with 5.0 MB for the demo being read while filling)").
    The least any plan holds is every frame compressed on disk: the fields that are not frames plus the reserve.
    Below it: refused in one line naming it in bytes; at it: served from disk, the footprint within the budget and
    the bound saying the reserve is part of it (the boundary is the control)."""
    import types

    from robo_loaders_plugin.backends.gpu_resampler import tiers as tensors
    from robo_loaders_plugin.core.units import format_bytes

    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path))
    patch_available(monkeypatch)
    size = _size()
    reserve = tensors.BUILD_EPISODES * max(LENGTHS) * 3 * 32 * 32
    least = size.other_bytes + reserve

    def plan(max_memory):
        return tensors.plan_tiers_checked(
            size,
            torch.device("cpu"),
            types.SimpleNamespace(max_memory=max_memory, max_device_memory=None),
            "kw",
            ["backend 'datapipe'"],
        )

    for small in (1, least - 1):
        with pytest.raises(
            ResourceRefused,
            match=rf"within kw\.max_memory=.*it needs at least {format_bytes(least)} "
            rf"\({least} bytes\) of host memory: "
            rf"{format_bytes(size.other_bytes)} "
            rf"for the fields that are not frames and {format_bytes(reserve)} "
            r"for the episode being read while filling",
        ) as exc:
            plan(small)
        assert "\n" not in str(exc.value)
    served, limit = plan(least)
    assert served.spill_dir is not None and served.raw == 0 and limit == least - reserve
    assert served.footprint.host_bytes == least
    assert served.footprint.bound.endswith(
        f"host memory within kw.max_memory={format_bytes(least)}, "
        f"{format_bytes(reserve)} of it kept for the episode being read while "
        "filling"
    )


@pytest.mark.parametrize("host_budget,tiers", [(None, "raw"), (65_000, "raw+compressed"), (10, "compressed")])
def test_tiers_read_across_sources_in_one_call(host_budget, tiers):
    """A mixture's joined batch reads a field of several sources' tiers in one call (``TieredFrames.join_field``):
    every row equals the arrays filled, rows interleaved across the sources, from whichever tier holds it (the
    compressed tier through the source's own gather), a row of ``out`` not read left alone. Negative controls: the
    sources swapped give other rows; a step outside a source's rows is an IndexError."""
    del tiers
    plan = plan_tiers(_size(), device_budget=None, host_budget=host_budget)
    eps = [_episodes(seed=s) for s in (0, 7)]
    sources = [_tiered(plan, eps=e) for e in eps]
    # (source, episode, steps, row), rows interleaved across the sources; row 5 not read
    reads = [
        (0, 4, [0, 1, 1], 0),
        (1, 1, [0, 1, 2], 1),
        (0, 0, [4, 4, 4], 2),
        (0, 2, [6, 5, 0], 3),
        (1, 3, [3, 3, 0], 4),
    ]
    parts, e, s, r = (np.array([x[i] for x in reads]) for i in range(4))
    for field in INFOS:
        want = np.zeros((6, 3, *INFOS[field].shape), INFOS[field].dtype)
        for k, i, j, row in reads:
            want[row] = np.stack([eps[k][i][field][t] for t in j])
        joined = TieredFrames.join_field([(source, field) for source in sources])
        out = np.zeros_like(want)
        joined.take(parts, e, s, r, out)
        assert out.tobytes() == want.tobytes(), field
        swapped = np.zeros_like(want)
        joined.take(1 - parts, e, s, r, swapped)
        assert not np.array_equal(swapped, want), field
    joined = TieredFrames.join_field([(source, "cam") for source in sources])
    with pytest.raises(IndexError, match="outside"):
        joined.take(np.array([0]), np.array([4]), np.array([[5, 6, 7]]), np.array([0]), out)


@pytest.mark.parametrize("small_step_bytes", [tensors.SMALL_STEP_BYTES, 0])
@pytest.mark.parametrize("rows", ["a row not read", "every row"])
def test_one_step_windows_of_one_row_per_source_are_read_from_their_rows(rows, small_step_bytes, monkeypatch):
    """Windows of one step, most sources with one row in the batch (a batch of 32 over hundreds of components):
    each row is a view of its source's host array (``JoinedHostRows.take``), the views copied in one concatenate,
    into the batch's rows in place when they are consecutive, else gathered and scattered (small frames) or copied
    row by row (frames over ``SMALL_STEP_BYTES``); every row equals the arrays filled, a row not read is left alone.
    Negative control: the sources swapped give other rows."""
    monkeypatch.setattr(tensors, "SMALL_STEP_BYTES", small_step_bytes)
    plan = plan_tiers(_size(), device_budget=None, host_budget=None)
    eps = [_episodes(seed=s) for s in (0, 7, 3)]
    sources = [_tiered(plan, eps=e) for e in eps]
    last = 5 if rows == "a row not read" else 4
    reads = [(0, 4, 1, 0), (1, 1, 2, 1), (2, 0, 4, 2), (1, 3, 0, 3), (2, 2, 5, last)]  # source 0 once
    parts, e, s, r = (np.array([x[i] for x in reads]) for i in range(4))
    for field in INFOS:
        want = np.zeros((6, 1, *INFOS[field].shape), INFOS[field].dtype)
        for k, i, j, row in reads:
            want[row, 0] = eps[k][i][field][j]
        joined = TieredFrames.join_field([(source, field) for source in sources])
        assert type(joined).__name__ == "JoinedHostRows"  # every row in a host array
        for steps in (s, s[:, None]):  # (B,) and (B, 1)
            out = np.zeros_like(want)
            joined.take(parts, e, steps, r, out)
            assert out.tobytes() == want.tobytes(), field
        swapped = np.zeros_like(want)
        joined.take((parts + 1) % 3, e, s, r, swapped)
        assert not np.array_equal(swapped, want), field


@pytest.mark.parametrize("moved", ["share_host", "a new fill after share_host"])
def test_a_joined_read_takes_the_spans_again_after_a_source_moves_its_host_memory(moved, monkeypatch):
    """``JoinedHostRows`` keeps every source's host span across reads (``_host_spans``), taken again when a source's
    host arrays are replaced (``share_host`` for workers, ``close``). After a move, rows filled into the new arrays
    are served, not the replaced arrays' bytes. Negative control: without the move counted
    (``host_moved`` a no-op), the read serves the replaced arrays' bytes (stale frames)."""
    plan = plan_tiers(_size(), device_budget=None, host_budget=None)
    eps = [_episodes(seed=s) for s in (0, 7)]
    parts, e, s, r = np.array([0, 1, 1]), np.array([2, 0, 4]), np.array([1, 2, 3]), np.array([0, 1, 2])

    def served(sources):
        joined = TieredFrames.join_field([(source, "cam") for source in sources])
        out = np.zeros((3, *INFOS["cam"].shape), np.uint8)
        joined.take(parts, e, s, r, out)
        before = out.copy()
        for source in sources:
            source.share_host()
        if moved == "a new fill after share_host":  # rows written into the new arrays after the move
            for source in sources:
                for i, ep in enumerate(_episodes(seed=11)):
                    source.fill(i, ep)
        joined.take(parts, e, s, r, out)
        return before, out

    def want(episodes):
        return np.stack([episodes[k][i]["cam"][j] for k, i, j in zip(parts, e, s)])

    after = _episodes(seed=11) if moved == "a new fill after share_host" else None
    before, out = served([_tiered(plan, eps=x) for x in eps])
    assert before.tobytes() == want(eps).tobytes()
    assert out.tobytes() == want([after, after] if after else eps).tobytes()
    if after is None:
        return
    import robo_loaders_plugin.backends.gpu_resampler.tiers as tiers_module

    monkeypatch.setattr(tensors, "host_moved", lambda: None)
    monkeypatch.setattr(tiers_module, "host_moved", lambda: None)
    _, stale = served([_tiered(plan, eps=x) for x in eps])
    assert stale.tobytes() == want(eps).tobytes() != want([after, after]).tobytes()
