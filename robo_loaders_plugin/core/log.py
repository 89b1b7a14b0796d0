"""The plugin's log: the ``"robo_loaders"`` logger (standard :mod:`logging`) and one child per module
(``robo_loaders.storage.cache``, ...), with a default handler that prints each record as the
``[robo-loaders] ...`` line users, tests and the docs read.

Why a handler of its own, on stdout: the lines were ``print()``-ed to stdout before there was a logger; training
scripts' users read them there, beside the framework's output (robomimic copies its stdout into the run's log
file), and the docs quote them. The handler writes to the ``sys.stdout`` *of the moment* a record is emitted, not the
one there was when it was made, so whatever replaces stdout later (robomimic's log-file tee, pytest's ``capsys``,
``contextlib.redirect_stdout``) gets the lines, as it got the prints; each line is flushed.

Why ``propagate=False``: a training script that configures the root logger (``lerobot-train`` does) would print
every line a second time in its own format. Where the ``"robo_loaders"`` logger has handlers already when the plugin
is first imported (the user configured it), no handler is added and ``propagate`` is left as the user set it.

The level: ``$ROBO_LOADERS_LOG_LEVEL`` (a level name: ``DEBUG``, ``INFO``, ``WARNING``, ``ERROR``, ``CRITICAL``,
or a number) when the plugin is first imported in a process (DataLoader workers and conversion tasks included), else
the level the user set on the logger before, else ``INFO``. ``logging.getLogger("robo_loaders").setLevel(...)``
changes it afterwards (docs/logging.md).
"""

from __future__ import annotations

import logging
import os
import sys
import threading

ROOT = "robo_loaders"
PREFIX = "[robo-loaders]"
ENV_LEVEL = "ROBO_LOADERS_LOG_LEVEL"
# set to the bad value once it was warned about: processes started after it (DataLoader workers, spawned or forked,
# inherit the environment) stay quiet about the same value, so a typo is one line per run, not one per worker
_WARNED = "_ROBO_LOADERS_LOG_LEVEL_WARNED"
# every ROBO_LOADERS_* variable anything in the repository reads (tests/test_log.py checks the list against the
# code): the package's, the benchmarks' data directory and the loss-curve tests' output directory
KNOWN_VARIABLES = (
    "ROBO_LOADERS_CACHE",
    "ROBO_LOADERS_CACHE_SIZE",
    "ROBO_LOADERS_DISABLE",
    "ROBO_LOADERS_LOCK_TIMEOUT",
    "ROBO_LOADERS_LOG_LEVEL",
    "ROBO_LOADERS_LOSS_CURVES_DIR",
    "ROBO_LOADERS_RAM_DIR",
    "ROBO_LOADERS_WORKLOADS",
)
# the unknown names last warned about, as _WARNED is for the level: one line per run, not one per worker
_UNKNOWN_WARNED = "_ROBO_LOADERS_UNKNOWN_WARNED"
HANDLER_NAME = "robo_loaders.stdout"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_PACKAGE = "robo_loaders_plugin"

_lock = threading.Lock()
_installed = False
_warned: set[tuple[str, str]] = set()  # (logger name, message) of the warnings warn_once logged in this process
_warned_lock = threading.Lock()


class StdoutHandler(logging.StreamHandler):
    """A stream handler whose stream is ``sys.stdout`` at the time of each record, flushed after each line (as
    ``print(..., flush=True)`` was); nothing is written while there is no stdout (``pythonw``: ``sys.stdout`` is
    ``None``), as ``print`` writes nothing there."""

    def __init__(self, level: int = logging.NOTSET):
        logging.Handler.__init__(self, level)  # StreamHandler.__init__ would keep today's stream

    @property
    def stream(self):
        """``sys.stdout``, looked up now."""
        return sys.stdout

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record's line to the current stdout and flush it.

        Args:
            record: The record.
        """
        if sys.stdout is not None:
            super().emit(record)


def level_from_env(value: str | None) -> tuple[int | None, str]:
    """``$ROBO_LOADERS_LOG_LEVEL``'s value as a :mod:`logging` level.

    Args:
        value: The variable's value (``None``: not set).

    Returns:
        ``(level, "")``; ``(None, "")`` when it is not set or blank; ``(None, why)`` when it is not a level (it is
        then ignored, not an error: how much is logged must not stop a training run), ``why`` being the line that
        says so and what to set.
    """
    text = (value or "").strip()
    if not text:
        return None, ""
    if text.isdigit():
        return int(text), ""
    if text.upper() in LEVELS:
        return logging.getLevelName(text.upper()), ""
    return None, (
        f"warning: {ENV_LEVEL}={value!r} is not a logging level, so it is ignored; set it to one of "
        f"{', '.join(LEVELS)} or a number"
    )


def unknown_variables(environ) -> list[str]:
    """Lines for the ``ROBO_LOADERS_*`` variables set in ``environ`` that nothing reads, each naming the closest
    known one.

    Why: a misspelt variable (``ROBO_LOADERS_CACHE_SIZ=5GB``) is otherwise ignored without a word, and the run
    silently uses the default it meant to change (a 50 GB cache limit, a 2 h lock wait, the home directory's cache).

    Args:
        environ: The environment (``os.environ``).

    Returns:
        One warning line per unknown variable, sorted by name; empty when there is none.
    """
    import difflib

    lines = []
    for name in _unknown_names(environ):
        near = difflib.get_close_matches(name, KNOWN_VARIABLES, n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        lines.append(
            f"warning: {name} is set but robo-loaders reads no such variable, so it is ignored; {hint}"
            f"the variables: {', '.join(KNOWN_VARIABLES)} (docs/logging.md)"
        )
    return lines


def _unknown_names(environ) -> list[str]:
    return sorted(k for k in environ if k.startswith("ROBO_LOADERS_") and k not in KNOWN_VARIABLES)


def install_default_handler() -> logging.Logger:
    """Set up the ``"robo_loaders"`` logger once per process: the ``[robo-loaders]`` stdout handler with
    ``propagate=False`` unless the logger has handlers already, and its level (module docstring). Idempotent; a
    forked process keeps its parent's setup.

    Returns:
        The ``"robo_loaders"`` logger.
    """
    global _installed
    logger = logging.getLogger(ROOT)
    with _lock:
        if _installed:
            return logger
        _installed = True
        if not logger.handlers:
            handler = StdoutHandler()
            handler.set_name(HANDLER_NAME)
            handler.setFormatter(logging.Formatter(f"{PREFIX} %(message)s"))
            logger.addHandler(handler)
            logger.propagate = False
        level, problem = level_from_env(os.environ.get(ENV_LEVEL))
        if level is not None:
            logger.setLevel(level)
        elif logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
    if problem and os.environ.get(_WARNED) != os.environ.get(ENV_LEVEL):
        logger.warning(problem)
        os.environ[_WARNED] = os.environ.get(ENV_LEVEL, "")
    unknown = unknown_variables(os.environ)
    names = ",".join(_unknown_names(os.environ))
    if unknown and os.environ.get(_UNKNOWN_WARNED) != names:
        for line in unknown:
            logger.warning(line)
        os.environ[_UNKNOWN_WARNED] = names
    return logger


def get_logger(name: str) -> logging.Logger:
    """The logger a module of the plugin writes its lines to: a child of ``"robo_loaders"``, named after the module
    without the package (``get_logger(__name__)`` in ``robo_loaders_plugin.storage.cache`` is
    ``robo_loaders.storage.cache``). Sets the plugin's logger up first (:func:`install_default_handler`).

    Args:
        name: The module's ``__name__`` (or any name: ``"robo_loaders.x"`` and ``"x"`` both give
            ``robo_loaders.x``; ``""`` gives ``robo_loaders`` itself).

    Returns:
        The logger.
    """
    install_default_handler()
    for head in (_PACKAGE, ROOT):
        if name == head or name.startswith(head + "."):
            name = name[len(head) + 1 :]
            break
    return logging.getLogger(f"{ROOT}.{name}" if name else ROOT)


def warn_once(logger: logging.Logger, message: str) -> bool:
    """Log ``message`` as a warning on ``logger`` the first time this process is asked to, and never again.

    Why: the same check can run several times in one process for one cause (a mixture's metadata is checked when
    ``lerobot-train`` parses its flags and again when it builds the training and evaluation sets; robomimic builds a
    training and a validation mixture), and a warning read three times reads as three problems.

    Args:
        logger: The module's logger (:func:`get_logger`).
        message: The whole line (``"warning: ..."``).

    Returns:
        True when it was logged now, False when it had been already.
    """
    key = (logger.name, message)
    with _warned_lock:
        if key in _warned:
            return False
        _warned.add(key)
    logger.warning(message)
    return True
