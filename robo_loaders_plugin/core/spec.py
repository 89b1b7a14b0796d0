"""What a backend is, independent of any framework: its name, the frameworks it serves, its kind, its options.

The *kind* says who drives a training pass, and the framework adapters dispatch on it (``core.iteration``):

- ``sample``: a map-style dataset; the framework's own DataLoader and sampler drive it (worker processes and all).
- ``indexed``: a map-style dataset that can also build a whole collated batch for a list of indices
  (:class:`~robo_loaders_plugin.core.iteration.IndexedDataset`); the adapter draws the indices from exactly the
  sampler the framework built and builds the batches in the training process, so the order, and the losses, are
  the native ones.
- ``batch``: the backend orders each pass itself and yields collated batches
  (:class:`~robo_loaders_plugin.core.iteration.BatchDataset` -> :class:`~robo_loaders_plugin.core.iteration.BatchSource`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from robo_loaders_plugin.core.errors import BackendOptionError, RoboLoadersError

SAMPLE = "sample"
INDEXED = "indexed"
BATCH = "batch"
KINDS = (SAMPLE, INDEXED, BATCH)
FRAMEWORKS = ("robomimic", "lerobot")


@dataclasses.dataclass(frozen=True)
class BackendSpec:
    name: str
    description: str
    frameworks: tuple[str, ...]
    # the adapter refuses a GPU backend on a machine without CUDA before reading any data
    needs_gpu: bool = False
    # lossless backends serve byte-identical samples (the parity suites hold them to it); lossy ones state a tolerance
    lossless: bool = True
    kind: str = SAMPLE
    # framework name -> factory, or "module:function" imported on first use (listing backends must not import
    # robomimic or LeRobot). robomimic: factory(config, obs_keys, filter_by_attribute, dataset_path, **options);
    # LeRobot: factory(native_lerobot_dataset, **options).
    factories: Mapping[str, Callable[..., Any] | str] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    # option name -> (type or tuple of types, default, help). Used to reject unknown/ill-typed kwargs early.
    options: Mapping[str, tuple] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    plugin: str = "builtin"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"backend {self.name!r}: kind must be one of {KINDS}, not {self.kind!r}")
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

    def check_device(self) -> None:
        """A ``needs_gpu`` backend fails here, before any data is read, on a machine without CUDA."""
        if self.needs_gpu:
            import torch

            if not torch.cuda.is_available():
                raise RoboLoadersError(f"backend {self.name!r} needs a CUDA GPU and torch sees none "
                                       "(torch.cuda.is_available() is False); choose another backend")

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
