"""What a LeRobot mixture serves, decided from its components' ``meta/`` before any data is read: the features
common to every component after the renames (refusing disagreements one line each), the aggregated statistics
(LeRobot's own ``aggregate_stats``) and the metadata object ``make_policy`` and the processors read.
"""

from __future__ import annotations

import numpy as np

MIXTURE_FLAG = "--dataset.mixture"
FRAMEWORK = "lerobot"

# LeRobot's bookkeeping columns, present in every dataset: a mixture sharing only these has nothing to train on
DEFAULT_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")


PAD_SUFFIX = "_is_pad"  # LeRobot's padding mask of a key with delta timestamps: renamed and kept with its key


DATASET_INDEX = "dataset_index"


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
