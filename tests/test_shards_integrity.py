"""robo-shards integrity: damaged members, edited or malformed indexes, hostile tar headers, missing shards and
format version 1 are errors naming the file, episode and member (never data, never a stray TypeError)."""

import contextlib
import io
import json
import os
import re
import tarfile
import zlib

import numpy as np
import pytest
from test_shards import episodes, rewrite_index, write

from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.integrity import with_checksum
from robo_loaders_plugin.storage.shards import ShardError, ShardReader, ShardWriter, verify_dir

NAMES = [f"demo_{e}" for e in range(5)]


def location(out, episode, suffix):
    """(shard path, index entry) of the member of ``episode`` whose name ends with ``suffix``."""
    index = json.loads((out / "index.json").read_text())
    ep = next(e for e in index["episodes"] if e["name"] == episode)
    member = next(m for m in ep["members"] if m.endswith(suffix))
    return out / ep["shard"], member, ep["members"][member]


def flip_bits(path, offset, count=1, stride=97):
    data = bytearray(path.read_bytes())
    for k in range(count):
        data[offset + k * stride] ^= 1 << (k % 8)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("suffix", ["obs~cam.frames", "actions.npy", "header.json"])
def test_one_flipped_bit_is_an_error_naming_shard_episode_and_member(tmp_path, suffix):
    write(tmp_path)
    shard, member, loc = location(tmp_path, "demo_1", suffix)
    flip_bits(shard, loc["offset"] + loc["size"] // 2)
    r = ShardReader(str(tmp_path))  # the shard's size is unchanged: only the CRC can tell
    pattern = rf"{re.escape(str(shard))}: member '{re.escape(member)}' of episode 'demo_1' is damaged \(CRC32"
    for decode in (True, False):
        with pytest.raises(ShardError, match=pattern):
            r.read_episode(r.by_name["demo_1"], decode_frames=decode)
    r.read_episode(r.by_name["demo_0"])  # other episodes still read
    problems = r.verify()
    assert any("SHA-256 mismatch" in p for p in problems) and any(member in p and "CRC32" in p for p in problems)


def test_many_flipped_bits_in_frames_are_a_shard_error_not_a_blosc_runtime_error(tmp_path):
    write(tmp_path)
    shard, member, loc = location(tmp_path, "demo_2", "obs~cam.frames")
    flip_bits(shard, loc["offset"] + 16, count=40, stride=11)
    with pytest.raises(ShardError, match=re.escape(member)):
        ShardReader(str(tmp_path)).read_episode(2)


def test_edited_index_or_dataset_json_is_refused(tmp_path):
    write(tmp_path)
    doc = json.loads((tmp_path / "dataset.json").read_text())
    doc["metadata"]["framework"] = "other"
    (tmp_path / "dataset.json").write_text(json.dumps(doc))
    with pytest.raises(ShardError, match=r"dataset.json: checksum mismatch.*convert"):
        ShardReader(str(tmp_path))
    write(tmp_path / "b")
    index = json.loads((tmp_path / "b" / "index.json").read_text())
    index["episodes"][0]["length"] += 1
    (tmp_path / "b" / "index.json").write_text(json.dumps(index))
    with pytest.raises(ShardError, match=r"index.json: checksum mismatch"):
        ShardReader(str(tmp_path / "b"))
    assert "checksum mismatch" in verify_dir(str(tmp_path / "b"))[0]


def test_swapped_member_offsets_serve_no_other_episode(tmp_path):
    """Even with a valid checksum (a buggy writer), an entry pointing at another episode's bytes is caught by the
    tar header read with the member (before the length checks) and by the tar headers in verify."""
    data = write(tmp_path, shard_bytes=10**9)  # one shard
    index = json.loads((tmp_path / "index.json").read_text())
    a, b = index["episodes"][0]["members"], index["episodes"][1]["members"]
    a["demo_0.actions.npy"], b["demo_1.actions.npy"] = b["demo_1.actions.npy"], a["demo_0.actions.npy"]
    rewrite_index(tmp_path, index)
    r = ShardReader(str(tmp_path))
    with pytest.raises(
        ShardError,
        match=r"'demo_0.actions.npy' of episode 'demo_0': the tar header before its data "
        r"names 'demo_1.actions.npy'",
    ):
        r.read_episode(0)
    _, fields = r.read_episode(0, fields=["obs/cam"])  # the untouched members still read
    assert fields["obs/cam"].tobytes() == data["demo_0"]["obs/cam"].tobytes()
    problems = r.verify()
    assert any("tar member 'demo_0.actions.npy': data at offset" in p for p in problems), problems
    assert not any("SHA-256" in p for p in problems)  # the shards themselves are intact


def test_members_swapped_with_a_recomputed_checksum_are_refused_by_their_tar_headers(tmp_path):
    """Two episodes of the same length and fields: an index whose entries for their actions are swapped (offsets,
    sizes and CRCs, checksum recomputed) passes every length and CRC check, so only the tar header read with each
    member tells that demo_0's entry points at demo_1's bytes; the reader refuses instead of serving them."""
    rng = np.random.default_rng(7)
    data = {f"demo_{e}": {"actions": rng.normal(size=(12, 7)), "dones": np.arange(12) == 11} for e in range(3)}
    w = ShardWriter(str(tmp_path), FrameCodec(), {"framework": "test"}, shard_bytes=10**9)
    for name, fields in data.items():
        w.add_episode(name, fields, compressed=set())
    w.close(source={"path": "x"})
    r = ShardReader(str(tmp_path))  # negative control: the intact index serves each episode its own arrays
    for i, name in enumerate(data):
        assert r.read_episode(i)[1]["actions"].tobytes() == data[name]["actions"].tobytes()
    index = json.loads((tmp_path / "index.json").read_text())
    a, b = index["episodes"][0]["members"], index["episodes"][1]["members"]
    a["demo_0.actions.npy"], b["demo_1.actions.npy"] = b["demo_1.actions.npy"], a["demo_0.actions.npy"]
    rewrite_index(tmp_path, index)
    r = ShardReader(str(tmp_path))  # the index itself is valid
    pattern = (
        r"member 'demo_0.actions.npy' of episode 'demo_0': the tar header before its data names "
        r"'demo_1.actions.npy', so index.json points at bytes that are not this member's.*convert"
    )
    for decode in (True, False):
        with pytest.raises(ShardError, match=pattern):
            r.read_episode(0, decode_frames=decode)
    with pytest.raises(
        ShardError,
        match=re.escape(
            "'demo_1.actions.npy' of episode 'demo_1': the tar header before its data names 'demo_0.actions.npy'"
        ),
    ):
        r.read_episode(1, fields=["actions"])
    assert r.read_episode(0, fields=["dones"])[1]["dones"].tobytes() == data["demo_0"]["dones"].tobytes()
    assert r.read_episode(2)[1]["actions"].tobytes() == data["demo_2"]["actions"].tobytes()
    problems = r.verify()
    assert any("demo_0.actions.npy" in p and "names 'demo_1.actions.npy'" in p for p in problems), problems
    # the same swap inside one episode (two members of one shape): refused the same way
    index = json.loads((tmp_path / "index.json").read_text())
    a = index["episodes"][2]["members"]
    a["demo_2.actions.npy"], a["demo_2.dones.npy"] = a["demo_2.dones.npy"], a["demo_2.actions.npy"]
    rewrite_index(tmp_path, index)
    with pytest.raises(ShardError, match=re.escape("names 'demo_2.dones.npy'")):
        ShardReader(str(tmp_path)).read_episode(2)


def test_a_damaged_tar_header_or_a_long_member_name(tmp_path):
    """A flipped bit in a member's tar header fails its checksum; a member name over the ustar field's 100
    characters (the full name is in the PAX header) still reads."""
    write(tmp_path)
    shard, _member, loc = location(tmp_path, "demo_1", "actions.npy")
    flip_bits(shard, loc["offset"] - 512 + 130)  # inside the header's size field
    with pytest.raises(
        ShardError,
        match=r"'demo_1.actions.npy' of episode 'demo_1': the 512 bytes before its "
        r"data are not a valid tar header \(checksum\)",
    ):
        ShardReader(str(tmp_path)).read_episode(1)
    field = "obs/" + "k" * 110
    w = ShardWriter(str(tmp_path / "long"), FrameCodec(), {"framework": "test"}, shard_bytes=10**9)
    w.add_episode("demo_0", {field: np.arange(6.0), "actions": np.ones((6, 2))}, compressed=set())
    w.close(source={"path": "x"})
    _, fields = ShardReader(str(tmp_path / "long")).read_episode(0)
    assert fields[field].tolist() == list(range(6)) and verify_dir(str(tmp_path / "long")) == []


def _tar_header(name: str, size: int, signed: bool) -> np.ndarray:
    """A ustar header block for ``name``, its checksum the unsigned sum (what tarfile writes) or the signed one
    (what some old tars wrote)."""
    info = tarfile.TarInfo(name)
    info.size = size
    block = bytearray(info.tobuf(format=tarfile.USTAR_FORMAT, encoding="utf-8")[: tarfile.BLOCKSIZE])
    block[148:156] = b" " * 8
    total = sum(np.frombuffer(bytes(block), np.int8 if signed else np.uint8).tolist())
    block[148:156] = b"%06o\0 " % total
    return np.frombuffer(bytes(block), np.uint8).copy()


@pytest.mark.parametrize("signed", [False, True])
def test_a_tar_headers_checksum_is_read_unsigned_or_signed_and_one_off_is_refused(signed):
    """The reader checks every member's tar header (unsigned sum first, the signed one only when it differs): a
    name of bytes >= 128 makes the two sums differ, so each is seen to be accepted, and one off refused."""
    from robo_loaders_plugin.storage.shards.reader import _tar_header_problem

    name = "démo_ü/obs~çam.frames"  # UTF-8 bytes >= 128: the signed sum is not the unsigned one
    block = _tar_header(name, 1234, signed)
    assert (block >= 128).sum() == 6  # three 2-byte characters
    assert _tar_header_problem(block, name, 1234) is None
    assert _tar_header_problem(block, name, 1235) == "the tar header before its data gives 1234 bytes, index.json 1235"
    # control: the checksum one off (in the field) or the header one bit off (elsewhere) is refused
    for at, bit in ((153, 1), (130, 2), (20, 1)):
        bad = block.copy()
        bad[at] ^= bit
        assert "not a valid tar header (checksum)" in _tar_header_problem(bad, name, 1234)


def test_overlapping_members_are_reported(tmp_path):
    write(tmp_path, shard_bytes=10**9)
    index = json.loads((tmp_path / "index.json").read_text())
    members = index["episodes"][0]["members"]
    frames = members["demo_0.obs~cam.frames"]
    half = frames["size"] // 2
    shard_bytes = (tmp_path / index["episodes"][0]["shard"]).read_bytes()
    members["demo_0.actions.npy"] = dict(
        frames, size=half, crc32=zlib.crc32(shard_bytes[frames["offset"] : frames["offset"] + half])
    )
    rewrite_index(tmp_path, index)
    r = ShardReader(str(tmp_path))
    with pytest.raises(ShardError, match=re.escape("actions.npy")):
        r.read_episode(0)
    problems = r.verify()
    assert any(
        "'demo_0.actions.npy' and 'demo_0.obs~cam.frames' overlap" in p
        or "'demo_0.obs~cam.frames' and 'demo_0.actions.npy' overlap" in p
        for p in problems
    ), problems


@pytest.mark.parametrize(
    "metadata",
    [{"framework": "robomimic", "demos": NAMES}, {"framework": "lerobot", "episodes": [{"name": n} for n in NAMES]}],
)
def test_episodes_must_be_those_the_metadata_lists(tmp_path, metadata):
    w = ShardWriter(str(tmp_path), FrameCodec(), metadata, shard_bytes=10**9)
    for name, fields in episodes():
        w.add_episode(name, fields, {"obs/cam"})
    w.close()
    assert [e["name"] for e in ShardReader(str(tmp_path)).episodes] == NAMES
    index = json.loads((tmp_path / "index.json").read_text())
    dropped = index["episodes"].pop(3)
    index["shards"][0]["members"] -= len(dropped["members"])
    rewrite_index(tmp_path, index)
    with pytest.raises(ShardError, match=r"1 episode\(s\) listed in dataset.json are not in index.json.*demo_3"):
        ShardReader(str(tmp_path))
    # and the writer never publishes such a directory
    w = ShardWriter(str(tmp_path / "b"), FrameCodec(), metadata)
    for name, fields in list(episodes())[:4]:
        w.add_episode(name, fields, {"obs/cam"})
    with pytest.raises(ShardError, match=r"cannot publish.*demo_4"):
        w.close()
    assert not (tmp_path / "b" / "index.json").exists()


BAD_VALUES = [
    ("offset", 1536.0),
    ("offset", "1536"),
    ("offset", True),
    ("offset", -512),
    ("offset", 10**30),
    ("offset", 10**4000),
    ("offset", 1000),
    ("size", "100"),
    ("size", True),
    ("size", -1),
    ("size", None),
    ("crc32", -1),
    ("crc32", 2**32),
    ("crc32", "x"),
    ("length", 10**30),
    ("length", -1),
    ("length", 2.0),
    ("length", False),
    ("shard_bytes", "big"),
    ("shard_bytes", 1.5),
    ("members", ["a"]),
    ("name", "../x"),
]


@pytest.mark.parametrize("key,value", BAD_VALUES, ids=[f"{k}={str(v)[:12]}" for k, v in BAD_VALUES])
def test_malformed_index_values_are_shard_errors_and_verify_lines(tmp_path, key, value):
    write(tmp_path)
    index = json.loads((tmp_path / "index.json").read_text())
    ep = index["episodes"][1]
    if key in ("offset", "size", "crc32"):
        ep["members"]["demo_1.actions.npy"][key] = value
    elif key == "shard_bytes":
        index["shards"][0]["bytes"] = value
    else:
        ep[key] = value
    rewrite_index(tmp_path, index)
    with pytest.raises(ShardError, match=r"index.json is invalid: index.json: .*convert the dataset again"):
        ShardReader(str(tmp_path))
    problems = verify_dir(str(tmp_path))
    assert len(problems) == 1 and "index.json" in problems[0]


def test_integers_json_cannot_even_parse_are_a_shard_error(tmp_path):
    write(tmp_path)
    text = (tmp_path / "index.json").read_text()
    (tmp_path / "index.json").write_text(re.sub(r'"offset": \d+', '"offset": ' + "9" * 5000, text, count=1))
    with pytest.raises(ShardError, match=r"index.json: cannot be read as JSON"):
        ShardReader(str(tmp_path))
    (tmp_path / "index.json").write_text("{" + text[:100])
    with pytest.raises(ShardError, match=r"index.json: cannot be read as JSON"):
        ShardReader(str(tmp_path))


def test_npy_header_claiming_terabytes_is_refused_before_allocating(tmp_path):
    write(tmp_path)
    shard, member, loc = location(tmp_path, "demo_0", "actions.npy")
    data = bytearray(shard.read_bytes())
    npy = bytes(data[loc["offset"] : loc["offset"] + loc["size"]])
    old = b"'shape': (10, 7), }"
    new = b"'shape': (10000000000000, 7), }"
    assert old in npy
    header_end = npy.index(b"\n")
    patched = npy[:header_end].replace(old + b" " * (len(new) - len(old)), new) + npy[header_end:]
    assert len(patched) == len(npy) and patched != npy
    data[loc["offset"] : loc["offset"] + loc["size"]] = patched
    shard.write_bytes(bytes(data))
    index = json.loads((tmp_path / "index.json").read_text())
    index["episodes"][0]["members"][member]["crc32"] = zlib.crc32(patched)  # a consistent, hostile dataset
    rewrite_index(tmp_path, index)
    r = ShardReader(str(tmp_path))
    with pytest.raises(ShardError, match=r"actions.npy'.*\.npy header claims shape \(10000000000000, 7\)"):
        r.read_episode(0)
    assert any("header claims" in p for p in r.verify())


def test_object_and_pickled_npy_are_refused(tmp_path):
    write(tmp_path)
    shard, member, loc = location(tmp_path, "demo_0", "dones.npy")
    data = bytearray(shard.read_bytes())
    npy = bytes(data[loc["offset"] : loc["offset"] + loc["size"]])
    patched = npy.replace(b"'descr': '|b1'", b"'descr': '|O' ")
    assert len(patched) == len(npy) and patched != npy
    data[loc["offset"] : loc["offset"] + loc["size"]] = patched
    shard.write_bytes(bytes(data))
    index = json.loads((tmp_path / "index.json").read_text())
    index["episodes"][0]["members"][member]["crc32"] = zlib.crc32(patched)
    rewrite_index(tmp_path, index)
    with pytest.raises(ShardError, match="pickle"):
        ShardReader(str(tmp_path)).read_episode(0)


def append_members(shard, members):
    """Append (TarInfo, bytes) members to a shard, as a hostile or careless tool would."""
    with tarfile.open(shard, "a", format=tarfile.PAX_FORMAT) as t:
        for info, payload in members:
            t.addfile(info, io.BytesIO(payload) if payload is not None else None)


def tar_info(name, kind=tarfile.REGTYPE, size=0, linkname=""):
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, size, linkname
    return info


def test_verify_reports_hostile_tar_headers(tmp_path):
    write(tmp_path)
    assert ShardReader(str(tmp_path)).verify() == []
    index = json.loads((tmp_path / "index.json").read_text())
    shard = tmp_path / index["shards"][-1]["name"]
    append_members(
        shard,
        [
            (tar_info("demo_4.evil.npy", tarfile.SYMTYPE, linkname="/etc/passwd"), None),
            (tar_info("demo_4.link.npy", tarfile.LNKTYPE, linkname="demo_4.actions.npy"), None),
            (tar_info("../escape.npy", size=3), b"abc"),
            (tar_info("/abs/path.npy", size=3), b"abc"),
            (tar_info("somedir", tarfile.DIRTYPE), None),
            (tar_info("demo_4.extra.npy", size=3), b"abc"),
        ],
    )
    # the index updated to match (size and SHA-256): only the tar headers can tell
    from robo_loaders_plugin.storage.shards.format import _sha256

    index["shards"][-1].update(bytes=shard.stat().st_size, sha256=_sha256(str(shard)))
    rewrite_index(tmp_path, index)
    r = ShardReader(str(tmp_path))
    assert [r.read_episode(i)[1]["actions"].shape[0] for i in range(5)] == [10, 13, 16, 19, 22]  # reads are fine
    problems = "\n".join(r.verify())
    for expected in [
        "'demo_4.evil.npy': a symbolic link, not a regular file",
        "'demo_4.link.npy': a hard link, not a regular file",
        "'../escape.npy': absolute or '..' path",
        "'/abs/path.npy': absolute or '..' path",
        "'somedir': a directory, not a regular file",
        "'somedir': not listed in index.json and not named <episode>.<field>.<ext>",
        "'demo_4.extra.npy': not listed in index.json",
    ]:
        assert expected in problems, (expected, problems)
    assert "SHA-256" not in problems


def test_a_deleted_shard_is_refused_when_opening(tmp_path):
    write(tmp_path)
    shards = sorted(os.listdir(tmp_path / "shards"))
    os.unlink(tmp_path / "shards" / shards[1])
    with pytest.raises(ShardError, match=rf"shards/{shards[1]}: missing .*convert the dataset again"):
        ShardReader(str(tmp_path))
    assert "missing" in verify_dir(str(tmp_path))[0]


def test_format_version_1_is_refused_with_convert_again(tmp_path):
    write(tmp_path)
    for name in ("index.json", "dataset.json"):  # what robo-loaders wrote before per-member checksums
        doc = json.loads((tmp_path / name).read_text())
        doc.pop("checksum", None)
        doc["version"] = 1
        for ep in doc.get("episodes", []):
            for loc in ep["members"].values():
                loc.pop("crc32", None)
        (tmp_path / name).write_text(json.dumps(doc))
    with pytest.raises(ShardError, match=r"converted by an earlier robo-loaders \(robo-shards version 1.*convert"):
        ShardReader(str(tmp_path))
    doc = json.loads((tmp_path / "index.json").read_text())
    doc["version"] = 5
    (tmp_path / "index.json").write_text(json.dumps(with_checksum(doc)))
    with pytest.raises(ShardError, match="version 5, this robo-loaders reads versions 2, 3, 4"):
        ShardReader(str(tmp_path))


def test_arrays_are_writable_and_fields_inconsistent_lengths_are_refused(tmp_path):
    write(tmp_path)
    _, fields = ShardReader(str(tmp_path)).read_episode(0)
    assert all(a.flags.writeable for a in fields.values())  # like np.load: callers may modify them in place
    w = ShardWriter(str(tmp_path / "b"), FrameCodec(), {})
    with pytest.raises(ShardError, match="field 'b' has 4 rows, the episode has 3"):
        w.add_episode("ep", {"a": np.zeros(3), "b": np.zeros(4)})
    with pytest.raises(ShardError, match="scalar"):
        w.add_episode("ep", {"a": np.float64(3)})
    with pytest.raises(ShardError, match="no fields"):
        w.add_episode("ep", {})
    w.add_episode("empty", {"a": np.zeros((0, 2)), "f": np.zeros((0, 32, 32), np.uint8)}, {"f"})
    w.close()
    _, fields = ShardReader(str(tmp_path / "b")).read_episode(0)
    assert fields["a"].shape == (0, 2) and fields["f"].shape == (0, 32, 32)


def json_paths(doc, prefix=()):
    """Every (path, value) of a JSON document."""
    yield prefix, doc
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        yield from json_paths(v, prefix + (k,))


ODD_VALUES = [None, True, False, -1, 0, 1.5, 2**70, 10**4000, "", "x", "../../etc/passwd", [], [1], {}, {"a": 1}]


def test_any_malformed_index_value_is_a_shard_error_never_a_crash(tmp_path):
    """Fuzz: each of 400 documents with one value replaced (checksum recomputed) opens, reads and verifies
    without any exception but ShardError."""
    write(tmp_path / "good")
    good = json.loads((tmp_path / "good" / "index.json").read_text())
    paths = [p for p, _ in json_paths(good) if p and p[0] != "checksum"]
    rng = np.random.default_rng(0)
    for _ in range(400):
        doc = json.loads(json.dumps(good))
        path = paths[rng.integers(len(paths))]
        target = doc
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] = ODD_VALUES[rng.integers(len(ODD_VALUES))]
        rewrite_index(tmp_path / "good", doc)
        try:
            r = ShardReader(str(tmp_path / "good"))
            for i in range(len(r.episodes)):
                with contextlib.suppress(ShardError):
                    r.read_episode(i)
        except ShardError:
            pass
        assert all(isinstance(p, str) for p in verify_dir(str(tmp_path / "good"))), (path, target)


class HeaderMutatingWriter(ShardWriter):
    """Writes episode headers with one value replaced, CRC and checksums consistent: a hostile dataset."""

    def __init__(self, *args, mutate, **kwargs):
        super().__init__(*args, **kwargs)
        self.mutate = mutate

    def _add(self, name, data):
        if name.endswith(".header.json"):
            data = json.dumps(self.mutate(json.loads(data))).encode()
        return super()._add(name, data)


def random_mutation(rng):
    """A header mutation: one value anywhere in it replaced by one of ODD_VALUES, drawn from ``rng``."""

    def mutate(header):
        paths = [p for p, _ in json_paths(header) if p]
        path = paths[rng.integers(len(paths))]
        target = header
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] = ODD_VALUES[rng.integers(len(ODD_VALUES))]
        return header

    return mutate


def fuzz_headers(tmp_path, seed: int, trials: int, reads) -> None:
    """``trials`` episodes written with one random header value replaced (:func:`random_mutation`): every read in
    ``reads`` (``read(reader)``) raises a ShardError or nothing, and ``verify`` lists problems as lines."""
    mutate = random_mutation(np.random.default_rng(seed))
    fields = next(episodes())[1]
    for trial in range(trials):
        out = tmp_path / str(trial)
        w = HeaderMutatingWriter(str(out), FrameCodec(), {}, mutate=mutate)
        w.add_episode("demo_0", fields, {"obs/cam"})
        w.close()
        r = ShardReader(str(out))
        for read in reads:
            with contextlib.suppress(ShardError):
                read(r)
        assert all(isinstance(p, str) for p in r.verify())


def test_any_malformed_header_value_is_a_shard_error_never_a_crash(tmp_path):
    fuzz_headers(
        tmp_path,
        1,
        150,
        [lambda r: r.read_episode(0, decode_frames=True), lambda r: r.read_episode(0, decode_frames=False)],
    )


# -- frames members of long episodes stored in parts (format.part_bounds) ------------------------------------------
@pytest.fixture
def small_parts(monkeypatch):
    """Parts of 4 rows of the 16x16 test frames (768 bytes a row)."""
    from robo_loaders_plugin.storage.shards import format as shard_format

    monkeypatch.setattr(shard_format, "FRAMES_PART_BYTES", 4 * 16 * 16 * 3)


def test_parts_round_trip_and_any_rows_read_only_their_parts(tmp_path, small_parts, monkeypatch):
    data = write(tmp_path)
    r = ShardReader(str(tmp_path))
    assert all(r.has_parts(i) for i in range(len(r.episodes))) and verify_dir(str(tmp_path)) == []
    reads = []
    member = ShardReader._member
    monkeypatch.setattr(
        ShardReader, "_member", lambda self, f, path, ep, name: reads.append(name) or member(self, f, path, ep, name)
    )
    for i, e in enumerate(r.episodes):
        want = data[e["name"]]["obs/cam"]
        assert np.array_equal(r.read_episode(i)[1]["obs/cam"], want)
        for lo in range(len(want)):
            for hi in range(lo + 1, len(want) + 1):
                reads.clear()
                got = r.read_frame_rows(i, lo, hi, ["obs/cam"])["obs/cam"]
                assert np.array_equal(got.decode_all(), want[lo:hi]), (e["name"], lo, hi)
                assert len([m for m in reads if ".part" in m]) == (hi - 1) // 4 - lo // 4 + 1
    with pytest.raises(ShardError, match="outside its"):
        r.read_frame_rows(0, 5, 99, ["obs/cam"])
    with pytest.raises(ShardError, match="no frames field 'actions'"):
        r.read_frame_rows(0, 0, 2, ["actions"])


def test_a_short_episode_and_the_control_are_stored_whole(tmp_path):
    """Without lowering the part size these episodes are far below it: one frames member each, as in version 2."""
    write(tmp_path)
    r = ShardReader(str(tmp_path))
    assert not any(r.has_parts(i) for i in range(len(r.episodes)))
    assert np.array_equal(
        r.read_frame_rows(1, 2, 5, ["obs/cam"])["obs/cam"].decode_all(), r.read_episode(1)[1]["obs/cam"][2:5]
    )


@pytest.mark.parametrize("parts", [[0, 4, 4, 13], [0, 8, 4, 13], [1, 13], [0, 12], [0, 13.0], "0,13", [0]])
def test_parts_that_are_not_increasing_bounds_are_refused(tmp_path, small_parts, parts):
    fields = dict(next(episodes(2))[1])  # 10 rows
    fields["obs/cam"] = np.concatenate([fields["obs/cam"], fields["obs/cam"][:3]])  # 13 rows
    fields = {k: (v if k == "obs/cam" else np.resize(v, (13,) + v.shape[1:])) for k, v in fields.items()}

    def mutate(header):
        header["fields"]["obs/cam"]["parts"] = parts
        return header

    w = HeaderMutatingWriter(str(tmp_path), FrameCodec(), {}, mutate=mutate)
    w.add_episode("demo_0", fields, {"obs/cam"})
    w.close()
    r = ShardReader(str(tmp_path))
    with pytest.raises(ShardError, match=r"parts .* are not increasing row boundaries|members .* differ"):
        r.read_episode(0)
    with pytest.raises(ShardError, match=r"parts .* are not increasing row boundaries|members .* differ"):
        r.read_frame_rows(0, 0, 3, ["obs/cam"])


def test_parts_moved_against_their_members_are_refused_not_served_shifted(tmp_path, small_parts):
    """The header's row boundaries moved ([0, 2, 6, 10, 13] over parts written at [0, 4, 8, 12, 13]), every CRC and
    checksum consistent: joined, the parts still decode right, so only the part sizes against the frame table can
    tell that rows 6..9 would be read from the wrong part. Refused by every read and by verify."""
    fields = {
        "obs/cam": np.arange(13 * 768, dtype=np.uint64).astype(np.uint8).reshape(13, 16, 16, 3),
        "actions": np.zeros((13, 2)),
    }

    def mutate(header):
        header["fields"]["obs/cam"]["parts"] = [0, 2, 6, 10, 13]
        return header

    w = HeaderMutatingWriter(str(tmp_path), FrameCodec(), {}, mutate=mutate)
    w.add_episode("demo_0", fields, {"obs/cam"})
    w.close()
    r = ShardReader(str(tmp_path))
    for read in (lambda: r.read_episode(0), lambda: r.read_frame_rows(0, 6, 10, ["obs/cam"])):
        with pytest.raises(ShardError, match=r"part 0 \(rows 0\.\.1\) does not hold those rows' frames"):
            read()
    assert any("does not hold those rows' frames" in p for p in r.verify())
    control = tmp_path / "control"  # the same episode with its header as written: served right
    w = ShardWriter(str(control), FrameCodec(), {})
    w.add_episode("demo_0", fields, {"obs/cam"})
    w.close()
    got = ShardReader(str(control)).read_frame_rows(0, 6, 10, ["obs/cam"])["obs/cam"].decode_all()
    assert np.array_equal(got, fields["obs/cam"][6:10])


def test_any_malformed_header_value_with_parts_is_a_shard_error_never_a_crash(tmp_path, small_parts):
    fuzz_headers(
        tmp_path,
        2,
        100,
        [lambda r: r.read_episode(0, decode_frames=False), lambda r: r.read_frame_rows(0, 3, 7, ["obs/cam"])],
    )


def test_npy_headers_are_parsed_once_per_distinct_header_and_a_bad_one_fails_every_time(monkeypatch):
    """``reader._npy_array`` keeps numpy's parse of a header by its bytes (a mixture's start parsed the same few
    headers for every episode): the same header is parsed once, another shape is parsed on its own and gives its
    own array, and a header numpy refuses is a ShardError naming the member at every read (a refusal is never
    kept). Control: with the kept parses cleared, the next read parses again."""
    import io as _io

    from numpy.lib import format as npy_format

    from robo_loaders_plugin.storage.shards import reader

    def npy(a):
        f = _io.BytesIO()
        np.save(f, a)
        return np.frombuffer(f.getvalue(), dtype=np.uint8)

    parsed = []
    read_1_0 = npy_format.read_array_header_1_0
    monkeypatch.setitem(reader._NPY_HEADER_READERS, (1, 0), lambda f: parsed.append(1) or read_1_0(f))
    reader._npy_header.cache_clear()
    a, b, c = np.arange(14, dtype=np.float32).reshape(2, 7), np.ones((2, 7), np.float32), np.zeros((3, 7), np.int64)
    for x in (a, b):
        np.testing.assert_array_equal(reader._npy_array(npy(x), {"shape": [2, 7], "dtype": "float32"}, "m"), x)
    assert len(parsed) == 1  # the same header bytes: parsed once
    np.testing.assert_array_equal(reader._npy_array(npy(c), {"shape": [3, 7], "dtype": "int64"}, "m"), c)
    assert len(parsed) == 2
    broken = npy(a).copy()
    broken[10:20] = np.frombuffer(b"{'descr': ", dtype=np.uint8)[:10][::-1]
    for _ in range(2):
        with pytest.raises(ShardError, match=r"^shard x, member y: not a valid \.npy header"):
            reader._npy_array(broken, {"shape": [2, 7], "dtype": "float32"}, "shard x, member y")
    assert len(parsed) == 4  # parsed (and refused) at each read
    reader._npy_header.cache_clear()
    reader._npy_array(npy(a), {"shape": [2, 7], "dtype": "float32"}, "m")
    assert len(parsed) == 5
