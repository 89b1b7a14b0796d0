"""The plugin's user-facing errors. Every one of them names the file, key or option at fault and says what to do."""

from __future__ import annotations


class RoboLoadersError(Exception):
    """Base class of the plugin's user-facing errors (bad config, bad data, bad options)."""


class UnknownBackendError(RoboLoadersError, KeyError):
    """A backend name no plugin registered; the message names the setting (``where``), the closest registered
    name and every registered one."""

    def __init__(self, name: str, known: list[str], where: str = ""):
        self.name, self.known, self.where = name, known, where
        super().__init__(name)

    def __str__(self) -> str:
        import difflib

        close = difflib.get_close_matches(str(self.name), self.known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        where = f"{self.where}: " if self.where else ""
        return (
            f"{where}unknown data backend {self.name!r}{hint}; registered backends: {', '.join(self.known)}. "
            "Run 'robo-loaders list' to see them with descriptions."
        )


class BackendOptionError(RoboLoadersError, ValueError):
    """A backend option (``data_backend_kwargs`` / ``--dataset.backend_kwargs``) is unknown or ill-typed."""


class SourceError(RoboLoadersError):
    """A source dataset (robomimic HDF5, LeRobot v3 directory) is missing, unreadable or inconsistent."""


class StaleSourceError(RoboLoadersError):
    """Persisted data (a cache, converted shards) was made from a source that has changed since."""


class CompatError(RoboLoadersError):
    """The installed framework is not the version whose internals the plugin was written against."""


def one_line(exc: BaseException) -> str:
    """The error's message on one line, as a training script's user should see it.

    A DataLoader worker's error reaches the training process re-raised with the worker's traceback in its message
    (``Caught X in DataLoader worker process 0. Original Traceback ...``): its last line, the worker's own message,
    is kept. Any other line break (an array printed into a message) becomes a space.

    Args:
        exc: The error.

    Returns:
        The message, one line.
    """
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) > 1 and "Traceback (most recent call last)" in text:
        last = lines[-1]
        head, sep, rest = last.partition(": ")
        return rest if sep and "." in head and " " not in head else last  # drop "package.module.ErrorType: "
    return " ".join(lines)


def exit_with_one_line(exc: BaseException, status: int = 1):
    """End a training script's process on one of the plugin's errors: ``error: <message>`` on stderr, one line, no
    traceback, exit ``status``.

    Why ``SystemExit``: it is not an ``Exception``, so a script that catches every ``Exception`` and exits 0
    (robomimic's ``train.py``) lets it through with its status.

    Args:
        exc: The plugin's error (:class:`RoboLoadersError`).
        status: The exit status.

    Raises:
        SystemExit: always.
    """
    import sys

    print(f"error: {one_line(exc)}", file=sys.stderr, flush=True)
    raise SystemExit(status)


_PASS_THROUGH: set = set()  # the code of the plugin's wrappers that only hand a framework's call on (pass_through)


def pass_through(function):
    """Mark a wrapper the plugin puts around a framework's function that only hands the call on (a patch that
    checks the command line, then calls LeRobot's ``train``): its frame is left out of the tracebacks the one-line
    hook prints (:func:`install_one_line_excepthook`).

    Why: an error LeRobot raised itself (``lerobot-train`` without ``--policy.push_to_hub=false`` or a policy
    repo id) printed a traceback through ``robo_loaders_plugin/lerobot/compat.py``, and looked like the plugin's.

    Args:
        function: The wrapper.

    Returns:
        ``function``, marked.
    """
    _PASS_THROUGH.add(function.__code__)
    return function


def without_pass_through(exc: BaseException) -> BaseException:
    """``exc`` (and the exceptions chained to it) with the frames of :func:`pass_through` wrappers taken out of
    their tracebacks; the other frames, in order, are kept.

    Args:
        exc: An exception about to be printed.

    Returns:
        ``exc``.
    """
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        entries = []
        tb = e.__traceback__
        while tb is not None:
            entries.append(tb)
            tb = tb.tb_next
        kept = [t for t in entries if t.tb_frame.f_code not in _PASS_THROUGH]
        if kept and len(kept) < len(entries):
            for here, after in zip(kept, [*kept[1:], None], strict=True):
                here.tb_next = after
            e.__traceback__ = kept[0]
        todo += [e.__cause__, e.__context__]
    return exc


def install_one_line_excepthook() -> None:
    """Print the plugin's errors that end a command-line process as one line (:func:`exit_with_one_line`'s words,
    exit status 1) instead of a traceback; every other error keeps its traceback (the previous hook prints it),
    without the frames of the plugin's :func:`pass_through` wrappers, so that an error the framework raised
    itself reads as the framework's. Idempotent. Installed only where the process is a training script's command
    line (``lerobot-train``).
    """
    import sys

    previous = sys.excepthook
    if getattr(previous, "_robo_loaders_one_line", False):
        return

    def hook(exc_type, exc, tb):
        if isinstance(exc, RoboLoadersError):
            print(f"error: {one_line(exc)}", file=sys.stderr, flush=True)
            return
        exc = without_pass_through(exc)
        previous(exc_type, exc, exc.__traceback__)

    hook._robo_loaders_one_line = True  # type: ignore[attr-defined]  # a mark on the function, read by getattr above
    sys.excepthook = hook
