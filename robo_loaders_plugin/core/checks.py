"""One row of ``robo-loaders doctor``: something the plugin relies on, whether it holds, and why it matters."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Check:
    what: str
    ok: bool
    detail: str = ""
    required: bool = True  # a failed required check makes doctor exit 1; others are warnings

    @property
    def status(self) -> str:
        return "ok" if self.ok else ("FAIL" if self.required else "warn")


def installed_version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def patch_point_checks(framework: str, points, originals: dict, mark: str) -> list[Check]:
    """One row per (module, dotted attribute, parameters relied on): the symbol exists and, patched or not, its
    original takes those leading parameters."""
    import importlib
    import inspect

    rows = []
    for module_name, attr, params in points:
        what = f"{framework} patch point {module_name}.{attr}"
        try:
            obj = importlib.import_module(module_name)
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
        ok = names[:len(params)] == tuple(params)
        state = "patched" if patched else "not patched in this process"
        rows.append(Check(what, ok, f"{state}; parameters {names}" + ("" if ok else f", expected {tuple(params)}")))
    return rows
