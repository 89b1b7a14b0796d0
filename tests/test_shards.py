"""robo-shards format: round trip, tar compatibility, atomic publishing, hostile and damaged input."""

import io
import json
import os
import re
import tarfile

import numpy as np
import pytest

from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.integrity import with_checksum
from robo_loaders_plugin.storage.shards import ShardError, ShardReader, ShardWriter


def episodes(n=5, seed=0):
    rng = np.random.default_rng(seed)
    for e in range(n):
        L = 10 + 3 * e
        base = np.add.outer(np.arange(16), np.arange(16))[None, :, :, None]
        frames = (base + np.arange(L)[:, None, None, None] + rng.integers(0, 3, (L, 16, 16, 3))).astype(np.uint8)
        yield f"demo_{e}", {"obs/cam": frames, "actions": rng.normal(size=(L, 7)), "dones": np.arange(L) == L - 1}


def write(out, shard_bytes=20_000):
    w = ShardWriter(str(out), FrameCodec(), {"framework": "test"}, shard_bytes=shard_bytes)
    data = {}
    for name, fields in episodes():
        w.add_episode(name, fields, compressed={"obs/cam"})
        data[name] = fields
    w.close(source={"path": "x"})
    return data


def test_round_trip_and_rollover(tmp_path):
    data = write(tmp_path)
    r = ShardReader(str(tmp_path))
    assert len(r.shards) > 1  # several shards at this size, no episode split across them
    assert not [f for f in os.listdir(tmp_path / "shards") if ".tmp-" in f]
    for i, e in enumerate(r.episodes):
        header, fields = r.read_episode(i)
        for k, v in data[e["name"]].items():
            assert fields[k].dtype == v.dtype and fields[k].tobytes() == v.tobytes()
        assert header["length"] == len(data[e["name"]]["actions"])
    assert r.verify() == []


def test_shards_are_plain_tar_with_webdataset_names(tmp_path):
    write(tmp_path)
    names = []
    for shard in sorted(os.listdir(tmp_path / "shards")):
        with tarfile.open(tmp_path / "shards" / shard) as t:
            names += t.getnames()
    assert "demo_0.header.json" in names and "demo_0.obs~cam.frames" in names and "demo_0.actions.npy" in names
    keys = [n.split(".")[0] for n in names]
    assert keys == sorted(keys, key=lambda k: int(k[5:]))  # one contiguous record per episode
    with tarfile.open(tmp_path / "shards" / sorted(os.listdir(tmp_path / "shards"))[0]) as t:
        arr = np.load(io.BytesIO(t.extractfile("demo_0.actions.npy").read()), allow_pickle=False)
    assert arr.shape == (10, 7)


def rewrite_index(out, index):
    """index.json edited as a buggy or hostile writer would: with a valid checksum, so deeper checks are reached."""
    (out / "index.json").write_text(json.dumps(with_checksum(index)))


def test_damage_is_detected(tmp_path):
    write(tmp_path)
    shard = tmp_path / "shards" / sorted(os.listdir(tmp_path / "shards"))[0]
    data = shard.read_bytes()
    r = ShardReader(str(tmp_path))  # opened before the damage: every read re-checks the shard's size
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(ShardError, match="truncated"):
        r.read_episode(0)
    assert any("bytes, index says" in p for p in r.verify())
    with pytest.raises(ShardError, match=f"{shard.name}: .*bytes, index says .*truncated"):  # and when opening
        ShardReader(str(tmp_path))
    shard.write_bytes(data[:1000] + bytes([data[1000] ^ 0xFF]) + data[1001:])
    assert any("SHA-256" in p for p in ShardReader(str(tmp_path)).verify())


def test_hostile_index_is_refused(tmp_path):
    write(tmp_path)
    index = json.loads((tmp_path / "index.json").read_text())
    index["shards"][0]["name"] = "../../etc/passwd"
    (tmp_path / "index.json").write_text(json.dumps(index))
    # an edited index is refused as such
    with pytest.raises(ShardError, match=re.escape("index.json: checksum mismatch")):
        ShardReader(str(tmp_path))
    rewrite_index(tmp_path, index)
    with pytest.raises(ShardError, match="outside the dataset directory"):
        ShardReader(str(tmp_path))
    write(tmp_path / "b")
    index = json.loads((tmp_path / "b" / "index.json").read_text())
    ep = index["episodes"][0]
    ep["members"]["demo_0.actions.npy"]["offset"] = 10**9
    rewrite_index(tmp_path / "b", index)
    with pytest.raises(ShardError, match="outside"):
        ShardReader(str(tmp_path / "b")).read_episode(0)


def test_bad_names_pickle_and_incomplete_output(tmp_path):
    w = ShardWriter(str(tmp_path), FrameCodec(), {})
    with pytest.raises(ShardError, match="episode name"):
        w.add_episode("../evil", {"a": np.zeros(3)})
    with pytest.raises(ShardError, match="pickle"):
        w.add_episode("ep", {"a": np.array([object()] * 3)})
    w.add_episode("ep", {"a": np.zeros(3)})
    w.abort()  # interrupted: nothing published
    assert not os.listdir(tmp_path / "shards")
    with pytest.raises(ShardError, match=re.escape("index.json is missing")):
        ShardReader(str(tmp_path))


def test_the_reader_keeps_index_members_compactly_and_reads_them_as_written(tmp_path):
    """A reader keeps each episode's members as a MemberTable (issue 22: index.json's dicts were ~55 bytes per frame
    of a million-frame dataset): every lookup equals index.json's entry, iteration keeps its names and order,
    episodes with the same fields share one layout, a copy sent to a worker by pickle reads the same, and a name
    that is not a member is not found (negative control: a wrong offset in the table is caught by the reader)."""
    import pickle

    from robo_loaders_plugin.storage.shards.reader import MemberTable

    write(tmp_path)
    index = json.loads((tmp_path / "index.json").read_text())
    r = ShardReader(str(tmp_path))
    for e, raw in zip(r.episodes, index["episodes"]):
        assert isinstance(e["members"], MemberTable)
        assert list(e["members"]) == list(raw["members"]) and dict(e["members"].items()) == raw["members"]
        assert f"{e['name']}.nothing.npy" not in e["members"] and "other.actions.npy" not in e["members"]
    assert len({id(e["members"]._layout) for e in r.episodes}) == 1
    copy = pickle.loads(pickle.dumps(r))
    assert [dict(e["members"].items()) for e in copy.episodes] == [e["members"] for e in index["episodes"]]
    assert copy.read_episode(2)[1]["actions"].tobytes() == r.read_episode(2)[1]["actions"].tobytes()
    r.episodes[1]["members"]._locs[0, 0] += 512  # the first member's offset, one tar block off
    with pytest.raises(ShardError, match=re.escape("index.json points at bytes that are not this member's")):
        r.read_episode(1)


def test_field_names_of_any_characters_round_trip_and_earlier_member_names_are_read(tmp_path, monkeypatch):
    """Member names escape what a name may not hold (a reviewer's reproductions: LeRobot's
    ``observation.gripper:pos`` was refused; a robomimic obs ``eef~pos`` was read back as ``eef/pos``, "~" standing
    for "/"); ``stored_fields`` gives the names back. Shards written before escaping (a literal "~" as it is) are
    still read. Control: a writer of the earlier names is read by the same reader, field for field."""
    from robo_loaders_plugin.storage.shards import format as shard_format
    from robo_loaders_plugin.storage.shards import writer as shard_writer

    names = ["obs/eef~pos", "observation.gripper:pos", "a..b", ".x", "ü/é", "100%", "obs/cam"]
    fields = {n: np.arange(6.0).reshape(3, 2) + i for i, n in enumerate(names)}
    for sub, legacy in (("now", False), ("earlier", True)):
        if legacy:  # as versions before escaping wrote them (names they could store: no ':', '%', ...)
            monkeypatch.setattr(shard_writer, "member_name", shard_format.legacy_member_name)
            fields = {"observation.x~y": np.ones((3, 2)), "obs/cam": np.zeros((3, 2))}
        w = ShardWriter(str(tmp_path / sub), FrameCodec(), {"framework": "test"})
        w.add_episode("ep_0", fields)
        w.close(source={"path": "x"})
        r = ShardReader(str(tmp_path / sub))
        _, read = r.read_episode(0)
        assert sorted(read) == sorted(fields) and all(read[k].tobytes() == v.tobytes() for k, v in fields.items())
        if not legacy:
            assert sorted(r.stored_fields(0)) == sorted(names)
        assert r.verify() == []


def test_shards_of_another_framework_are_refused_naming_the_option_and_what_to_do(tmp_path):
    """A reviewer's find: shards converted from a LeRobot dataset given to a robomimic run said only
    ``<dir>: converted from a 'lerobot' dataset, not robomimic``, naming neither the option nor a next step.
    Control: the refusal is for the other framework only (here: 'test' shards for 'test' pass the check)."""
    from robo_loaders_plugin import RoboLoadersError
    from robo_loaders_plugin.pipeline.options import open_shards

    write(tmp_path / "s")  # framework "test"
    kwargs = dict(
        source=None,
        shards=str(tmp_path / "s"),
        cache_dir=None,
        check_source=False,
        key_desc={},
        convert=None,
        option_prefix="train.data_backend_kwargs.shards",
        convert_hint="'robo-loaders convert robomimic IN OUT'",
        backend="datapipe",
    )
    with pytest.raises(RoboLoadersError) as e:
        open_shards(framework="robomimic", **kwargs)
    msg = str(e.value)
    assert msg.startswith("train.data_backend_kwargs.shards: ") and "'test' dataset, not a robomimic one" in msg
    assert "robo-loaders convert robomimic IN OUT" in msg and "\n" not in msg
    reader, hold = open_shards(framework="test", **kwargs)
    assert reader.dir and hold is None
