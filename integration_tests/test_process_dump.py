"""The suite's process-tree runner (process_dump.run_tree): a tree that runs past its time is described (threads,
scheduling policy, every Python process's stacks) and stopped whole; one that ends in time is returned as it ran."""

import os
import subprocess
import sys
import textwrap

import pytest
from process_dump import descendants, run_tree

HANGS = textwrap.dedent(
    """
    import subprocess, sys, time
    body = "import time\\ndef waits_in_the_child():\\n    time.sleep(600)\\nwaits_in_the_child()"
    child = subprocess.Popen([sys.executable, "-c", body])
    print("parent up", child.pid, flush=True)
    time.sleep(600)
    """
)


def gone_or_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] in "ZX"
    except FileNotFoundError:
        return True


def test_a_tree_past_its_time_says_where_each_process_waited_and_is_stopped_whole():
    rc, out, err = run_tree([sys.executable, "-c", HANGS], {"PATH": "/usr/bin:/bin"}, timeout=4)
    assert rc is None
    child = int(out.split()[-1])
    assert "--- the process tree when the time ran out ---" in err
    assert f"process {child}:" in err and "policy OTHER/0" in err
    assert "in waits_in_the_child" in err, err[-3000:]  # the child's Python stack (faulthandler on SIGABRT)
    assert gone_or_zombie(child)  # stopped (a zombie until whoever adopted it reaps it)
    assert descendants(child) == []


def test_a_tree_that_ends_in_time_is_returned_as_it_ran():
    rc, out, err = run_tree([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"], {}, timeout=60)
    assert (rc, out, err) == (3, "out\n", "")


def test_the_tree_starts_at_normal_scheduling_whatever_this_thread_was_left_at():
    """A thread left at real-time priority (an SVT-AV1 encode as root) starts the tree at normal scheduling; the
    control, a plain subprocess from the same thread, inherits the real-time policy."""
    policy = [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"]
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
    except PermissionError:
        pytest.skip("needs the privilege to raise this thread's priority (root)")
    try:
        rc, out, _ = run_tree(policy, {}, timeout=60)
        inherited = subprocess.run(policy, capture_output=True, text=True).stdout
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    assert rc == 0 and int(out) == os.SCHED_OTHER
    assert int(inherited) == os.SCHED_RR
