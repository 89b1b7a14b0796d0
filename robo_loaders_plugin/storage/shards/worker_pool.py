"""The local executor's process runner: a conversion's ``worker(args)`` in this process, or in N spawned processes.

Why not ``multiprocessing.Pool``: a worker that dies without returning (killed by a signal, or aborted inside a
native library such as an encoder) leaves a pool waiting forever for a result that never comes. Here each worker
has its own pipe, whose end-of-file says the process is gone, so a dead worker is an error naming the signal.
What the workers do (lease units from ``manifest.json`` and convert them) is the manifest's business
(:func:`~robo_loaders_plugin.storage.shards.manifest.run` calls :func:`run_workers`); this module only runs them.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Callable

from robo_loaders_plugin.storage.shards.format import ShardError


class RemoteTraceback(Exception):
    """A worker process's traceback, chained to the error it raised (as multiprocessing.Pool chains it)."""

    def __str__(self) -> str:
        return self.args[0]


def _die_with(parent: int) -> None:
    """End this worker when the process that started it dies (Linux: ``PR_SET_PDEATHSIG``), and now if it has
    already.

    Why: the parent ends its workers in a ``finally``, which a SIGTERM (``kill``, ``timeout``), a SIGKILL or the OOM
    killer skips: the workers went on converting as orphans, writing into the output directory a user had stopped
    (a reviewer's reproduction)."""
    import ctypes
    import sys

    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # gone before the request took effect
        os._exit(1)


def _worker_process(worker: Callable, args, conn, parent: int | None = None) -> None:
    """Body of one spawned worker: runs ``worker(args)`` and sends back None or (error, its traceback); ends with
    ``parent`` (:func:`_die_with`)."""
    import pickle
    import traceback

    if parent is not None:
        _die_with(parent)
    try:
        worker(args)
        conn.send(None)
    except BaseException as exc:  # noqa: BLE001 - sent to the parent, which raises it
        tb = "".join(traceback.format_exception(exc))
        try:
            pickle.loads(pickle.dumps(exc))  # an error that does not survive the trip is sent as text
        except Exception:  # noqa: BLE001 - whatever pickling raises, the text goes instead
            exc = ShardError(f"{type(exc).__name__}: {exc}")
        conn.send((exc, tb))
    finally:
        conn.close()


def _died(process) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by signal {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with status {code} without reporting"


def run_workers(
    worker: Callable, args: tuple, num_workers: int, out_dir: str, on_poll: Callable[[], None], poll_s: float
) -> None:
    """``worker(args)`` here, or in ``num_workers`` spawned processes until each returns.

    The first error a worker raises is raised here (its traceback chained) and stops the others; so does a worker
    that dies without returning (killed by a signal, or aborted inside a native library such as an encoder): a
    ShardError naming ``out_dir`` and the signal, not a wait for a result that never comes (what
    multiprocessing.Pool does). Units a dead worker leased are free again (its locks went with it): running the same
    command again resumes them.

    Args:
        worker: The conversion's worker (picklable when ``num_workers > 1``).
        args: ``worker``'s one argument.
        num_workers: Processes to spawn; 1 or less runs it here (:func:`run_here`).
        out_dir: Named in the error about a dead worker.
        on_poll: Called every ``poll_s`` seconds meanwhile, and once at the end (the progress bar).
        poll_s: Seconds between calls of ``on_poll``.

    Raises:
        ShardError: a worker died without reporting.
        Exception: the first error a worker raised, chained to a :class:`RemoteTraceback`.
    """
    if num_workers <= 1:
        run_here(worker, args, on_poll, poll_s)
        return
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")
    procs = []
    try:
        for _ in range(num_workers):
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(
                target=_worker_process,
                args=(worker, args, send, os.getpid()),
                daemon=True,
                name="robo-loaders-worker",
            )
            p.start()
            send.close()  # the child's copy only: its end-of-file then says the child is gone
            procs.append((p, recv))
        live = dict(procs)
        while live:
            wait(list(live.values()), timeout=poll_s)
            on_poll()
            for p, conn in list(live.items()):
                if not conn.poll():
                    continue
                try:
                    outcome = conn.recv()
                except EOFError:  # nothing sent: the process is gone
                    p.join()
                    raise ShardError(
                        f"{out_dir}: a worker process (pid {p.pid}) {_died(p)}; the units it held "
                        "are free again: run the same command again to resume"
                    ) from None
                del live[p]
                p.join()
                if outcome is not None:
                    exc, tb = outcome
                    raise exc from RemoteTraceback(tb)
    finally:
        for p, conn in procs:
            if p.is_alive():
                p.terminate()
            p.join()
            conn.close()
    on_poll()


def run_here(worker: Callable, args: tuple, on_poll: Callable[[], None], poll_s: float) -> None:
    """``worker(args)`` in this process (no spawned interpreter to start for one worker), in a thread, so that the
    progress bar follows the units as they finish instead of jumping at the end.

    Daemon: an interrupted run exits without waiting for the unit in progress (its lease goes with the process, and
    its partial files are swept when the command is run again).

    Args:
        worker: The conversion's worker.
        args: ``worker``'s one argument.
        on_poll: Called every ``poll_s`` seconds while it runs.
        poll_s: Seconds between calls of ``on_poll``.

    Raises:
        BaseException: the error ``worker`` raised, re-raised here.
    """
    failure: list[BaseException] = []

    def body():
        try:
            worker(args)
        except BaseException as exc:  # noqa: BLE001 - raised in the launching thread
            failure.append(exc)

    thread = threading.Thread(target=body, name="robo-loaders-convert", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(poll_s)
        on_poll()
    if failure:
        raise failure[0]
