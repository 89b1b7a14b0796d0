"""What a backend is, independent of any framework.

A backend declares which frameworks it serves and, per framework, a *factory*. Two kinds exist because the fast
paths differ: a ``sample`` backend returns a map-style dataset (the framework keeps its own DataLoader and
sampler), a ``batch`` backend returns an iterable of whole collated batches (possibly already on a GPU) that the
framework adapter feeds to the training loop instead of a DataLoader.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

SAMPLE = "sample"
BATCH = "batch"
FRAMEWORKS = ("robomimic", "lerobot")


class RoboLoadersError(Exception):
    """Base class of the plugin's user-facing errors (bad config, bad data, bad options)."""


class UnknownBackendError(RoboLoadersError, KeyError):
    def __init__(self, name: str, known: list[str]):
        self.name, self.known = name, known
        super().__init__(name)

    def __str__(self) -> str:
        return (f"unknown data backend {self.name!r}; registered backends: {', '.join(self.known)}. "
                "Run 'robo-loaders list' to see them with descriptions.")


class BackendOptionError(RoboLoadersError, ValueError):
    """A backend option (``data_backend_kwargs`` / ``--dataset.backend_kwargs``) is unknown or ill-typed."""


@dataclasses.dataclass(frozen=True)
class BackendSpec:
    name: str
    description: str
    frameworks: tuple[str, ...]
    needs_gpu: bool = False
    lossless: bool = True
    kind: str = SAMPLE
    # framework name -> factory, or "module:function" imported on first use (listing backends must not import
    # robomimic or LeRobot). robomimic: factory(config, obs_keys, filter_by_attribute, dataset_path, **options)
    factories: Mapping[str, Callable[..., Any] | str] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    # option name -> (type or tuple of types, default, help). Used to reject unknown/ill-typed kwargs early.
    options: Mapping[str, tuple] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    plugin: str = "builtin"

    def __post_init__(self):
        if self.kind not in (SAMPLE, BATCH):
            raise ValueError(f"backend {self.name!r}: kind must be {SAMPLE!r} or {BATCH!r}, not {self.kind!r}")
        unknown = set(self.frameworks) - set(FRAMEWORKS)
        if unknown:
            raise ValueError(f"backend {self.name!r}: unknown frameworks {sorted(unknown)}; known: {FRAMEWORKS}")

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "frameworks": list(self.frameworks),
            "needs_gpu": self.needs_gpu,
            "lossless": self.lossless,
            "kind": self.kind,
            "plugin": self.plugin,
        }

    def validate_options(self, kwargs: Mapping[str, Any] | None, where: str) -> dict:
        """Check ``kwargs`` against ``options``; return them merged over the defaults."""
        kwargs = dict(kwargs or {})
        unknown = sorted(set(kwargs) - set(self.options))
        if unknown:
            known = ", ".join(sorted(self.options)) or "(none)"
            raise BackendOptionError(
                f"{where}: unknown option(s) {unknown} for backend {self.name!r}; valid options: {known}")
        out = {}
        for key, (types, default, _help) in self.options.items():
            if key not in kwargs:
                out[key] = default
                continue
            value = kwargs[key]
            if value is not None and not isinstance(value, types) or isinstance(value, bool) and bool not in _as_tuple(types):
                names = "/".join(t.__name__ for t in _as_tuple(types))
                raise BackendOptionError(
                    f"{where}: option {key!r} of backend {self.name!r} must be {names} (or null), "
                    f"got {type(value).__name__} {value!r}")
            out[key] = value
        return out

    def factory_for(self, framework: str) -> Callable[..., Any]:
        if framework not in self.factories:
            raise RoboLoadersError(
                f"backend {self.name!r} does not support {framework}; it supports: {', '.join(self.frameworks)}")
        factory = self.factories[framework]
        if isinstance(factory, str):
            import importlib

            module, _, attr = factory.partition(":")
            factory = getattr(importlib.import_module(module), attr)
        return factory


def _as_tuple(types):
    return types if isinstance(types, tuple) else (types,)
