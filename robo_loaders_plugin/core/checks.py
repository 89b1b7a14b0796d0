"""One row of ``robo-loaders doctor``: something the plugin relies on, whether it holds, and why it matters."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any


@dataclasses.dataclass(frozen=True)
class Check:
    """One row of ``robo-loaders doctor``: something the plugin relies on, and whether it holds here.

    Attributes:
        what: What is checked (a version, a patch point, a private attribute read).
        ok: Whether it holds.
        detail: Why it matters, or what was found instead.
        required: A failed required check makes ``doctor`` exit 1; a failed optional one is a warning.
    """

    what: str
    ok: bool
    detail: str = ""
    required: bool = True  # a failed required check makes doctor exit 1; others are warnings

    @property
    def status(self) -> str:
        """``"ok"``, ``"FAIL"`` (a required check failed) or ``"warn"`` (an optional one failed)."""
        return "ok" if self.ok else ("FAIL" if self.required else "warn")


@functools.cache
def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, without importing it; read once per process.

    Why once: ``importlib.metadata.version`` scans every installed distribution's metadata (~10 ms here), and
    the in-process batch path checks LeRobot's version at every pass (two calls per pass of ~165 batches: a
    seventh of the training thread's time at LeRobot 84x84's 37,000 samples/s).

    Args:
        distribution: The distribution's name on PyPI (``"lerobot"``, ``"robomimic"``).

    Returns:
        Its version string, or ``None`` when it is not installed.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def patch_point_checks(framework: str, points, originals: dict, mark: str) -> list[Check]:
    """One row per patch point: the symbol exists and, patched or not, its original takes the leading
    parameters the plugin relies on.

    Args:
        framework: The framework's name as printed (``"LeRobot"``, ``"robomimic"``).
        points: ``(module, dotted attribute, parameters)`` triples, e.g.
            ``("lerobot.datasets.factory", "make_dataset", ("cfg",))``.
        originals: ``{attribute's last name: original}`` kept by the patches, consulted for a patched symbol.
        mark: The attribute the patches set on their wrappers (how a patched symbol is recognised).

    Returns:
        One required :class:`Check` per point; a missing module or attribute is a failed row, not an error.
    """
    import importlib
    import inspect

    rows = []
    for module_name, attr, params in points:
        what = f"{framework} patch point {module_name}.{attr}"
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            rows.append(Check(what, False, f"missing ({exc}); the plugin cannot hook in"))
            continue
        patched = getattr(obj, mark, False)
        target = originals.get(attr.split(".")[-1], obj) if patched else obj
        try:
            names = tuple(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            names = ()
        ok = names[: len(params)] == tuple(params)
        state = "patched" if patched else "not patched in this process"
        rows.append(Check(what, ok, f"{state}; parameters {names}" + ("" if ok else f", expected {tuple(params)}")))
    return rows
