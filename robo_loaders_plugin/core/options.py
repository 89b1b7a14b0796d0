"""Backend options, declared once: :class:`Option` says an option's type, default, help, allowed values and
frameworks; :func:`resolve_options` checks what a user gave against the declarations and returns a typed, frozen
options object.

Why one declaration: the option's type, default, range and help used to live in three places (the spec table, the
factory's signature, checks inside the factory), and they drifted: a bad *value* then failed after data had been
read, as a traceback. Now everything a user can get wrong about an option's value is checked here, before any data
is read (on LeRobot, at argument parsing), and ``robo-loaders list --json``, the README table and the option
tables of docs/backends.md are generated from the same declarations.

What cannot be checked from the value alone (an option naming a key the dataset does not have, a rate the source
cannot be converted to) is checked by the factory from the source's metadata, still before reading data.
"""

from __future__ import annotations

import builtins
import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, cast

from robo_loaders_plugin.core.errors import BackendOptionError

# how robomimic's and LeRobot's users set a backend's options, as they type them (a message names the setting)
ROBOMIMIC_OPTIONS = "train.data_backend_kwargs"
LEROBOT_OPTIONS = "--dataset.backend_kwargs"


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of a backend.

    Attributes:
        type: The accepted Python type(s) of a given value (``bool`` is never taken for ``int``; an ``int`` is
            accepted where ``float`` is declared). ``None`` is accepted only when the default is ``None``.
        default: The value when the option is not given (``None``: "the backend decides", documented in ``help``).
        help: One sentence for users: what the option changes and what its default does.
        choices: The allowed values, when they are a fixed set.
        min: Smallest allowed value (numbers), inclusive.
        max: Largest allowed value (numbers), inclusive.
        frameworks: The frameworks the option applies to (``None``: every framework the backend serves). Given
            under another framework it is refused, naming the frameworks it applies to.
        framework_defaults: Per-framework defaults that replace ``default``.
        random_items_defaults: Per-framework defaults that replace both when the dataset's items draw random
            numbers (LeRobot's image transforms: :meth:`BackendChoice.for_items
            <robo_loaders_plugin.core.spec.BackendChoice.for_items>`). Why: a value that serves faster may move
            those draws out of the framework's workers (another RNG stream, other augmentations); the default
            takes it only where nothing is drawn, so the samples stay the framework's.
        framework_choices: Per-framework allowed values that replace ``choices``.
        check: Extra check of a given (non-``None``) value: raises ``ValueError`` with the reason, or returns
            nothing. Must be cheap and import nothing heavy (it runs at argument parsing).
        kinds: Value -> the backend kind (``core.spec``) this value makes the backend, for an option that decides
            who drives a pass (e.g. building batches in threads or with the framework's DataLoader).
        per_host: The value may differ between the processes of a multi-process run (a local path: each host has
            its own cache directory); every other option must be the same on every rank, or the run is refused.
        convert: What a given, valid value is turned into when the options are resolved (a size into its bytes:
            :func:`to_bytes`), so that a factory reads the converted value and never parses it again; ``None``: kept
            as given.
    """

    # builtins.type: inside the class body, ``type`` is this field
    type: builtins.type | tuple[builtins.type, ...]
    default: Any = None
    help: str = ""
    choices: tuple | None = None
    min: float | None = None
    max: float | None = None
    frameworks: tuple[str, ...] | None = None
    framework_defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    random_items_defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    framework_choices: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
    check: Callable[[Any], None] | None = dataclasses.field(default=None, compare=False)
    kinds: Mapping[Any, str] = dataclasses.field(default_factory=dict)
    per_host: bool = False
    convert: Callable[[Any], Any] | None = dataclasses.field(default=None, compare=False)

    @property
    def types(self) -> tuple[builtins.type, ...]:
        """The accepted types, as a tuple."""
        return self.type if isinstance(self.type, tuple) else (self.type,)

    def field_type(self):
        """The type the resolved options object holds (what a factory reads): the converted type (bytes: ``int``)
        or the accepted types, with ``None`` when the default is ``None``."""
        import functools
        import operator

        held = (int,) if self.convert is to_bytes else self.types
        t = functools.reduce(operator.or_, held)
        return t | None if self.default is None or None in self.framework_defaults.values() else t

    def _converted(self, value: Any) -> Any:
        """A given, valid value as the options object holds it: :attr:`convert` applied (``None`` kept as is), and a
        whole number given to an option that takes floats but not ints held as a float (``1`` and ``1.0`` were two
        keys, so two cache entries of one content: a reviewer's reproduction)."""
        if value is None:
            return value
        if self.convert is not None:
            return self.convert(value)
        if type(value) is int and float in self.types and int not in self.types:
            return float(value)
        return value

    def applies_to(self, framework: str) -> bool:
        """Whether the option may be given under a framework.

        Args:
            framework: ``robomimic`` or ``lerobot``.
        """
        return self.frameworks is None or framework in self.frameworks

    def default_for(self, framework: str) -> Any:
        """The default under a framework.

        Args:
            framework: ``robomimic`` or ``lerobot``.
        """
        return self.framework_defaults.get(framework, self.default)

    def choices_for(self, framework: str) -> tuple | None:
        """The allowed values under a framework (``None``: not a fixed set).

        Args:
            framework: ``robomimic`` or ``lerobot``.
        """
        return self.framework_choices.get(framework, self.choices)

    def type_name(self) -> str:
        """The accepted types in words, for errors and docs (``int``, ``int or string``, ...)."""
        return " or ".join(_TYPE_WORDS.get(t, t.__name__) for t in self.types)

    def describe_values(self, framework: str | None = None) -> str:
        """The allowed values in words (choices or range), for errors and docs; empty when any value is allowed.

        Args:
            framework: Whose choices (``None``: the declaration's own).
        """
        choices = self.choices_for(framework) if framework else self.choices
        if choices is not None:
            return "one of " + ", ".join(repr(c) for c in choices)
        if self.min is not None and self.max is not None:
            return f"{_num(self.min)}..{_num(self.max)}"
        if self.min is not None:
            return f">= {_num(self.min)}"
        if self.max is not None:
            return f"<= {_num(self.max)}"
        return ""

    def validate(self, value: Any, framework: str) -> str | None:
        """Why ``value`` is not acceptable under ``framework`` (``None``: it is).

        Args:
            value: What the user gave.
            framework: ``robomimic`` or ``lerobot``.

        Returns:
            ``None`` when the value is acceptable, else one sentence (without the option's name) saying what is
            expected and what was given.
        """
        if value is None:
            if self.default_for(framework) is None:
                return None
            return f"must be {self.type_name()}, got null"
        ok_type = any(_is_instance(value, t) for t in self.types)
        if not ok_type:
            return f"must be {self.type_name()}, got {type(value).__name__} {_short(value)}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {value!r}"
        choices = self.choices_for(framework)
        if choices is not None and value not in choices:
            elsewhere = [
                fw for fw in ("robomimic", "lerobot") if fw != framework and value in (self.choices_for(fw) or ())
            ]
            if elsewhere:
                return (
                    f"must be {self.describe_values(framework)} under {framework}, got {_short(value)}, which "
                    f"applies to {' and '.join(elsewhere)} only"
                )
            return f"must be {self.describe_values(framework)}, got {_short(value)}"
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and ((self.min is not None and value < self.min) or (self.max is not None and value > self.max))
        ):
            return f"must be {self.describe_values(framework)}, got {_short(value)}"
        if self.check is not None:
            try:
                self.check(value)
            except ValueError as exc:
                return str(exc)
        return None

    def as_dict(self, framework: str | None = None) -> dict:
        """JSON-ready description (``robo-loaders list --json``, generated docs).

        Args:
            framework: Describe the values allowed under this framework (``None``: the declaration's own).
        """
        out = {
            "type": self.type_name(),
            "types": [_TYPE_NAMES.get(t, t.__name__) for t in self.types],
            "default": self.default,
            "help": self.help,
            "per_host": self.per_host,
        }
        if self.convert is to_bytes:
            out["converted_to"] = "bytes"
        for key in ("min", "max"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        choices = self.choices_for(framework) if framework else self.choices
        if choices is not None:
            out["choices"] = list(choices)
        if self.framework_defaults:
            out["framework_defaults"] = dict(self.framework_defaults)
        if self.random_items_defaults:
            out["random_items_defaults"] = dict(self.random_items_defaults)
        values = self.describe_values(framework)
        if values:
            out["values"] = values
        if self.framework_choices:
            out["framework_values"] = {fw: self.describe_values(fw) for fw in self.framework_choices}
        if self.frameworks is not None:
            out["frameworks"] = list(self.frameworks)
        return out


_TYPE_WORDS = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true/false",
    dict: "a JSON object",
    list: "a list",
}
_TYPE_NAMES = {int: "integer", float: "number", str: "string", bool: "boolean", dict: "object", list: "array"}  # JSON


def _is_instance(value, t: type) -> bool:
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if t is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, t)


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Options:
    """Base of the typed, frozen options object a factory receives (one generated class per backend and
    framework, :func:`options_class`): every declared option is an attribute holding the given value (converted:
    :attr:`Option.convert`) or its default, and :attr:`given_names` records which ones the user gave.

    Why record what was given instead of comparing with the default: a backend may adapt an option the user left
    to it (a shuffle buffer made smaller to fit its cache) but must keep one the user set, even to the default's
    value.
    """

    backend: str = ""
    framework: str = ""
    given_names: frozenset = frozenset()  # set by resolve_options

    def as_dict(self) -> dict:
        """``{name: value}`` of every option (given or default)."""
        # every instance is of an options_class dataclass (this base declares no fields of its own)
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def given(self) -> dict:
        """Only the options the user gave (their values as resolved), whatever their values."""
        return {k: v for k, v in self.as_dict().items() if k in self.given_names}

    def with_defaults(self, values: Mapping[str, Any]) -> Options:
        """A copy in which options the user did not give take other defaults (given ones are kept).

        Args:
            values: ``{name: value}``, values as resolved (already converted).

        Returns:
            The copy (this object when nothing changes).
        """
        changes = {k: v for k, v in values.items() if k not in self.given_names and getattr(self, k) != v}
        if not changes:
            return self
        # every instance is of an options_class dataclass
        copy = dataclasses.replace(self, **changes)  # type: ignore[type-var]
        object.__setattr__(copy, "given_names", self.given_names)
        return copy

    def shared(self) -> dict:
        """The options every rank of a multi-process run must agree on (those not declared ``per_host``)."""
        return {k: v for k, v in self.as_dict().items() if k not in self._per_host}

    _per_host: ClassVar[frozenset] = frozenset()

    def __reduce__(self):
        """Pickled by value (a spawned DataLoader worker reopening a store with its options): the generated class
        is not importable by name, so the copy is rebuilt as an equal object of an equivalent class."""
        return _rebuild, (self.backend, self.framework, self.as_dict(), self.given_names, self._per_host)


def _rebuild(backend: str, framework: str, values: dict, given_names: frozenset, per_host: frozenset) -> Options:
    """An options object equal to a pickled one (:meth:`Options.__reduce__`), of a class made once per process
    for that backend, framework and set of names."""
    key = (backend, framework, tuple(values), per_host)
    cls = _REBUILT.get(key)
    if cls is None:
        cls = cast(
            "type[Options]",
            dataclasses.make_dataclass(
                f"{_camel(backend)}{_camel(framework)}Options",
                [(n, Any, dataclasses.field(default=None)) for n in values],
                bases=(Options,),
                frozen=True,
            ),
        )
        cls.backend, cls.framework, cls._per_host = backend, framework, per_host
        _REBUILT[key] = cls
    obj = cls(**values)
    object.__setattr__(obj, "given_names", given_names)
    return obj


_REBUILT: dict[tuple, type] = {}


_CLASSES: dict[tuple, tuple] = {}


def options_class(backend: str, framework: str, declared: Mapping[str, Option]) -> type[Options]:
    """The frozen dataclass of a backend's options under a framework (options of other frameworks left out).

    Args:
        backend: The backend's name (names the class).
        framework: ``robomimic`` or ``lerobot``.
        declared: The backend's declarations.

    Returns:
        A subclass of :class:`Options` (one per backend, framework and declaration table).
    """
    key = (backend, framework, id(declared))
    cls = _CLASSES.get(key, (None, None))[0]
    if cls is None:
        fields = [
            (name, opt.field_type(), dataclasses.field(default=opt.default_for(framework)))
            for name, opt in declared.items()
            if opt.applies_to(framework)
        ]
        cls = cast(
            type[Options],
            dataclasses.make_dataclass(
                f"{_camel(backend)}{_camel(framework)}Options", fields, bases=(Options,), frozen=True
            ),
        )
        cls.backend, cls.framework = backend, framework
        cls._per_host = frozenset(name for name, opt in declared.items() if opt.per_host)
        _CLASSES[key] = (cls, declared)  # the declarations are kept so that their id is not reused
    return cls


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("-", "_").split("_"))


def resolve_options(
    backend: str,
    framework: str,
    declared: Mapping[str, Option],
    given: Mapping[str, Any] | None,
    where: str,
    constraints: Callable[[Options], None] | None = None,
) -> Options:
    """Check ``given`` against ``declared`` and return the typed options object.

    Args:
        backend: The backend's name (for messages).
        framework: ``robomimic`` or ``lerobot``.
        declared: The backend's option declarations.
        given: What the user gave (``None``: nothing).
        where: How the user gave it, as they would type it (``train.data_backend_kwargs``,
            ``--dataset.backend_kwargs``): every message starts with it.
        constraints: Checks across options (e.g. two options that exclude each other), called with the resolved
            object; raises ``ValueError`` with the reason.

    Returns:
        An instance of :func:`options_class` ``(backend, framework, declared)``.

    Raises:
        BackendOptionError: one line naming ``where``, the option and what is expected: an unknown name (with the
            valid ones), an option of another framework, a value of the wrong type or out of its range/choices.
    """
    given = dict(given or {})
    known = {n for n, o in declared.items() if o.applies_to(framework)}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        hint = _did_you_mean(unknown[0], sorted(known))
        raise BackendOptionError(
            f"{where}: unknown option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))} for backend {backend!r}{hint}; valid options: "
            f"{', '.join(sorted(known)) or '(none)'}"
        )
    for name in sorted(set(given) - known):
        fws = " and ".join(declared[name].frameworks or ())
        raise BackendOptionError(f"{where}.{name}: applies to {fws} only, not {framework} (backend {backend!r})")
    for name in sorted(given):
        problem = declared[name].validate(given[name], framework)
        if problem:
            sep = "" if problem.startswith("[") else " "  # an entry of a dict-valued option: delta_timestamps['a']
            raise BackendOptionError(f"{where}.{name}{sep}{problem} (backend {backend!r})")
    resolved = options_class(backend, framework, declared)(**{k: declared[k]._converted(v) for k, v in given.items()})
    object.__setattr__(resolved, "given_names", frozenset(given))
    if constraints is not None:
        try:
            constraints(resolved)
        except ValueError as exc:
            raise BackendOptionError(f"{where}: {exc} (backend {backend!r})") from None
    return resolved


def _did_you_mean(name: str, candidates: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# -- checks shared by several declarations (cheap: run at argument parsing) -------------------------------------
def check_size(value) -> None:
    """A byte size: a non-negative integer or a string like ``2GB``/``512MiB``.

    Args:
        value: The option's value.

    Raises:
        ValueError: not a size.
    """
    from robo_loaders_plugin.core.units import parse_bytes

    try:
        parse_bytes(value, "size")
    except ValueError as exc:  # read after the option's name: "<prefix>.max_memory must be a size like ..."
        why = str(exc).split(": ", 1)[1]
        raise ValueError(f"must be {why[len('expected ') :]}" if why.startswith("expected ") else why) from None


def to_bytes(value) -> int:
    """A size option's value as its bytes (:attr:`Option.convert` of every size; :func:`check_size` accepted it).

    Args:
        value: A non-negative number of bytes or a string like ``2GB``/``512MiB``.

    Returns:
        The bytes, rounded down to an integer.
    """
    from robo_loaders_plugin.core.units import parse_bytes

    return parse_bytes(value, "a size")


def check_positive_rate(value) -> None:
    """A rate in frames per second: positive and at most 10 kHz (beyond that no recording exists and the windows
    it implies would not fit in memory).

    Args:
        value: The option's value.

    Raises:
        ValueError: out of range.
    """
    if value <= 0 or value > MAX_FPS:
        raise ValueError(f"must be a rate in frames per second in (0, {MAX_FPS:g}], got {value!r}")


MAX_FPS = 10_000.0
