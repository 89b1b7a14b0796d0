"""The suite's process-tree runner (process_dump.run_tree): a tree that runs past its time is described (threads,
scheduling policy, every Python process's stacks) and stopped whole; one that ends in time is returned as it ran."""

import os
import shutil
import subprocess
import sys
import textwrap
import time

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
    rc, out, err, after = run_tree([sys.executable, "-c", HANGS], {"PATH": "/usr/bin:/bin"}, timeout=4)
    assert rc is None and not after
    child = int(out.split()[-1])
    assert "--- the process tree when the time ran out ---" in err
    assert f"process {child}:" in err and "policy OTHER/0" in err
    assert "in waits_in_the_child" in err, err[-3000:]  # the child's Python stack (faulthandler on SIGABRT)
    assert gone_or_zombie(child)  # stopped (a zombie until whoever adopted it reaps it)
    assert descendants(child) == []


FINISHES_THEN_HANGS = textwrap.dedent(
    """
    import subprocess, sys
    body = (
        "import time\\nprint('step 4', flush=True)\\nprint('End of training', flush=True)\\n"
        "def waits_in_teardown():\\n    time.sleep(600)\\nwaits_in_teardown()"
    )
    sys.exit(subprocess.call([sys.executable, "-c", body]))  # a launcher and its rank, as torchrun
    """
)


def test_a_tree_that_hangs_after_its_finished_line_is_stopped_after_the_grace_and_said_so():
    """The finished line starts the exit grace: the tree is stopped well before its time, described with native and
    Python stacks, and said to have hung after finishing; the control, the same tree without the line, runs to its
    time and is not."""
    start = time.monotonic()
    ran = run_tree([sys.executable, "-c", FINISHES_THEN_HANGS], {}, 120, finished="End of training", exit_grace=2)
    assert time.monotonic() - start < 60
    assert ran.returncode is None and ran.hung_after_finish
    assert "End of training" in ran.stdout
    assert "printed 'End of training' and had not exited 2 s later" in ran.stderr
    assert "in waits_in_teardown" in ran.stderr  # faulthandler, after SIGABRT
    if shutil.which("gdb"):
        assert "native stacks of" in ran.stderr and "#0 " in ran.stderr, ran.stderr[-3000:]
    control = run_tree(
        [sys.executable, "-c", FINISHES_THEN_HANGS.replace("End of", "Middle of")],
        {},
        5,
        finished="End of training",
        exit_grace=2,
    )
    assert control.returncode is None and not control.hung_after_finish
    assert "when the time ran out" in control.stderr


def test_a_tree_that_ends_in_time_is_returned_as_it_ran():
    ran = run_tree([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"], {}, timeout=60)
    assert tuple(ran) == (3, "out\n", "", False)


def test_the_tree_starts_at_normal_scheduling_whatever_this_thread_was_left_at():
    """A thread left at real-time priority (an SVT-AV1 encode as root) starts the tree at normal scheduling; the
    control, a plain subprocess from the same thread, inherits the real-time policy."""
    policy = [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"]
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
    except PermissionError:
        pytest.skip("needs the privilege to raise this thread's priority (root)")
    try:
        rc, out, *_ = run_tree(policy, {}, timeout=60)
        inherited = subprocess.run(policy, capture_output=True, text=True).stdout
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    assert rc == 0 and int(out) == os.SCHED_OTHER
    assert int(inherited) == os.SCHED_RR
