"""``gpu_resampler`` on LeRobot: every episode held as tensors in tiers, whole batches of LeRobotDataset's items
in a few gathers, in the native sampler's order, with optional rate conversion.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
from tqdm.auto import tqdm

from robo_loaders_plugin.core.errors import BackendOptionError
from robo_loaders_plugin.core.in_flight import indexed_in_flight
from robo_loaders_plugin.core.iteration import Serving
from robo_loaders_plugin.core.progress import inner_bars_quiet
from robo_loaders_plugin.frames.base import FieldInfo
from robo_loaders_plugin.lerobot.dataset import (
    OPTION_PREFIX,
    LeRobotSamples,
    check_rows_match,
    native_source,
    sample_bytes,
)
from robo_loaders_plugin.sources.lerobot_v3 import LeRobotEpisodes, decoder_identity, gaps_at_risk, window_gaps
from robo_loaders_plugin.windows.lerobot import TRANSITION_PREFIX, transition_ends

# what fits when this backend does not (its refusal names these)
ALTERNATIVES = (
    "backend 'compressed_cache' (compressed frames, spilled to a file-backed cache on disk when RAM cannot hold them)",
    "backend 'video_stream' (decodes the dataset's own videos, writes nothing, a bounded buffer)",
)


def gpu_resampler_dataset(native, *, options):
    """Every episode's fields held as tensors (on the training GPU when they fit), batches gathered in a few index
    operations over lerobot-train's sampler order, delta steps optionally at another rate (``gpu_resampler``).
    The tiers (GPU, host raw, host compressed, spilled to disk) are planned and checked from metadata before any
    data is read.

    Args:
        native: The ``LeRobotDataset`` LeRobot's own factory built (episode selection, ``delta_timestamps``,
            transforms, tolerance).
        options: The backend's resolved options object (``core.options``; declared in this package's ``__init__``).

    Returns:
        A :class:`~robo_loaders_plugin.lerobot.dataset.LeRobotSamples` over :class:`TieredFrames`; batches are built
        in the training process without threads when every episode is on the GPU.

    Raises:
        CompatError: the installed LeRobot is not the version the backends support.
        BackendOptionError: a bad ``device``, or ``delta_timestamps`` naming keys the dataset does not have, or
            bad ``modes``.
        SourceError: the dataset is not supported, or its rows differ from LeRobot's.
        core.footprint.ResourceRefused: the data does not fit the tiers' budgets or the machine.
    """
    from robo_loaders_plugin.backends.gpu_resampler.tensors import training_device
    from robo_loaders_plugin.backends.gpu_resampler.tiers import plan_tiers_checked
    from robo_loaders_plugin.backends.gpu_resampler.tiers_at_start import kept_or_filled
    from robo_loaders_plugin.windows.rates import resolve_modes

    target_fps = options.target_fps
    source, settings = native_source(native)
    train_device = training_device(options.device, OPTION_PREFIX)
    delta_steps = _delta_steps(native, settings.delta_indices, target_fps, options.delta_timestamps)
    meta_size = source.data_size(native.episodes)
    batches = indexed_in_flight(sample_bytes(meta_size, settings, delta_steps))
    plan_tiers_checked(
        meta_size, train_device, options, OPTION_PREFIX, ALTERNATIVES, quiet=True, batches=batches
    )  # before reading any data; made again below in the rows' order
    episodes = LeRobotEpisodes(source, settings.tolerance_s, native.episodes)
    episodes.videos.window_gaps = window_gaps(settings.delta_indices, source.video_keys)
    check_rows_match(native, episodes.columns, episodes.arrays["index"], episodes.arrays, images=episodes.images())
    fields = set(episodes.arrays) | set(episodes.camera_keys)
    unknown = sorted(set(delta_steps or {}) - fields)
    if unknown:
        raise BackendOptionError(
            f"{OPTION_PREFIX}.delta_timestamps names {unknown}, which {native.repo_id} does not "
            f"have; its features are {sorted(fields)}"
        )
    lengths = [e - s for _, s, e in episodes.runs]
    # the tiers again in the rows' order (the check above summed the episodes in index order: the same bytes)
    size = dataclasses.replace(meta_size, lengths=np.asarray(lengths, dtype=np.int64))
    plan, host_limit = plan_tiers_checked(size, train_device, options, OPTION_PREFIX, ALTERNATIVES, batches=batches)
    cameras = set(episodes.camera_keys)

    def each_episode():
        for ep, _, _ in tqdm(
            episodes.runs,
            desc=f"gpu_resampler [{native.repo_id}]",
            unit="episode",
            mininterval=0.5,
            disable=inner_bars_quiet(),
        ):
            yield episodes.read(ep)[0]

    def infos_of(first: dict) -> dict:
        return {k: FieldInfo(a.dtype, tuple(a.shape[1:]), k in cameras) for k, a in first.items()}

    key: dict[str, object] = {
        "framework": "lerobot",
        "root": os.path.abspath(str(source.root)),
        "episodes": None if native.episodes is None else [int(e) for e in native.episodes],
        "tolerance_s": float(settings.tolerance_s),
        "fields": sorted(fields),
        # frames decoded by another torchcodec/FFmpeg are another tier (PNG images need no decoder)
        "decoder": decoder_identity() if source.video_keys else None,
    }
    risk = gaps_at_risk(episodes.videos.window_gaps, settings.tolerance_s, source.fps)
    if risk:  # tiers built without these windows' check are not theirs (gaps_at_risk); absent, keys are as before
        key["window_gaps"] = risk
    names = [f"episode_{ep}" for ep, _, _ in episodes.runs]
    frames, held, hold, reused = kept_or_filled(
        key=key,
        source=source,
        size=size,
        plan=plan,
        host_limit=host_limit,
        episodes=each_episode,
        infos_of=infos_of,
        options=options,
        where=OPTION_PREFIX,
        device=train_device,
        names=names,
    )
    plan = frames.plan  # the entry's tiers (a reused entry keeps the boundary it was built with)
    ends = None
    if target_fps and delta_steps and options.delta_timestamps is None:
        ends = transition_ends(settings.delta_indices or {}, float(native.meta.fps) / float(target_fps)) or None
    named = sorted(set(options.modes or {}) & set(ends or {}))
    if named:
        raise BackendOptionError(
            f"{OPTION_PREFIX}.modes names {named}: what a transition ended with is read at the last recorded step "
            f"the transition covers, not between recorded steps; leave {named} out of modes"
        )
    between = {k: frames.infos[k] for k in delta_steps or {} if k not in (ends or {})}
    modes = resolve_modes(between, options.modes, OPTION_PREFIX)
    rates = f", windows at {target_fps:g} Hz on {source.fps} Hz data" if target_fps and delta_steps else ""
    if target_fps and not delta_steps:  # nothing converted: the items are the recorded frames (a reviewer's finding)
        rates = f", target_fps {target_fps:g} converts nothing (no delta_timestamps windows: items are single frames)"
    where = plan.describe(str(train_device)) + f", {held}"
    if frames.spilled_while_filling:
        where += f" (then {frames.spilled_while_filling})"
    summary = (
        f"{len(lengths)} episodes, {sum(lengths)} frames, {where}, batches on {train_device}{rates}; "
        f"bounded: {plan.footprint.bound}"
    )
    on_device = plan.device == len(lengths) and train_device.type == "cuda"
    return LeRobotSamples(
        native,
        frames,
        episodes.runs,
        episodes.columns,
        source.video_keys,
        source.image_keys,
        backend_name="gpu_resampler",
        location=f"tensors: {where}",
        delta_steps=delta_steps,
        modes=modes,
        transition_ends=ends,
        target_fps=float(target_fps) if target_fps and delta_steps else None,
        serving=Serving(summary, batch_threads=0 if on_device else None, hold=hold, reused=reused),
    )


def _delta_steps(native, delta_indices, target_fps, delta_timestamps) -> dict | None:
    """Each delta key's offsets in recorded steps: LeRobot's ``delta_indices`` (the policy's steps at the recorded
    rate), those steps at ``target_fps``, or explicit ``delta_timestamps`` in seconds, at any offsets (LeRobot
    itself only accepts multiples of 1/fps)."""
    fps = float(native.meta.fps)
    if delta_timestamps is not None:  # checked (finite, bounded, not with target_fps) by the option declarations
        _check_policy_shapes(delta_timestamps, delta_indices, fps, set(native.meta.features))
        outcomes = sorted(k for k in delta_timestamps if k.startswith(TRANSITION_PREFIX))
        if outcomes:  # a window in seconds does not say where each transition ends (transition_ends)
            raise BackendOptionError(
                f"{OPTION_PREFIX}.delta_timestamps has windows for {outcomes}, what a transition to the next step "
                f"ended with: offsets in seconds do not say where each transition ends; leave them out and give "
                f"target_fps instead (they are then read at the last recorded step each transition covers)"
            )
        # the keys it names at its offsets; the policy's other windows kept (they replaced them, so a partial
        # option served the other keys as single frames without their pad masks: a reviewer's reproduction)
        steps = {k: [float(i) for i in v] for k, v in (delta_indices or {}).items()}
        steps.update({key: [float(x) * fps for x in offsets] for key, offsets in delta_timestamps.items()})
        return steps
    if delta_indices is None or target_fps is None:
        return None
    return {k: [float(i) * fps / target_fps for i in v] for k, v in delta_indices.items()}


def _check_policy_shapes(delta_timestamps: dict, delta_indices: dict | None, fps: float, features=()) -> None:
    """The ``delta_timestamps`` option gives windows of the policy's (``delta_indices``, when the dataset has them)
    with as many offsets: its offsets may be anywhere, but another count, or a window for a key the policy takes
    whole, changes the batches' shapes, and the policy failed deep in its forward pass (a reviewer's reproduction:
    ACT with 10 action offsets for its chunk of 5). A policy window the option leaves out is not refused: a
    mixture's component has windows for keys the mixture drops (LeRobot's factory windows every observation key).

    Raises:
        BackendOptionError: a key the policy has no window for, or another number of offsets.
    """
    if delta_indices is None:
        return
    # a key the dataset does not have is named by the check of the dataset's fields, with what it has
    extra = sorted((set(delta_timestamps) & set(features)) - set(delta_indices))
    if extra:
        raise BackendOptionError(
            f"{OPTION_PREFIX}.delta_timestamps has windows for {extra}, which the policy takes as single frames (its "
            f"windows are for {sorted(delta_indices)}); give offsets for those keys only (or leave the option out)"
        )
    for key in sorted(set(delta_timestamps) & set(delta_indices)):
        if len(delta_timestamps[key]) != len(delta_indices[key]):
            seconds = [round(float(i) / fps, 6) for i in delta_indices[key]]
            raise BackendOptionError(
                f"{OPTION_PREFIX}.delta_timestamps[{key!r}] has {len(delta_timestamps[key])} offsets, the policy's "
                f"window has {len(delta_indices[key])} ({seconds} s at {fps:g} fps); give as many, at any offsets"
            )


def gpu_resampler_footprint(native, *, options, committed):
    """What the tiers of this dataset will need, planned as :func:`gpu_resampler_dataset` plans them, with
    ``committed`` held beside them (``BackendSpec.footprints``): ``meta/`` only, nothing read.

    Args:
        native: The ``LeRobotDataset`` LeRobot's own factory built.
        options: The backend's resolved options object.
        committed: A ``core.footprint.Footprint`` other datasets hold beside this one.

    Returns:
        A ``core.footprint.Planned``.

    Raises:
        CompatError: the installed LeRobot is not the version the backends support.
        BackendOptionError: a bad ``device``.
        core.footprint.ResourceRefused: ``max_memory`` is below the least any plan holds.
    """
    from robo_loaders_plugin.backends.gpu_resampler.tensors import training_device
    from robo_loaders_plugin.backends.gpu_resampler.tiers import planned_tiers

    source, settings = native_source(native)
    train_device = training_device(options.device, OPTION_PREFIX)
    size = source.data_size(native.episodes)
    delta_steps = _delta_steps(native, settings.delta_indices, options.target_fps, options.delta_timestamps)
    batches = indexed_in_flight(sample_bytes(size, settings, delta_steps))
    return planned_tiers(size, train_device, options, OPTION_PREFIX, ALTERNATIVES, committed, batches)
