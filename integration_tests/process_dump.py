"""Run a process tree with a time limit, and when it runs past it, say where every process of the tree waited.

Why: a ``torchrun`` job of this suite that hangs (once in CI, after "End of training") left only its output's end
behind, which cannot tell a plugin thread blocked at exit from torch's gloo or autograd threads stuck in the
interpreter's finalization. On a timeout, each process of the tree is listed with its threads (name, kernel wait
channel, scheduling policy: a real-time policy inherited from an AV1 encode starved ranks once), then sent SIGABRT
so that Python's faulthandler (``PYTHONFAULTHANDLER=1``, set here) prints every thread's Python stack, and only then
killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

_POLICIES = {0: "OTHER", 1: "FIFO", 2: "RR", 3: "BATCH", 5: "IDLE"}


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


def _normal_scheduling() -> None:
    """In the child before exec: normal scheduling, whatever the thread that started it was left at (an SVT-AV1
    encode as root leaves threads at real-time priority; ranks inheriting it starved each other once)."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def run_tree(cmd: list[str], env: dict, timeout: float, cwd: str | None = None) -> tuple[int | None, str, str]:
    """Run ``cmd``; past ``timeout`` seconds, describe and stop its whole tree.

    Args:
        cmd: The command (its processes inherit ``PYTHONFAULTHANDLER=1``; it starts at normal scheduling).
        env: Its environment.
        timeout: Seconds it may run.
        cwd: Its working directory.

    Returns:
        ``(returncode, stdout, stderr)``; ``returncode`` is ``None`` when it ran past ``timeout``, and ``stderr`` then
        ends with the tree's threads and Python stacks.
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
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        pass
    tree = [p.pid, *descendants(p.pid)]
    report = "\n".join(threads_of(pid) for pid in tree)
    for pid in reversed(tree):  # the ranks first: their stacks, before the launcher sees them die
        if pid != p.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGABRT)
    time.sleep(3)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    out, err = p.communicate()
    return None, out, f"{err}\n--- the process tree when the time ran out ---\n{report}\n"
