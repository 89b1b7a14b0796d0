"""Camera frames at rest channels last (``storage.frame_layout``): shards and compressed stores store channels-first
frames as (H, W, C), record it, and serve the bytes they were given; stores and shards written channels first by an
earlier version are read as they are (shards) or rebuilt (stores), never read as the other layout."""

import json
import os
import sys
import zlib

import numpy as np
import pytest

from robo_loaders_plugin.backends.compressed_cache import episode_store as store_module
from robo_loaders_plugin.backends.compressed_cache.episode_store import EpisodeStore, StoreWriter
from robo_loaders_plugin.backends.compressed_cache.frames import CompressedFrames
from robo_loaders_plugin.storage import frame_layout
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.encoded_frames import EncodedFrames
from robo_loaders_plugin.storage.shards import ShardError, ShardReader, ShardWriter
from robo_loaders_plugin.storage.shards import format as shard_format
from robo_loaders_plugin.storage.shards import writer as shard_writer


def camera(n: int, seed: int = 0, shape=(3, 12, 16)) -> np.ndarray:
    """(N, C, H, W) uint8 frames, as LeRobot serves them: smooth content plus noise, every channel different."""
    rng = np.random.default_rng(seed)
    c, h, w = shape
    base = np.add.outer(np.arange(h), np.arange(w))[None, None] * np.arange(1, c + 1)[None, :, None, None]
    return (base + np.arange(n)[:, None, None, None] + rng.integers(0, 4, (n, c, h, w))).astype(np.uint8)


def record(n: int = 9, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "cam": camera(n, seed),  # channels first: stored channels last
        "hwc": camera(n, seed + 1).transpose(0, 2, 3, 1).copy(),  # robomimic's (H, W, C): stored as served
        "state": rng.normal(size=(n, 4)).astype(np.float32),
    }


def test_the_rule_picks_channels_first_frames_and_the_copy_puts_them_back(monkeypatch):
    assert frame_layout.stored_layout((3, 480, 640)) == frame_layout.CHANNELS_LAST
    assert frame_layout.stored_layout((4, 8, 8)) == frame_layout.CHANNELS_LAST
    for served in ((84, 84, 3), (1, 84, 84), (3, 3, 3), (480, 640), (7,)):  # already last, one channel, ambiguous
        assert frame_layout.stored_layout(served) is None
    frame = camera(1)[0]
    stored = np.ascontiguousarray(frame_layout.to_stored(frame, frame_layout.CHANNELS_LAST))
    assert stored.shape == frame_layout.stored_shape(frame.shape, frame_layout.CHANNELS_LAST) == (12, 16, 3)
    for cv2 in (frame_layout._cv2(), None):  # OpenCV's split, and numpy's transposing copy
        monkeypatch.setattr(frame_layout, "_CV2", [cv2])
        out = np.empty_like(frame)
        frame_layout.copy_served(stored, out, frame_layout.CHANNELS_LAST)
        assert out.tobytes() == frame.tobytes()
        frame_layout.copy_served(stored, out, None)  # negative control: the same bytes copied as if as served
        assert out.tobytes() != frame.tobytes()
    with pytest.raises(ValueError, match="frame layout 'chw' is unknown"):
        frame_layout.checked_layout("chw", (3, 4, 4))
    with pytest.raises(ValueError, match=r"needs \(C, H, W\) frames"):
        frame_layout.checked_layout("hwc", (4, 4))


@pytest.mark.parametrize("opencv", [True, False])
@pytest.mark.parametrize("group_frames", [1, 3, 64])
def test_frames_are_put_back_a_group_at_a_time_into_any_rows(monkeypatch, opencv, group_frames):
    frames = camera(7, shape=(3, 6, 8))
    stored = [np.ascontiguousarray(f.transpose(1, 2, 0)) for f in frames]
    monkeypatch.setattr(frame_layout, "GROUP_BYTES", group_frames * frames[0].nbytes)
    monkeypatch.setattr(frame_layout, "_CV2", [frame_layout._cv2() if opencv else None])
    rows = [4, 5, 6, 0, 2, 3, 1]  # runs of consecutive rows, and single ones, across groups
    out = np.zeros((8, 3, 6, 8), np.uint8)
    served = frame_layout.ServedRows(out, frame_layout.CHANNELS_LAST)
    for r, frame in zip(rows, stored):
        np.copyto(served.slot(r), frame)
    served.flush()
    assert out[rows].tobytes() == frames.tobytes() and not out[7].any()
    # negative control: the frames placed in the order given, not in their rows
    assert out[:7].tobytes() != frames.tobytes()


def write_shards(out, eps: dict) -> None:
    w = ShardWriter(str(out), FrameCodec(), {"framework": "test"})
    for name, fields in eps.items():
        w.add_episode(name, fields, compressed={"cam", "hwc"})
    w.close(source={"path": "x"})


def write_old_shards(out, eps: dict, monkeypatch) -> None:
    """Shards as robo-loaders wrote them before version 4: frames as served, no ``layout``."""
    with monkeypatch.context() as m:
        m.setattr(shard_writer, "VERSION", 3)
        m.setattr(frame_layout, "stored_layout", lambda shape: None)
        write_shards(out, eps)


def test_shards_store_channels_first_frames_channels_last_and_serve_them_as_given(tmp_path, monkeypatch):
    monkeypatch.setattr(shard_format, "FRAMES_PART_BYTES", 4 * 12 * 16 * 3 * 2)  # long episodes in parts
    eps = {"demo_0": record(9), "demo_1": record(4, seed=5)}
    write_shards(tmp_path, eps)
    reader = ShardReader(str(tmp_path))
    assert reader.version == shard_format.VERSION == shard_format.LAYOUT_VERSION
    assert reader.has_parts(0) and not reader.has_parts(1)
    header, stored = reader.read_episode(0, decode_frames=False)
    assert header["fields"]["cam"]["layout"] == "hwc" and "layout" not in header["fields"]["hwc"]
    cam = eps["demo_0"]["cam"]
    at_rest = np.empty((12, 16, 3), np.uint8)  # at rest: the frame channels last
    FrameCodec.decompress_into(stored["cam"].data[stored["cam"].offsets[2] : stored["cam"].offsets[3]], at_rest)
    assert at_rest.tobytes() == cam[2].transpose(1, 2, 0).tobytes()
    for i, (name, fields) in enumerate(eps.items()):
        _, got = reader.read_episode(i)
        for k, v in fields.items():
            assert got[k].shape == v.shape and got[k].tobytes() == v.tobytes(), (name, k)
    out = np.zeros((4, 3, 12, 16), np.uint8)
    stored["cam"].decode_into([5, 0, 0], out, out_rows=[3, 1, 0])  # any order, repeats, chosen rows
    assert out[[3, 1, 0]].tobytes() == cam[[5, 0, 0]].tobytes() and not out[2].any()
    rows = reader.read_frame_rows(0, 3, 8, ["cam", "hwc"])  # only the parts holding rows 3..7
    assert rows["cam"].layout == "hwc" and rows["cam"].decode_all().tobytes() == cam[3:8].tobytes()
    assert rows["hwc"].decode_all().tobytes() == eps["demo_0"]["hwc"][3:8].tobytes()
    # negative control: the member read as if it recorded no layout (as a version-3 reader would) is other bytes
    as_served = EncodedFrames(stored["cam"].data, stored["cam"].offsets, np.dtype(np.uint8), cam.shape, "x")
    assert as_served.decode_all().tobytes() != cam.tobytes()
    assert reader.verify() == []


def test_shards_of_an_earlier_version_are_read_as_stored_channels_first(tmp_path, monkeypatch):
    eps = {"demo_0": record(7)}
    write_old_shards(tmp_path / "old", eps, monkeypatch)
    write_shards(tmp_path / "new", eps)
    old, new = ShardReader(str(tmp_path / "old")), ShardReader(str(tmp_path / "new"))
    assert old.version == 3 < shard_format.LAYOUT_VERSION
    header, got = old.read_episode(0)
    assert "layout" not in header["fields"]["cam"]
    assert got["cam"].tobytes() == eps["demo_0"]["cam"].tobytes()
    assert new.read_episode(0)[1]["cam"].tobytes() == got["cam"].tobytes()
    # negative control: the old member read as channels last (a reader that assumed the new layout) is other bytes
    _, enc = old.read_episode(0, decode_frames=False)
    wrong = EncodedFrames(enc["cam"].data, enc["cam"].offsets, enc["cam"].dtype, enc["cam"].shape, "x", "hwc")
    assert wrong.decode_all().tobytes() != eps["demo_0"]["cam"].tobytes()


def test_a_layout_this_version_does_not_know_is_refused(tmp_path):
    desc = {"shape": [2, 3, 4, 4], "dtype": "|u1", "offsets": [0, 1, 2], "layout": "cwh"}
    with pytest.raises(ShardError, match=r"x: frame layout 'cwh' is unknown .*convert it again"):
        EncodedFrames.from_member(b"ab", desc, "x")


def with_header(path, edit) -> None:
    """Rewrite a store file's JSON header with ``edit(header)``, its CRC and footer made valid again."""
    data = open(path, "rb").read()
    hoff, hlen, _, end = store_module._FOOTER.unpack(data[-store_module._FOOTER.size :])
    header = json.dumps(edit(json.loads(data[hoff : hoff + hlen])), sort_keys=True).encode()
    with open(path, "wb") as f:
        f.write(data[:hoff] + header + store_module._FOOTER.pack(hoff, len(header), zlib.crc32(header), end))


def test_stores_keep_channels_first_frames_channels_last_and_serve_them_as_given(tmp_path):
    eps = [record(6), record(5, seed=3)]
    path = str(tmp_path / "s.rlc")
    w = StoreWriter(path, FrameCodec(), workers=2)
    for e, fields in enumerate(eps):
        w.add_episode(f"demo_{e}", fields, compressed={"cam", "hwc"})
    w.finish({})
    store = EpisodeStore(path)
    assert store.header["format"] == store_module.FORMAT_VERSION
    assert store.frame_layout(0, "cam") == "hwc" and store.frame_layout(0, "hwc") is None
    assert store.frame_info(1, "cam")[1] == (3, 12, 16)  # served shape
    steps = np.array([[0, 0, 1, 2], [3, 4, 4, 4]])  # padding repeats
    episodes = np.array([0, 1])
    for field in ("cam", "hwc", "state"):
        got = CompressedFrames(store).gather(field, episodes, steps)
        want = np.stack([eps[e][field][s] for e, s in zip(episodes, steps)])
        assert got.tobytes() == want.tobytes(), field
    # negative control: the same store with its layout dropped from the header (an old reader's view) serves other
    # bytes, and the check above catches it
    store.close()
    with_header(path, lambda h: dict(h, episodes=[_no_layout(e) for e in h["episodes"]]))
    got = CompressedFrames(EpisodeStore(path)).gather("cam", episodes, steps)
    assert got.tobytes() != np.stack([eps[e]["cam"][s] for e, s in zip(episodes, steps)]).tobytes()


def _no_layout(episode: dict) -> dict:
    return dict(
        episode, fields={k: {n: v for n, v in d.items() if n != "layout"} for k, d in episode["fields"].items()}
    )


def test_a_cache_of_the_earlier_format_is_removed_and_built_again_channels_last(tmp_path, monkeypatch, capsys):
    """A store written channels first (format 2) is never read as format 3: its cache entry (another kind,
    ``compressed-cache-2``) is removed with a line saying why and the store built again; one found at this format's
    entry, rewritten, is refused and rebuilt."""
    sys.path.insert(0, os.path.dirname(__file__))
    from ram_users import open_cached

    src = tmp_path / "src.bin"
    src.write_bytes(b"source")
    eps = [record(5), record(4, seed=2)]

    def write(w):
        for e, fields in enumerate(eps):
            w.add_episode(f"demo_{e}", fields, compressed={"cam", "hwc"})

    def opened(version=store_module.FORMAT_VERSION):
        return open_cached(src, write, cache_dir=str(tmp_path / "cache"), kind=f"compressed-cache-{version}")

    def served(store) -> bytes:
        return CompressedFrames(store).gather("cam", np.array([0, 1]), np.array([[1, 2], [3, 3]])).tobytes()

    want = np.stack([eps[0]["cam"][[1, 2]], eps[1]["cam"][[3, 3]]]).tobytes()
    with monkeypatch.context() as m:  # what an earlier robo-loaders built: format 2, channels first
        m.setattr(store_module, "FORMAT_VERSION", 2)
        m.setattr(frame_layout, "stored_layout", lambda shape: None)
        old, hold, reused = opened(2)
        assert not reused and served(old) == want and "layout" not in old.field(0, "cam")
        old_entry = os.path.dirname(old.path)
        old.close()
        hold.release()
    capsys.readouterr()
    store, hold, reused = opened()
    out = capsys.readouterr().out
    assert not reused and os.path.dirname(store.path) != old_entry and not os.path.exists(old_entry)
    assert f"removed {old_entry}: the test store of this source and these options in an earlier format" in out
    assert store.frame_layout(0, "cam") == "hwc" and served(store) == want
    path = store.path
    store.close()
    hold.release()
    # a format-2 header written over this format's store (an edited file): refused (its size is no longer the one
    # its build wrote), then rebuilt
    with_header(path, lambda h: dict(h, format=2, episodes=[_no_layout(e) for e in h["episodes"]]))
    store, hold, reused = opened()
    out = capsys.readouterr().out
    assert not reused and "store.rlc is " in out and "were written" in out and "rebuilding" in out, out
    assert served(store) == want
    store.close()
    hold.release()


def test_channels_first_copies_a_decoders_channels_first_view_exactly():
    """torchcodec hands back (N, C, H, W) views of (N, H, W, C) memory; ``channels_first`` makes them C-contiguous
    with OpenCV, byte for byte what numpy's transpose gives; anything else goes through numpy unchanged. Control:
    planes written in another order are caught by the same comparison."""
    from robo_loaders_plugin.storage.frame_layout import channels_first

    rng = np.random.default_rng(0)
    hwc = rng.integers(0, 256, (3, 48, 64, 3), dtype=np.uint8)
    view = hwc.transpose(0, 3, 1, 2)
    got = channels_first(view)
    assert got.flags.c_contiguous and np.array_equal(got, np.ascontiguousarray(view))
    assert not np.array_equal(got[:, ::-1], view)  # the control: swapped planes differ
    already = np.ascontiguousarray(view)
    assert channels_first(already) is already
    floats = view.astype(np.float32)
    assert np.array_equal(channels_first(floats), floats) and channels_first(floats).flags.c_contiguous
    for other in (hwc[0].transpose(2, 0, 1), view[:, :, ::2]):  # one frame; a view of no channels-last memory
        assert np.array_equal(channels_first(other), other) and channels_first(other).flags.c_contiguous


def test_shards_with_big_endian_arrays_from_an_earlier_version_are_served_in_this_machines_order(tmp_path):
    """A session review's reproduction: shards converted before robomimic files were read in this machine's byte
    order kept a file's big-endian arrays, were reused, and their batches failed in torch. Read now as the source
    is: the same values, in this machine's order (control: the stored member is big-endian)."""
    values = np.arange(12, dtype=np.dtype("u2").newbyteorder(">")).reshape(6, 2)
    write_shards(tmp_path, {"demo_0": {"depth": values}})
    reader = ShardReader(str(tmp_path))
    header, fields = reader.read_episode(0)
    assert header["fields"]["depth"]["dtype"] == ">u2"  # as stored
    assert fields["depth"].dtype == np.dtype("<u2") and np.array_equal(fields["depth"], values)
