"""The conversion's spawned workers end with the process that started them (``storage.shards.worker_pool``)."""

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from worker_pool_helpers import sleeping_worker
from robo_loaders_plugin.storage.shards.worker_pool import run_workers
run_workers(sleeping_worker, {directory!r}, 2, {directory!r}, lambda: None, 0.2)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone, not working
        return f.read().split()[2] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_end_when_the_converting_process_is_terminated(tmp_path):
    """A reviewer's reproduction: SIGTERM to ``robo-loaders convert --num-workers 2`` (``kill``, ``timeout``) ended
    the command at once, its workers went on converting as orphans into the output directory. Control: they are
    working before the signal."""
    tests = os.path.dirname(os.path.abspath(__file__))
    script = SCRIPT.format(tests=tests, directory=str(tmp_path))
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.time() + 120
        while len(os.listdir(tmp_path)) < 2 and time.time() < deadline:
            time.sleep(0.1)
        pids = [int(n) for n in os.listdir(tmp_path)]
        assert len(pids) == 2 and all(map(_alive, pids))  # control
        parent.send_signal(signal.SIGTERM)
        parent.wait(30)
        deadline = time.time() + 30
        while any(map(_alive, pids)) and time.time() < deadline:
            time.sleep(0.1)
        assert not any(map(_alive, pids)), "workers outlived the process that started them"
    finally:
        parent.kill()
        for n in os.listdir(tmp_path):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(n), signal.SIGKILL)
