"""The factories: read the source once into a JPEG store (``extend.build_or_reuse``), then serve the framework's
samples from it with the framework's own window rules (``extend.RobomimicSamples`` / ``extend.LeRobotSamples``)."""
from __future__ import annotations

import os

from robo_loaders_plugin import extend

from robo_loaders_jpeg.frames import JpegFrames, is_camera, verify, write_store


def _summary(frames: JpegFrames, reused: bool, n_episodes: int, n_samples: int, episodes: str = "episodes") -> str:
    m = frames.meta
    ratio = m["raw_frame_bytes"] / m["jpeg_bytes"] if m["jpeg_bytes"] else float("nan")
    return (f"{n_episodes} {episodes}, {n_samples} samples, camera frames as JPEG q{m['quality']} "
            f"({m['raw_frame_bytes'] / 1e6:.1f} MB -> {m['jpeg_bytes'] / 1e6:.1f} MB, {ratio:.1f}x) in "
            f"{'reused ' if reused else ''}{frames.directory}")


def robomimic_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options):
    """robomimic's SequenceDataset samples, camera frames from JPEG."""
    opts, path = extend.robomimic_sequence(config, obs_keys, dataset_path)
    source = extend.RobomimicHdf5(path)
    with source.open() as f:
        demos = source.demos(f, filter_by_attribute)
        if not demos:
            raise extend.SourceError(f"{path}: no demos selected (filter key {filter_by_attribute!r} is empty)")
        first = extend.robomimic_demo_fields(source, f, demos[0], opts)
    cameras = {k for k, a in first.items() if is_camera(a)}

    def episodes():
        with source.open() as f:
            for demo in demos:
                yield demo, extend.robomimic_demo_fields(source, f, demo, opts)

    key = {"source": os.path.realpath(path), "demos": demos, "fields": opts.field_names(),
           "cache_mode": opts.hdf5_cache_mode, "quality": options.quality}
    directory, hold, reused = extend.build_or_reuse(
        kind="jpeg-frames-robomimic", source=source, key=key, cache_dir=options.cache_dir, check=verify,
        build=lambda d: write_store(d, episodes(), options.quality, cameras),
        description=f"JPEG frames of {path}", option_prefix=extend.ROBOMIMIC_OPTIONS)
    frames = JpegFrames(directory)
    windows = extend.SequenceWindows(frames.lengths, opts)
    return extend.RobomimicSamples(frames, windows, demos=demos, hdf5_path=path,
                                   filter_by_attribute=filter_by_attribute, backend_name="jpeg_frames",
                                   location=directory,
                                   serving=extend.Serving(_summary(frames, reused, len(demos), len(windows), "demos"),
                                                          hold=hold))


def lerobot_dataset(native, *, options):
    """LeRobotDataset's items, camera frames from JPEG (decoded once from LeRobot's videos when the store is built)."""
    episodes = extend.lerobot_episodes(native)
    source = episodes.source

    def read():
        for ep, _, _ in episodes.runs:
            yield f"episode_{ep}", episodes.read(ep)[0]

    key = {"root": str(source.root), "episodes": native.episodes, "tolerance_s": episodes.tolerance_s,
           "quality": options.quality}
    directory, hold, reused = extend.build_or_reuse(
        kind="jpeg-frames-lerobot", source=source, key=key, cache_dir=options.cache_dir, check=verify,
        build=lambda d: write_store(d, read(), options.quality, set(episodes.camera_keys)),
        description=f"JPEG frames of {source.root}", option_prefix=extend.LEROBOT_OPTIONS)
    frames = JpegFrames(directory)
    if frames.meta["episodes"] != [f"episode_{ep}" for ep, _, _ in episodes.runs]:
        raise extend.SourceError(f"{directory} does not hold the episodes {native.repo_id} selects; delete it")
    n = int(frames.lengths.sum())
    return extend.LeRobotSamples(native, frames, episodes.runs, episodes.columns, source.video_keys,
                                 source.image_keys, backend_name="jpeg_frames", location=directory,
                                 serving=extend.Serving(_summary(frames, reused, len(episodes.runs), n), hold=hold))
