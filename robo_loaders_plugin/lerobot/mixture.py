"""LeRobot weighted mixtures: ``lerobot-train --dataset.mixture=<file or inline JSON>``, built and served.

LeRobot 0.6.1 trains on one dataset (its ``make_dataset`` refuses several ``repo_id``\\ s); this module builds a
mixture of them the way LeRobot's factory builds one. A mixture's config goes down three modules, each deciding one
thing and importing only those below it:

1. The flag, parsed and checked (``mixture_flag``), at argument parsing: the flag is read as JSON
   (``mixtures.spec.parse_mixture``) and checked with the other flags (a backend that cannot convert rates given
   ``target_fps``, options naming one dataset's data, ``--dataset.repo_id`` given beside it, each local root's
   ``meta/info.json``); it is saved resolved, as inline JSON, in ``train_config.json``, so ``--resume=true`` trains
   on the same mixture even if the file changed.
2. The components' metadata, read and checked (``mixture_meta``) before any data is read: every component's
   ``meta/`` (LeRobot's ``LeRobotDatasetMetadata``, read once into the mixture index, ``mixtures.index``, and
   reused while the component's ``meta/`` is unchanged) is compared: renames onto existing keys, features whose dtype or
   shape disagree, frame rates that differ without ``target_fps``, statistics missing. Each refusal is one line
   naming the component and the key.
3. The build and the serving, here. Each component is LeRobot's own ``LeRobotDataset``, built by LeRobot's own
   factory with the run's settings (delta timestamps from the policy, image transforms, tolerance, video backend,
   ``eval_split``), then served by the chosen backend as a single dataset would be (``single``; ``native``:
   LeRobot's object itself). A component whose ``root`` is remote is read as one remote dataset is, by a backend
   that streams (``remote_source_option``): its tables mirrored into the backend's cache directory for LeRobot
   (:func:`local_tables`), its frames streamed from the root (the backend's source option set to it).
   The mixture (:class:`LeRobotMixture`, a ``mixtures.dataset.MixtureDataset``) is a ``batch`` kind dataset for the
   adapter whatever the backend: its passes are drawn by weight (``mixtures.sampling``), never by LeRobot's
   ``EpisodeAwareSampler``, whose order is a plain concatenation; they draw, per component, only the rows that
   sampler would serve of that component alone (:func:`sampler_rows`: the episode filter, the policy's
   ``drop_n_last_frames``). Its ``meta`` (``mixture_meta.MixtureMetadata``) is what ``make_policy`` and the
   processors read: the common features, ``stats`` aggregated with LeRobot's own ``aggregate_stats`` (ImageNet
   statistics applied as LeRobot's factory applies them), the frame rate.

From Python: ``build_mixture(parse(path_or_json), natives, choice)`` (``parse`` is ``mixture_flag.parse``,
importable from here).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math

import numpy as np

from robo_loaders_plugin.core import iteration
from robo_loaders_plugin.core.iteration import ServedDataset, Serving
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.spec import BATCH, DEFAULT_BACKEND
from robo_loaders_plugin.core.units import some_of
from robo_loaders_plugin.lerobot import compat
from robo_loaders_plugin.lerobot.dataset import OPTION_PREFIX, sources_checked_once
from robo_loaders_plugin.lerobot.flags import (
    MIXTURE_FLAG,
    backend_choice,
    choose,
    component_name,
    drop_n_last_frames_of,
)
from robo_loaders_plugin.lerobot.joined import JoinedBatches
from robo_loaders_plugin.lerobot.mixture_flag import (
    check_flags,
    check_rates,
    check_remote_roots,
    converts_rates,
    mixture_of,
    parse,
    remote_root,
    target_fps_of,
)
from robo_loaders_plugin.lerobot.mixture_meta import (
    Layout,
    MixtureMetadata,
    check_components,
    indexed_metas,
    mixture_episodes,
    mixture_stats,
    renamed_stats,
)
from robo_loaders_plugin.lerobot.mixture_resume import COMPONENT_STATS_FILE, pass_order, warn_resized
from robo_loaders_plugin.lerobot.single import (
    build_dataset,
    items_choice,
    native_datasets,
    natives_built,
    remote_tables,
)
from robo_loaders_plugin.mixtures.component_lines import ComponentLines
from robo_loaders_plugin.mixtures.dataset import DATASET_INDEX, MixtureDataset, MixtureHooks, garbage_collected_once
from robo_loaders_plugin.mixtures.footprint import bounded_buffer, check_mixture_fits
from robo_loaders_plugin.mixtures.kept_tables import kept_tables
from robo_loaders_plugin.mixtures.spec import MixtureError
from robo_loaders_plugin.storage import cache
from robo_loaders_plugin.windows.rates import recorded_frames

__all__ = [
    "LeRobotMixture",
    "build_mixture",
    "make_mixture_datasets",
    "parse",
    "resume_position",
    "save_component_stats",
]

logger = get_logger(__name__)

# the mixture lerobot-train trains on in this process (make_mixture_datasets'), whose component statistics each
# checkpoint saves (:func:`save_component_stats`): save_checkpoint is not given the dataset
TRAINED: list = []


def save_component_stats(checkpoint_dir, cfg) -> None:
    """Write the trained mixture's ``meta.component_stats`` into the checkpoint's ``pretrained_model/``, beside the
    policy and its processors' statistics, so a policy can be un-normalised per robot at inference.

    The file: ``{"components": [{"repo_id", "root", "frames", "episodes", "stats": {key: {stat: list}}}],
    "padding": {key: size},
    "pass_order": str}`` (each component's statistics under its rename map, unpadded: its own sizes; the order the
    passes were served in, ``mixture_resume.pass_order``, which a resumed run compares with its own). Written
    atomically: a checkpoint stopped mid-write keeps the previous file or none, never half of one.

    Args:
        checkpoint_dir: The checkpoint's directory (``.../checkpoints/<step>``).
        cfg: lerobot-train's config (nothing is written without ``--dataset.mixture``).
    """
    import os

    from robo_loaders_plugin.core.files import atomic_write_json

    mixture = TRAINED[0] if TRAINED else None
    if mixture is None or cfg is None or not getattr(getattr(cfg, "dataset", None), "mixture", None):
        return
    meta = mixture.meta
    doc = {
        "components": [
            {
                "repo_id": name,
                "root": str(native.root),
                # what the passes are ordered over, compared when a run resumes (mixture_resume.warn_resized)
                "frames": int(native.num_frames),
                "episodes": int(native.num_episodes),
                "stats": {
                    key: {stat: np.asarray(value).tolist() for stat, value in values.items()}
                    for key, values in stats.items()
                },
            }
            for name, native, stats in zip(meta.names, mixture.natives, meta.component_stats, strict=True)
        ],
        "padding": dict(mixture.padding.sizes),
        "pass_order": pass_order(getattr(cfg.dataset, "backend", None), getattr(cfg.dataset, "backend_kwargs", None)),
    }
    folder = os.path.join(str(checkpoint_dir), "pretrained_model")
    os.makedirs(folder, exist_ok=True)
    atomic_write_json(os.path.join(folder, COMPONENT_STATS_FILE), doc)


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


def windows_by_mixture_names(native, component, trained_cfg) -> None:
    """Give a component's ``LeRobotDataset`` the windows LeRobot's factory gives its keys' mixture names (a key
    renamed onto ``action`` gets the policy's action window), where they differ from those of its own names.

    Args:
        native: The component's ``LeRobotDataset``, built by LeRobot's factory.
        component: Its ``mixtures.spec.Component`` (``rename``).
        trained_cfg: What is trained (lerobot-train's ``cfg.trainable_config``).
    """
    own = list(native.meta.features)
    served = [component.rename.get(key, key) for key in own]
    by_mixture_name = compat.policy_windows(trained_cfg, served, native.meta.fps) or {}
    wanted = {key: by_mixture_name[name] for key, name in zip(own, served) if name in by_mixture_name} or None
    if wanted != (native.delta_timestamps or None):
        compat.set_windows(native, wanted)


def check_windows(spec, natives, layout) -> None:
    """Every component windows a served key the same way (LeRobot's ``delta_indices``, in steps), or not at all.

    Why: a batch is one key's values stacked over components; a component with no window for a key the others
    window (a key renamed onto ``action`` in datasets built outside ``lerobot-train``) crashed the ``native``
    mixture's collate and was served another's window by the joined batches (a reviewer's reproduction).

    Args:
        spec: The ``MixtureSpec`` (each component's ``rename``).
        natives: The components' ``LeRobotDataset`` objects.
        layout: The mixture's ``Layout`` (its served features).

    Raises:
        MixtureError: two components window a served key differently, naming both and the key.
    """
    seen: dict[str, tuple[int, list | None]] = {}
    for k, native in enumerate(natives):
        deltas = compat.reader_settings(native).delta_indices or {}
        for key in native.meta.features:
            name = layout.renames[k].get(key, key)  # a dropped key maps to no served name (it is not served)
            if name not in layout.features:
                continue
            mine = None if deltas.get(key) is None else [int(x) for x in deltas[key]]
            first, theirs = seen.setdefault(name, (k, mine))
            if theirs != mine:
                served = f" (served as {name!r})" if name != key else ""
                raise MixtureError(
                    f"{MIXTURE_FLAG}: {component_name(spec, k)}'s {key!r}{served} has the window {mine}, "
                    f"{component_name(spec, first)}'s {name!r} has {theirs} (delta_timestamps in steps): build every "
                    f"component with the same delta_timestamps by mixture names (lerobot-train does)"
                )


def sampler_rows(native, drop_n_last_frames: int, where: str = "a component") -> np.ndarray:
    """The rows lerobot-train's sampler serves of ``native`` alone: LeRobot's own ``EpisodeAwareSampler``, built
    as lerobot-train 0.6.1 builds it for one dataset (its episode table, its episode filter, ``drop_n_last_frames``),
    its frames read as the single-dataset backends read them (``compat.sampler_indices``).

    Why LeRobot's sampler itself: the rule (which episodes, which frames at their ends, episodes too short for it
    skipped) stays LeRobot's, for a mixture's component as for one dataset.

    Args:
        native: A component's ``LeRobotDataset``.
        drop_n_last_frames: Frames left out at each episode's end (:func:`drop_n_last_frames_of`).
        where: The component, for the message.

    Returns:
        The rows (the dataset's indices), in the sampler's unshuffled order.

    Raises:
        MixtureError: no row is left (every episode shorter than ``drop_n_last_frames``).
    """
    try:
        sampler = compat.episode_sampler(native, drop_n_last_frames)
    except ValueError as exc:
        raise MixtureError(
            f"{MIXTURE_FLAG}: {where}: LeRobot's sampler serves none of its frames with drop_n_last_frames="
            f"{int(drop_n_last_frames)} (the policy's; {exc}); leave it out or give it longer episodes"
        ) from None
    return compat.sampler_indices(sampler)


def _dropped(steps: int, drops: list[int], target_fps: float | None) -> str:
    """The frames each component's passes leave out at an episode's end, for the summary line."""
    counts = sorted(set(drops))
    if target_fps is None:
        return f"{steps}"
    shown = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"{shown} recorded frames (the policy's {steps} steps at {target_fps:g} fps)"


def local_tables(spec, choice):
    """The mixture with every remote component ``root`` replaced by a local mirror of its tables
    (``single.remote_tables``, in the backend's cache directory): what LeRobot reads its metadata and builds
    its dataset object from, as for one remote dataset; the frames are streamed from the root by the backend.

    Args:
        spec: The ``MixtureSpec``.
        choice: The backend choice (refused unless it reads a remote source, when a root is remote).

    Returns:
        ``(local spec, remote roots)``: the spec with local roots, and each component's remote root or ``None``.

    Raises:
        MixtureError: a remote root with a backend that reads local roots only (:func:`check_remote_roots`).
        SourceError: a remote root holding no LeRobot dataset.
    """
    check_remote_roots(spec, choice)
    remotes = [remote_root(c) for c in spec.components]
    if not any(remotes):
        return spec, remotes
    components = tuple(
        c if url is None else dataclasses.replace(c, root=remote_tables(url, choice))
        for c, url in zip(spec.components, remotes)
    )
    return dataclasses.replace(spec, components=components), remotes


def _streamed_choice(choice, component):
    """The backend choice serving ``component``: the run's, reading a remote ``root`` as its source."""
    url = remote_root(component)
    if url is None:
        return choice
    return choose(choice.name, **{**choice.options.given(), choice.spec.remote_source_option: url})


def _component_choice(choice, target_fps: float | None):
    """The backend choice each component is built with: the run's, with the mixture's ``target_fps`` given to a
    backend that converts rates."""
    if target_fps is None or not converts_rates(choice) or getattr(choice.options, "target_fps", None) == target_fps:
        return choice
    if getattr(choice.options, "delta_timestamps", None) is not None:  # the backend's check blamed its own options
        raise MixtureError(
            f"{MIXTURE_FLAG}'s target_fps ({target_fps:g}) and {OPTION_PREFIX}.delta_timestamps both set where the "
            f"windows' offsets fall; leave delta_timestamps out (the policy's windows are then served at "
            f"{target_fps:g} fps in every component)"
        )
    return choose(choice.name, **{**choice.options.given(), "target_fps": float(target_fps)})


class LeRobotHooks(MixtureHooks):
    """LeRobot's items and batches are flat dicts of tensors (the defaults); a worker process of a mixture opens its
    own video decoders (``compat.fresh_video_decoders``); image transforms draw random numbers."""

    def in_worker(self) -> None:
        """A forked worker drops the video decoders it inherited (``compat.fresh_video_decoders``)."""
        compat.fresh_video_decoders()

    def draws_random(self, component_dataset) -> bool:
        """LeRobot's image transforms draw random numbers per item (``image_transforms`` of a ``LeRobotDataset`` and
        of the backends' datasets alike).

        Args:
            component_dataset: The component's dataset.

        Returns:
            Whether it applies image transforms.
        """
        return getattr(component_dataset, "image_transforms", None) is not None


class LeRobotMixture(MixtureDataset):
    """A mixture as ``lerobot-train`` sees a dataset: ``meta`` (:class:`MixtureMetadata`), ``num_frames``,
    ``num_episodes``, ``episodes`` (``None``: every row of :attr:`meta`'s episode table), ``fps``, ``features``; items
    and batches from ``mixtures.dataset.MixtureDataset``, each with ``dataset_index``.

    Args:
        *args: ``MixtureDataset``'s.
        meta: The :class:`MixtureMetadata`.
        natives: Each component's ``LeRobotDataset`` (the backend's dataset serves it).
        joined_batches: Build batches once over all components where they allow it (:meth:`join`); ``False``: part
            by part (the reference the joined batches are tested against).
        **kwargs: ``MixtureDataset``'s.
    """

    setting = MIXTURE_FLAG

    def __init__(self, *args, meta: MixtureMetadata, natives, joined_batches: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.meta = meta
        self.natives = list(natives)
        self.episodes = None
        self.absolute_to_relative_idx = None
        if joined_batches:
            self.join()

    def join(self) -> bool:
        """Build the batches once over all components from now on (``lerobot.joined``) where they allow it; the
        keys and their order are those of a batch built per component (one row of the first component is read).

        Returns:
            Whether the batches are joined.
        """
        self.joined = None
        if JoinedBatches.joinable(self) is None:  # checked before a row is read
            return False
        keys = [k for k in self._per_component(np.zeros(1, np.int64), np.zeros(1, np.int64)) if k != DATASET_INDEX]
        self.joined = JoinedBatches.of(self, keys)
        return True

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
        """``mixture(a, b, ...)`` (``mixture_meta.mixture_repo_id``: past 8 components, the rest counted and a digest
        of every name)."""
        return self.meta.repo_id

    @property
    def roots(self) -> list[str]:
        """Each component's dataset root (what the ranks of a run must share)."""
        return [str(n.root) for n in self.natives]

    def __repr__(self):
        """The components (the first :data:`~robo_loaders_plugin.core.units.NAMED_IN_A_LINE`, then how many more)
        with their frames and weights, on one line whatever the mixture's size."""
        weights = [None] * len(self.names) if self.weights is None else [f"{w:g}" for w in self.weights]
        parts = some_of(
            f"{n} ({s} frames{'' if w is None else f', weight {w}'})"
            for n, s, w in zip(self.names, self.sizes, weights, strict=True)
        )
        how = "weighted by size" if self.weights is None else "weighted"
        return f"LeRobotMixture({parts}; {how}; fps={self.fps:g})"


@garbage_collected_once()
def build_mixture(
    spec,
    natives,
    choice,
    *,
    layout: Layout | None = None,
    use_imagenet_stats: bool = True,
    seed=None,
    drop_n_last_frames: int = 0,
):
    """Serve LeRobot datasets as one mixture through a backend, as ``lerobot-train --dataset.mixture`` does.

    Args:
        spec: The ``MixtureSpec`` (:func:`parse`); its components in the order of ``natives``. A remote ``root`` is
            streamed by the backend (its source option set to the root; ``native`` refuses it).
        natives: Each component's ``LeRobotDataset`` (built by LeRobot's factory, or by user code with the same
            ``delta_timestamps``, transforms and ``return_uint8=True`` for every component); a remote component's
            built from a local copy of its tables (:func:`local_tables`) or of the dataset.
        choice: The backend choice (``flags.choose``, ``flags.backend_choice``); ``native`` serves ``natives``.
        layout: What the metadata decided (default: checked here from ``natives``' metadata).
        use_imagenet_stats: ImageNet's mean and std on the mixture's camera statistics, as LeRobot's factory.
        seed: The order seed when lerobot-train's sampler gives none (its ``--seed``).
        drop_n_last_frames: Frames each pass leaves out at every episode's end, as LeRobot's sampler does for one
            dataset (the policy's ``drop_n_last_frames``; :func:`sampler_rows`). Every row stays an item
            (``mix[i]``, ``len``); only the passes skip them.

    Returns:
        The :class:`LeRobotMixture`, recorded as a ``batch`` dataset for the adapter (``cycle``).

    Raises:
        MixtureError: the components' metadata disagree (``mixture_meta.check_components``), ``target_fps`` with a
            backend that does not convert rates, a component whose episodes ``drop_n_last_frames`` empties, or a
            remote root with a backend that reads local roots only.
        ResourceRefused: the components do not fit the machine together (``mixtures.footprint``), before any is
            built.
        RoboLoadersError: a component is refused by the backend (its own message, naming the dataset).
    """
    if len(natives) != len(spec.components):
        raise ValueError(f"{len(natives)} datasets for a mixture of {len(spec.components)} components")
    check_rates(spec, choice)
    check_remote_roots(spec, choice)
    target = target_fps_of(spec, choice)
    if layout is None:
        layout = check_components(spec, [n.meta for n in natives], target)
    check_windows(spec, natives, layout)
    names = [c.source for c in spec.components]
    # the policy counts drop_n_last_frames in its steps: at a converted rate, each component's recorded frames
    converting = target if converts_rates(choice) else None
    drops = [recorded_frames(drop_n_last_frames, float(n.meta.fps), converting) for n in natives]
    eligible = [sampler_rows(n, d, component_name(spec, k)) for k, (n, d) in enumerate(zip(natives, drops))]
    for k, dropped in enumerate(layout.dropped):
        listed = [key for key in dropped if key in spec.components[k].drop]
        uncommon = [key for key in dropped if key not in listed]
        if listed:
            logger.info(f"mixture: {component_name(spec, k)}'s {listed} left out (its drop lists them)")
        if uncommon:
            logger.info(
                f"mixture: {component_name(spec, k)}'s {uncommon} left out (not in every component after the renames)"
            )
    component_choice = _component_choice(choice, target)
    for native in natives[:1]:  # one factory's settings for every component: the user's options checked once
        items_choice(native, component_choice, f"{MIXTURE_FLAG}: ")
    component_choice = bounded_buffer(component_choice, lambda given: choose(component_choice.name, **given))
    choices = [_streamed_choice(component_choice, c) for c in spec.components]
    # each component's meta/ checked once, and its store looked for once, for its plan and its build
    with sources_checked_once(), cache.placements_planned_once():
        if component_choice.name != DEFAULT_BACKEND:
            check_mixture_fits(
                MIXTURE_FLAG,
                names,
                lambda k, committed: choices[k].plan(natives[k], committed=committed),
                backend=component_choice.name,
                option_prefix=OPTION_PREFIX,
            )
        served = natives
        if component_choice.name != DEFAULT_BACKEND:
            with ComponentLines(len(natives), component_choice.name, logger, MIXTURE_FLAG) as lines:
                served = []
                for k, (n, c, ch) in enumerate(zip(natives, spec.components, choices)):
                    served.append(build_dataset(n, ch, repo_id=c.source, seed=seed, log_level=lines.level))
                    lines.built(component_name(spec, k), served[-1])
    component_stats = [
        renamed_stats(n.meta.stats, dict(c.rename or {}), c.drop) for n, c in zip(natives, spec.components)
    ]
    stats = mixture_stats(component_stats, layout.features, use_imagenet_stats, layout.padding)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in served])[:-1]]).astype(np.int64)
    meta = MixtureMetadata(
        [n.meta for n in natives], names, layout, stats, component_stats, mixture_episodes(natives, offsets)
    )
    weights = spec.weight_vector()
    summary = (
        f"mixture of {len(served)} ({'weighted by size' if weights is None else 'weighted'}): "
        + some_of(f"{n} {len(d)} frames" for n, d in zip(names, served))
        + f"; {len(layout.features)} common features at {layout.fps:g} fps"
        + (
            f"; passes leave each episode's last {_dropped(drop_n_last_frames, drops, converting)} out"
            if drop_n_last_frames
            else ""
        )
    )
    mixture = LeRobotMixture(
        served,
        names,
        layout.renames,
        layout.keep,
        LeRobotHooks(),
        weights,
        0 if seed is None else int(seed),
        Serving(summary),
        eligible,
        layout.padding,
        layout.cameras,
        layout.missing,
        meta=meta,
        natives=natives,
    )
    iteration.record_built(mixture, choice, seed=seed, served_as=BATCH)
    logger.info(f"lerobot data backend: {choice.name} [{meta.repo_id}] {summary}")
    return mixture


@garbage_collected_once()  # the index, the datasets and the mixtures: one block
def make_mixture_datasets(cfg, split: bool):
    """``make_dataset``/``make_train_eval_datasets`` for ``--dataset.mixture``: metadata checked first, then each
    component built by LeRobot's own factory (split by ``--dataset.eval_split`` as LeRobot splits one dataset; a
    remote root from the local mirror of its tables, :func:`local_tables`) and served by the backend, then the
    mixture(s).

    Args:
        cfg: lerobot-train's config (``cfg.dataset.mixture`` set).
        split: Split as ``make_train_eval_datasets`` does.

    Returns:
        ``(train mixture, eval mixture or None)``.

    Raises:
        MixtureError: the flags or the components' metadata are refused.
        RoboLoadersError: a component is refused by the backend.
    """
    spec = mixture_of(cfg.dataset)
    choice = backend_choice(cfg.dataset)
    check_flags(cfg.dataset, spec)  # a config built in Python skipped the parser's check
    local, remotes = local_tables(spec, choice)
    # the components' meta/ read once into the mixture index (mixtures.index), in the backend's cache directory;
    # a later run reads only the components whose meta/ changed
    cache_dir = getattr(choice.options, "cache_dir", None)
    imagenet = bool(getattr(cfg.dataset, "use_imagenet_stats", True))
    seed = getattr(cfg, "seed", None)
    drop = drop_n_last_frames_of(cfg)  # the training sampler's; lerobot-train's eval loader has no sampler
    # LeRobot's reads of its tables were most of a component's build; the backends' sources then read the same
    # files' tables from the block's reads while the files are unchanged (compat.active_reads)
    # and on a later start, each parquet file from its checked Arrow copy beside the index while it is unchanged
    with compat.tables_read_directly(kept_tables(cache_dir, f"{OPTION_PREFIX}.cache_dir")):
        reread: list[int] = []
        metas = indexed_metas(local, cfg.dataset, cache_dir, f"{OPTION_PREFIX}.cache_dir", reread)
        layout = check_components(local, metas, target_fps_of(spec, choice))

        def native(k: int):
            where = f"{MIXTURE_FLAG}: {component_name(spec, k)}"
            with compat.tables_only() if remotes[k] else contextlib.nullcontext():  # videos streamed, not local
                return native_datasets(component_config(cfg, local.components[k]), split, where, "its root")

        alone = [k for k, url in enumerate(remotes) if url]
        # threads for the components read from their files (a first start: I/O to overlap), one after another for
        # those the index served (their tables' kept copies: Python holding the GIL, which threads slow down)
        served = sorted(set(range(len(remotes))) - set(reread))
        built = natives_built(native, len(remotes), alone=alone, serial=served)
        trains = [train for train, _ in built]
        evals = [evaluation for _, evaluation in built]
        trained = getattr(cfg, "trainable_config", None) or getattr(cfg, "policy", None)
        for c, train, evaluation in zip(local.components, trains, evals):
            for n in (train, evaluation):
                if n is not None and trained is not None:
                    windows_by_mixture_names(n, c, trained)
        train = build_mixture(
            spec, trains, choice, layout=layout, use_imagenet_stats=imagenet, seed=seed, drop_n_last_frames=drop
        )
        TRAINED[:] = [train]
        if getattr(cfg, "resume", False) and getattr(cfg, "checkpoint_path", None) is not None:
            warn_resized(
                cfg.checkpoint_path,
                [
                    (n, int(t.num_frames), int(t.num_episodes))
                    for n, t in zip(train.meta.names, train.natives, strict=True)
                ],
            )
        if any(e is None for e in evals):
            return train, None
        return train, build_mixture(spec, evals, choice, layout=layout, use_imagenet_stats=imagenet, seed=seed)


def resume_position(state: dict, sampler_frames: int, pass_length: int, batch_size: int, world_size: int):
    """The mixture's (epoch, batch) a resumed run starts at, from the state ``--resume`` gave LeRobot's sampler.

    Why: LeRobot positions its ``EpisodeAwareSampler`` from the checkpoint's step with the sampler's length
    (``compute_sampler_state``). That sampler runs over the mixture's episode table; the mixture's pass draws each
    component's rows its own sampler would serve (:func:`sampler_rows`), the same count in LeRobot's usual layout
    (then this is the sampler's own position), not when a component's rows are not its episodes' (then the step is
    recovered from the sampler's count and cut by the mixture's pass).

    Args:
        state: The sampler's ``{"epoch", "start_index"}``.
        sampler_frames: The sampler's length.
        pass_length: The mixture's pass length (``MixtureDataset.pass_length``).
        batch_size: Items per batch per process.
        world_size: Processes.

    Returns:
        ``(epoch, batch)`` of the mixture's passes.
    """
    per_step = batch_size * world_size
    sampler_batches = math.ceil(math.ceil(int(sampler_frames) / batch_size) / world_size)  # LeRobot's count
    step = int(state["epoch"]) * sampler_batches + int(state["start_index"]) // per_step
    mixture_batches = max(1, -(-int(pass_length) // per_step))
    return divmod(step, mixture_batches)
