import os
import pickle
import zlib

import numpy as np
import pytest

from robo_loaders_plugin.backends.compressed_cache.episode_store import (
    EpisodeStore,
    MemoryBudgetExceeded,
    StoreError,
    StoreWriter,
)
from robo_loaders_plugin.core.units import format_bytes, parse_bytes
from robo_loaders_plugin.storage.codec import CodecError, FrameCodec


def frames(n=5, seed=0):
    rng = np.random.default_rng(seed)
    base = np.add.outer(np.arange(24), np.arange(24))[..., None].repeat(3, -1)
    return np.stack([(base + i + rng.integers(0, 3, base.shape)).astype(np.uint8) for i in range(n)])


@pytest.mark.parametrize("codec", ["lz4", "lz4hc", "zstd", "blosclz"])
@pytest.mark.parametrize("filt", ["none", "shuffle", "bitshuffle"])
def test_codec_roundtrip(codec, filt):
    c = FrameCodec(codec, 5, filt)
    for dtype in (np.uint8, np.float32, np.int64):
        f = frames(1)[0].astype(dtype)
        out = np.empty_like(f)
        c.decompress_into(c.compress(f), out)
        assert out.tobytes() == f.tobytes()


def test_codec_errors():
    with pytest.raises(CodecError, match="unknown codec"):
        FrameCodec("gzip")
    with pytest.raises(CodecError, match="level"):
        FrameCodec("lz4", 12)
    c = FrameCodec()
    blob = c.compress(frames(1)[0])
    with pytest.raises(CodecError, match="expected"):
        c.decompress_into(blob, np.empty(10, np.uint8))
    with pytest.raises(CodecError, match="corrupt"):
        c.decompress_into(b"\x00" * 40, np.empty(10, np.uint8))


def test_decompression_releases_the_gil_and_never_writes_past_its_output():
    """Batch threads decompress large frames side by side only if Blosc2 releases the GIL (``set_releasegil``, set at
    import; ``blosc2.decompress`` holds it whatever that says). ``decompress2`` writes as many bytes as the header
    says, so a header announcing more than the output holds must be refused before it runs; the control: Blosc2
    itself, given that header, writes past a smaller output's end (seen in a guard region after it). Small frames
    keep ``decompress``, which writes at most the output's size."""
    import blosc2

    from robo_loaders_plugin.storage.codec import GIL_FREE_MIN_BYTES

    assert blosc2.set_releasegil(True) is True  # already set by importing the codec
    c = FrameCodec()
    rng = np.random.default_rng(0)
    for side in (24, 160):  # 1.7 kB (decompress) and 77 kB (decompress2)
        f = rng.integers(0, 4, (side, side, 3), dtype=np.uint8)
        assert (f.nbytes >= GIL_FREE_MIN_BYTES) == (side == 160)
        blob = c.compress(f)
        out = np.empty_like(f)
        c.decompress_into(blob, out, shared=True)
        assert out.tobytes() == f.tobytes()
        guard = np.full(2 * f.nbytes, 7, np.uint8)
        half = f.nbytes // 2
        with pytest.raises(CodecError, match="expected"):
            c.decompress_into(blob, guard[:half])
        assert (guard[half:] == 7).all()  # nothing written beyond the output
    try:  # the control: unguarded, Blosc2 before 4.15 writes on; 4.15 checks the output's length itself
        blosc2.decompress2(blob, dst=guard[:half], nthreads=1)
    except RuntimeError as exc:
        assert "smaller than the decompressed size" in str(exc), exc
    else:
        assert not (guard[half : f.nbytes] == 7).all()


def build(path, **kw):
    w = StoreWriter(str(path), FrameCodec(), **kw)
    eps = []
    for e in range(3):
        img = frames(4 + e, seed=e)
        low = np.arange((4 + e) * 2, dtype=np.float64).reshape(-1, 2) + e
        w.add_episode(f"demo_{e}", {"img": img, "low": low}, compressed={"img"})
        eps.append((img, low))
    w.finish({"fingerprint": "abc"})
    return eps


def test_store_roundtrip_and_pickle(tmp_path):
    path = tmp_path / "s.rlc"
    eps = build(path, workers=2)
    assert os.listdir(tmp_path) == ["s.rlc"]
    st = EpisodeStore(str(path))
    assert st.meta["fingerprint"] == "abc" and len(st.episodes) == 3
    starts, ends = st.blob_bounds("img")
    assert len(starts) == 4 + 5 + 6
    out = np.empty((15, 24, 24, 3), np.uint8)
    st.decode_frames(starts.tolist(), ends.tolist(), out, list(range(15)), sums=st.frame_sums("img").tolist())
    assert out.tobytes() == np.concatenate([e[0] for e in eps]).tobytes()
    assert st.raw(2, "low").tobytes() == eps[2][1].tobytes()
    assert not st.raw(0, "low").flags.writeable
    st2 = pickle.loads(pickle.dumps(st))
    assert len(pickle.dumps(st)) < 200
    assert st2.raw(1, "low").tobytes() == eps[1][1].tobytes()
    assert st.stats["compressed_nbytes"] > 0 and st.stats["decoded_frame_nbytes"] == out.nbytes


def test_blob_layout_read_in_one_pass_equals_each_episodes_tables(tmp_path):
    """``blob_layout``/``frame_sums`` read every episode's tables with one gather (a mixture opens hundreds of
    stores): each blob's bounds, decoded size and checksum equal the episode's own tables read one by one, for all
    episodes and for a selection in any order; a table off its 8-byte boundary or past the file is refused."""
    path = tmp_path / "s.rlc"
    build(path)
    st = EpisodeStore(str(path))

    def one_by_one(eps):
        starts, ends, sizes, sums = [], [], [], []
        for ep in eps:
            d = st.field(ep, "img")
            table = np.frombuffer(st._buf, np.int64, d["shape"][0] + 1, d["table"])
            starts += (d["offset"] + table[:-1]).tolist()
            ends += (d["offset"] + table[1:]).tolist()
            sizes += [24 * 24 * 3] * d["shape"][0]
            sums += np.frombuffer(st._buf, "<u8", d["shape"][0], d["sums"]).tolist()
        return starts, ends, sizes, sums

    for eps in (None, [2, 0], [1], []):
        layout = st.blob_layout("img", eps)
        got = [x.tolist() for x in layout] + [st.frame_sums("img", eps).tolist()]
        assert got == list(one_by_one(range(3) if eps is None else eps))
    assert len(st.blob_layout("img")[0]) == 4 + 5 + 6
    # negative control: the tables one episode later are another layout, which the comparison sees
    assert [x.tolist() for x in st.blob_layout("img", [1])] != list(one_by_one([2]))[:3]
    fresh = EpisodeStore(str(path))
    fresh.episodes[1]["fields"]["img"]["table"] += 4
    with pytest.raises(StoreError, match="not aligned"):
        fresh.blob_layout("img")
    past = EpisodeStore(str(path))
    past.episodes[2]["fields"]["img"]["sums"] = past.file_nbytes // 8 * 8
    with pytest.raises(StoreError, match="past the end"):
        past.frame_sums("img")


def test_store_rejects_truncated_and_corrupt(tmp_path):
    path = tmp_path / "s.rlc"
    build(path)
    data = path.read_bytes()
    bad = tmp_path / "truncated.rlc"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError, match="truncated or corrupt"):
        EpisodeStore(str(bad))
    bad.write_bytes(b"NOTSTORE" + data[8:])
    with pytest.raises(StoreError, match="bad magic"):
        EpisodeStore(str(bad))
    hdr = data.rfind(b'"episodes"')
    bad.write_bytes(data[:hdr] + b"X" + data[hdr + 1 :])
    with pytest.raises(StoreError, match="checksum"):
        EpisodeStore(str(bad))
    # a frame blob damaged in the data region is caught when its table is loaded
    st = EpisodeStore(str(path))
    s0 = int(st.blob_bounds("img")[0][0])
    st.close()
    bad.write_bytes(data[:s0] + b"\xff" * 16 + data[s0 + 16 :])
    with pytest.raises(CodecError, match="corrupt compressed frame"):
        EpisodeStore(str(bad)).blob_bounds("img")
    # damage in the data region is also caught by the full check done before a persisted cache is reused
    raw_off = EpisodeStore(str(path)).field(1, "low")["offset"]
    bad.write_bytes(data[:raw_off] + b"\x01" + data[raw_off + 1 :])
    reopened = EpisodeStore(str(bad))
    with pytest.raises(StoreError, match="data checksum"):
        reopened.verify()
    EpisodeStore(str(path)).verify()
    with pytest.raises(StoreError, match="gone"):
        EpisodeStore(str(tmp_path / "missing.rlc"))


def test_budget_and_abort_leave_nothing(tmp_path):
    path = tmp_path / "s.rlc"
    with pytest.raises(MemoryBudgetExceeded, match=r"max_memory.*or choose a stronger codec"):
        w = StoreWriter(str(path), FrameCodec(), max_bytes=500)
        try:
            w.add_episode("demo_0", {"img": frames(8)}, compressed={"img"})
        except BaseException:
            w.abort()
            raise
    assert os.listdir(tmp_path) == []
    # a store without frames is not told to choose a codec (a reviewer's finding)
    w = StoreWriter(str(path), FrameCodec(), max_bytes=500)
    with pytest.raises(MemoryBudgetExceeded, match=r"select fewer obs keys or demos\Z"):
        try:
            w.add_episode("demo_0", {"low": np.zeros((200, 8), np.float32)})
        finally:
            w.abort()
    w.abort()  # again: does nothing, raises nothing
    assert os.listdir(tmp_path) == []


def test_units():
    assert parse_bytes("2GB") == 2_000_000_000 and parse_bytes("512MiB") == 512 * 2**20 and parse_bytes(10) == 10
    for bad in ("lots", True, -1, "3 parsecs"):
        with pytest.raises(ValueError):
            parse_bytes(bad, "max_memory")
    assert format_bytes(1536) == "1.5 kB" and format_bytes(999) == "999 B" and format_bytes(999_960) == "1.0 MB"
    # what users type is printed back as they typed it (issue 23: max_memory "1MB" was shown as "976.6 KiB",
    # the 50GB cache limit as "46.6 GiB")
    assert format_bytes(parse_bytes("1MB")) == "1.0 MB" and format_bytes(parse_bytes("50GB")) == "50.0 GB"
    assert format_bytes(parse_bytes("512MiB")) == "536.9 MB" and format_bytes(3.2e12) == "3.2 TB"


def test_buffer_pool_never_hands_out_a_buffer_in_use():
    import torch

    from robo_loaders_plugin.storage.buffers import BufferPool

    pool = BufferPool(max_per_shape=4)
    a = pool.empty((4, 3), np.uint8)
    b = pool.empty((4, 3), np.uint8)
    assert a is not b
    t = torch.from_numpy(a[1:])  # a tensor on a view keeps the buffer busy
    del a
    c = pool.empty((4, 3), np.uint8)
    assert c is not b and not np.shares_memory(c, t.numpy())
    del b, c
    d = pool.empty((4, 3), np.uint8)  # b or c is free again: recycled, no new allocation
    assert len(pool._free[((4, 3), np.dtype(np.uint8).str)]) == 3
    assert not np.shares_memory(d, t.numpy())
    held = [pool.empty((4, 3), np.uint8) for _ in range(6)]  # all alive at once: all distinct
    assert len({id(h) for h in held}) == 6 and not any(np.shares_memory(h, t.numpy()) for h in held)


def test_a_bounded_pool_keeps_no_more_bytes_than_its_bound_and_lets_go_of_free_buffers_first():
    """Arrays of many shapes (a mixture's parts) kept within ``max_bytes``: the least recently handed out buffers
    nothing references are let go to make room, a buffer in use never; beyond the bound arrays are handed out unkept.
    With ``round_rows`` (the batch size) an array of fewer rows is a view of a buffer of a power of two rows, so
    parts of every size share a few buffers, and a batch's array is its buffer itself; a view keeps its buffer busy.
    The control: the same arrays from a pool without the bound keep a buffer per shape, past it."""
    import torch

    from robo_loaders_plugin.storage.buffers import BufferPool

    row = 100  # bytes of a row of (rows, 100) uint8
    unbounded, pool = BufferPool(max_per_shape=64), BufferPool(max_per_shape=64, max_bytes=40 * row)
    for rows in range(1, 17):
        unbounded.empty((rows, 100), np.uint8)
        pool.empty((rows, 100), np.uint8)
    assert unbounded.held() == (16, 136 * row)  # the control: every shape kept
    assert pool.held() == (2, 31 * row)  # 15 + 16 rows: the most recent that fit, older ones let go
    busy = pool.empty((16, 100), np.uint8)
    busy[:] = 7
    pool.bound(20 * row)  # only the free ones go: the one in use stays, and stays intact
    assert pool.held() == (1, 16 * row) and (busy == 7).all()
    assert pool.empty((16, 100), np.uint8) is not busy  # in use: never handed out again; no room: not kept
    assert pool.held() == (1, 16 * row)
    del busy
    rounded = BufferPool(max_per_shape=8, round_rows=16)
    parts = [rounded.empty((rows, 100), np.uint8) for rows in (3, 5, 9, 16)]
    assert [p.shape[0] for p in parts] == [3, 5, 9, 16] and parts[3].base is None  # a batch's own shape
    assert sorted(len(b) for bufs in rounded._free.values() for b in bufs) == [4, 8, 16, 16]
    view = torch.from_numpy(parts[0][1:])  # a tensor on a view of a part keeps its buffer busy
    del parts
    again = rounded.empty((4, 100), np.uint8)
    assert not np.shares_memory(again, view.numpy()) and rounded.allocations == 5


def test_the_store_summary_counts_in_the_frameworks_word_and_says_when_there_are_no_frames(tmp_path):
    """Issue 23 B12: a store of low-dim fields only (every step under 1024 bytes) was summarised "frames 0 B -> 0 B,
    nanx"; robomimic's summary said "episodes" where robomimic (and the rest of its log) says demos. The summary's
    head is the SDK's (``sdk.serve.served_head``), what the store holds its own (``CompressedStore.describe``)."""
    from robo_loaders_plugin.backends.compressed_cache.frames import CompressedFrames
    from robo_loaders_plugin.backends.compressed_cache.store import CompressedStore
    from robo_loaders_plugin.sdk.serve import served_head

    build(tmp_path / "s.rlc")
    with_frames = CompressedStore().describe(CompressedFrames(EpisodeStore(str(tmp_path / "s.rlc"))), str(tmp_path))
    assert served_head(3, 10, "demo") == "3 demos, 10 samples"
    assert with_frames.startswith("cache ") and "frames " in with_frames and "x; low-dim" in with_frames
    assert "nan" not in with_frames
    w = StoreWriter(str(tmp_path / "low.rlc"), FrameCodec())
    w.add_episode("demo_0", {"low": np.zeros((5, 2))}, compressed=set())
    w.finish({})
    low = CompressedStore().describe(CompressedFrames(EpisodeStore(str(tmp_path / "low.rlc"))), str(tmp_path))
    assert served_head(1, 5, "episode") == "1 episode, 5 samples"
    assert low.startswith("cache ") and low.endswith("(no camera frames; low-dim 80 B)"), low
    assert "nan" not in low and "0 B ->" not in low


def test_squared_error_does_not_wrap_on_large_frames():
    """16 frames of 640x480x3 differing by 30 everywhere: 1.33e9 squared differences summed per chunk overflowed
    int32 (np.dot sums in the arrays' dtype) and came back negative, so the PSNR of 480p video was wrong."""
    import numpy as np

    from robo_loaders_plugin.storage.video import psnr, squared_error

    a = np.zeros((16, 480, 640, 3), np.uint8)
    b = np.full_like(a, 30)
    assert squared_error(a, b) == 30 * 30 * a.size
    assert abs(psnr(a, b) - 10 * np.log10(255**2 / 900)) < 1e-9


def test_sizes_that_are_not_finite_are_refused_naming_the_option():
    import pytest

    from robo_loaders_plugin.core.units import parse_bytes

    for bad in (float("inf"), float("nan")):
        with pytest.raises(ValueError, match="max_memory: expected a finite size"):
            parse_bytes(bad, "max_memory")


def test_store_frames_check_each_blob_before_its_first_decode_not_all_at_open(tmp_path, monkeypatch):
    """A reader locates the blobs at open from the offset tables only (checking every blob's header touched a page
    of the mapped file per frame: seconds per million frames in every process, issue 22) and checks each blob once,
    before it is first decoded: a blob damaged in episode 2 is refused when a batch needs it (negative control),
    episodes 0 and 1 read before it, and a checked blob is not checked again."""
    from robo_loaders_plugin.backends.compressed_cache.frames import CompressedFrames

    path = tmp_path / "s.rlc"
    eps = build(path)
    store = EpisodeStore(str(path))
    s2 = int(store.blob_layout("img")[0][4 + 5])  # the first frame blob of episode 2
    store.close()
    data = bytearray(path.read_bytes())
    data[s2 : s2 + 16] = b"\xff" * 16
    bad = tmp_path / "bad.rlc"
    bad.write_bytes(bytes(data))
    checked = []
    real = EpisodeStore.check_blobs
    monkeypatch.setattr(
        EpisodeStore,
        "check_blobs",
        lambda self, k, s, e, x, **kw: (checked.append(len(s)), real(self, k, s, e, x, **kw)),
    )
    frames = CompressedFrames(EpisodeStore(str(bad)))
    out = np.empty((2, 24, 24, 3), np.uint8)
    frames.take("img", np.array([0, 1]), np.array([3, 4]), out)
    assert out[0].tobytes() == eps[0][0][3].tobytes() and out[1].tobytes() == eps[1][0][4].tobytes()
    frames.take("img", np.array([0, 1]), np.array([3, 4]), out)
    assert checked == [2]  # two blobs checked, once
    with pytest.raises(StoreError, match=r"bad\.rlc: demo_2 img frame 0 is damaged \(checksum mismatch"):
        frames.take("img", np.array([2]), np.array([0]), out[:1])


def test_store_frames_read_raw_rows_where_they_lie(tmp_path):
    """Raw fields are read from the mapped file's bytes per batch (no per-process concatenation of every
    episode's rows, seconds at a million frames in each DataLoader worker): windows across episodes equal the
    rows written; negative control: another episode's offsets give other values."""
    from robo_loaders_plugin.backends.compressed_cache.frames import CompressedFrames

    path = tmp_path / "s.rlc"
    eps = build(path)
    frames = CompressedFrames(EpisodeStore(str(path)))
    episodes, steps = np.array([2, 0, 1]), np.array([[0, 5, 5], [1, 2, 3], [4, 4, 0]])
    out = np.empty((3, 3, 2), np.float64)
    frames.take("low", episodes, steps, out)
    assert out.tobytes() == np.stack([eps[e][1][s] for e, s in zip(episodes, steps)]).tobytes()
    assert len(frames._flat["low"]) == 3  # one offset per episode held, not the rows
    rows, first = frames._rows["low"]
    frames._rows["low"] = (rows, first[[1, 2, 0]])
    frames.take("low", episodes, steps, out)
    assert out.tobytes() != np.stack([eps[e][1][s] for e, s in zip(episodes, steps)]).tobytes()


def _flip(path, offset: int) -> None:
    """Flip one bit of ``path`` in place (the file a store has mapped: the mapping sees it)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ 0x10]))


def test_a_store_damaged_while_it_is_read_is_an_error_naming_file_episode_field_and_frame(tmp_path):
    """Issue 30 item 4: bits flipped in a mapped store while a run reads it were served (wrong pixels, wrong rows)
    or raised Blosc2's anonymous "Cannot decompress". Each frame is checked after its decode and each raw block
    after its rows are copied: a StoreError naming the file, the episode, the field and the frame or steps. Negative
    control: the damaged blob decoded unchecked gives other pixels (or Blosc2's error naming nothing), the damaged
    rows are other values."""
    from robo_loaders_plugin.backends.compressed_cache.frames import CompressedFrames

    path = tmp_path / "s.rlc"
    eps = build(path)
    frames = CompressedFrames(EpisodeStore(str(path)))
    img, low = np.empty((1, 2, 24, 24, 3), np.uint8), np.empty((1, 2, 2), np.float64)
    frames.take("img", np.array([1]), np.array([[2, 3]]), img)  # the run is under way: the tables are loaded
    frames.take("low", np.array([2]), np.array([[0, 1]]), low)
    store = frames.store
    s, e = (int(x[4 + 2]) for x in store.blob_layout("img")[:2])  # demo_1's frame 2, past its Blosc2 header
    _flip(path, (s + e) // 2)
    _flip(path, store.field(2, "low")["offset"] + 9)  # demo_2's step 0
    with pytest.raises(StoreError, match=r"s\.rlc: demo_1 img frame 2 is damaged \(checksum mismatch on read"):
        frames.take("img", np.array([1]), np.array([[2, 3]]), img)
    with pytest.raises(StoreError, match=r"s\.rlc: demo_2 low steps 0-5 is damaged \(checksum mismatch on read"):
        frames.take("low", np.array([2, 0]), np.array([[0, 1], [0, 1]]), np.empty((2, 2, 2)))
    frames.take("img", np.array([1]), np.array([[3, 4]]), img)  # intact frames and blocks are still served
    assert img[0].tobytes() == eps[1][0][3:5].tobytes()
    frames.take("low", np.array([0]), np.array([[0, 1]]), low)
    assert low[0].tobytes() == eps[0][1][:2].tobytes()
    # negative control: the same reads unchecked serve the damage
    out = np.empty((24, 24, 3), np.uint8)
    try:
        FrameCodec.decompress_into(store._buf[s:e], out)
        assert out.tobytes() != eps[1][0][2].tobytes()
    except (RuntimeError, ValueError) as exc:
        assert str(path) not in str(exc) and "demo_1" not in str(exc)
    assert store.raw(2, "low").tobytes() != eps[2][1].tobytes()


def test_a_store_of_another_format_gets_another_cache_entry_and_is_refused_if_opened(tmp_path):
    """A change of the store's format (2 -> 3: camera frames channels last) changes its cache entries' kind, so a
    store of format 2 is never found for this version (rebuilt beside it), and one opened anyway is refused naming
    both."""
    from robo_loaders_plugin.backends.compressed_cache import episode_store as store_module
    from robo_loaders_plugin.backends.compressed_cache.store import CompressedStore

    now = store_module.FORMAT_VERSION
    assert CompressedStore.kind == f"compressed-cache-{now}"
    path = tmp_path / "s.rlc"
    build(path)
    (tmp_path / "old.rlc").write_bytes(_with_header(path.read_bytes(), lambda h: dict(h, format=now - 1)))
    with pytest.raises(
        StoreError, match=rf"old\.rlc: cache format {now - 1} is not {now} .*delete it and it will be rebuilt"
    ):
        EpisodeStore(str(tmp_path / "old.rlc"))


def _with_header(data: bytes, edit) -> bytes:
    """A store file's bytes with its JSON header replaced by ``edit(header)``, footer and header CRC made valid."""
    import json

    from robo_loaders_plugin.backends.compressed_cache import episode_store as store_module

    hoff, hlen, _, end = store_module._FOOTER.unpack(data[-store_module._FOOTER.size :])
    header = json.dumps(edit(json.loads(data[hoff : hoff + hlen])), sort_keys=True).encode()
    return data[:hoff] + header + store_module._FOOTER.pack(hoff, len(header), zlib.crc32(header), end)


def test_decompress_into_refuses_a_small_frame_whose_header_announces_fewer_bytes():
    """A blob of a smaller frame decoded into a larger output would leave the output's tail as it was (stale bytes
    served silently): ``decompress_into`` checks the header first. The control: the hot path's bare call (sizes
    checked where the table is loaded) writes the blob's bytes and raises nothing."""
    c = FrameCodec()
    f = frames(1)[0]
    blob = c.compress(f[:12])  # half the frame
    out = np.full_like(f, 9)
    with pytest.raises(CodecError, match="expected"):
        c.decompress_into(blob, out)
    assert (out == 9).all()
    FrameCodec.decoder(out.nbytes)(blob, out)
    assert out[:12].tobytes() == f[:12].tobytes() and (out[12:] == 9).all()


def test_decoder_into_chooses_by_the_size_of_one_frame_of_the_batch():
    """Small frames take the bare call (their sizes checked where their tables were loaded), large ones the checked
    one; an empty batch asks for no frame. The control: a large batch of frames is checked per frame, so a short
    blob is refused."""
    from robo_loaders_plugin.storage import codec as codec_module

    small = np.zeros((4, codec_module.GIL_FREE_MIN_BYTES // 2), np.uint8)
    large = np.zeros((2, codec_module.GIL_FREE_MIN_BYTES), np.uint8)
    assert FrameCodec.decoder_into(small) is codec_module._decompress_small
    assert FrameCodec.decoder_into(small[:0]) is codec_module._decompress_small
    decode = FrameCodec.decoder_into(large)
    assert decode is not codec_module._decompress_small
    with pytest.raises(CodecError, match="expected"):
        decode(FrameCodec().compress(large[0, :100]), large[0])


def _store_of(path, seed: int, chw: bool):
    """A store of 3 episodes of ``img`` frames (channels first when ``chw``: stored channels last), its frames."""
    w = StoreWriter(str(path), FrameCodec())
    eps = []
    for e in range(3):
        img = frames(4 + e, seed=seed + e)
        img = np.ascontiguousarray(img.transpose(0, 3, 1, 2)) if chw else img
        w.add_episode(f"demo_{e}", {"img": img}, compressed={"img"})
        eps.append(img)
    w.finish({"fingerprint": str(seed)})
    return eps


@pytest.mark.parametrize("chw", [False, True], ids=["as_stored", "channels_last_stored"])
def test_store_frames_read_across_stores_in_one_call(tmp_path, chw, monkeypatch):
    """A mixture's joined batch reads a camera of several stores in one call (``CompressedFrames.join_field``):
    every row equals the frames written and each store's own ``take``, with windows repeating a step (padding),
    rows interleaved across the stores and rows of ``out`` left alone. Negative controls: the parts swapped give
    other rows; a damaged frame of the second store is refused naming its file and frame; stores holding the
    field in other shapes are declined (``None``)."""
    from robo_loaders_plugin.backends.compressed_cache.frames import CompressedFrames

    data = [_store_of(tmp_path / f"s{k}.rlc", 10 * k, chw) for k in range(3)]
    sources = [CompressedFrames(EpisodeStore(str(tmp_path / f"s{k}.rlc"))) for k in range(3)]
    # (part, episode, steps, row): windows with repeated steps, rows interleaved across parts, row 6 not written
    reads = [
        (0, 2, [0, 0, 1], 0),
        (1, 1, [1, 2, 3], 1),
        (2, 2, [5, 5, 5], 2),
        (0, 0, [3, 3, 3], 3),
        (1, 2, [4, 5, 5], 4),
        (1, 0, [0, 1, 2], 5),
    ]
    parts, eps, steps, rows = (np.array([r[i] for r in reads]) for i in range(4))
    shape = data[0][0].shape[1:]
    written = np.full((7, 3, *shape), 7, np.uint8)
    by_take = written.copy()
    for k, e, s, r in reads:
        written[r] = data[k][e][s]
        sources[k].take("img", np.array([e]), np.array([s]), by_take[r : r + 1])
    joined = CompressedFrames.join_field([(source, "img") for source in sources])
    out = np.full_like(written, 7)
    joined.take(parts, eps, steps, rows, out)
    assert out.tobytes() == written.tobytes() == by_take.tobytes()
    joined.take(parts, eps, steps, rows, out)  # again: the blobs checked at the first read are not checked again
    assert out.tobytes() == written.tobytes()
    swapped = np.full_like(written, 7)  # negative control: the same reads of other stores
    joined.take((parts + 1) % 3, eps, steps, rows, swapped)
    assert not np.array_equal(swapped, written)

    store = EpisodeStore(str(tmp_path / "s1.rlc"))
    s, e = (int(x[4 + 2]) for x in store.blob_layout("img")[:2])  # demo_1's frame 2, past its Blosc2 header
    store.close()
    raw = bytearray((tmp_path / "s1.rlc").read_bytes())
    raw[(s + e) // 2] ^= 0xFF
    (tmp_path / "bad.rlc").write_bytes(bytes(raw))
    damaged = [sources[0], CompressedFrames(EpisodeStore(str(tmp_path / "bad.rlc"))), sources[2]]
    bad = CompressedFrames.join_field([(source, "img") for source in damaged])
    with pytest.raises(StoreError, match=r"bad\.rlc: demo_1 img frame 2 is damaged"):
        bad.take(parts, eps, steps, rows, out)
    raw = bytearray((tmp_path / "s1.rlc").read_bytes())
    raw[s + 12] ^= 0x01  # its Blosc2 header's compressed size: refused by the first read's check, before a decode
    (tmp_path / "bad_header.rlc").write_bytes(bytes(raw))
    damaged = [sources[0], CompressedFrames(EpisodeStore(str(tmp_path / "bad_header.rlc"))), sources[2]]
    bad = CompressedFrames.join_field([(source, "img") for source in damaged])
    from robo_loaders_plugin.backends.compressed_cache import frames as cc_frames

    def no_decode(*args, **kwargs):
        raise AssertionError("decoded before the headers were checked")

    with monkeypatch.context() as m:
        m.setattr(cc_frames, "decode_across", no_decode)
        with pytest.raises(StoreError, match=r"bad_header\.rlc: demo_1 img frame 2 is damaged"):
            bad.take(parts, eps, steps, rows, out)
        with pytest.raises(AssertionError, match="decoded before"):  # control: sound headers reach the decode
            CompressedFrames.join_field([(source, "img") for source in sources]).take(parts, eps, steps, rows, out)

    _store_of(tmp_path / "other.rlc", 99, not chw)  # the other layout: another step shape
    other = CompressedFrames(EpisodeStore(str(tmp_path / "other.rlc")))
    assert CompressedFrames.join_field([(sources[0], "img"), (other, "img")]) is None


def test_raw_blocks_found_in_one_pass_equal_each_episodes_blocks_and_check_every_one(tmp_path):
    """``raw_blocks`` computes every episode's checked blocks of a raw field at once (issue 45: a loop per
    episode took ~1 s of the first batch at 10,000 demos): the same bounds and checksums as each episode's own
    entry read one by one, over episodes of one row, of partial last blocks and of rows of two widths; every
    block then passes ``check_blocks``, and a byte flipped in any one of them is named (negative control); a
    checksum table off its 8-byte boundary or past the file is refused."""
    path = tmp_path / "s.rlc"
    w = StoreWriter(str(path), FrameCodec())
    rng = np.random.default_rng(3)
    for e, rows in enumerate((1700, 1, 2300, 257)):
        w.add_episode(f"demo_{e}", {"low": rng.standard_normal((rows, 2 + 5 * (e % 2))).astype(np.float32)})
    w.finish({"fingerprint": "abc"})
    st = EpisodeStore(str(path))
    base, per, starts, ends, sums = st.raw_blocks("low")
    want_starts, want_ends, want_sums, want_base = [], [], [], [0]
    for ep in range(4):
        d = st.field(ep, "low")
        rows, p = d["shape"][0], d["block_rows"]
        row_bytes = int(np.prod(d["shape"][1:])) * np.dtype(d["dtype"]).itemsize
        n = -(-rows // p)
        for b in range(n):
            want_starts.append(d["offset"] + b * p * row_bytes)
            want_ends.append(d["offset"] + min((b + 1) * p, rows) * row_bytes)
        want_sums += np.frombuffer(bytes(st._buf[d["sums"] : d["sums"] + 8 * n]), "<u8").tolist()
        want_base.append(want_base[-1] + n)
    assert (starts, ends, sums, base) == (want_starts, want_ends, want_sums, want_base)
    assert len(starts) > 8 and len(set(per)) > 1  # several blocks per episode, two block sizes
    layout = (base, per, starts, ends, sums)
    st.check_blocks("low", layout, range(len(starts)))
    st.close()
    data = bytearray(path.read_bytes())
    data[starts[6] + 5] ^= 0x10
    path.write_bytes(bytes(data))
    bad = EpisodeStore(str(path))
    bad.check_blocks("low", bad.raw_blocks("low"), [b for b in range(len(starts)) if b != 6])
    with pytest.raises(StoreError, match="damaged"):
        bad.check_blocks("low", bad.raw_blocks("low"), range(len(starts)))
    bad.episodes[2]["fields"]["low"]["sums"] += 4  # a header the writer did not write: tables off 8 bytes, past the end
    with pytest.raises(StoreError, match="low: checksum tables not aligned"):
        bad.raw_blocks("low")
    bad.episodes[2]["fields"]["low"]["sums"] = bad.file_nbytes // 8 * 8
    with pytest.raises(StoreError, match="past the end"):
        bad.raw_blocks("low")


def test_a_store_with_big_endian_arrays_from_an_earlier_version_is_refused_for_a_rebuild(tmp_path):
    """A session review's reproduction: robomimic sources were stored as their files hold them until files were read
    in this machine's byte order; a store built so from a big-endian file was reused, and its batches failed in torch
    (the failure the change fixed). Such a store is refused as outdated, naming the field (control: the same
    arrays in this machine's order open)."""
    for order, ok in ((">", False), ("=", True)):
        path = tmp_path / f"{order != '>'}.rlc"
        w = StoreWriter(str(path), FrameCodec())
        w.add_episode("demo_0", {"low": np.arange(6, dtype=np.dtype("f8").newbyteorder(order))}, compressed=set())
        w.finish({})
        if ok:
            assert EpisodeStore(str(path)).raw(0, "low").dtype.isnative
        else:
            with pytest.raises(StoreError, match=r"holds 'low' big-endian, as an earlier version .*rebuilt"):
                EpisodeStore(str(path))
