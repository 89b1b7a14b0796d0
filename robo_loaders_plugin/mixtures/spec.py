"""What a weighted mixture of datasets is, independent of any framework, and how a user's mixture is read.

Why a layer of its own: LeRobot and robomimic both train on one dataset; a mixture (several datasets, each drawn with
a weight) is the same idea in both, so the spec, the sampling order and the mixed batches are written once here and
the framework adapters only build each component's dataset and say how their batches are renamed and joined.

Everything checkable from the text alone is refused here, before any data is read, with one line naming the setting
(``where``), the component (its index and name) and what to do. Checks that need the datasets' metadata (a rename
onto a key the component already has, shapes that disagree, rates that differ) are the adapters', raised as
:class:`MixtureError`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from typing import Any

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.options import MAX_FPS
from robo_loaders_plugin.mixtures.missing import DROP, MISSING_CAMERAS

GIVEN = "given"  # each component's own weight (Open X-Embodiment's convention)
SIZE = "size"  # weights proportional to size: plain concatenation, every window once per pass
WEIGHT_MODES = (GIVEN, SIZE)

# the keys a component may have, per framework
COMPONENT_KEYS = {
    "lerobot": ("repo_id", "root", "weight", "episodes", "rename", "drop"),
    # robomimic reads only the obs keys its config names: a component has nothing to drop
    "robomimic": ("path", "weight", "filter_key", "rename"),
}
MIXTURE_KEYS = ("components", "weights", "target_fps", "pad", "missing_cameras")


class MixtureError(RoboLoadersError):
    """A mixture that cannot be served: bad text, or components whose metadata disagree (keys, shapes, rates)."""


@dataclasses.dataclass(frozen=True)
class Component:
    """One dataset of a mixture.

    Attributes:
        source: LeRobot's ``repo_id``, or the robomimic HDF5 path (absolute, ``~`` expanded).
        root: LeRobot's dataset root (a local path, made absolute, or a URL); ``None`` for robomimic, or LeRobot's
            default location.
        weight: The sampling weight (``None`` when the mixture's weights are ``"size"``).
        episodes: LeRobot: the episodes used (``None``: all).
        filter_key: robomimic: the ``mask/`` filter key selecting its demos (``None``: robomimic's own
            ``train.hdf5_filter_key``).
        rename: ``{component key: mixture key}``, applied to every item of this component.
        drop: LeRobot: the component's own keys it does not serve (left out before the mixture's keys are
            decided, so another key may be renamed onto one of their names).
    """

    source: str
    root: str | None = None
    weight: float | None = None
    episodes: tuple[int, ...] | None = None
    filter_key: str | None = None
    rename: Mapping[str, str] = dataclasses.field(default_factory=dict)
    drop: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """How messages and logs name the component (its repo_id, or its HDF5 file's name)."""
        return os.path.basename(self.source) if os.path.isabs(self.source) else self.source


@dataclasses.dataclass(frozen=True)
class MixtureSpec:
    """A mixture: its components, how they are weighted, and the rate every component is served at.

    Attributes:
        components: The datasets, in order (a served item's ``dataset_index`` is its component's position here).
        weights: ``"given"`` (each component's ``weight``) or ``"size"`` (plain concatenation).
        target_fps: The rate every component is served at (``None``: their own rate, which must then agree).
        pad: ``{mixture key: size}``: vectors padded to this size (``mixtures.padding``); vectors whose sizes differ
            between components and are not named here are padded to the largest.
    """

    components: tuple[Component, ...]
    weights: str = GIVEN
    target_fps: float | None = None
    pad: Mapping[str, int] = dataclasses.field(default_factory=dict)
    missing_cameras: str = DROP

    def weight_vector(self) -> list[float] | None:
        """The components' weights, in order (``None``: weighted by size)."""
        if self.weights == SIZE:
            return None
        return [float(c.weight) for c in self.components]  # type: ignore[arg-type]  # given: checked at parse

    def describe(self) -> str:
        """One line naming the components and their weights, for the training log."""
        from robo_loaders_plugin.core.units import some_of
        from robo_loaders_plugin.mixtures.sampling import named_shares, weight_shares

        names = [c.name for c in self.components]
        if self.weights == SIZE:
            return some_of(names) + " (weighted by size)"
        return named_shares(names, weight_shares(self.weight_vector() or []), "{} ({:.1%})")


# LeRobot's bookkeeping keys (its DEFAULT_FEATURES, and the task string an item carries): every item of every component
# has them, and a batch's task strings are looked up through the component's own task_index; renamed or dropped, a
# mixture's joined batches served another column's tasks, or task 0 (a reviewer's reproduction)
LEROBOT_BOOKKEEPING = frozenset({"timestamp", "frame_index", "episode_index", "index", "task_index", "task"})


def _is_url(text: str) -> bool:
    return "://" in text


def _load(value: Any, where: str) -> tuple[Any, str | None]:
    """The mixture's JSON value, and the directory relative paths are resolved against (a file's own)."""
    if isinstance(value, (dict, list, tuple)):
        return value, None
    if not isinstance(value, str):
        raise MixtureError(
            f"{where}: a mixture is a JSON file, inline JSON, an object or a list, got {type(value).__name__}"
        )
    text = value.strip()
    if text[:1] in ("{", "["):
        try:
            return json.loads(text), None
        except json.JSONDecodeError as exc:
            raise MixtureError(f"{where}: the inline mixture is not valid JSON ({exc}); check the quoting") from None
    path = os.path.abspath(os.path.expanduser(text))
    if not os.path.isfile(path):
        raise MixtureError(
            f"{where}: {text!r} is neither a JSON file that exists nor inline JSON ('{{...}}' / '[...]')"
        )
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f), os.path.dirname(path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MixtureError(f"{where}: {path} is not a readable JSON file ({exc})") from None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def parse_mixture(value: Any, framework: str, where: str) -> MixtureSpec:
    """Read a user's mixture, refusing anything wrong before any data is read.

    Args:
        value: A path to a JSON file, inline JSON text, a dict ``{"components": [...], "weights": "given" |
            "size", "target_fps": ..., "pad": {key: size}}`` or a bare list of components. A component is an
            object with the keys of :data:`COMPONENT_KEYS` for ``framework``. Relative paths are resolved
            against the JSON file's directory (or the working directory for inline JSON and objects).
        framework: ``"lerobot"`` or ``"robomimic"``.
        where: The setting the mixture came from, named in every message (``--dataset.mixture``,
            ``train.data_mixture``).

    Returns:
        The :class:`MixtureSpec`.

    Raises:
        MixtureError: one line naming ``where``, the component (index and name) and what to do: unreadable JSON,
            unknown keys, a missing local root or path, a robomimic path that is a directory, a duplicated component,
            a weight that is missing (with ``"given"`` weights), given with ``"size"`` weights, zero, negative, not
            finite or not a number, episodes that are not distinct non-negative integers, a rename onto one of its
            own targets twice, a bad ``target_fps``, a ``pad`` that is not ``{key: positive integer}``, a ``drop``
            that is not a list of distinct keys or names a key the component also renames.
        ValueError: ``framework`` is not one of :data:`COMPONENT_KEYS`.
    """
    if framework not in COMPONENT_KEYS:
        raise ValueError(f"framework must be one of {tuple(COMPONENT_KEYS)}, got {framework!r}")
    data, base = _load(value, where)
    if isinstance(data, (list, tuple)):
        data = {"components": list(data)}
    if not isinstance(data, dict):
        raise MixtureError(f"{where}: a mixture is an object or a list of components, got {type(data).__name__}")
    unknown = sorted(set(data) - set(MIXTURE_KEYS))
    if unknown:
        raise MixtureError(f"{where}: unknown key(s) {unknown}; a mixture has {list(MIXTURE_KEYS)}")
    weights = data.get("weights", GIVEN)
    if weights not in WEIGHT_MODES:
        raise MixtureError(f"{where}: weights must be 'given' (each component's weight) or 'size', got {weights!r}")
    target = data.get("target_fps")
    if target is not None:
        t = _number(target)
        if t is None or not math.isfinite(t) or t <= 0 or t > MAX_FPS:
            # the range the backend's own option takes: a value out of it was refused naming the backend's
            # options, which the user had not set (a reviewer's reproduction)
            raise MixtureError(
                f"{where}: target_fps must be a number of frames per second in (0, {MAX_FPS:g}], got {target!r}"
            )
        target = t
    pad = _pad(data.get("pad"), where)
    missing = data.get("missing_cameras", DROP)
    if missing not in MISSING_CAMERAS:
        raise MixtureError(
            f"{where}: missing_cameras must be 'drop' (a camera some components lack is left out) or 'zeros' (served "
            f"as zeros with <camera>_is_missing), got {missing!r}"
        )
    raw = data.get("components")
    if not isinstance(raw, (list, tuple)) or not raw:
        raise MixtureError(f"{where}: 'components' must be a non-empty list of components")
    components: list[Component] = []
    seen: dict[tuple, int] = {}
    for i, entry in enumerate(raw):
        comp = _component(entry, i, framework, weights, base, where)
        # the files themselves, not the paths as written: the same file through a symlink or a hard-linked copy's
        # directory named twice would be drawn twice as often as its weight says
        key = (_identity(comp.root or comp.source), comp.episodes, comp.filter_key)
        if key in seen:
            raise MixtureError(
                f"{where}: {_label(raw[i], i, framework)} duplicates component {seen[key]} (same "
                f"{'root and episodes' if framework == 'lerobot' else 'path and filter_key'}); raise that "
                "component's weight instead of listing it twice"
            )
        seen[key] = i
        components.append(comp)
    return MixtureSpec(tuple(components), weights, target, pad, missing)


def _identity(path: str) -> str:
    """What a component's file or root is, whatever the path it is named by: a local path with its symlinks resolved;
    a URL or a repo id as written."""
    return path if _is_url(path) or not os.path.isabs(path) else os.path.realpath(path)


def _pad(value: Any, where: str) -> dict[str, int]:
    """The mixture's ``"pad"``: ``{key: size}`` with positive integer sizes."""
    if value is None:
        return {}
    if not isinstance(value, dict) or any(
        not isinstance(k, str) or not k or isinstance(v, bool) or not isinstance(v, int) or v <= 0
        for k, v in value.items()
    ):
        raise MixtureError(
            f'{where}: pad must be an object {{mixture key: size}} of positive integers (e.g. {{"action": 32}}), '
            f"got {value!r}"
        )
    return {k: int(v) for k, v in value.items()}


def _label(entry: Any, i: int, framework: str) -> str:
    """How messages name a component: its index and its repo_id or path as the user wrote it."""
    name = entry.get("repo_id" if framework == "lerobot" else "path") if isinstance(entry, dict) else None
    return f"component {i} ({name})" if isinstance(name, str) else f"component {i}"


def _hdf5_inside(directory: str) -> str:
    """`` (it holds a.hdf5, b.hdf5)``: the HDF5 files a directory given as a component holds, for its message."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith((".hdf5", ".h5")))
    except OSError:
        return ""
    if not names:
        return " (it holds no .hdf5 file)"
    return f" (it holds {', '.join(names[:5])}{', ...' if len(names) > 5 else ''})"


def _component(entry: Any, i: int, framework: str, weights: str, base: str | None, where: str) -> Component:
    allowed = COMPONENT_KEYS[framework]
    first = "repo_id" if framework == "lerobot" else "path"
    label = _label(entry, i, framework)

    def fail(problem: str) -> MixtureError:
        return MixtureError(f"{where}: {label}: {problem}")

    if not isinstance(entry, dict):
        raise fail(f"must be an object with keys {list(allowed)}, got {type(entry).__name__}")
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        raise fail(f"unknown key(s) {unknown}; a {framework} component has {list(allowed)}")
    source = entry.get(first)
    if not isinstance(source, str) or not source:
        raise fail(f"'{first}' is missing; give the {'dataset repo_id' if framework == 'lerobot' else 'HDF5 path'}")

    def local(path: str) -> str:
        path = os.path.expanduser(path)
        return os.path.abspath(os.path.join(base, path) if base and not os.path.isabs(path) else path)

    root = None
    if framework == "robomimic":
        source = local(source)
        if os.path.isdir(source):
            inside = _hdf5_inside(source)
            raise fail(f"{source} is a directory, not an HDF5 file{inside}; give the path of the HDF5 file itself")
        if not os.path.isfile(source):
            raise fail(f"{source} does not exist; fix the path")
    elif entry.get("root") is not None:
        root = entry["root"]
        if not isinstance(root, str) or not root:
            raise fail(f"'root' must be a path or URL, got {root!r}")
        if not _is_url(root):
            root = local(root)
            if not os.path.isdir(root):
                raise fail(f"root {root} does not exist; fix the path, or leave root out for LeRobot's default")

    weight = entry.get("weight")
    if weights == "size":
        if weight is not None:
            raise fail("has a weight, but the mixture's weights are 'size'; remove it or set weights to 'given'")
    elif weight is None:
        raise fail("has no weight; give every component a weight, or set the mixture's weights to 'size'")
    else:
        w = _number(weight)
        if w is None or not math.isfinite(w) or w <= 0:
            raise fail(f"weight must be a positive finite number, got {weight!r}")
        weight = w

    episodes = entry.get("episodes")
    if episodes is not None:
        if (
            not isinstance(episodes, (list, tuple))
            or not episodes
            or any(isinstance(e, bool) or not isinstance(e, int) or e < 0 for e in episodes)
        ):
            raise fail(f"episodes must be a non-empty list of episode indices (integers >= 0), got {episodes!r}")
        if len(set(episodes)) != len(episodes):
            raise fail("episodes lists an episode twice; list each once (raise the weight to draw it more)")
        episodes = tuple(int(e) for e in episodes)

    filter_key = entry.get("filter_key")
    if filter_key is not None and (not isinstance(filter_key, str) or not filter_key):
        raise fail(f"filter_key must be the name of a mask/ filter key, got {filter_key!r}")

    rename = entry.get("rename") or {}
    if not isinstance(rename, dict) or any(
        not isinstance(k, str) or not isinstance(v, str) or not k or not v for k, v in rename.items()
    ):
        raise fail(f"rename must be an object {{component key: mixture key}} of strings, got {rename!r}")
    targets: dict[str, str] = {}
    for k, v in rename.items():
        if v in targets:
            raise fail(f"rename maps both {targets[v]!r} and {k!r} onto {v!r}; give each key its own name")
        targets[v] = k
    drop = entry.get("drop") or []
    if not isinstance(drop, (list, tuple)) or any(not isinstance(k, str) or not k for k in drop):
        raise fail(f"drop must be a list of the component's own keys, got {drop!r}")
    if len(set(drop)) != len(drop):
        raise fail("drop lists a key twice; list each once")
    both = sorted(set(drop) & set(rename))
    if both:
        raise fail(f"both renames and drops {both}; drop a key or rename it, not both")
    if framework == "lerobot":
        kept = sorted((set(rename) | set(rename.values()) | set(drop)) & LEROBOT_BOOKKEEPING)
        if kept:
            raise fail(
                f"renames or drops {kept}, which LeRobot keeps in every item to say where it comes from (its "
                f"{', '.join(sorted(LEROBOT_BOOKKEEPING))}); rename or drop other keys"
            )
    return Component(source, root, weight, episodes, filter_key, dict(rename), tuple(drop))
