"""Conversion state (manifest.py): failed units given back, leases as locks, waiting for another converting
process, repairs on resume (missing shards, inconsistent done units, leftovers) and a full disk."""

import builtins
import errno
import io
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from test_shards import episodes

from robo_loaders_plugin import RoboLoadersError
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.shards import ShardError, ShardReader, ShardWriter, manifest, publish
from robo_loaders_plugin.storage.shards import writer as writer_module

TESTS = os.path.dirname(os.path.abspath(__file__))
NAMES = [f"demo_{e}" for e in range(6)]
DATA = dict(episodes(6))
CODEC = FrameCodec()
META = {"framework": "robomimic", "demos": NAMES}
UNITS = [NAMES[0:2], NAMES[2:4], NAMES[4:6]]


def read_episode(name):
    return DATA[name], {"obs/cam"}


def make_plan(out):
    return manifest.plan(str(out), {"content": "abc", "size": 1}, UNITS, {"codec": CODEC.as_dict()})


def convert(out, read=read_episode, plan=True, **kwargs):
    if plan:
        make_plan(out)
    return manifest.run(
        str(out),
        lambda _: manifest.work(str(out), CODEC, read),
        None,
        1,
        CODEC,
        META,
        {"path": "src"},
        "test",
        progress=False,
        **kwargs,
    )


def units(out):
    return json.loads((out / "manifest.json").read_text())["units"]


def temporaries(out):
    return [n for d in (out, out / "shards") if d.exists() for n in os.listdir(d) if ".tmp-" in n]


def assert_complete(out):
    r = ShardReader(str(out))
    assert [e["name"] for e in r.episodes] == NAMES
    for i, name in enumerate(NAMES):
        _, fields = r.read_episode(i)
        assert all(fields[k].tobytes() == v.tobytes() for k, v in DATA[name].items())
    assert r.verify() == []


HOLD_LEASE = """
import sys, time
sys.path.insert(0, sys.argv[3])
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.shards import manifest
from test_shards import episodes
data = dict(episodes(6))
def read(name):  # holds unit 0 for a while, then converts it
    print("leased", flush=True)
    time.sleep(float(sys.argv[2]))
    return data[name], {"obs/cam"}
manifest.work(sys.argv[1], FrameCodec(), read)
"""


@pytest.fixture
def other_process():
    """Start a process converting into ``out`` that holds its first unit for ``hold_s`` (ended at teardown)."""
    procs = []

    def start(out, hold_s):
        p = subprocess.Popen(
            [sys.executable, "-c", HOLD_LEASE, str(out), str(hold_s), TESTS], stdout=subprocess.PIPE, text=True
        )
        procs.append(p)
        assert p.stdout.readline().strip() == "leased"
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_converts_publishes_and_reports_counts(tmp_path):
    res = convert(tmp_path)
    assert res == manifest.Converted(units=3, shards=3, episodes=6)
    assert_complete(tmp_path)
    assert all(u["state"] == "done" for u in units(tmp_path)) and not temporaries(tmp_path)


def test_one_worker_moves_the_progress_bar_as_units_finish(tmp_path, monkeypatch):
    """One worker runs in this process (no interpreter to spawn), yet the bar follows the units as they finish: it
    sat at 0 until the whole conversion was done (a transcode's default is one worker)."""
    seen = []
    show = manifest._show_progress

    def recording(out_dir, bar):
        show(out_dir, bar)
        seen.append(bar.n)

    def slow(name):
        time.sleep(0.15)
        return read_episode(name)

    monkeypatch.setattr(manifest, "_show_progress", recording)
    monkeypatch.setattr(manifest, "POLL_S", 0.05)
    assert convert(tmp_path, slow).episodes == 6
    assert {1, 2} <= set(seen) and seen[-1] == 3, seen
    make_plan(tmp_path / "failing")
    with pytest.raises(OSError, match="source read failed"):  # the thread's error, raised in the caller
        convert(tmp_path / "failing", lambda name: (_ for _ in ()).throw(OSError("source read failed")), plan=False)


def test_a_failed_unit_is_given_back_and_a_retry_in_the_same_process_converts_it(tmp_path):
    make_plan(tmp_path)
    failed = []

    def flaky(name):
        if name == "demo_3" and not failed:
            failed.append(name)
            raise OSError("source read failed")
        return read_episode(name)

    with pytest.raises(OSError, match="source read failed"):
        manifest.work(str(tmp_path), CODEC, flaky)
    assert [u["state"] for u in units(tmp_path)] == ["done", "planned", "planned"]
    assert not temporaries(tmp_path)
    assert convert(tmp_path, flaky).episodes == 6
    assert_complete(tmp_path)


def test_a_lease_whose_lock_is_free_is_stale_even_if_its_pid_is_alive(tmp_path):
    """PID reuse, or a lease from another PID namespace whose number is a live process here."""
    make_plan(tmp_path)
    m = json.loads((tmp_path / "manifest.json").read_text())
    m["units"][1].update(
        state="leased", lease={"pid": os.getpid(), "host": socket.gethostname(), "time": time.time(), "token": "x"}
    )
    manifest._write(str(tmp_path), m)  # another writer's state, its checksum written
    assert convert(tmp_path).episodes == 6
    assert_complete(tmp_path)


def test_a_held_lease_is_never_taken_over_and_waiting_times_out(tmp_path, other_process, monkeypatch, capsys):
    """A lease whose lock is held is live even if its pid means nothing here (another PID namespace)."""
    make_plan(tmp_path)
    other_process(tmp_path, 600)
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert m["units"][0]["state"] == "leased"
    m["units"][0]["lease"]["pid"] = 2**22 + 12345  # no such process on this host
    manifest._write(str(tmp_path), m)  # another writer's state, its checksum written
    monkeypatch.setenv(manifest.ENV_LOCK_TIMEOUT, "1")
    with pytest.raises(
        ShardError,
        match=rf"{tmp_path}: timed out after 1 s waiting for another process converting "
        r"unit\(s\) 0 \(leased by pid 4206649 on .*ROBO_LOADERS_LOCK_TIMEOUT",
    ):
        convert(tmp_path)
    after = units(tmp_path)
    assert after[0]["state"] == "leased" and after[0]["lease"] == m["units"][0]["lease"]  # not taken over
    assert [u["state"] for u in after[1:]] == ["done", "done"]
    assert not (tmp_path / "index.json").exists()
    assert capsys.readouterr().out.count("waiting for another process") == 1
    # not a number, and numbers no deadline follows (a reviewer's reproduction: with nan a wait never ended)
    for bad in ("soon", "nan", "inf", "-1"):
        monkeypatch.setenv(manifest.ENV_LOCK_TIMEOUT, bad)
        with pytest.raises(RoboLoadersError, match="ROBO_LOADERS_LOCK_TIMEOUT must be a finite number of seconds"):
            convert(tmp_path)


def test_two_processes_on_one_directory_the_second_waits_then_publishes(tmp_path, other_process, capsys, monkeypatch):
    """The second run waits, then publishes; while it waits it hashes no shard (a reviewer's measurement: every
    finished shard was hashed at each poll, under the manifest's lock: ~1 h a poll for 1 TB); each shard is hashed
    once, when every unit is done."""
    make_plan(tmp_path)
    hashed = []
    sha256_file = manifest.sha256_file
    monkeypatch.setattr(manifest, "sha256_file", lambda path, *a: hashed.append(path) or sha256_file(path, *a))
    other = other_process(tmp_path, 2)  # converts unit 0 slowly
    res = convert(tmp_path, timeout_s=120)
    assert res.episodes == 6 and res.units == 3
    assert_complete(tmp_path)
    out = capsys.readouterr().out
    assert out.count("waiting for another process converting unit(s) 0 (leased by pid") == 1, out
    assert other.wait(timeout=60) == 0
    shards = [s["name"] for u in units(tmp_path) for s in u["shards"]]
    assert sorted(os.path.basename(p) for p in hashed) == sorted(os.path.basename(n) for n in shards), hashed


def test_a_done_unit_whose_shard_is_gone_is_converted_again(tmp_path):
    convert(tmp_path)
    shard = tmp_path / units(tmp_path)[1]["shards"][0]["name"]
    os.unlink(shard)
    m = make_plan(tmp_path)  # resume: the unit is planned again and index.json withdrawn meanwhile
    assert [u["state"] for u in m["units"]] == ["done", "planned", "done"]
    assert not (tmp_path / "index.json").exists()
    assert convert(tmp_path).episodes == 6
    assert_complete(tmp_path)
    shard.write_bytes(shard.read_bytes()[:-512])  # resized: the same
    assert convert(tmp_path).episodes == 6
    assert_complete(tmp_path)


def test_the_done_shards_check_shows_a_bar_by_bytes_where_it_is_long(tmp_path, capsys, monkeypatch):
    """The check of the done units' shards reads every byte (SHA-256), minutes at hundreds of GB: a bar by bytes
    (silent before: between the conversion's bar and its publication, and before a resume's bar), and not for small
    conversions (below ``CHECK_BAR_FROM_BYTES``). The bar stops at the first damaged shard of a unit, and the unit
    is planned again."""
    convert(tmp_path)
    capsys.readouterr()
    make_plan(tmp_path)  # 1 GiB: no bar for these few kB
    assert "check converted shards" not in capsys.readouterr().err
    monkeypatch.setattr(manifest, "CHECK_BAR_FROM_BYTES", 0)
    total = sum(s["bytes"] for u in units(tmp_path) for s in u["shards"])
    make_plan(tmp_path)
    err = capsys.readouterr().err
    assert "check converted shards" in err and "100%" in err, err
    shard = tmp_path / units(tmp_path)[1]["shards"][0]["name"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1  # one bit: the size is kept, the hash is not
    shard.write_bytes(bytes(data))
    m = make_plan(tmp_path)
    assert [u["state"] for u in m["units"]] == ["done", "planned", "done"] and total > 0


def test_a_manifest_damaged_keeping_valid_json_is_converted_again_from_the_start(tmp_path, capsys):
    """A reviewer's 60 random bit flips in a finished conversion's manifest.json: one that kept it valid JSON was
    trusted, its units published again as index.json at every run (refused by readers, blaming the shard) or the
    finish crashed with a KeyError. The manifest holds a checksum of itself: a damaged one is refused when read, and
    a conversion run again starts over from the start and finishes. Control: the intact manifest is read."""
    make_plan(tmp_path)
    assert convert(tmp_path).episodes == 6
    path = tmp_path / "manifest.json"
    manifest._read(str(tmp_path))  # control
    text = path.read_text()
    damaged = text.replace('"state": "done"', '"state": "dome"', 1)
    assert damaged != text
    path.write_text(damaged)
    with pytest.raises(ShardError, match=r"manifest\.json is damaged \(it does not match its checksum\)"):
        manifest._read(str(tmp_path))
    assert convert(tmp_path).episodes == 6
    assert "converting again from the start" in capsys.readouterr().out
    assert_complete(tmp_path)


def test_a_done_unit_with_an_empty_index_is_converted_again_and_counts_are_published_ones(tmp_path):
    make_plan(tmp_path)
    manifest.work(str(tmp_path), CODEC, read_episode)
    m = json.loads((tmp_path / "manifest.json").read_text())
    m["units"][2]["index"] = []
    manifest._write(str(tmp_path), m)  # another writer's state, its checksum written
    assert convert(tmp_path, plan=False).episodes == 6  # checked before publishing, not only when planning
    assert_complete(tmp_path)


def test_publish_refuses_duplicates_and_missing_shards(tmp_path):
    make_plan(tmp_path)
    manifest.work(str(tmp_path), CODEC, read_episode)
    done = units(tmp_path)
    eps = [e for u in done for e in u["index"]]
    shards = [s for u in done for s in u["shards"]]
    with pytest.raises(ShardError, match=r"cannot publish: episode\(s\) \['demo_0'\] would be listed twice"):
        publish(str(tmp_path), eps + eps[:1], shards, CODEC, {})
    with pytest.raises(ShardError, match=r"cannot publish: .*not in index.json.*demo_5"):
        publish(str(tmp_path), eps[:-1], shards, CODEC, META)
    with pytest.raises(ShardError, match="twice"):
        manifest.plan(str(tmp_path / "b"), "fp", [["a", "b"], ["b"]], {})
    assert not (tmp_path / "index.json").exists()


class FullDisk(io.FileIO):
    """A file on a disk that fills up after ``budget`` bytes."""

    budget = 30_000

    def write(self, data):
        if self.tell() + len(data) > self.budget:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(data)


def open_on_full_disk(path, mode="r", *args, **kwargs):
    if mode != "wb":
        return builtins.open(path, mode, *args, **kwargs)
    return io.BufferedWriter(FullDisk(path, "wb"))


def test_a_full_disk_is_a_clear_error_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "open", open_on_full_disk, raising=False)
    w = ShardWriter(str(tmp_path), CODEC, {}, shard_bytes=10**9)
    with pytest.raises(
        ShardError,
        match=rf"{tmp_path}: No space left on device while writing episode demo_\d \(.* "
        r"free; the shard being written needs at least .*\)"
        r".*run the same command again",
    ):
        for name, fields in episodes():
            w.add_episode(name, fields, {"obs/cam"})
    assert not temporaries(tmp_path)
    w.abort()  # never raises, also a second time


def test_a_full_disk_while_writing_a_json_document_is_a_shard_error_and_keeps_the_old_one(tmp_path, monkeypatch):
    from robo_loaders_plugin.core import files as files_module
    from robo_loaders_plugin.storage.shards.format import _atomic_json

    path = tmp_path / "manifest.json"
    _atomic_json(str(path), {"units": []})
    monkeypatch.setattr(FullDisk, "budget", 10)
    monkeypatch.setattr(files_module, "open", open_on_full_disk, raising=False)
    with pytest.raises(ShardError, match=rf"{tmp_path}: No space left on device while writing manifest.json"):
        _atomic_json(str(path), {"units": list(range(100))})
    assert json.loads(path.read_text()) == {"units": []} and os.listdir(tmp_path) == ["manifest.json"]


def test_abort_never_raises_even_when_closing_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(FullDisk, "budget", 10**9)
    monkeypatch.setattr(writer_module, "open", open_on_full_disk, raising=False)
    w = ShardWriter(str(tmp_path), CODEC, {})
    w.add_episode("ep", {"a": np.zeros((3, 100))})  # buffered, not yet on disk
    monkeypatch.setattr(FullDisk, "budget", 0)  # the disk is now full: flushing on close fails
    w.abort()
    assert not temporaries(tmp_path)


def test_a_full_disk_during_conversion_gives_the_unit_back(tmp_path, monkeypatch):
    make_plan(tmp_path)
    with monkeypatch.context() as m:
        m.setattr(writer_module, "open", open_on_full_disk, raising=False)
        with pytest.raises(ShardError, match="No space left on device"):
            manifest.work(str(tmp_path), CODEC, read_episode)
    assert not temporaries(tmp_path)
    assert "leased" not in [u["state"] for u in units(tmp_path)]
    assert convert(tmp_path).episodes == 6


def test_leftovers_of_gone_writers_are_removed_on_resume(tmp_path, other_process):
    make_plan(tmp_path)
    other = other_process(tmp_path, 600)  # holds unit 0: its temporary file is live
    live = tmp_path / "shards" / f"unit-000000-000000.tar.tmp-{other.pid}"
    dead = [
        tmp_path / "shards" / "unit-000001-000000.tar.tmp-999999",
        tmp_path / "shards" / "unit-000077-000000.tar.tmp-999999",
        tmp_path / "manifest.json.tmp-999999",
        tmp_path / "index.json.tmp-999999-0a1b2c3d",
    ]  # core.files' temporaries carry a random part
    for p in dead:
        p.write_bytes(b"x" * 1000)
    live.write_bytes(b"x")  # as if its writer had started
    make_plan(tmp_path)
    assert live.exists() and not any(p.exists() for p in dead)
    other.kill()
    other.wait()
    make_plan(tmp_path)  # its writer is gone now
    assert not live.exists()
    assert convert(tmp_path).episodes == 6


def test_workers_that_convert_nothing_are_an_error_not_a_hang(tmp_path):
    make_plan(tmp_path)
    calls = []
    with pytest.raises(ShardError, match=r"some units are not done yet \(unit\(s\) 0, 1, 2 were left unconverted"):
        manifest.run(str(tmp_path), calls.append, "args", 1, CODEC, META, {}, "test", progress=False)
    assert calls == ["args", "args"]  # tried once more in case another process gave them back meanwhile
    assert not (tmp_path / "index.json").exists()


def test_a_source_that_keeps_changing_is_said_so_not_left_unconverted(tmp_path):
    """Each unit records the stat of the source's files it was read under, and a unit read under another stat than
    the files' when publishing is converted again; a source whose ctime changed at every pass was reported as
    units "left unconverted by the workers" (a reviewer's reproduction). Control: a source that changes once is
    converted again and published."""
    from robo_loaders_plugin import StaleSourceError

    src = tmp_path / "source.bin"
    src.write_bytes(b"x")
    out = tmp_path / "out"
    files = {"path": str(src), "names": None}
    manifest.plan(str(out), {"content": "abc"}, UNITS, {"codec": CODEC.as_dict()}, source_files=files)
    changes = []

    def touching(name):  # the file written (its ctime) as each unit is read, mtime kept
        if name in (NAMES[0], NAMES[2]):
            st = src.stat()
            src.write_bytes(b"x")
            os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
            changes.append(name)
        return read_episode(name)

    def run(read):
        return manifest.run(
            str(out), lambda _: manifest.work(str(out), CODEC, read), None, 1, CODEC, META, {}, "t", progress=False
        )

    with pytest.raises(StaleSourceError, match=r"source\.bin: its files kept changing .* while they were converted"):
        run(touching)
    assert len(changes) >= 4 and not (out / "index.json").exists()
    changes.clear()

    def once(name):
        if not changes:
            touching(name)
        return read_episode(name)

    assert run(once).episodes == 6 and changes  # control: converted again once, then published


def pool_worker(out):
    return manifest.work(out, CODEC, read_episode)


def test_spawned_workers_convert_in_parallel(tmp_path):
    make_plan(tmp_path)
    res = manifest.run(str(tmp_path), pool_worker, str(tmp_path), 2, CODEC, META, {}, "test", progress=False)
    assert res == manifest.Converted(units=3, shards=3, episodes=6)
    assert_complete(tmp_path)


def test_a_slurm_task_publishes_only_while_the_source_keeps_its_stat(tmp_path):
    """A reviewer's reading: a conversion run as a datatrove-slurm job array was published by its last task without
    the source being looked at again (the launching process checks it only for local runs), so a source edited while
    the job ran gave shards of two versions. The publishing task compares the source's files' stats with those
    recorded: changed, nothing is published and every unit is planned again. Control: unchanged, it publishes."""
    pytest.importorskip("datatrove")
    from robo_loaders_plugin import StaleSourceError
    from robo_loaders_plugin.storage.fingerprint import fingerprint
    from robo_loaders_plugin.storage.shards.datatrove_step import ConvertUnits

    src = tmp_path / "src.hdf5"
    src.write_bytes(b"v1" * 100)
    fp = fingerprint(str(src), lambda: "digest")
    source = {"path": fp.path, "fingerprint": fp.as_dict()}

    def task(out):
        make_plan(out)
        step = ConvertUnits(
            lambda _: manifest.work(str(out), CODEC, read_episode),
            None,
            str(out),
            publish={"codec": CODEC, "metadata": META, "source": source},
        )
        return step.run(None, 0, 1)

    task(tmp_path / "control")
    assert (tmp_path / "control" / "index.json").exists()
    os.utime(src, ns=(1, 10**18))  # edited while the job ran
    with pytest.raises(StaleSourceError, match=r"src\.hdf5 changed while it was converted into .*withdrawn"):
        task(tmp_path / "out")
    assert not (tmp_path / "out" / "index.json").exists()
    assert {u["state"] for u in units(tmp_path / "out")} == {"planned"}
