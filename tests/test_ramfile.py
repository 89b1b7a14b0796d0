"""RAM-only stores: ownership by flock (not by pid), cleanup on SIGTERM, killed builds, full disks."""
import errno
import fcntl
import gc
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest

from robo_loaders_plugin.storage import ramfile, store
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.ramfile import RamFile, new_ram_path, sweep_stale
from robo_loaders_plugin.storage.store import EpisodeStore, StoreError, StoreWriter, default_shm_dir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def dead_pid() -> int:
    """A pid with no /proc entry: what a live process in another PID namespace (or behind hidepid) looks like."""
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    return pid


def after_sweep(d) -> list[str]:
    """What is left in ``d`` after a sweep (checked on disk, not on what the sweep says it did)."""
    sweep_stale(str(d))
    return sorted(os.listdir(d))


def small_store(path, n=3):
    w = StoreWriter(str(path), FrameCodec())
    w.add_episode("demo_0", {"img": np.arange(n * 300, dtype=np.uint8).reshape(n, 10, 10, 3),
                             "low": np.arange(n * 2, dtype=np.float64).reshape(n, 2)}, compressed={"img"})
    return w


def spawn(code: str, *args) -> subprocess.Popen:
    """A Python child running ``code``; it prints one line when ready (read it with ``ready``)."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ready(proc: subprocess.Popen) -> str:
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        raise AssertionError(f"child failed: {proc.communicate()[1]}")
    return line


HOLD_LOCK = """
    import fcntl, sys, time
    f = open(sys.argv[1], "rb")
    fcntl.flock(f.fileno(), getattr(fcntl, sys.argv[2]))
    print("locked", flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize("mode", ["LOCK_SH", "LOCK_EX"])
def test_sweep_keeps_files_another_live_process_holds_and_never_blocks(tmp_path, mode):
    # the owner's pid is not in our /proc (another PID namespace sharing /dev/shm, or hidepid): still in use
    stores = [tmp_path / f"robo-loaders-{dead_pid()}-fp-1234abcd.rlc",
              tmp_path / f"robo-loaders-{dead_pid()}-fp-1234abcd.rlc.tmp-{dead_pid()}-77-0000beef"]
    holders = []
    for p in stores:
        p.write_bytes(b"x" * 100)
        holders.append(spawn(HOLD_LOCK, p, mode))
    try:
        for h in holders:
            assert ready(h) == "locked"
        t = time.monotonic()
        assert after_sweep(tmp_path) == sorted(p.name for p in stores)
        assert time.monotonic() - t < 2  # an exclusive holder (another sweep, say) does not make it wait
    finally:
        for h in holders:
            h.kill()
            h.communicate()
    assert after_sweep(tmp_path) == []  # holders gone: now stale


def test_sweep_removes_files_nobody_holds_even_if_the_pid_in_their_name_lives(tmp_path):
    me = os.getpid()  # alive, but holds no lock on them (or a recycled pid): leftovers
    stale = [tmp_path / f"robo-loaders-{me}-fp-1234abcd.rlc", tmp_path / f"robo-loaders-{me}-fp-0.rlc.tmp-{me}-1-2"]
    other = tmp_path / "someone-else.rlc"
    for p in stale + [other]:
        p.write_bytes(b"x")
    assert after_sweep(tmp_path) == [other.name]


def test_builder_then_readers_then_owner_hold_the_file(tmp_path):
    path = tmp_path / f"robo-loaders-{dead_pid()}-fp-1234abcd.rlc"
    w = small_store(path)
    tmp = [p for p in os.listdir(tmp_path) if ".tmp-" in p]
    assert len(tmp) == 1
    assert after_sweep(tmp_path) == tmp  # being built: locked from its creation
    w.finish({})
    assert after_sweep(tmp_path) == [path.name]  # published, not yet opened: still locked
    st = EpisodeStore(str(path))
    assert store._published == {}  # the writer's lock was handed over to the store, not leaked
    worker = pickle.loads(pickle.dumps(st))  # what a spawned DataLoader worker does
    owner = RamFile(str(path))
    st.close()
    assert after_sweep(tmp_path) == [path.name]
    worker.close()
    assert after_sweep(tmp_path) == [path.name]  # the owner still holds it
    assert worker._mm is None
    del owner
    gc.collect()
    assert not path.exists()


def test_a_store_locks_its_file_while_mapped_in_any_process(tmp_path):
    path = tmp_path / f"robo-loaders-{dead_pid()}-fp-1234abcd.rlc"
    small_store(path).finish({})
    st = EpisodeStore(str(path))
    worker = pickle.loads(pickle.dumps(st))
    st.close()
    probe = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert after_sweep(tmp_path) == [path.name]
        worker.close()
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody holds it any more
        fcntl.flock(probe, fcntl.LOCK_UN)
    finally:
        os.close(probe)
    assert after_sweep(tmp_path) == []
    with pytest.raises(StoreError, match="gone"):
        pickle.loads(pickle.dumps(worker))


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")  # a DataLoader worker is forked the same way
def test_ramfile_handles_and_forked_copies_never_delete(tmp_path):
    path = tmp_path / f"robo-loaders-{os.getpid()}-fp-1234abcd.rlc"
    small_store(path).finish({})
    owner = RamFile(str(path))
    assert store._published == {}  # the owner took over the writer's lock
    EpisodeStore(str(path)).close()
    handle = pickle.loads(pickle.dumps(owner))  # a spawned worker's copy
    assert len(pickle.dumps(owner)) < 300
    del handle
    gc.collect()
    assert path.exists()
    pid = os.fork()
    if pid == 0:  # a forked worker collects its inherited owner and runs the exit cleanup: neither may delete
        code = 3
        try:
            owner._finalizer()
            ramfile._remove_owned_files()
            code = 0 if path.exists() else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert after_sweep(tmp_path) == [path.name]  # the parent's lock survived the child's close
    del owner
    gc.collect()
    assert not path.exists()


def test_sweep_removes_what_a_killed_build_left(tmp_path):
    child = spawn("""
        import sys, time
        import numpy as np
        from robo_loaders_plugin.storage.codec import FrameCodec
        from robo_loaders_plugin.storage.store import StoreWriter
        w = StoreWriter(sys.argv[1], FrameCodec())
        w.add_episode("demo_0", {"low": np.zeros((4, 2))})
        print("building", flush=True)
        time.sleep(120)
    """, tmp_path / "robo-loaders-1-fp-1234abcd.rlc")
    assert ready(child) == "building"
    (tmp,) = os.listdir(tmp_path)  # the pid in the store's name (1) is alive: a pid check would keep it forever
    assert ".tmp-" in tmp and after_sweep(tmp_path) == [tmp]
    child.send_signal(signal.SIGKILL)
    child.communicate()
    assert after_sweep(tmp_path) == []


# -- SIGTERM ---------------------------------------------------------------------------------------------------
OWNER = """
    import os, signal, sys, time
    import numpy as np
    from robo_loaders_plugin.storage.codec import FrameCodec
    from robo_loaders_plugin.storage.ramfile import RamFile, new_ram_path
    from robo_loaders_plugin.storage.store import EpisodeStore, StoreWriter
    where, previous = sys.argv[1], sys.argv[2]
    stop = []
    if previous == "exit3":
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(3))
    elif previous == "graceful":
        signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    elif previous == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    path = new_ram_path("test" + os.urandom(4).hex(), shm_dir=where)
    w = StoreWriter(path, FrameCodec())
    w.add_episode("demo_0", {"low": np.arange(8.0).reshape(4, 2)})
    if previous == "mid-build":
        print(path, flush=True)
        time.sleep(120)
    w.finish({})
    store, owner = EpisodeStore(path), RamFile(path)
    print(path, flush=True)
    for _ in range(1200):
        time.sleep(0.1)
        if stop:
            assert os.path.exists(path) and EpisodeStore(path).raw(0, "low")[3, 1] == 7.0
            print("graceful stop, cache still there", flush=True)
            break
"""


def run_owner(where, previous="none"):
    child = spawn(OWNER, where, previous)
    path = ready(child)
    assert path.startswith(str(where))
    return child, path


def test_sigterm_removes_the_ram_store_and_still_kills(tmp_path):
    shm = default_shm_dir()  # /dev/shm where there is one: the real thing
    child, path = run_owner(shm)
    assert os.path.exists(path)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGTERM, err
    assert not os.path.exists(path)
    assert not [p for p in os.listdir(shm) if p.startswith(os.path.basename(path))]


def test_sigterm_during_a_build_removes_its_temporary_file(tmp_path):
    child, path = run_owner(tmp_path, "mid-build")
    assert [p for p in os.listdir(tmp_path) if ".tmp-" in p]
    child.send_signal(signal.SIGTERM)
    child.communicate(timeout=30)
    assert child.returncode == -signal.SIGTERM
    assert os.listdir(tmp_path) == []


def test_sigterm_chains_to_a_previous_handler_that_exits(tmp_path):
    child, path = run_owner(tmp_path, "exit3")
    child.send_signal(signal.SIGTERM)
    child.communicate(timeout=30)
    assert child.returncode == 3  # the previous handler decided; the files went at exit
    assert os.listdir(tmp_path) == []


def test_sigterm_keeps_the_files_while_a_previous_handler_lets_the_process_run_on(tmp_path):
    child, path = run_owner(tmp_path, "graceful")
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=30)
    assert "cache still there" in out, err
    assert child.returncode == 0 and os.listdir(tmp_path) == []  # removed at the normal exit


def test_ignored_sigterm_is_left_alone_and_sigkill_leftovers_are_swept(tmp_path):
    child, path = run_owner(tmp_path, "ignore")
    child.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert child.poll() is None and os.path.exists(path)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=30)
    assert os.path.exists(path)  # nobody could clean up...
    new_ram_path("other", shm_dir=str(tmp_path))  # ...so the next build's sweep does
    assert os.listdir(tmp_path) == []


# -- failing writes ---------------------------------------------------------------------------------------------
def fill_up_after(monkeypatch, limit):
    emit, written = StoreWriter._emit, [0]

    def full(self, data):
        written[0] += memoryview(data).nbytes
        if written[0] > limit:
            raise OSError(errno.ENOSPC, "No space left on device")
        emit(self, data)

    monkeypatch.setattr(StoreWriter, "_emit", full)


def test_full_disk_is_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    fill_up_after(monkeypatch, 2000)
    path = tmp_path / "cache" / "s.rlc"
    w = StoreWriter(str(path), FrameCodec(), workers=2)
    with pytest.raises(StoreError) as e:
        try:
            for i in range(10):
                w.add_episode(f"demo_{i}", {"low": np.zeros((100, 2))})
            w.finish({})
        except BaseException:
            w.abort()  # what callers do; the writer has cleaned up already, so this must do nothing, quietly
            raise
    msg = str(e.value)
    assert isinstance(e.value.__cause__, OSError) and e.value.__cause__.errno == errno.ENOSPC
    assert str(tmp_path / "cache") in msg and "full" in msg and str(path) in msg
    assert "free of" in msg and "failed after 1.6 KiB" in msg  # free space, and how much was written
    assert "Free space there" in msg and "cache_dir" in msg and "shm-size" not in msg
    assert os.listdir(tmp_path / "cache") == []
    w.abort()


@pytest.mark.skipif(default_shm_dir() != "/dev/shm", reason="no /dev/shm")
def test_full_dev_shm_points_at_cache_dir_and_shm_size(monkeypatch):
    fill_up_after(monkeypatch, 500)
    path = new_ram_path("full-" + uuid.uuid4().hex[:6])
    with pytest.raises(StoreError) as e:
        small_store(path, n=20)  # the writer removes its own partial file, whatever its caller does
    msg = str(e.value)
    assert "/dev/shm is full" in msg and "64 MB" in msg and "--shm-size" in msg and "cache_dir" in msg
    assert not [p for p in os.listdir("/dev/shm") if p.startswith(os.path.basename(path))]


def test_full_disk_while_finishing(tmp_path, monkeypatch):
    w = small_store(tmp_path / "s.rlc")

    def no_room(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_room)
    with pytest.raises(StoreError, match="is full"):
        w.finish({})
    assert os.listdir(tmp_path) == []


def test_other_write_errors_keep_their_type_and_leave_nothing(tmp_path, monkeypatch):
    def broken(self, data):
        raise OSError(errno.EIO, "Input/output error")

    w = small_store(tmp_path / "s.rlc")
    monkeypatch.setattr(StoreWriter, "_emit", broken)
    with pytest.raises(OSError, match="Input/output") as e:
        w.add_episode("demo_1", {"low": np.zeros((4, 2))})
    assert not isinstance(e.value, StoreError)
    assert os.listdir(tmp_path) == []


def test_abort_never_raises(tmp_path):
    w = small_store(tmp_path / "s.rlc")

    class FailingFile:  # e.g. a close whose flush hits a full disk
        def close(self):
            raise OSError(errno.ENOSPC, "No space left on device")

    w._f = FailingFile()
    w.abort()
    w.abort()
    assert os.listdir(tmp_path) == []
