"""LeRobot weighted mixtures: ``lerobot-train --dataset.mixture=<file or inline JSON>``.

LeRobot 0.6.1 trains on one dataset (its ``make_dataset`` refuses several ``repo_id``\\ s); this module builds a
mixture of them the way LeRobot's factory builds one:

1. At argument parsing (:func:`resolve_mixture_flag`): the flag is read as JSON (``mixtures.spec.parse_mixture``)
   and checked with the other flags (a backend that cannot convert rates given ``target_fps``, options naming one
   dataset's data, ``--dataset.repo_id`` given beside it); it is saved resolved, as inline JSON, in
   ``train_config.json``, so ``--resume=true`` trains on the same mixture even if the file changed.
2. Before any data is read (:func:`check_components`): every component's ``meta/`` (LeRobot's
   ``LeRobotDatasetMetadata``) is compared: renames onto existing keys, features whose dtype or shape disagree, frame
   rates that differ without ``target_fps``. Each refusal is one line naming the component and the key.
3. Each component is LeRobot's own ``LeRobotDataset``, built by LeRobot's own factory with the run's settings
   (delta timestamps from the policy, image transforms, tolerance, video backend, ``eval_split``), then served by
   the chosen backend as a single dataset would be (``native``: LeRobot's object itself).
4. The mixture (:class:`LeRobotMixture`, a ``mixtures.dataset.MixtureDataset``) is a ``batch`` kind dataset for the
   adapter whatever the backend: its passes are drawn by weight (``mixtures.sampling``), never by LeRobot's
   ``EpisodeAwareSampler``, whose order is a plain concatenation. Its ``meta`` (:class:`MixtureMetadata`) is what
   ``make_policy`` and the processors read: the common features, ``stats`` aggregated with LeRobot's own
   ``aggregate_stats`` (ImageNet statistics applied as LeRobot's factory applies them), the frame rate.
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys

import numpy as np

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.iteration import ServedDataset, Serving
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.spec import DEFAULT_BACKEND
from robo_loaders_plugin.mixtures.dataset import MixtureDataset, MixtureHooks

logger = get_logger(__name__)

MIXTURE_FLAG = "--dataset.mixture"
FRAMEWORK = "lerobot"
# LeRobot's bookkeeping columns, present in every dataset: a mixture sharing only these has nothing to train on
DEFAULT_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")
PAD_SUFFIX = "_is_pad"  # LeRobot's padding mask of a key with delta timestamps: renamed and kept with its key
DATASET_INDEX = "dataset_index"
# backend options that name one dataset's data: a mixture has one dataset per component
PER_DATASET_OPTIONS = ("shards",)


# -- the flag ------------------------------------------------------------------------------------------------------
def command_line_mixture(decoded, argv: list[str] | None = None):
    """``--dataset.mixture``'s value as typed on the command line, over what LeRobot's parser made of it.

    Why: LeRobot's parser reads every value as YAML and hands a ``str`` field the text of what it read, so inline
    JSON arrives as a Python repr (``[{'repo_id': ...}]``) and ``1e-3`` as a string; the text typed is JSON.

    Args:
        decoded: The field as LeRobot's parser decoded it (or as ``train_config.json`` holds it).
        argv: The command line (default: ``sys.argv[1:]``).

    Returns:
        The typed text when the command line gives the flag, else ``decoded``.
    """
    from robo_loaders_plugin.lerobot.integration import flag_text

    found = flag_text(sys.argv[1:] if argv is None else argv, MIXTURE_FLAG)
    return decoded if found is None else found[2]


def check_mixture_text(argv: list[str]) -> None:
    """Parse ``--dataset.mixture`` on the command line before LeRobot's parser reads it as YAML (malformed JSON
    would be a YAML traceback there).

    Args:
        argv: The command line without the program.

    Raises:
        RoboLoadersError: the mixture is refused (one line naming the flag, the component and what to do).
    """
    from robo_loaders_plugin.lerobot.integration import flag_text

    found = flag_text(argv, MIXTURE_FLAG)
    if found is not None and found[2].strip():
        parse(found[2])


def parse(value):
    """A mixture under LeRobot (``mixtures.spec.parse_mixture`` with the flag's name).

    Args:
        value: A JSON file's path, inline JSON, a dict or a list of components.

    Returns:
        The ``MixtureSpec``.

    Raises:
        MixtureError: naming ``--dataset.mixture``, the component and what to do.
    """
    from robo_loaders_plugin.mixtures.spec import parse_mixture

    return parse_mixture(value, FRAMEWORK, MIXTURE_FLAG)


def mixture_of(dataset_cfg):
    """The mixture ``cfg.dataset`` names, or ``None`` (a single dataset).

    Args:
        dataset_cfg: ``cfg.dataset`` (LeRobot's own ``DatasetConfig`` has no ``mixture``: ``None``).

    Returns:
        The ``MixtureSpec`` or ``None``.

    Raises:
        MixtureError: the mixture is refused.
    """
    value = getattr(dataset_cfg, "mixture", None)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return parse(value)


def resolve_mixture_flag(dataset_cfg) -> str | None:
    """Check ``--dataset.mixture`` with the other dataset flags, at argument parsing, and give the value to save.

    Args:
        dataset_cfg: The ``BackendDatasetConfig`` being built (``mixture`` holds the text given).

    Returns:
        The mixture as canonical inline JSON (local roots made absolute), or ``None`` without one.

    Raises:
        RoboLoadersError: no dataset at all, or the mixture refused alone or with the other flags.
    """
    spec = mixture_of(dataset_cfg)
    if spec is None:
        if not getattr(dataset_cfg, "repo_id", None):
            raise RoboLoadersError(
                "--dataset.repo_id is required (or --dataset.mixture=<file or inline JSON> to train on several "
                "datasets, docs/mixtures.md)"
            )
        return None
    check_flags(dataset_cfg, spec)
    return canonical_json(spec)


def canonical_json(spec) -> str:
    """The mixture as the inline JSON saved in ``train_config.json`` (components in order, local roots absolute).

    Args:
        spec: A ``MixtureSpec``.

    Returns:
        JSON text ``parse_mixture`` reads back to an equal spec.
    """
    from robo_loaders_plugin.sources.lerobot_v3 import is_remote

    components = []
    for c in spec.components:
        out: dict = {"repo_id": c.source}
        if c.root is not None:
            out["root"] = str(c.root) if is_remote(str(c.root)) else os.path.abspath(str(c.root))
        if c.weight is not None:
            out["weight"] = c.weight
        if c.episodes is not None:
            out["episodes"] = [int(e) for e in c.episodes]
        if c.rename:
            out["rename"] = dict(c.rename)
        components.append(out)
    doc: dict = {"components": components, "weights": spec.weights}
    if spec.target_fps is not None:
        doc["target_fps"] = spec.target_fps
    return json.dumps(doc, sort_keys=False)


def _rate_converting_backends() -> list[str]:
    """Backends whose LeRobot options include ``target_fps`` (they convert rates)."""
    from robo_loaders_plugin.core.registry import rate_converting_backends

    return rate_converting_backends(FRAMEWORK)


def converts_rates(choice) -> bool:
    """Whether a backend choice converts frame rates under LeRobot (declares a ``target_fps`` option).

    Args:
        choice: A LeRobot ``BackendChoice``.
    """
    opt = choice.spec.options.get("target_fps")
    return opt is not None and opt.applies_to(FRAMEWORK)


def target_fps_of(spec, choice) -> float | None:
    """The rate the mixture is served at: the mixture's ``target_fps``, else the backend's own ``target_fps``
    option (``--dataset.backend_kwargs``), else ``None`` (each component's recorded rate).

    Args:
        spec: The ``MixtureSpec``.
        choice: The LeRobot ``BackendChoice``.
    """
    if spec.target_fps is not None:
        return float(spec.target_fps)
    own = getattr(choice.options, "target_fps", None) if converts_rates(choice) else None
    return None if own is None else float(own)


def check_flags(dataset_cfg, spec) -> None:
    """What the other dataset flags cannot be with a mixture, at argument parsing.

    Args:
        dataset_cfg: ``cfg.dataset``.
        spec: Its ``MixtureSpec``.

    Raises:
        RoboLoadersError: ``--dataset.repo_id``/``root``/``episodes`` given too, ``--dataset.streaming``, a remote
            component root, a ``target_fps`` the backend cannot convert to (or two that differ), or a backend option
            naming one dataset's data.
    """
    from robo_loaders_plugin.lerobot.integration import OPTIONS_FLAG, backend_choice

    given = [f"--dataset.{k}" for k in ("repo_id", "root", "episodes") if getattr(dataset_cfg, k, None)]
    if given:
        raise RoboLoadersError(
            f"{MIXTURE_FLAG} names every dataset: leave {', '.join(given)} out (each component gives its own "
            "repo_id, root and episodes)"
        )
    if getattr(dataset_cfg, "streaming", False):
        raise RoboLoadersError(
            f"{MIXTURE_FLAG} cannot be combined with --dataset.streaming=true (a mixture draws its own order over "
            "map-style datasets)"
        )
    from robo_loaders_plugin.sources.lerobot_v3 import is_remote

    for k, c in enumerate(spec.components):
        if c.root is not None and is_remote(str(c.root)):
            raise RoboLoadersError(
                f"{MIXTURE_FLAG}: {component_name(spec, k)}: root {c.root} is remote; mixtures read local roots (or "
                "LeRobot's own download of a Hub repo_id, root left out): copy it locally first"
            )
    choice = backend_choice(dataset_cfg)
    check_rates(spec, choice)
    own = getattr(choice.options, "target_fps", None) if converts_rates(choice) else None
    if spec.target_fps is not None and own is not None and float(own) != float(spec.target_fps):
        raise RoboLoadersError(
            f"{MIXTURE_FLAG}: target_fps={spec.target_fps:g} but {OPTIONS_FLAG}.target_fps={own:g}; give one"
        )
    per_dataset = [o for o in PER_DATASET_OPTIONS if o in choice.options.given()]
    remote = choice.spec.remote_source_option
    if remote and remote in choice.options.given():
        per_dataset.append(remote)
    if per_dataset:
        raise RoboLoadersError(
            f"{OPTIONS_FLAG}.{per_dataset[0]} names one dataset's data; with {MIXTURE_FLAG} leave it out (each "
            "component is read from its own root, converted into the cache directory where the backend converts)"
        )


# -- metadata checks -----------------------------------------------------------------------------------------------
class Layout:
    """What the components' metadata decide, before any data is read.

    Attributes:
        features: The mixture's features (mixture names; each the first component's feature dict), in the first
            component's order: the keys common to every component after its rename map.
        renames: Per component, ``{item key: mixture key}`` (features and their ``_is_pad`` masks).
        keep: The item keys served (features, their ``_is_pad`` masks, ``task``).
        dropped: Per component, its keys (component names) not common to every component.
        fps: The rate the mixture is served at.
    """

    def __init__(self, features: dict, renames: list[dict], keep: frozenset, dropped: list[list[str]], fps: float):
        self.features, self.renames, self.keep, self.dropped, self.fps = features, renames, keep, dropped, fps


def component_name(spec, k: int) -> str:
    """``component K (repo_id)``, as the messages name a component.

    Args:
        spec: The ``MixtureSpec``.
        k: The component's position.
    """
    return f"component {k} ({spec.components[k].source})"


def _signature(ft: dict) -> tuple:
    """What must agree for a key to be served from every component: dtype and shape."""
    shape = ft.get("shape")
    return ft.get("dtype"), tuple(shape) if isinstance(shape, (list, tuple)) else shape


def check_components(spec, metas, target_fps: float | None) -> Layout:
    """Compare the components' metadata before any data is read.

    Args:
        spec: The ``MixtureSpec``.
        metas: Each component's ``LeRobotDatasetMetadata``, in order.
        target_fps: The rate the mixture is served at (``None``: every component's must be the same).

    Returns:
        The :class:`Layout`.

    Raises:
        MixtureError: one line naming the flag, the component and the key: a rename of a key the component does
            not have, a rename onto one of its existing keys, a common key whose dtype or shape differs, frame rates
            that differ without ``target_fps``, no feature common to every component, language columns.
    """
    from robo_loaders_plugin.mixtures.spec import MixtureError

    renamed_features = []
    for k, (c, meta) in enumerate(zip(spec.components, metas)):
        name = component_name(spec, k)
        features = dict(meta.features)
        rename = dict(c.rename or {})
        for old, new in rename.items():
            if old not in features:
                raise MixtureError(
                    f"{MIXTURE_FLAG}: {name} renames {old!r}, which it does not have; its features are "
                    f"{sorted(features)}"
                )
            if new in features and new not in rename:
                raise MixtureError(
                    f"{MIXTURE_FLAG}: {name} renames {old!r} onto {new!r}, which it already has; rename {new!r} "
                    "too or choose another name"
                )
        if getattr(meta, "has_language_columns", False):
            raise MixtureError(
                f"{MIXTURE_FLAG}: {name} has language columns, which mixtures do not serve yet; leave it out"
            )
        renamed_features.append({rename.get(key, key): ft for key, ft in features.items()})

    first = renamed_features[0]
    common = [key for key in first if all(key in f for f in renamed_features[1:])]
    for k, features in enumerate(renamed_features[1:], start=1):
        for key in common:
            mine, theirs = _signature(features[key]), _signature(first[key])
            if mine != theirs:
                raise MixtureError(
                    f"{MIXTURE_FLAG}: {component_name(spec, k)}'s {key!r} is {mine[0]} of shape {mine[1]}, "
                    f"{component_name(spec, 0)}'s is {theirs[0]} of shape {theirs[1]}; rename it in one of them "
                    f'("rename": {{"{key}": "<another name>"}}) to keep them apart'
                )
    if target_fps is None:
        fps0 = float(metas[0].fps)
        for k, meta in enumerate(metas[1:], start=1):
            if float(meta.fps) != fps0:
                raise MixtureError(
                    f"{MIXTURE_FLAG}: {component_name(spec, k)} is recorded at {float(meta.fps):g} fps, "
                    f"{component_name(spec, 0)} at {fps0:g} fps; give target_fps in the mixture (rates are converted "
                    "by the backends that can, e.g. --dataset.backend=gpu_resampler) or mix datasets of one rate"
                )
    if not [key for key in common if key not in DEFAULT_FEATURES]:
        raise MixtureError(
            f"{MIXTURE_FLAG}: no feature is common to every component besides LeRobot's own columns "
            f"({', '.join(DEFAULT_FEATURES)}); rename keys so that the components share them"
        )
    features = {key: first[key] for key in common}
    renames, dropped = [], []
    for c, meta in zip(spec.components, metas):
        rename = dict(c.rename or {})
        full = dict(rename)
        full.update({f"{old}{PAD_SUFFIX}": f"{new}{PAD_SUFFIX}" for old, new in rename.items()})
        renames.append(full)
        dropped.append([key for key in meta.features if rename.get(key, key) not in features])
    keep = frozenset([*features, *(f"{key}{PAD_SUFFIX}" for key in features), "task"])
    return Layout(features, renames, keep, dropped, float(target_fps) if target_fps else float(metas[0].fps))


def component_metas(spec, dataset_cfg) -> list:
    """Each component's ``LeRobotDatasetMetadata`` (``meta/`` only: no data is read).

    Args:
        spec: The ``MixtureSpec``.
        dataset_cfg: ``cfg.dataset`` (its ``revision`` and ``repo_type``).
    """
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata

    return [
        LeRobotDatasetMetadata(
            c.source,
            root=c.root,
            revision=getattr(dataset_cfg, "revision", None),
            repo_type=getattr(dataset_cfg, "repo_type", "dataset"),
        )
        for c in spec.components
    ]


# -- statistics ----------------------------------------------------------------------------------------------------
def renamed_stats(stats, rename: dict) -> dict:
    """A component's ``meta.stats`` under its rename map (a shallow copy: arrays shared).

    Args:
        stats: ``meta.stats`` (``{key: {stat: array}}``) or ``None``.
        rename: ``{component key: mixture key}``.
    """
    return {rename.get(key, key): dict(value) for key, value in (stats or {}).items()}


def mixture_stats(component_stats: list[dict], features: dict, use_imagenet_stats: bool) -> dict:
    """The mixture's ``meta.stats``: LeRobot's own ``aggregate_stats`` over the components' statistics of the kept
    features (count-weighted means, pooled variances, min of mins, max of maxes, count-weighted quantiles), then,
    as LeRobot's factory does for one dataset, ImageNet's mean and std on every camera (depth excluded).

    Why count-weighted and not by the sampling weights: ``make_policy`` normalises with the statistics of the data
    recorded, as LeRobot's ``MultiLeRobotDataset`` did; the per-component statistics stay in
    ``meta.component_stats`` for a policy that normalises per dataset.

    Args:
        component_stats: Each component's statistics under its rename map (:func:`renamed_stats`).
        features: The mixture's features.
        use_imagenet_stats: ``--dataset.use_imagenet_stats``.

    Returns:
        ``{key: {stat: array or tensor}}``.
    """
    import torch
    from lerobot.datasets.compute_stats import aggregate_stats
    from lerobot.utils.constants import IMAGENET_STATS

    kept = [{key: value for key, value in stats.items() if key in features} for stats in component_stats]
    stats = aggregate_stats(kept)
    if use_imagenet_stats:
        for key, ft in features.items():
            if ft.get("dtype") in ("image", "video") and not _is_depth(ft):
                for stats_type, value in IMAGENET_STATS.items():
                    stats.setdefault(key, {})[stats_type] = torch.tensor(value, dtype=torch.float32)
    return stats


def _is_depth(ft: dict) -> bool:
    """A depth camera (LeRobot 0.6.1 marks it in the feature's info), which keeps its own statistics."""
    info = ft.get("info") or {}
    return bool(info.get("video.is_depth_map") or info.get("is_depth_map"))


# -- the facade ----------------------------------------------------------------------------------------------------
class MixtureMetadata:
    """``dataset.meta`` of a mixture: what ``lerobot-train``, ``make_policy`` and the processors read of a
    ``LeRobotDatasetMetadata``.

    Attributes:
        components: Each component's own ``LeRobotDatasetMetadata``.
        names: Each component's ``repo_id``.
        features: The mixture's features (:class:`Layout`).
        stats: The aggregated statistics (:func:`mixture_stats`).
        component_stats: Each component's statistics under its rename map (ImageNet's not applied).
        fps: The rate the mixture is served at.
        episodes: ``{"dataset_from_index", "dataset_to_index", "dataset_index"}``: every episode served, as rows of
            the mixture (component ``k``'s rows follow component ``k - 1``'s), for ``EpisodeAwareSampler``.
        repo_id: ``"mixture(a, b, ...)"``, what a model card names.
    """

    def __init__(self, metas, names, layout: Layout, stats, component_stats, episodes: dict):
        self.components = list(metas)
        self.names = list(names)
        self.features = dict(layout.features)
        self.stats = stats
        self.component_stats = component_stats
        self.fps = layout.fps
        self.episodes = episodes
        self.repo_id = f"mixture({', '.join(self.names)})"
        robots = {getattr(m, "robot_type", None) for m in self.components}
        self.robot_type = robots.pop() if len(robots) == 1 else None

    @property
    def camera_keys(self) -> list[str]:
        """Camera features (image or video)."""
        return [k for k, ft in self.features.items() if ft.get("dtype") in ("image", "video")]

    @property
    def video_keys(self) -> list[str]:
        """Camera features stored as video."""
        return [k for k, ft in self.features.items() if ft.get("dtype") == "video"]

    @property
    def image_keys(self) -> list[str]:
        """Camera features stored as images."""
        return [k for k, ft in self.features.items() if ft.get("dtype") == "image"]

    @property
    def depth_keys(self) -> list[str]:
        """Depth cameras."""
        return [k for k in self.camera_keys if _is_depth(self.features[k])]

    @property
    def has_language_columns(self) -> bool:
        """Never (refused by :func:`check_components`)."""
        return False

    @property
    def total_episodes(self) -> int:
        """Episodes served, over every component."""
        return len(self.episodes["dataset_from_index"])

    @property
    def total_frames(self) -> int:
        """Frames served, over every component."""
        return int(np.sum(self.episodes["dataset_to_index"] - self.episodes["dataset_from_index"]))

    @property
    def tasks(self):
        """Every component's task strings, once each, in order (a model card lists them; items keep their own)."""
        import pandas as pd

        seen: dict[str, int] = {}
        for meta in self.components:
            for task in meta.tasks.index:
                seen.setdefault(str(task), len(seen))
        return pd.DataFrame({"task_index": list(seen.values())}, index=list(seen))

    @property
    def info(self) -> dict:
        """What ``meta/info.json`` would say of the mixture."""
        return {
            "fps": self.fps,
            "features": self.features,
            "total_episodes": self.total_episodes,
            "total_frames": self.total_frames,
            "robot_type": self.robot_type,
        }

    def __repr__(self):
        return f"MixtureMetadata({self.repo_id}, fps={self.fps:g}, features={list(self.features)})"


def episode_rows(native) -> tuple[np.ndarray, np.ndarray]:
    """The row range of every episode ``native`` serves, in its row order (rows follow the selected episodes in
    index order, as LeRobot loads them).

    Args:
        native: A ``LeRobotDataset``.

    Returns:
        ``(first row, end row)`` of each episode served.
    """
    selected = native.episodes if native.episodes is not None else range(native.meta.total_episodes)
    table = native.meta.episodes
    start = np.asarray(table["dataset_from_index"], dtype=np.int64)[list(selected)]
    end = np.asarray(table["dataset_to_index"], dtype=np.int64)[list(selected)]
    order = np.argsort(start, kind="stable")
    lengths = (end - start)[order]
    if int(lengths.sum()) != len(native):  # not LeRobot's usual layout: one run per component
        return np.array([0], dtype=np.int64), np.array([len(native)], dtype=np.int64)
    ends = np.cumsum(lengths)
    return ends - lengths, ends


def mixture_episodes(natives, offsets) -> dict:
    """The mixture's episode table (:attr:`MixtureMetadata.episodes`).

    Args:
        natives: Each component's ``LeRobotDataset``.
        offsets: Each component's first row in the mixture.
    """
    starts, ends, which = [], [], []
    for k, (native, offset) in enumerate(zip(natives, offsets)):
        s, e = episode_rows(native)
        starts.append(s + int(offset))
        ends.append(e + int(offset))
        which.append(np.full(len(s), k, dtype=np.int64))
    return {
        "dataset_from_index": np.concatenate(starts),
        "dataset_to_index": np.concatenate(ends),
        "dataset_index": np.concatenate(which),
    }


def component_config(cfg, component):
    """lerobot-train's config for one component: a copy whose dataset is the component (repo_id, root, episodes),
    without ImageNet statistics (applied once to the mixture's, after aggregation: LeRobot's ``aggregate_stats``
    takes numpy arrays) and without the mixture.

    Why copies with attributes set, not ``dataclasses.replace``: ``replace`` would run the dataset config's
    ``__post_init__``, which reads the mixture from the command line again.

    Args:
        cfg: lerobot-train's ``TrainPipelineConfig``.
        component: A ``mixtures.spec.Component``.
    """
    dataset = copy.copy(cfg.dataset)
    dataset.repo_id = component.source
    dataset.root = None if component.root is None else str(component.root)
    dataset.episodes = None if component.episodes is None else [int(e) for e in component.episodes]
    dataset.use_imagenet_stats = False
    dataset.mixture = None
    out = copy.copy(cfg)
    out.dataset = dataset
    return out


def _component_choice(choice, target_fps: float | None):
    """The backend choice each component is built with: the run's, with the mixture's ``target_fps`` given to a
    backend that converts rates."""
    if target_fps is None or not converts_rates(choice) or getattr(choice.options, "target_fps", None) == target_fps:
        return choice
    from robo_loaders_plugin.lerobot.integration import choose

    return choose(choice.name, **{**choice.options.given(), "target_fps": float(target_fps)})


def check_rates(spec, choice) -> None:
    """A mixture's ``target_fps`` needs a backend that converts rates (also checked at argument parsing).

    Args:
        spec: The ``MixtureSpec``.
        choice: The LeRobot ``BackendChoice``.

    Raises:
        MixtureError: ``target_fps`` with a backend that does not convert rates.
    """
    from robo_loaders_plugin.lerobot.integration import NAME_FLAG
    from robo_loaders_plugin.mixtures.spec import MixtureError

    if spec.target_fps is not None and not converts_rates(choice):
        which = ", ".join(_rate_converting_backends()) or "none installed"
        raise MixtureError(
            f"{MIXTURE_FLAG}: target_fps={spec.target_fps:g} needs a backend that converts frame rates "
            f"({NAME_FLAG}={which}); {NAME_FLAG}={choice.name} serves each dataset at its recorded rate: "
            "leave target_fps out or choose such a backend"
        )


class LeRobotMixture(MixtureDataset):
    """A mixture as ``lerobot-train`` sees a dataset: ``meta`` (:class:`MixtureMetadata`), ``num_frames``,
    ``num_episodes``, ``episodes`` (``None``: every row of :attr:`meta`'s episode table), ``fps``, ``features``; items
    and batches from ``mixtures.dataset.MixtureDataset``, each with ``dataset_index``.

    Args:
        *args: ``MixtureDataset``'s.
        meta: The :class:`MixtureMetadata`.
        natives: Each component's ``LeRobotDataset`` (the backend's dataset serves it).
        **kwargs: ``MixtureDataset``'s.
    """

    def __init__(self, *args, meta: MixtureMetadata, natives, **kwargs):
        super().__init__(*args, **kwargs)
        self.meta = meta
        self.natives = list(natives)
        self.episodes = None
        self.absolute_to_relative_idx = None

    def batch_threads(self, plan) -> int:
        """Threads building batches: none when a component is LeRobot's own ``LeRobotDataset`` (``native``).

        Why: a ``LeRobotDataset`` keeps one video decoder per file per process and is made for DataLoader worker
        processes; two threads reading items of one video file seek the same decoder and get each other's frames
        (``FrameTimestampError``, or worse, wrong frames within the tolerance). The backends' datasets build batches
        in threads by design.

        Args:
            plan: The pass (``core.iteration.SamplingPlan``).
        """
        if any(not isinstance(d, ServedDataset) for d in self.datasets):
            return 0
        return super().batch_threads(plan)

    @property
    def num_frames(self) -> int:
        """Rows served, over every component."""
        return len(self)

    @property
    def num_episodes(self) -> int:
        """Episodes served, over every component."""
        return self.meta.total_episodes

    @property
    def fps(self) -> float:
        """The rate the mixture is served at."""
        return self.meta.fps

    @property
    def features(self) -> dict:
        """The mixture's features."""
        return self.meta.features

    @property
    def repo_id(self) -> str:
        """``mixture(a, b, ...)``."""
        return self.meta.repo_id

    @property
    def roots(self) -> list[str]:
        """Each component's dataset root (what the ranks of a run must share)."""
        return [str(n.root) for n in self.natives]

    def __repr__(self):
        parts = ", ".join(f"{n} ({s} frames)" for n, s in zip(self.names, self.sizes))
        how = "by size" if self.weights is None else f"weights {self.weights}"
        return f"LeRobotMixture({parts}; {how}; fps={self.fps:g})"


def build_mixture(spec, natives, choice, *, layout: Layout | None = None, use_imagenet_stats: bool = True, seed=None):
    """Serve LeRobot datasets as one mixture through a backend, as ``lerobot-train --dataset.mixture`` does.

    Args:
        spec: The ``MixtureSpec`` (:func:`parse`); its components in the order of ``natives``.
        natives: Each component's ``LeRobotDataset`` (built by LeRobot's factory, or by user code with the same
            ``delta_timestamps``, transforms and ``return_uint8=True`` for every component).
        choice: The backend choice (``integration.choose``/``backend_choice``); ``native`` serves ``natives``.
        layout: What the metadata decided (default: checked here from ``natives``' metadata).
        use_imagenet_stats: ImageNet's mean and std on the mixture's camera statistics, as LeRobot's factory.
        seed: The order seed when lerobot-train's sampler gives none (its ``--seed``).

    Returns:
        The :class:`LeRobotMixture`, recorded as a ``batch`` dataset for the adapter (``cycle``).

    Raises:
        MixtureError: the components' metadata disagree (:func:`check_components`), or ``target_fps`` with a
            backend that does not convert rates.
        ResourceRefused: the components do not fit the machine together (``mixtures.footprint``), before any is
            built.
        RoboLoadersError: a component is refused by the backend (its own message, naming the dataset).
    """
    from robo_loaders_plugin.core import iteration
    from robo_loaders_plugin.core.spec import BATCH
    from robo_loaders_plugin.lerobot.integration import build_dataset

    if len(natives) != len(spec.components):
        raise ValueError(f"{len(natives)} datasets for a mixture of {len(spec.components)} components")
    check_rates(spec, choice)
    target = target_fps_of(spec, choice)
    if layout is None:
        layout = check_components(spec, [n.meta for n in natives], target)
    names = [c.source for c in spec.components]
    for k, dropped in enumerate(layout.dropped):
        if dropped:
            logger.info(
                f"mixture: {component_name(spec, k)}'s {dropped} left out (not in every component after the renames)"
            )
    component_choice = _component_choice(choice, target)
    if component_choice.name != DEFAULT_BACKEND:
        from robo_loaders_plugin.lerobot.dataset import OPTION_PREFIX
        from robo_loaders_plugin.mixtures.footprint import check_mixture_fits

        check_mixture_fits(
            MIXTURE_FLAG,
            names,
            lambda k, committed: component_choice.plan(natives[k], committed=committed),
            backend=component_choice.name,
            option_prefix=OPTION_PREFIX,
        )
    served = [
        n
        if component_choice.name == DEFAULT_BACKEND
        else build_dataset(n, component_choice, repo_id=c.source, seed=seed)
        for n, c in zip(natives, spec.components)
    ]
    component_stats = [renamed_stats(n.meta.stats, dict(c.rename or {})) for n, c in zip(natives, spec.components)]
    stats = mixture_stats(component_stats, layout.features, use_imagenet_stats)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in served])[:-1]]).astype(np.int64)
    meta = MixtureMetadata(
        [n.meta for n in natives], names, layout, stats, component_stats, mixture_episodes(natives, offsets)
    )
    weights = spec.weight_vector()
    summary = (
        f"mixture of {len(served)} ({'weighted by size' if weights is None else 'weighted'}): "
        + ", ".join(f"{n} {len(d)} frames" for n, d in zip(names, served))
        + f"; {len(layout.features)} common features at {layout.fps:g} fps"
    )
    mixture = LeRobotMixture(
        served,
        names,
        layout.renames,
        layout.keep,
        MixtureHooks(),
        weights,
        0 if seed is None else int(seed),
        Serving(summary),
        meta=meta,
        natives=natives,
    )
    iteration.record_built(mixture, choice, seed=seed, served_as=BATCH)
    logger.info(f"lerobot data backend: {choice.name} [{meta.repo_id}] {summary}")
    return mixture


def make_mixture_datasets(cfg, split: bool):
    """``make_dataset``/``make_train_eval_datasets`` for ``--dataset.mixture``: metadata checked first, then each
    component built by LeRobot's own factory (split by ``--dataset.eval_split`` as LeRobot splits one dataset) and
    served by the backend, then the mixture(s).

    Args:
        cfg: lerobot-train's config (``cfg.dataset.mixture`` set).
        split: Split as ``make_train_eval_datasets`` does.

    Returns:
        ``(train mixture, eval mixture or None)``.

    Raises:
        MixtureError: the flags or the components' metadata are refused.
        RoboLoadersError: a component is refused by the backend.
    """
    from robo_loaders_plugin.lerobot.integration import backend_choice, native_datasets

    spec = mixture_of(cfg.dataset)
    choice = backend_choice(cfg.dataset)
    check_flags(cfg.dataset, spec)  # a config built in Python skipped the parser's check
    layout = check_components(spec, component_metas(spec, cfg.dataset), target_fps_of(spec, choice))
    trains, evals = [], []
    for c in spec.components:
        train, evaluation = native_datasets(component_config(cfg, c), split)
        trains.append(train)
        evals.append(evaluation)
    imagenet = bool(getattr(cfg.dataset, "use_imagenet_stats", True))
    seed = getattr(cfg, "seed", None)
    train = build_mixture(spec, trains, choice, layout=layout, use_imagenet_stats=imagenet, seed=seed)
    if any(e is None for e in evals):
        return train, None
    return train, build_mixture(spec, evals, choice, layout=layout, use_imagenet_stats=imagenet, seed=seed)


def resume_position(state: dict, sampler_frames: int, mixture_frames: int, batch_size: int, world_size: int):
    """The mixture's (epoch, batch) a resumed run starts at, from the state ``--resume`` gave LeRobot's sampler.

    Why: LeRobot positions its ``EpisodeAwareSampler`` from the checkpoint's step with the sampler's length
    (``compute_sampler_state``), which leaves out each episode's last frames when the policy says so
    (``drop_n_last_frames``); a mixture's pass has every row, so the step is recovered and cut by the mixture's
    pass instead.

    Args:
        state: The sampler's ``{"epoch", "start_index"}``.
        sampler_frames: The sampler's length.
        mixture_frames: The mixture's rows (its pass length).
        batch_size: Items per batch per process.
        world_size: Processes.

    Returns:
        ``(epoch, batch)`` of the mixture's passes.
    """
    per_step = batch_size * world_size
    sampler_batches = math.ceil(math.ceil(int(sampler_frames) / batch_size) / world_size)  # LeRobot's count
    step = int(state["epoch"]) * sampler_batches + int(state["start_index"]) // per_step
    mixture_batches = max(1, -(-int(mixture_frames) // per_step))
    return divmod(step, mixture_batches)
