"""What a backend is, independent of any framework: :class:`BackendSpec` (name, frameworks, kind, options, what it
promises about its samples and the GPU), and :class:`BackendChoice`, a user's choice of a backend resolved once.

The *kind* says who drives a training pass, and the framework adapters dispatch on it (``core.iteration``):

- ``sample``: a map-style dataset; the framework's own DataLoader and sampler drive it (worker processes and all).
- ``indexed``: a map-style dataset that can also build a whole collated batch for a list of indices
  (:class:`~robo_loaders_plugin.core.iteration.IndexedDataset`); the adapter draws the indices from exactly the
  sampler the framework built and builds the batches in the training process, so the order, and the losses, are
  the native ones.
- ``batch``: the backend orders each pass itself and yields collated batches
  (:class:`~robo_loaders_plugin.core.iteration.BatchDataset` ->
  :class:`~robo_loaders_plugin.core.iteration.BatchSource`).

A kind may differ by framework (LeRobot's DataLoader stays in charge where image transforms draw from its workers'
RNG) and by an option's value (:attr:`Option.kinds <robo_loaders_plugin.core.options.Option.kinds>`): the kind of
a :class:`BackendChoice` is the one that drives its passes.
"""

from __future__ import annotations

import dataclasses
import keyword
from collections.abc import Callable, Mapping
from typing import Any

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.options import Option, Options, resolve_options

# names the options object (core.options.Options) holds itself: an option of one of these names would replace them
_RESERVED = frozenset(name for name in dir(Options) if not name.startswith("__")) | {"backend", "framework"}

SAMPLE = "sample"
INDEXED = "indexed"
BATCH = "batch"
KINDS = (SAMPLE, INDEXED, BATCH)
FRAMEWORKS = ("robomimic", "lerobot")

# what a backend promises about the samples it serves (BackendSpec.lossless)
LOSSLESS = "yes"  # byte-identical to the native loader (the parity suites hold it to that)
LOSSY_FRAMES = "lossy frames"  # camera frames differ within a stated tolerance; everything else identical
NOT_BIT_IDENTICAL_ON_NVDEC = "yes on the CPU; not bit-identical with NVDEC"
# whether it uses a GPU (BackendSpec.gpu)
GPU_NO, GPU_OPTIONAL, GPU_REQUIRED = "no", "optional", "required"

# the backend used when none is chosen: the framework's own loader (robomimic SequenceDataset, LeRobotDataset), the
# reference every other backend is compared with; the adapters and the registry know this one name, no other
DEFAULT_BACKEND = "native"


def _per_framework(value, frameworks, name: str, allowed: tuple | None, backend: str) -> dict:
    out = dict(value) if isinstance(value, Mapping) else dict.fromkeys(frameworks, value)
    missing = [fw for fw in frameworks if fw not in out]
    if missing:
        raise ValueError(f"backend {backend!r}: {name} gives no value for {missing}")
    if allowed is not None:
        bad = {fw: v for fw, v in out.items() if v not in allowed}
        if bad:
            raise ValueError(f"backend {backend!r}: {name} must be one of {allowed}, got {bad}")
    return out


@dataclasses.dataclass(frozen=True)
class BackendSpec:
    """A backend, as its plugin declares it (``robo_loaders_backends`` hook; the contracts: ``extend``).

    Attributes:
        name: Unique across plugins; what users write (``train.data_backend``, ``--dataset.backend``): letters,
            digits, ``_``, ``-`` or ``.``, starting with a letter or digit (a plugin declaring another name is skipped
            with one line).
        description: One sentence for ``robo-loaders list``.
        frameworks: The frameworks it serves (``robomimic``, ``lerobot``).
        kind: Who drives a pass (``SAMPLE``, ``INDEXED``, ``BATCH``), or ``{framework: kind}``.
        factories: ``{framework: "module:function"}`` (imported on first use, so listing backends imports neither
            the backend nor a framework) or the callable itself. robomimic:
            ``factory(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options)``; LeRobot:
            ``factory(lerobot_dataset, *, options)``; ``options`` is the typed object of :attr:`options`. The
            protocols are the contracts of ``robo_loaders_plugin.extend``, checked when the backend is registered.
        options: ``{name: Option}``, every option the backend takes (:class:`Option`).
        footprints: ``{framework: "module:function"}`` (or the callable): what the backend will need for one
            dataset, from its metadata, without reading data or building anything, as its factory plans it. Called
            with the factory's positional arguments and ``options=``, ``committed=`` (a ``Footprint`` other
            datasets served beside it hold: the machine is measured and reduced by it, ``Available.less``);
            returns a ``Planned``. A mixture plans every component with it and checks their sum once before
            building any. A framework without one: the factory's own check only, when the component is built
            (the mixture's log says the backend "states no footprint"). ``frame_backend`` fills it.
        constraints: Checks across options, called with the resolved options object (raise ``ValueError``).
        lossless: ``LOSSLESS``, ``LOSSY_FRAMES`` or ``NOT_BIT_IDENTICAL_ON_NVDEC``, or ``{framework: value}``.
        gpu: ``GPU_NO``, ``GPU_OPTIONAL`` or ``GPU_REQUIRED`` (refused before reading data on a machine without
            CUDA), or ``{framework: value}``.
        remote_source_option: The option naming a remote URL (``s3://``, ``http(s)://``, ``hf://``) the backend
            reads a LeRobot dataset from: LeRobot then builds its dataset object from a local mirror of that URL's
            tables (``meta/``, ``data/``) while the backend reads the rest remotely. ``None``: local data only.
        remote_storage_option: The option holding the fsspec options (endpoint, credentials) for that URL.
        requires: ``{framework: ((module, install hint), ...)}``: importable modules the backend needs there, checked
            when it is chosen (before any data is read), so the missing ones are one line naming what to install,
            one command for all (e.g. ``("torchdata", 'pip install "robo-loaders-plugin[datapipe]"')``).
        plugin: The plugin that registered it (set by the registry).
    """

    name: str
    description: str
    frameworks: tuple[str, ...]
    kind: str | Mapping[str, str] = SAMPLE
    factories: Mapping[str, Callable[..., Any] | str] = dataclasses.field(
        default_factory=dict, compare=False, repr=False
    )
    options: Mapping[str, Option] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    footprints: Mapping[str, Callable[..., Any] | str] = dataclasses.field(
        default_factory=dict, compare=False, repr=False
    )
    constraints: Callable[[Options], None] | None = dataclasses.field(default=None, compare=False, repr=False)
    lossless: str | Mapping[str, str] = LOSSLESS
    gpu: str | Mapping[str, str] = GPU_NO
    remote_source_option: str | None = None
    remote_storage_option: str | None = None
    requires: Mapping[str, tuple] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    plugin: str = "builtin"

    def __post_init__(self):
        unknown = set(self.frameworks) - set(FRAMEWORKS)
        if unknown:
            raise ValueError(f"backend {self.name!r}: unknown frameworks {sorted(unknown)}; known: {FRAMEWORKS}")
        _per_framework(self.kind, self.frameworks, "kind", KINDS, self.name)
        _per_framework(
            self.lossless, self.frameworks, "lossless", (LOSSLESS, LOSSY_FRAMES, NOT_BIT_IDENTICAL_ON_NVDEC), self.name
        )
        _per_framework(self.gpu, self.frameworks, "gpu", (GPU_NO, GPU_OPTIONAL, GPU_REQUIRED), self.name)
        for key, opt in self.options.items():
            if not isinstance(opt, Option):
                raise ValueError(
                    f"backend {self.name!r}: option {key!r} must be declared as an Option, got {type(opt).__name__}"
                )
            # an option is an attribute of the options object the factory receives: a name that is no identifier
            # failed at every use with dataclasses' error, and one of the object's own names ('shared', 'given',
            # 'backend') replaced it, failing far away (a reviewer's reproduction)
            if not isinstance(key, str) or not key.isidentifier() or keyword.iskeyword(key) or key in _RESERVED:
                raise ValueError(
                    f"backend {self.name!r}: option name {key!r} cannot be used: an option's name must be a Python "
                    f"identifier, not a keyword, and none of {sorted(_RESERVED)}; rename it"
                )
            for value, kind in opt.kinds.items():
                if kind not in KINDS:
                    raise ValueError(f"backend {self.name!r}: option {key!r} maps {value!r} to unknown kind {kind!r}")

    def kind_for(self, framework: str) -> str:
        """The kind declared for a framework (an option may still change it: :meth:`BackendChoice.kind`).

        Args:
            framework: ``robomimic`` or ``lerobot``.

        Returns:
            ``SAMPLE``, ``INDEXED`` or ``BATCH``.
        """
        return _per_framework(self.kind, self.frameworks, "kind", None, self.name)[framework]

    def lossless_for(self, framework: str) -> str:
        """What the backend promises about its samples under a framework.

        Args:
            framework: ``robomimic`` or ``lerobot``.

        Returns:
            ``LOSSLESS``, ``LOSSY_FRAMES`` or ``NOT_BIT_IDENTICAL_ON_NVDEC``.
        """
        return _per_framework(self.lossless, self.frameworks, "lossless", None, self.name)[framework]

    def gpu_for(self, framework: str) -> str:
        """Whether the backend uses a GPU under a framework.

        Args:
            framework: ``robomimic`` or ``lerobot``.

        Returns:
            ``GPU_NO``, ``GPU_OPTIONAL`` or ``GPU_REQUIRED``.
        """
        return _per_framework(self.gpu, self.frameworks, "gpu", None, self.name)[framework]

    def as_dict(self) -> dict:
        """JSON-ready description (``robo-loaders list --json``): per framework, the kind, the lossless promise,
        the GPU use and every option with its type, default, allowed values and help."""
        return {
            "name": self.name,
            "description": self.description,
            "frameworks": list(self.frameworks),
            "kind": {fw: self.kind_for(fw) for fw in self.frameworks},
            "lossless": {fw: self.lossless_for(fw) for fw in self.frameworks},
            "gpu": {fw: self.gpu_for(fw) for fw in self.frameworks},
            "plugin": self.plugin,
            "options": {name: opt.as_dict() for name, opt in self.options.items()},
        }

    def choose(self, framework: str, given: Mapping[str, Any] | None, where: str) -> BackendChoice:
        """Resolve a user's options for this backend under ``framework``, before any data is read.

        Args:
            framework: ``robomimic`` or ``lerobot``.
            given: The options the user gave (``None``: none).
            where: How the user gave them (``train.data_backend_kwargs``, ``--dataset.backend_kwargs``).

        Returns:
            The resolved :class:`BackendChoice`.

        Raises:
            RoboLoadersError: the backend does not serve ``framework``.
            BackendOptionError: an option is unknown, of another framework, or has a bad value.
        """
        if framework not in self.frameworks:
            raise RoboLoadersError(
                f"backend {self.name!r} does not support {framework}; it supports: {', '.join(self.frameworks)}"
            )
        self.check_requirements(framework)
        options = resolve_options(self.name, framework, self.options, given, where, self.constraints)
        return BackendChoice(self, framework, options)

    def check_requirements(self, framework: str) -> None:
        """Raise naming what to install when modules the backend needs under a framework are missing (found
        without importing them), all of them in one line.

        Args:
            framework: ``robomimic`` or ``lerobot``.

        Raises:
            RoboLoadersError: ``backend 'X' needs A and B, which are not installed: pip install "P[a,b]"``: every
                missing module at once, with one command installing them all (``core.installs``).
        """
        from robo_loaders_plugin.core.installs import missing, missing_line

        gone = missing(self.requires.get(framework, ()))
        if gone:
            raise RoboLoadersError(missing_line(f"backend {self.name!r}", gone))

    def factory_for(self, framework: str) -> Callable[..., Any]:
        """The factory building this backend's dataset under a framework (imported on first use).

        Args:
            framework: ``robomimic`` or ``lerobot``.

        Returns:
            The factory function.

        Raises:
            RoboLoadersError: the backend does not serve ``framework``, or its factory does not follow the
                framework's protocol (the contracts, ``robo_loaders_plugin.extend``).
        """
        if framework not in self.factories:
            raise RoboLoadersError(
                f"backend {self.name!r} does not support {framework}; it supports: {', '.join(self.frameworks)}"
            )
        from robo_loaders_plugin.core.factory_check import factory_problem, import_factory, refusal

        declared = self.factories[framework]
        ref = declared if isinstance(declared, str) else None
        # an import error of the backend's own code keeps its traceback
        factory = import_factory(declared) if isinstance(declared, str) else declared
        # registration checked third-party factories already; the built-ins' are checked here, once imported
        problem = factory_problem(factory, framework, name=ref)
        if problem is not None:
            raise RoboLoadersError(refusal(self.plugin, self.name, framework, problem))
        return factory


@dataclasses.dataclass(frozen=True)
class BackendChoice:
    """A backend chosen for one framework, with its options checked: resolved once per run and carried with the
    dataset it builds.

    Attributes:
        spec: The backend.
        framework: ``robomimic`` or ``lerobot``.
        options: The typed options object the factory receives.
    """

    spec: BackendSpec
    framework: str
    options: Options

    @property
    def name(self) -> str:
        """The backend's name."""
        return self.spec.name

    @property
    def kind(self) -> str:
        """Who drives this choice's passes: the framework's declared kind, unless an option's value decides it."""
        for key, opt in self.spec.options.items():
            if opt.kinds and opt.applies_to(self.framework):
                kind = opt.kinds.get(getattr(self.options, key))
                if kind is not None:
                    return kind
        return self.spec.kind_for(self.framework)

    @property
    def gpu(self) -> str:
        """Whether this choice uses a GPU (``GPU_NO``, ``GPU_OPTIONAL``, ``GPU_REQUIRED``)."""
        return self.spec.gpu_for(self.framework)

    def for_items(self, draw_random: bool) -> BackendChoice:
        """This choice for a dataset whose items do (or do not) draw random numbers: with ``draw_random``, every
        option the user left to its default takes its ``random_items_defaults`` value for the framework
        (:attr:`Option.random_items_defaults <robo_loaders_plugin.core.options.Option.random_items_defaults>`).

        Why here and not when the options are read: whether items draw random numbers is known from the
        framework's dataset object (LeRobot's image transforms), built after the command line is read.

        Args:
            draw_random: Whether the dataset's items draw random numbers.

        Returns:
            The choice to build with (this one when nothing changes).
        """
        if not draw_random:
            return self
        values = {
            name: opt.random_items_defaults[self.framework]
            for name, opt in self.spec.options.items()
            if self.framework in opt.random_items_defaults and opt.applies_to(self.framework)
        }
        options = self.options.with_defaults(values)
        return self if options is self.options else dataclasses.replace(self, options=options)

    def check_device(self) -> None:
        """A backend that requires a GPU fails here, before any data is read, on a machine without CUDA.

        Raises:
            RoboLoadersError: naming the backend, when it requires CUDA and torch sees no GPU.
        """
        if self.gpu == GPU_REQUIRED:
            import torch

            if not torch.cuda.is_available():
                raise RoboLoadersError(
                    f"backend {self.name!r} needs a CUDA GPU and torch sees none "
                    "(torch.cuda.is_available() is False); choose another backend"
                )

    def plan(self, *args, committed=None, **kwargs):
        """What the backend will need for one dataset, from metadata (``BackendSpec.footprints``), with
        ``committed`` already held by other datasets; nothing is read or built.

        Args:
            *args: The factory's positional arguments for the dataset.
            committed: A ``Footprint`` held beside it (``None``: nothing).
            **kwargs: The factory's keyword arguments.

        Returns:
            A ``Planned``, or ``None`` when the backend declares no footprint for this framework.
        """
        fn = self.spec.footprints.get(self.framework)
        if fn is None:
            return None
        if isinstance(fn, str):
            import importlib

            module, _, attr = fn.partition(":")
            fn = getattr(importlib.import_module(module), attr)
        from robo_loaders_plugin.core.footprint import Footprint

        return fn(*args, options=self.options, committed=committed or Footprint(), **kwargs)

    def build(self, *args, **kwargs):
        """Call the backend's factory for this framework with the resolved options (``options=``)."""
        return self.spec.factory_for(self.framework)(*args, options=self.options, **kwargs)
