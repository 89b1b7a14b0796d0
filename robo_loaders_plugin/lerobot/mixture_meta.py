"""What a LeRobot mixture serves, decided from its components' ``meta/`` before any data is read: the features
common to every component after the renames (refusing disagreements one line each), the aggregated statistics
(LeRobot's own ``aggregate_stats``) and the metadata object ``make_policy`` and the processors read.

The second of the mixture's three steps: it takes the ``MixtureSpec`` the flag gave (``mixture_flag``), reads and
checks what the components' ``meta/`` say, and gives the :class:`Layout` the build (``mixture``) serves.
"""

from __future__ import annotations

import numpy as np

from robo_loaders_plugin.core.log import get_logger, warn_once
from robo_loaders_plugin.core.units import NAMED_IN_A_LINE, some_of
from robo_loaders_plugin.lerobot import compat
from robo_loaders_plugin.lerobot.dataset_root import local_copy_required
from robo_loaders_plugin.lerobot.flags import FRAMEWORK, MIXTURE_FLAG, component_name
from robo_loaders_plugin.mixtures.dataset import DATASET_INDEX, DROPPED
from robo_loaders_plugin.mixtures.missing import MISSING_SUFFIX, ZEROS, missing_lines
from robo_loaders_plugin.mixtures.padding import MASK_SUFFIX, NO_PADDING, PAD_STATS, Padding, plan_padding
from robo_loaders_plugin.mixtures.spec import MixtureError

logger = get_logger(__name__)

# LeRobot's bookkeeping columns, present in every dataset: a mixture sharing only these has nothing to train on
DEFAULT_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")


PAD_SUFFIX = "_is_pad"  # LeRobot's padding mask of a key with delta timestamps: renamed and kept with its key


# -- metadata checks -----------------------------------------------------------------------------------------------
class Layout:
    """What the components' metadata decide, before any data is read.

    Attributes:
        features: The mixture's features (mixture names; each the first component's feature dict), in the first
            component's order: the keys common to every component after its rename map.
        renames: Per component, ``{item key: mixture key}`` (features and their ``_is_pad`` masks).
        keep: The item keys served (features, their ``_is_pad`` masks, ``task``).
        dropped: Per component, its keys (component names) not common to every component, or in its ``drop``.
        fps: The rate the mixture is served at.
        padding: The vectors padded to one size (``mixtures.padding``); ``features`` has their padded shapes.
        cameras: With ``"missing_cameras": "zeros"``, the cameras some component lacks, served as zeros there
            (``mixtures.missing``); empty with ``"drop"``.
        missing: Per component, the cameras of ``cameras`` it lacks.
    """

    def __init__(
        self,
        features: dict,
        renames: list[dict],
        keep: frozenset,
        dropped: list[list[str]],
        fps: float,
        padding: Padding = NO_PADDING,
        cameras: tuple[str, ...] = (),
        missing: list[list[str]] | None = None,
    ):
        self.features, self.renames, self.keep, self.dropped, self.fps = features, renames, keep, dropped, fps
        self.padding = padding
        self.cameras = cameras
        self.missing = missing if missing is not None else [[] for _ in renames]


def _signature(ft: dict) -> tuple:
    """What must agree for a key to be served from every component: dtype and shape."""
    shape = ft.get("shape")
    return ft.get("dtype"), tuple(shape) if isinstance(shape, (list, tuple)) else shape


def _is_vector(ft: dict) -> bool:
    """A feature the mixture may pad: a 1-d numeric vector (an action, a state), not a camera or a string."""
    shape = ft.get("shape")
    return isinstance(shape, (list, tuple)) and len(shape) == 1 and ft.get("dtype") not in ("image", "video", "string")


def _generated(name: str) -> bool:
    """Whether ``name`` is one the mixture makes itself: a component's key served under it replaced it or was
    replaced (a camera renamed onto ``action_dim_mask`` was served as the bool mask, its frames dropped without a
    word: a reviewer's reproduction)."""
    return name == DATASET_INDEX or name.endswith(("_is_pad", MASK_SUFFIX, MISSING_SUFFIX))


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
            not have, a rename onto one of its existing keys, a drop of a key it does not have, a common key whose
            dtype differs, or whose shape differs and is not a 1-d vector (those are padded: ``mixtures.padding``),
            a ``pad`` size smaller than a component's or of a key that is not a 1-d vector, frame rates
            that differ without ``target_fps``, no feature common to every component, language columns, statistics
            missing (:func:`check_stats`).
    """
    renamed_features = []
    for k, (c, meta) in enumerate(zip(spec.components, metas)):
        name = component_name(spec, k)
        features = dict(meta.features)
        rename = dict(c.rename or {})
        for key in c.drop:
            if key not in features:
                raise MixtureError(
                    f"{MIXTURE_FLAG}: {name} drops {key!r}, which it does not have; its features are {sorted(features)}"
                )
            del features[key]
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
        for key in features:
            served = rename.get(key, key)
            if _generated(served):
                how = f"renames {key!r} onto {served!r}" if served != key else f"has a feature {key!r}"
                raise MixtureError(
                    f"{MIXTURE_FLAG}: {name} {how}, a name the mixture makes itself ({DATASET_INDEX!r}, "
                    f"'<key>_is_pad', '<key>{MASK_SUFFIX}', '<camera>{MISSING_SUFFIX}'); rename it to another name"
                )
        renamed_features.append({rename.get(key, key): ft for key, ft in features.items()})

    first = renamed_features[0]
    common = [key for key in first if all(key in f for f in renamed_features[1:])]
    cameras: list[str] = []
    if spec.missing_cameras == ZEROS:  # every camera any component has, in order of first appearance
        seen = [key for f in renamed_features for key, ft in f.items() if _is_camera(ft)]
        cameras = [key for key in dict.fromkeys(seen) if key not in common]
        for key in cameras:
            having = [k for k, f in enumerate(renamed_features) if key in f]
            for k in having[1:]:
                mine, theirs = _signature(renamed_features[k][key]), _signature(renamed_features[having[0]][key])
                if mine != theirs:
                    raise MixtureError(
                        f"{MIXTURE_FLAG}: {component_name(spec, k)}'s {key!r} is {mine[0]} of shape {mine[1]}, "
                        f"{component_name(spec, having[0])}'s is {theirs[0]} of shape {theirs[1]}; rename it in one "
                        f'of them ("rename": {{"{key}": "<another name>"}}) to keep them apart'
                    )
    for k, features in enumerate(renamed_features[1:], start=1):
        for key in common:
            mine, theirs = _signature(features[key]), _signature(first[key])
            if mine[0] == theirs[0] and _is_vector(features[key]) and _is_vector(first[key]):
                continue  # vectors of different sizes: padded to one (below)
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
                from robo_loaders_plugin.core.registry import rate_converting_backends

                which = ", ".join(rate_converting_backends(FRAMEWORK)) or "none installed"
                raise MixtureError(
                    f"{MIXTURE_FLAG}: {component_name(spec, k)} is recorded at {float(meta.fps):g} fps, "
                    f"{component_name(spec, 0)} at {fps0:g} fps; give target_fps in the mixture (rates are converted "
                    f"by the backends that can: --dataset.backend={which}) or mix datasets of one rate"
                )
    if not [key for key in common if key not in DEFAULT_FEATURES]:
        raise MixtureError(
            f"{MIXTURE_FLAG}: no feature is common to every component besides LeRobot's own columns "
            f"({', '.join(DEFAULT_FEATURES)}); rename keys so that the components share them"
        )
    names = [component_name(spec, k) for k in range(len(metas))]
    vectors = [
        {key: int(f[key]["shape"][0]) for key in common if key not in DEFAULT_FEATURES and _is_vector(first[key])}
        for f in renamed_features
    ]
    padding = plan_padding(MIXTURE_FLAG, names, vectors, dict(spec.pad), what="feature")
    features = {key: _padded_feature(key, first[key], renamed_features, padding) for key in common}
    for key in cameras:
        features[key] = next(f[key] for f in renamed_features if key in f)
    _warn_other_names(spec, renamed_features, [key for key in common if key not in padding.sizes])
    _warn_every_camera_dropped(spec, renamed_features, features)

    check_stats(spec, metas, features, cameras)
    renames, dropped = [], []
    for c, meta in zip(spec.components, metas):
        rename = dict(c.rename or {})
        full = dict(rename)
        full.update({f"{old}{PAD_SUFFIX}": f"{new}{PAD_SUFFIX}" for old, new in rename.items()})
        full.update({key: f"{DROPPED}{key}" for key in c.drop})
        full.update({f"{key}{PAD_SUFFIX}": f"{DROPPED}{key}{PAD_SUFFIX}" for key in c.drop})
        renames.append(full)
        dropped.append([key for key in meta.features if key in c.drop or rename.get(key, key) not in features])
    keep = frozenset([*features, *(f"{key}{PAD_SUFFIX}" for key in features), "task"])
    fps = float(target_fps) if target_fps else float(metas[0].fps)
    missing = [[key for key in cameras if key not in f] for f in renamed_features]
    for line in missing_lines([component_name(spec, k) for k in range(len(missing))], missing):
        logger.info(f"mixture: {line}")
    return Layout(features, renames, keep, dropped, fps, padding, tuple(cameras), missing)


def _padded_feature(key: str, ft: dict, renamed_features: list[dict], padding: Padding) -> dict:
    """The mixture's feature dict of a key: the first component's, with a padded key's shape the padded size and its
    ``names`` the widest component's followed by ``pad<i>`` (``None`` where that component names none)."""
    if key not in padding.sizes:
        return ft
    size = padding.sizes[key]
    widest = max(renamed_features, key=lambda f: int(f[key]["shape"][0]))[key]
    names = widest.get("names")
    own = int(widest["shape"][0])
    out = dict(ft, shape=(size,))
    out["names"] = [*names, *(f"pad{i}" for i in range(own, size))] if isinstance(names, list) else None
    return out


def _shown(names) -> str:
    """A feature's ``names`` for a message: the list, or its first 8 entries."""
    if isinstance(names, (list, tuple)) and len(names) > 8:
        return f"[{', '.join(map(repr, names[:8]))}, ... ({len(names)})]"
    return repr(names)


def _is_camera(ft: dict) -> bool:
    return ft.get("dtype") in ("image", "video")


def _warn_other_names(spec, renamed_features: list[dict], common: list[str]) -> None:
    """A warning (once) per component whose ``names`` of a served key differ from the first component's.

    Why a warning and not a refusal: dtype and shape agree, so the values mix; ``names`` says what each position
    holds, and two components naming them differently (``a0..a3`` and ``gripper, z, y, x``) may mean another
    order, or just other words for the same: only the user knows. Cameras (``height, width, channels``) too.
    """
    first = renamed_features[0]
    for k, features in enumerate(renamed_features[1:], start=1):
        for key in common:
            mine, theirs = features[key].get("names"), first[key].get("names")
            if mine is None or theirs is None or mine == theirs:
                continue
            warn_once(
                logger,
                f"warning: {MIXTURE_FLAG}: {component_name(spec, k)}'s {key!r} names its values {_shown(mine)} but "
                f"{component_name(spec, 0)}'s {_shown(theirs)}; they are mixed position by position: if they are not "
                f'the same values in the same order, give one of them another key ("rename": {{"{key}": '
                '"<another name>"}) or reorder its data',
            )


def _warn_every_camera_dropped(spec, renamed_features: list[dict], features: dict) -> None:
    """A warning (once) when the components have cameras but none is common to all of them (after the renames):
    the mixture then serves no image at all, which a vision policy cannot train on; usually the same camera under
    other names in different datasets, which a rename joins."""
    cameras = [[key for key, ft in f.items() if _is_camera(ft)] for f in renamed_features]
    if not any(cameras) or any(_is_camera(ft) for ft in features.values()):
        return
    seen = "; ".join(f"{component_name(spec, k)}: {cams or 'none'}" for k, cams in enumerate(cameras))
    with_cameras = [k for k, cams in enumerate(cameras) if cams]
    k0 = with_cameras[0]
    other = next((k for k in with_cameras[1:] if cameras[k][0] != cameras[k0][0]), None)
    if other is not None:
        own = {new: old for old, new in (spec.components[other].rename or {}).items()}  # its own key, before renames
        key = own.get(cameras[other][0], cameras[other][0])
        example = f'e.g. in {component_name(spec, other)}: "rename": {{"{key}": "{cameras[k0][0]}"}}'
    else:
        example = "or leave out the components without cameras"
    warn_once(
        logger,
        f"warning: {MIXTURE_FLAG}: every camera was dropped: no camera key is common to every component ({seen}), "
        f"so the mixture serves no images; rename the cameras that are the same onto one name ({example})",
    )


def check_stats(spec, metas, features: dict, cameras=()) -> None:
    """Every component has the statistics the mixture's are aggregated from: its ``meta/stats.json``, with every
    feature the other components' statistics have (LeRobot's bookkeeping columns aside, which no policy normalises).

    Why: LeRobot's ``aggregate_stats`` takes the union of what it is given, so a component without statistics (or
    without those of a key) would silently leave its frames out of the mixture's, and the policy would normalise
    every component with the statistics of the others. LeRobot alone refuses such a dataset (its factory writes
    ImageNet's statistics into ``meta.stats``: a ``TypeError`` without the file, a ``KeyError`` without a camera's).

    Args:
        spec: The ``MixtureSpec``.
        metas: Each component's ``LeRobotDatasetMetadata`` (``stats`` is ``None`` without ``meta/stats.json``).
        features: The mixture's features (mixture names).
        cameras: Cameras some components lack (``"missing_cameras": "zeros"``): only those that have one must have
            its statistics.

    Raises:
        MixtureError: one line naming the flag, the component, its root and the missing file or key, and what to do.
    """
    for k, meta in enumerate(metas):
        if meta.stats is None:
            raise MixtureError(
                f"{MIXTURE_FLAG}: {component_name(spec, k)} has no meta/stats.json (in {meta.root}): policies "
                "normalise with the mixture's statistics, which would count only the other components (LeRobot "
                "refuses this dataset alone too); restore the file from where the dataset came from, compute it "
                "with LeRobot (lerobot.datasets.compute_stats; 'lerobot-edit-dataset --operation.type recompute_stats' "
                "computes the numeric features' only), or leave the component out"
            )
    held = [renamed_stats(meta.stats, dict(c.rename or {}), c.drop) for c, meta in zip(spec.components, metas)]
    dropped: dict[int, tuple[list[str], list[str]]] = {}  # component -> (statistics it lacks, keys)
    for key in features:
        if key in DEFAULT_FEATURES:
            continue
        having = [k for k, stats in enumerate(held) if key in stats]
        lacking = [k for k in range(len(held)) if k not in having]
        if key in cameras:  # a component without the camera has no statistics of it
            lacking = [k for k in lacking if key in renamed_stats_keys(metas[k], spec.components[k])]
        if having and lacking:
            k = lacking[0]
            raise MixtureError(
                f"{MIXTURE_FLAG}: {component_name(spec, k)}'s meta/stats.json (in {metas[k].root}) has no statistics "
                f"of {key!r}, which {component_name(spec, having[0])}'s has: the mixture's statistics of it would "
                "count only some components; compute them for every component (lerobot.datasets.compute_stats), "
                f'rename the key apart in one of them ("rename": {{"{key}": "<another name>"}}) or leave the '
                "component out"
            )
        _statistics_dropped(held, key, having, dropped)
    _warn_statistics_dropped(spec, metas, dropped)


def _statistics_dropped(held, key: str, having: list[int], dropped: dict) -> None:
    """Note in ``dropped`` the first component whose statistics of ``key`` lack what others have (quantiles
    q01..q99, most often: datasets written before LeRobot computed them), with what it lacks."""
    names = [set(held[k][key]) for k in having if isinstance(held[k].get(key), dict)]
    if len(names) < 2:
        return
    for k in having:
        missing = sorted(set.union(*names) - set(held[k][key]))
        if missing:
            lacks, keys = dropped.setdefault(k, ([], []))
            lacks.extend(m for m in missing if m not in lacks)
            keys.append(key)
            return


def _warn_statistics_dropped(spec, metas, dropped: dict) -> None:
    """One warning per mixture: LeRobot's aggregation, which the mixture's statistics follow, keeps a statistic
    only when every component has it, so a policy normalising with quantiles failed at its first batch with
    LeRobot's own error, naming no component (a reviewer's reproduction). Warned, not refused: a policy normalising
    with mean and std (the default) trains as LeRobot would."""
    if not dropped:
        return
    k, (lacks, keys) = next(iter(dropped.items()))
    others = f" (and {len(dropped) - 1} other component(s))" if len(dropped) > 1 else ""
    logger.warning(
        f"{MIXTURE_FLAG}: {component_name(spec, k)}'s meta/stats.json (in {metas[k].root}){others} has no "
        f"{', '.join(lacks)} of {', '.join(map(repr, keys))}, which other components have: the mixture's statistics "
        "keep only what every component has, as LeRobot's aggregation does (a policy normalising with quantiles "
        "will fail); compute them for that component (LeRobot's augment_dataset_quantile_stats.py) or leave it out"
    )


def renamed_stats_keys(meta, component) -> set[str]:
    """A component's feature names under its rename map, without its dropped keys (the names its statistics are
    kept under in the mixture).

    Args:
        meta: The component's ``LeRobotDatasetMetadata``.
        component: Its ``MixtureComponent`` (``rename``, ``drop``).

    Returns:
        The mixture's names of the component's features.
    """
    rename = dict(component.rename or {})
    return {rename.get(key, key) for key in meta.features if key not in component.drop}


def component_metas(spec, dataset_cfg) -> list:
    """Each component's ``LeRobotDatasetMetadata`` (``meta/`` only: no data is read).

    Args:
        spec: The ``MixtureSpec``.
        dataset_cfg: ``cfg.dataset`` (its ``revision`` and ``repo_type``).

    Raises:
        SourceError: LeRobot went to the Hub with the Hub off, naming the component (``dataset_root``).
    """
    return [component_meta(spec, k, dataset_cfg) for k in range(len(spec.components))]


def component_meta(spec, k: int, dataset_cfg):
    """Component ``k``'s ``LeRobotDatasetMetadata`` (:func:`component_metas`).

    Args:
        spec: The ``MixtureSpec``.
        k: The component's position.
        dataset_cfg: ``cfg.dataset`` (its ``revision`` and ``repo_type``).

    Raises:
        SourceError: LeRobot went to the Hub with the Hub off, naming the component (``dataset_root``).
    """
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata

    c = spec.components[k]
    with local_copy_required(c.source, c.root, f"{MIXTURE_FLAG}: {component_name(spec, k)}", "its root"):
        return LeRobotDatasetMetadata(
            c.source,
            root=c.root,
            revision=getattr(dataset_cfg, "revision", None),
            repo_type=getattr(dataset_cfg, "repo_type", "dataset"),
        )


INDEX_KIND = "lerobot-meta-1"  # the mixture index's records of LeRobot components (mixtures.index)


class IndexedMeta:
    """What :func:`check_components` reads of a component's ``LeRobotDatasetMetadata``, from the mixture index
    (``mixtures.index``): ``features``, ``fps``, ``stats`` (numpy arrays, or ``None`` without ``meta/stats.json``),
    ``root``, ``has_language_columns``.

    Why not LeRobot's object: reading it opens every metadata file of the component (the episodes parquet files
    among them); the index gives these back for a component whose ``meta/`` is unchanged without opening any.

    Args:
        record: The component's record (:func:`meta_record`).
    """

    def __init__(self, record: dict):
        # shapes as tuples, as LeRobot's metadata holds them (``DatasetInfo``): JSON gives lists back, and LeRobot
        # compares some with tuples (``get_hf_features_from_features``: ``ft["shape"] == (1,)``)
        self.features = {
            key: {**ft, "shape": tuple(ft["shape"])} if isinstance(ft.get("shape"), list) else dict(ft)
            for key, ft in record["features"].items()
        }
        self.fps = record["fps"]
        self.root = record["root"]
        self.has_language_columns = bool(record["has_language_columns"])
        stats = record["stats"]
        self.stats = None
        if stats is not None:
            self.stats = {
                key: {stat: np.asarray(v["data"], dtype=v["dtype"]).reshape(v["shape"]) for stat, v in values.items()}
                for key, values in stats.items()
            }


def meta_record(meta) -> dict:
    """A component's record for the mixture index: what :class:`IndexedMeta` gives back, as JSON (arrays as
    dtype, shape and values: never pickled).

    Args:
        meta: The component's ``LeRobotDatasetMetadata``.

    Returns:
        The record.
    """

    def array(value) -> dict:
        value = np.asarray(value)
        return {"dtype": str(value.dtype), "shape": list(value.shape), "data": value.ravel().tolist()}

    stats = None
    if meta.stats is not None:
        stats = {key: {stat: array(v) for stat, v in values.items()} for key, values in meta.stats.items()}
    return {
        "features": meta.features,
        "fps": meta.fps,
        "root": str(meta.root),
        "has_language_columns": bool(getattr(meta, "has_language_columns", False)),
        "stats": stats,
    }


def _indexable(component) -> bool:
    """A component whose metadata the index may keep: a local root holding LeRobot's ``meta/info.json`` (one on
    the Hub, or not there yet, is read by LeRobot as before)."""
    import os

    return component.root is not None and os.path.isfile(os.path.join(str(component.root), "meta", "info.json"))


def indexed_metas(spec, dataset_cfg, cache_dir=None, where: str = "cache_dir", reread: list | None = None) -> list:
    """Each component's metadata as :func:`check_components` reads it, from the mixture index (``mixtures.index``)
    where the component's ``meta/`` is unchanged since it was read, else read with LeRobot (in parallel) and kept.

    Args:
        spec: The ``MixtureSpec`` (local roots).
        dataset_cfg: ``cfg.dataset`` (its ``revision`` and ``repo_type``).
        cache_dir: The cache root the index is kept in (the backend's ``cache_dir``; ``None``: the default root).
        where: How the user sets ``cache_dir``, for the cache root's errors.
        reread: A list given the components whose metadata was read from their files, not served by the index
            (new, changed or not indexable ones; in order): what ``make_mixture_datasets`` builds in threads.

    Returns:
        An :class:`IndexedMeta` per indexed component, LeRobot's ``LeRobotDatasetMetadata`` for the others.

    Raises:
        SourceError: as :func:`component_metas`.
        CacheError: the cache root cannot be written.
    """
    from robo_loaders_plugin.mixtures.index import ComponentIndex

    kept = [k for k, c in enumerate(spec.components) if _indexable(c)]
    index = ComponentIndex(
        INDEX_KIND,
        ("meta",),
        lambda i: meta_record(component_meta(spec, kept[i], dataset_cfg)),
        cache_dir,
        where,
        parse=IndexedMeta,
    )
    records = dict(zip(kept, index.records([str(spec.components[k].root) for k in kept])))
    if reread is not None:
        served = {kept[i] for i in set(range(len(kept))) - set(index.reread)}
        reread.extend(k for k in range(len(spec.components)) if k not in served)
    return [records[k] if k in records else component_meta(spec, k, dataset_cfg) for k in range(len(spec.components))]


# -- statistics ----------------------------------------------------------------------------------------------------
def renamed_stats(stats, rename: dict, drop=()) -> dict:
    """A component's ``meta.stats`` under its rename map, without its dropped keys (a shallow copy: arrays shared).

    Args:
        stats: ``meta.stats`` (``{key: {stat: array}}``) or ``None``.
        rename: ``{component key: mixture key}``.
        drop: The component's ``drop``.
    """
    return {rename.get(key, key): dict(value) for key, value in (stats or {}).items() if key not in drop}


def mixture_stats(
    component_stats: list[dict], features: dict, use_imagenet_stats: bool, padding: Padding = NO_PADDING
) -> dict:
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
        padding: The padded vectors (:class:`Layout`'s): their statistics by :func:`padded_stats`.

    Returns:
        ``{key: {stat: array or tensor}}``.
    """
    import torch
    from lerobot.datasets.compute_stats import aggregate_stats
    from lerobot.utils.constants import IMAGENET_STATS

    kept = [
        {key: value for key, value in stats.items() if key in features and key not in padding.sizes}
        for stats in component_stats
    ]
    stats = aggregate_stats(kept)
    for key, size in padding.sizes.items():
        stats[key] = padded_stats([s[key] for s in component_stats], [own[key] for own in padding.own], size)
    if use_imagenet_stats:
        for key, ft in features.items():
            if ft.get("dtype") in ("image", "video") and not _is_depth(ft):
                for stats_type, value in IMAGENET_STATS.items():
                    stats.setdefault(key, {})[stats_type] = torch.tensor(value, dtype=torch.float32)
    return stats


def padded_stats(stats: list[dict], sizes: list[int], size: int) -> dict:
    """The statistics of a padded vector: each real entry aggregated (LeRobot's ``aggregate_stats``) over the
    components that have it, count-weighted as for any key; the padding entries :data:`~robo_loaders_plugin.mixtures.
    padding.PAD_STATS` (every LeRobot normaliser leaves a padded 0 at 0).

    Why by ranges of entries: a component of 7 entries says nothing of entries 7..13 of a 14-wide one; aggregating
    its padded zeros into them would shift the real robot's statistics.

    Args:
        stats: Each component's statistics of the key (``{stat: array}``, arrays as wide as the component's vector;
            ``count`` of shape ``(1,)``).
        sizes: Each component's size of the key.
        size: The padded size.

    Returns:
        ``{stat: array}`` of width ``size`` (``count``: every component's frames).
    """
    from lerobot.datasets.compute_stats import aggregate_stats

    bounds = sorted(set(sizes))
    pieces: list[dict] = []
    start = 0
    for end in bounds:
        having = [s for s, own in zip(stats, sizes, strict=True) if own >= end]
        part = [{"x": {n: v if n == "count" else np.asarray(v)[..., start:end] for n, v in s.items()}} for s in having]
        pieces.append(aggregate_stats(part)["x"])
        start = end
    names = [n for n in pieces[0] if n != "count"]
    out = {}
    for n in names:
        real = np.concatenate([np.asarray(p[n], dtype=np.float64) for p in pieces], axis=-1)
        fill = np.full((*real.shape[:-1], size - real.shape[-1]), PAD_STATS.get(n, 0.0))
        out[n] = np.concatenate([real, fill], axis=-1).astype(np.asarray(pieces[0][n]).dtype)
    if "count" in stats[0]:
        out["count"] = np.sum([np.asarray(s["count"]) for s in stats], axis=0)
    return out


def _is_depth(ft: dict) -> bool:
    """A depth camera (LeRobot 0.6.1 marks it in the feature's info), which keeps its own statistics."""
    info = ft.get("info") or {}
    return bool(info.get("video.is_depth_map") or info.get("is_depth_map"))


# -- the facade ----------------------------------------------------------------------------------------------------
def mixture_repo_id(names) -> str:
    """The mixture's ``repo_id``: ``mixture(a, b, c)``; past 8 components the first 8, how many more, and a digest of
    every name in order (``mixture(a, ..., h, ... and 392 more; names 3f2a9c01d4e5)``).

    Why not every name: LeRobot logs the ``repo_id`` and a run's log line grew to ~10 kB at 400 components; why the
    digest: LeRobot writes it into a checkpoint's training context, where two mixtures sharing their first 8
    components must still differ.

    Args:
        names: The components' names, in order.

    Returns:
        The ``repo_id``.
    """
    import hashlib

    names = [str(n) for n in names]
    if len(names) <= NAMED_IN_A_LINE:
        return f"mixture({some_of(names)})"
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:12]
    return f"mixture({some_of(names)}; names {digest})"


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
        self.repo_id = mixture_repo_id(self.names)
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
    every_start, every_end = compat.episode_boundaries(native.meta.episodes)
    start = every_start[list(selected)]
    end = every_end[list(selected)]
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
