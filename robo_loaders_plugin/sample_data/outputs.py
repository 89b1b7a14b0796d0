"""What ``sample-data`` may write over, and how it replaces it.

Why: ``sample-data robomimic OUT`` replaced whatever OUT was without a word (an 8-demo file became a 2-demo one, a
LeRobot dataset's ``meta/info.json`` became HDF5). Now nothing that exists is replaced unless the user asks
(``--overwrite``, or ``overwrite=True`` from Python), and even then only a dataset this command could have written:

- robomimic: a regular file that is HDF5 with a ``data`` group (a robomimic dataset); written to a temporary name
  beside it, then renamed over it (``os.replace``), so OUT is always the old file or the whole new one;
- LeRobot: a directory holding a LeRobot dataset (``meta/info.json`` with a ``codebase_version``) and nothing but
  what LeRobot's writer puts there (:data:`LEROBOT_ENTRIES`), or an empty directory; the new dataset is written into
  a hidden sibling directory and renamed into place when complete, the old one removed after, so an interrupted
  run leaves the old dataset (or nothing) at OUT, never a partial one.

Anything else (a directory for a file, a JSON file, a folder holding the user's own files) is refused even with
the flag, in one line naming the path and what to do: the user removes it, or chooses another OUT.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from robo_loaders_plugin.core.errors import RoboLoadersError

LEROBOT_ENTRIES = frozenset({"meta", "data", "videos", "images"})  # what LeRobot's writer puts at a dataset's root


class OutputExistsError(RoboLoadersError, FileExistsError):
    """``sample-data``'s output exists and may not be replaced: not asked to, or not a dataset it could have
    written. The message names the path and the flag (``--overwrite`` or ``overwrite=True``)."""


def _exists(path: str | os.PathLike) -> bool:
    return os.path.lexists(path)  # a dangling symlink exists too: it is the user's


def robomimic_dataset_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` is not a robomimic HDF5 file ``sample-data robomimic`` could replace, or ``None`` when it is.

    Args:
        path: An existing path.

    Returns:
        ``None``, or the reason in a few words (``"a directory"``, ``"not an HDF5 file"``, ...).
    """
    if os.path.isdir(path):
        return "a directory"
    if not os.path.isfile(path):
        return "not a regular file"
    import h5py

    try:
        if not h5py.is_hdf5(path):
            return "not an HDF5 file"
        with h5py.File(path, "r") as f:
            if not isinstance(f.get("data"), h5py.Group):
                return "an HDF5 file without a 'data' group (not a robomimic dataset)"
    except OSError as exc:
        return f"an HDF5 file that cannot be read ({exc})"
    return None


def lerobot_dataset_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` is not a directory ``sample-data lerobot`` could replace, or ``None`` when it is (an empty
    directory, or a LeRobot dataset holding only :data:`LEROBOT_ENTRIES`).

    Args:
        path: An existing path.

    Returns:
        ``None``, or the reason in a few words.
    """
    if not os.path.isdir(path) or os.path.islink(path):
        return "not a directory" if not os.path.isdir(path) else "a symbolic link"
    entries = sorted(os.listdir(path))
    if not entries:
        return None
    info = os.path.join(path, "meta", "info.json")
    try:
        with open(info) as f:
            if "codebase_version" not in json.load(f):
                return "not a LeRobot dataset (meta/info.json has no codebase_version)"
    except (OSError, ValueError, TypeError):
        return "not a LeRobot dataset (no readable meta/info.json)"
    others = [e for e in entries if e not in LEROBOT_ENTRIES]
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        return f"a LeRobot dataset that also holds {shown}, which sample-data does not write"
    return None


def check_output(path: str | os.PathLike, framework: str, overwrite: bool, flag: str = "overwrite=True") -> None:
    """Refuse an output that exists, unless asked to replace it and it is a dataset ``sample-data`` could have
    written (module docstring). Reads nothing but the existing path; called before any data is drawn.

    Args:
        path: The output: a robomimic HDF5 file, or a LeRobot dataset directory.
        framework: ``robomimic`` or ``lerobot``.
        overwrite: Replacing an existing dataset was asked for.
        flag: How the user asks, as they write it (``--overwrite`` on the command line).

    Raises:
        OutputExistsError: ``path`` exists and ``overwrite`` is false, or it is not a dataset that may be replaced.
    """
    if not _exists(path):
        return
    if not overwrite:
        raise OutputExistsError(f"{path} exists: add {flag} to replace it, or choose another output path")
    problem = robomimic_dataset_problem(path) if framework == "robomimic" else lerobot_dataset_problem(path)
    if problem:
        kind = "a robomimic HDF5 file" if framework == "robomimic" else "a LeRobot dataset directory"
        raise OutputExistsError(
            f"{path} is {problem}: {flag} replaces only {kind} sample-data could have written; "
            "remove it yourself or choose another output path"
        )


@contextlib.contextmanager
def replacing_dir(root: str | os.PathLike, overwrite: bool, flag: str = "overwrite=True") -> Iterator[Path]:
    """A fresh directory to write a LeRobot dataset into, renamed to ``root`` when the block ends without error.

    Why not write at ``root``: LeRobot's writer wants a directory that does not exist, and an interrupted run must
    not leave a partial dataset where a whole one was (the old one stays until the new one is complete).

    Args:
        root: The dataset directory (checked by :func:`check_output`).
        overwrite: Replace an existing dataset there.
        flag: How the user asks to replace it.

    Yields:
        A hidden sibling of ``root`` that does not exist yet.

    Raises:
        OutputExistsError: as :func:`check_output`.
    """
    root = Path(root)
    check_output(root, "lerobot", overwrite, flag)
    root.parent.mkdir(parents=True, exist_ok=True)
    partial = root.parent / f".{root.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)  # a leftover of this pid's earlier run
    try:
        yield partial
        if _exists(root):
            old = root.parent / f".{root.name}.replaced-{os.getpid()}"
            os.rename(root, old)
            os.rename(partial, root)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(partial, root)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
