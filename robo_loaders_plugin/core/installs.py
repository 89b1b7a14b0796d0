"""What is not installed, and the one command that installs all of it.

Why: a backend needing two extras must name both at once, not the second only once the first is installed. A
requirement is ``(module, install hint)``, the hint a whole command
(``pip install "robo-loaders-plugin[datapipe]"``, or whatever a third-party backend declares); the missing ones are
found together, without importing them, and their hints merged into one command: the extras of one package in one
pair of brackets.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable

_EXTRA_HINT = re.compile(r"""^pip install (["']?)(?P<package>[A-Za-z0-9_.-]+)\[(?P<extras>[\w.,-]+)\]\1$""")


def is_installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it (a ``None`` in ``sys.modules``, the way
    Python blocks an import, counts as missing).

    Args:
        module: A dotted module name.

    Returns:
        True when its spec is found.
    """
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing; a module whose __spec__ is None
        return False


def missing(requirements: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The requirements whose module is not installed, in their order.

    Args:
        requirements: ``(module, install hint)`` pairs.

    Returns:
        The pairs whose module :func:`is_installed` does not find.
    """
    return [(module, hint) for module, hint in requirements if not is_installed(module)]


def install_command(hints: Iterable[str]) -> str:
    """One command for several install hints: ``pip install "P[a]"`` and ``pip install "P[b]"`` become
    ``pip install "P[a,b]"``; hints of another form are kept whole, after it, joined by ``; ``.

    Args:
        hints: Install hints, each a command.

    Returns:
        The command (duplicates dropped, order kept).
    """
    packages: dict[str, list[str]] = {}
    others: list[str] = []
    for hint in hints:
        m = _EXTRA_HINT.match(hint.strip())
        if m is None:
            if hint not in others:
                others.append(hint)
            continue
        extras = packages.setdefault(m.group("package"), [])
        extras += [e for e in m.group("extras").split(",") if e and e not in extras]
    specs = ['"{}[{}]"'.format(package, ",".join(extras)) for package, extras in packages.items()]
    return "; ".join(([f"pip install {' '.join(specs)}"] if specs else []) + others)


def missing_line(who: str, gone: list[tuple[str, str]]) -> str:
    """The one line naming every missing module of ``who`` and the command that installs them all.

    Args:
        who: What needs them, as the user knows it (``backend 'my_backend'``, ``sample-data lerobot``).
        gone: The missing ``(module, install hint)`` pairs (:func:`missing`), at least one.

    Returns:
        ``<who> needs torchdata and torchcodec, which are not installed: pip install "P[datapipe,video]"``.
    """
    names = [module for module, _ in gone]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    verb = "is" if len(names) == 1 else "are"
    return f"{who} needs {listed}, which {verb} not installed: {install_command(h for _, h in gone)}"
