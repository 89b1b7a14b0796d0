"""Run a process tree with a time limit, and when it runs past it, say where every process of the tree waited.

Why: ``torchrun`` jobs of this suite hung, twice in CI, after lerobot-train's "End of training" (rank 0 gone, rank
1 waiting on a futex while its ``train()`` frame was torn down), and the output's end could not say where. On a
timeout, each process of the tree is listed with its threads (name, kernel wait channel, scheduling policy: a
real-time policy inherited from an AV1 encode starved ranks once) and, where ``gdb`` is installed, every thread's
native stack; then each is sent SIGABRT so that Python's faulthandler (``PYTHONFAULTHANDLER=1``, set here) prints
its Python stacks, and only then killed. The native stacks named the hang: torch's gloo teardown deadlocking on the
GIL (``test_multiprocess.torchrun``).

A job can name a line that says its work is done (``finished``): if the tree has not exited ``exit_grace`` seconds
after that line, it is described and stopped as above, and :class:`Ran` says it hung *after* finishing, so that a
caller can tell a teardown hang from a job that never finished.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from typing import NamedTuple

_POLICIES = {0: "OTHER", 1: "FIFO", 2: "RR", 3: "BATCH", 5: "IDLE"}


class Ran(NamedTuple):
    """What :func:`run_tree` saw.

    ``returncode`` is ``None`` when the tree was stopped (past its time, or past its exit grace after finishing);
    ``stderr`` then ends with the tree's threads and stacks. ``hung_after_finish``: it was stopped after printing its
    ``finished`` line.
    """

    returncode: int | None
    stdout: str
    stderr: str
    hung_after_finish: bool = False


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children first), from ``/proc/<pid>/task/*/children``."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "?"


def threads_of(pid: int) -> str:
    """One line per thread of ``pid``: id, name, state, kernel wait channel and scheduling policy/priority."""
    lines = [f"process {pid}: {_read(f'/proc/{pid}/cmdline').replace(chr(0), ' ')[:200]}"]
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        return lines[0] + " (gone)"
    for t in tids:
        stat = _read(f"/proc/{pid}/task/{t}/stat")
        fields = stat.rsplit(")", 1)[-1].split()
        state = fields[0] if fields else "?"
        policy = _POLICIES.get(int(fields[38]), fields[38]) if len(fields) > 38 else "?"
        prio = fields[37] if len(fields) > 38 else "?"
        comm, wchan = _read(f"/proc/{pid}/task/{t}/comm"), _read(f"/proc/{pid}/task/{t}/wchan")
        lines.append(f"  thread {t} {comm!r} state {state} wchan {wchan} policy {policy}/{prio}")
    return "\n".join(lines)


def native_stacks(pid: int, frames: int = 16, timeout: float = 90) -> str:
    """Every thread's native stack of ``pid`` (``gdb -batch``: attach, print, detach), threads with the same stack
    said once; or why there are none.

    Why: a Python stack ends where C++ begins; a rank that waits in a destructor (a process group's, a decoder's)
    shows only the Python line that dropped the object, and which object it was is in the native frames.
    """
    gdb = shutil.which("gdb")
    if gdb is None:
        return f"(no native stacks of {pid}: gdb is not installed)"
    cmd = [gdb, "-batch", "-nx", "-p", str(pid), "-ex", "set pagination off", "-ex", f"thread apply all bt {frames}"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"(no native stacks of {pid}: gdb ran past {timeout} s)"
    stacks: dict[str, list[str]] = {}  # stack -> the threads that have it
    thread, frames_of = None, []
    for line in [*p.stdout.splitlines(), "Thread end"]:
        if line.startswith("Thread "):
            if thread is not None:
                stacks.setdefault("\n".join(frames_of), []).append(thread)
            lwp = re.search(r"LWP (\d+)", line)  # 'Thread 3 (Thread 0x7f.. (LWP 10110) "python"):'
            thread, frames_of = (lwp.group(1) if lwp else line.split(" (", 1)[0].removeprefix("Thread ")), []
        elif line.startswith("#"):  # "#3  0x... in func (args) at file:line" -> "#3 func at file:line"
            m = re.match(r"#(\d+)\s+(?:0x[0-9a-f]+ in )?(.*?)(?: \(.*?\))?( at \S+| from \S+)?$", line)
            frames_of.append(f"  #{m.group(1)} {m.group(2)}{m.group(3) or ''}" if m else "  " + line)
    if not stacks:
        return f"(no native stacks of {pid}: {(p.stderr.strip() or 'gdb printed nothing')[-500:]})"
    said = [f"threads {', '.join(ts)}:\n{stack}" for stack, ts in stacks.items()]
    return f"native stacks of {pid}:\n" + "\n".join(said)


def _pump(stream, into: list[str], seen: threading.Event, marker: str | None) -> None:
    """Read ``stream`` line by line into ``into``; set ``seen`` at the first line holding ``marker``."""
    for line in iter(stream.readline, ""):
        into.append(line)
        if marker is not None and marker in line:
            seen.set()
    stream.close()


def run_tree(
    cmd: list[str],
    env: dict,
    timeout: float,
    cwd: str | None = None,
    finished: str | None = None,
    exit_grace: float = 120.0,
) -> Ran:
    """Run ``cmd``; past ``timeout`` seconds, or ``exit_grace`` seconds after it printed ``finished``, describe and
    stop its whole tree.

    Args:
        cmd: The command (its processes inherit ``PYTHONFAULTHANDLER=1``; it starts at normal scheduling).
        env: Its environment.
        timeout: Seconds it may run.
        cwd: Its working directory.
        finished: A text that a line of its output holds once its work is done (``None``: no such line).
        exit_grace: Seconds the tree may take to exit after that line.

    Returns:
        :class:`Ran`: the return code (``None`` when stopped), its output, and whether it hung after finishing.
    """
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "PYTHONFAULTHANDLER": "1"},
        cwd=cwd,
        start_new_session=True,
        preexec_fn=_normal_scheduling,
    )
    out: list[str] = []
    err: list[str] = []
    seen = threading.Event()
    pumps = [
        threading.Thread(target=_pump, args=(p.stdout, out, seen, finished), daemon=True),
        threading.Thread(target=_pump, args=(p.stderr, err, seen, finished), daemon=True),
    ]
    for t in pumps:
        t.start()
    deadline, finished_at = time.monotonic() + timeout, None
    while p.poll() is None:
        now = time.monotonic()
        if finished_at is None and seen.is_set():
            finished_at = now
        if now > deadline or (finished_at is not None and now > finished_at + exit_grace):
            break
        time.sleep(0.2)
    if p.returncode is not None:
        for t in pumps:
            t.join()
        return Ran(p.returncode, "".join(out), "".join(err))
    report = _stop(p.pid)
    p.wait()
    for t in pumps:
        t.join(timeout=30)
    after = finished_at is not None
    why = f"it printed {finished!r} and had not exited {exit_grace:.0f} s later" if after else "the time ran out"
    return Ran(None, "".join(out), "".join(err) + f"\n--- the process tree when {why} ---\n{report}\n", after)


def _stop(root: int) -> str:
    """Describe the tree under ``root`` (threads, native stacks), SIGABRT its processes below the root (Python
    stacks), then kill it whole; returns the description."""
    tree = [root, *descendants(root)]
    report = "\n".join(threads_of(pid) for pid in tree)
    report += "\n" + "\n".join(native_stacks(pid) for pid in tree if pid != root)
    for pid in reversed(tree):  # the ranks first: their stacks, before the launcher sees them die
        if pid != root:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGABRT)
    time.sleep(3)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(root, signal.SIGKILL)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return report


def _normal_scheduling() -> None:
    """In the child before exec: normal scheduling, whatever the thread that started it was left at (an SVT-AV1
    encode as root leaves threads at real-time priority; ranks inheriting it starved each other once)."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
