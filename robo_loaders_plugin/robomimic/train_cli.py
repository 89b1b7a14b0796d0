"""``robo-loaders robomimic-train``: robomimic's own training script, run as ``__main__`` after patching, with an
exit status that says whether the run failed.

Why a wrapper may do more than the script: robomimic's ``main`` catches every error of a run, prints it and exits 0,
so a scheduler or CI job cannot tell a failed run from a finished one; and a retry of a failed run without a
terminal dies on robomimic's "overwrite?" prompt with ``EOFError``. The wrapper exits 1 when robomimic printed its
failure line, and, without a terminal, keeps the earlier run's folder and writes the retry beside it. (The plugin's
own errors end robomimic's script with one line and exit status 1 by themselves, ``robomimic.compat``; the wrapper
is what gives every other failure a status too.)
"""

from __future__ import annotations

import io
import runpy
import sys


class _Watch(io.TextIOBase):
    """stdout passed through unchanged, noting whether robomimic printed its failure line."""

    def __init__(self, inner, marker: str):
        self.inner, self.marker, self.failed = inner, marker, False

    def write(self, text: str) -> int:
        if self.marker in text:
            self.failed = True
        return self.inner.write(text)

    def flush(self) -> None:
        self.inner.flush()

    def fileno(self) -> int:
        return self.inner.fileno()

    def isatty(self) -> bool:
        return self.inner.isatty()


def config_problem(argv: list[str]) -> str | None:
    """What is wrong with robomimic's ``--config`` in ``argv`` before its script runs (``None``: nothing seen).

    Why: robomimic's script opens the file itself, so a mistyped path or a file that is no JSON object ended the
    wrapper's run in a traceback (a reviewer's reproduction); the rest of the config is robomimic's to check.

    Args:
        argv: robomimic's command line without the program.

    Returns:
        One sentence naming ``--config``, or ``None``.
    """
    import json

    path = None
    for i, arg in enumerate(argv):
        if arg == "--config":
            path = argv[i + 1] if i + 1 < len(argv) else ""
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
    if path is None:
        return None
    if not path:
        return "--config needs a path to a robomimic config JSON"
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return f"--config {path}: no such file"
    except (OSError, UnicodeDecodeError) as exc:
        return f"--config {path}: cannot be read ({exc})"
    except ValueError as exc:
        return f"--config {path}: not a JSON file ({exc}); give a robomimic config JSON"
    if not isinstance(doc, dict):
        return f"--config {path}: holds a JSON {type(doc).__name__}, not a robomimic config (a JSON object)"
    return None


def run_robomimic_train(argv: list[str]) -> int:
    """Run ``robomimic.scripts.train`` with ``argv``, patched, as ``__main__``.

    Without a terminal on stdin, an existing run's folder is kept and this run goes beside it
    (:func:`~robo_loaders_plugin.robomimic.compat.keep_existing_runs`).

    Args:
        argv: robomimic's command line without the program (``--config ...``, ``--dataset ...``).

    Returns:
        1 when robomimic printed its failure line (it exits 0 after a failed run), else 0.

    Raises:
        SystemExit: with status 1, after one line, for the plugin's own errors (``robomimic.compat``).
    """
    import robomimic.utils.train_utils as train_utils

    from robo_loaders_plugin.robomimic import compat
    from robo_loaders_plugin.robomimic.patches import apply_all

    apply_all()
    if not sys.stdin or not sys.stdin.isatty():
        compat.keep_existing_runs(train_utils)
    watch = _Watch(sys.stdout, compat.TRAIN_FAILED)
    sys.argv = ["robomimic.scripts.train"] + list(argv)
    stdout, sys.stdout = sys.stdout, watch
    try:
        runpy.run_module("robomimic.scripts.train", run_name="__main__", alter_sys=True)
    finally:
        sys.stdout = stdout
    if watch.failed:
        print(
            "[robo-loaders] robomimic's training run failed (its error is above); exit status 1",
            file=sys.stderr,
            flush=True,
        )
        return 1
    return 0
