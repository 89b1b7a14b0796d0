"""``robo-loaders convert robomimic IN.hdf5 OUT_DIR``: a robomimic HDF5 file as robo-shards, losslessly (every
dataset of every demo in its file dtype, camera frames compressed), with the file's metadata (``env_args``,
``total``, per-demo attributes, filter-key masks) and its source fingerprint in ``dataset.json``.

With ``--frames h264|hevc|av1`` the RGB cameras (uint8 (N, H, W, 3) datasets, ``obs/`` and ``next_obs/``) are
stored lossily instead, one video segment per demo and camera (``storage/video.py``), for image datasets that do
not fit in RAM; everything else stays byte-identical. Each segment's loss is measured while converting and
reported per camera with the size against the HDF5 (:func:`video_report`)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Collection, Mapping

import numpy as np
from tqdm.auto import tqdm

from robo_loaders_plugin.core.byte_order import in_native_order
from robo_loaders_plugin.core.units import format_bytes
from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5, datasets
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.fingerprint import Fingerprint
from robo_loaders_plugin.storage.frame_layout import sampled_ratio
from robo_loaders_plugin.storage.shards import DEFAULT_SHARD_BYTES, ShardReader, executors, manifest, verify_dir
from robo_loaders_plugin.storage.shards.disk_estimate import check_conversion_disk
from robo_loaders_plugin.storage.shards.format import check_output_dir
from robo_loaders_plugin.storage.video import (
    DEFAULT_FPS,
    VideoSettings,
    check_frame_size,
    encode_segment,
    psnr_from_mse,
    squared_error,
)

DEFAULT_MIN_PSNR = 35.0  # dB, a camera segment over its frames (the floor the docs and parity tests hold them to)


def is_camera(arr: np.ndarray) -> bool:
    """What ``--frames`` stores as video: RGB frames (depth maps and other arrays stay lossless).

    Args:
        arr: A demo's dataset, read.

    Returns:
        Whether it is uint8 of shape (N, H, W, 3).
    """
    return arr.dtype == np.uint8 and arr.ndim == 4 and arr.shape[-1] == 3


def as_video(name: str, arr: np.ndarray, video_keys) -> bool:
    """Whether a demo's dataset is stored as video: an RGB camera (:func:`is_camera`) and, where the conversion
    names the keys it may encode (``video_keys``: a backend's config's ``rgb`` observations), one of them.

    Why the names: a key robomimic serves as ``low_dim`` or ``depth`` may be uint8 of shape (N, H, W, 3) too (a depth
    map packed into 24 bits over RGB), and encoded lossy it was served with errors of a million units, silently (a
    reviewer's reproduction); only what the config serves as an RGB image may be lossy.

    Args:
        name: The dataset's name under the demo (``obs/<key>``, ``next_obs/<key>``, ``actions``).
        arr: The dataset, read.
        video_keys: The observation keys that may be encoded, or ``None`` (every RGB camera: the CLI's ``--frames``).

    Returns:
        Whether it is encoded.
    """
    if not is_camera(arr):
        return False
    if video_keys is None:
        return True
    group, _, key = name.partition("/")
    return group in ("obs", "next_obs") and key in video_keys


def check_segment_psnr(segment, floor: float, where: str) -> None:
    """Refuse a camera segment whose decoded frames are further from the source than ``floor`` dB over all its
    frames.

    Why: the docs hold the robomimic video shards to a floor (35 dB), but it was enforced only by the tests; a noisy
    64x64 camera at crf 18 was served at 26 dB with nothing said (a reviewer's reproduction).

    Args:
        segment: The ``VideoSegment`` encoded.
        floor: The lowest PSNR (dB) allowed (0: none).
        where: The demo's dataset, for the message.

    Raises:
        VideoError: the segment is below the floor.
    """
    from robo_loaders_plugin.storage.video import VideoError

    if floor > 0 and segment.psnr < floor:
        raise VideoError(
            f"{where}: encoded at {segment.psnr:.2f} dB over its frames, below the floor of {floor:g} dB: convert with "
            "a lower crf ('robo-loaders convert robomimic IN OUT --frames h264 --crf 10', then give OUT as the "
            "backend's source), lower the floor (--min-psnr), or train with a backend that keeps frames lossless"
        )


def _worker(args):
    in_path, out_dir, codec_dict, lease_s = args[:4]
    video = VideoSettings.from_dict(args[4]) if len(args) > 4 and args[4] else None
    video_keys = set(args[5]) if len(args) > 5 and args[5] is not None else None
    floor = float(args[6]) if len(args) > 6 else 0.0
    source = RobomimicHdf5(in_path, check=False)  # validated by convert_robomimic before it planned the units

    def read(f, demo):
        fields, compressed = source.read_all(f, demo)
        if video is not None:
            for k in sorted(fields):
                if as_video(k, fields[k], video_keys):
                    fields[k] = encode_segment(fields[k], video, f"{in_path}: data/{demo}/{k}")
                    check_segment_psnr(fields[k], floor, f"{in_path}: data/{demo}/{k}")
                    compressed.discard(k)
        return fields, compressed

    with source.open() as f:
        return manifest.work(out_dir, FrameCodec(**codec_dict), lambda demo: read(f, demo), lease_s)


def _recorded_fps(meta: dict) -> int:
    """robosuite's ``control_freq`` from ``env_args`` (the video's frame rate; only its time base depends on it)."""
    try:
        fps = json.loads(meta["data_attrs"]["env_args"])["env_kwargs"]["control_freq"]
        return int(fps) if float(fps) == int(fps) and int(fps) >= 1 else DEFAULT_FPS
    except (KeyError, TypeError, ValueError):
        return DEFAULT_FPS


def frame_ratio(source: RobomimicHdf5, codec: FrameCodec | None = None) -> float | None:
    """The ratio the file's camera frames pack at in lossless shards, measured on a few of them
    (``storage.frame_layout.sampled_ratio``): the disk estimate of a conversion.

    Args:
        source: The file.
        codec: The shards' frame codec (``None``: ``FrameCodec()``'s default, what a conversion on first use takes).

    Returns:
        Decoded bytes / compressed bytes, or ``None`` when the file has no camera frames.
    """
    with source.open() as f:
        demos = source.stored_demos(f)
        size = source.data_size(f, demos, [name for name, _ in datasets(f[f"data/{demos[0]}"])])
        return sampled_ratio(source.sample_frames(f, demos, size.frame_step_bytes), codec or FrameCodec())


def convert_robomimic(
    in_path: str,
    out_dir: str,
    num_workers: int = 1,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    codec: FrameCodec | None = None,
    lease_s: float = 3600.0,
    progress: bool = True,
    fingerprint: Fingerprint | None = None,
    executor: str = "local",
    executor_options: Mapping | None = None,
    video: VideoSettings | None = None,
    cache_dir: str | None = None,
    video_keys: Collection[str] | None = None,
    min_psnr: float = DEFAULT_MIN_PSNR,
) -> dict:
    """Convert a robomimic HDF5 file into robo-shards in ``out_dir``, one record per demo. The file is validated
    and the disk checked against the estimated output (frames at the ratio a few sampled frames pack at) before
    the conversion starts; re-running with the same source and settings resumes an interrupted conversion
    (``storage.shards.manifest``), with other video settings it is refused.

    Args:
        in_path: The robomimic HDF5 file.
        out_dir: The robo-shards directory written.
        num_workers: Processes (or executor tasks) converting at once.
        shard_bytes: The target shard size in bytes.
        codec: The lossless frame codec (``None``: ``FrameCodec()``'s default).
        lease_s: Seconds a worker's claim on a work unit lasts before another may take it over.
        progress: Show a progress bar.
        fingerprint: The source's fingerprint when the caller has it (``None``: computed here).
        executor: Where the work units run (``storage/shards/executors.py``): ``local`` or a datatrove executor.
        executor_options: That executor's options (``None``: none).
        video: Store RGB cameras (:func:`is_camera`) as video segments with these settings (lossy; an ``fps`` left
            at the default is taken from the file's ``control_freq`` when it says), and add the
            :func:`video_report` to the result (``None``: every array lossless).
        cache_dir: The cache directory the record of the file's validation goes to (``storage.cache.records_dir``;
            a backend converting on first use passes its own ``cache_dir``; ``None``: the default cache root).
        video_keys: With ``video``, the observation keys that may be stored as video (:func:`as_video`: a backend
            passes its config's ``rgb`` keys); ``None``: every RGB camera. Recorded in the shards' metadata.
        min_psnr: With ``video``, the lowest PSNR (dB) of a camera segment over its frames
            (:func:`check_segment_psnr`; 0: no floor).

    Returns:
        ``episodes`` and ``shards`` (and ``video``, the report, with ``video``); for ``datatrove-slurm``, the
        submitted job's description (``executors.Submitted.as_dict``) instead.

    Raises:
        SourceError: the file is not a valid robomimic file (``sources.robomimic_hdf5``).
        ExecutorError: an unknown executor or options it does not take.
        ShardError: ``out_dir`` cannot be written, or a worker failed.
        VideoError: the video encoder is not available.
        core.footprint.ResourceRefused: the estimated output does not fit the disk.
        StaleSourceError: the source changed while it was converted (the conversion is withdrawn).
    """
    executors.check_options(executor, executor_options or {}, out_dir)
    if not math.isfinite(min_psnr) or min_psnr < 0:  # NaN compared false everywhere: no floor, said nowhere
        from robo_loaders_plugin.storage.video import VideoError

        raise VideoError(f"min_psnr (--min-psnr) must be a number of dB >= 0 (0: no floor), got {min_psnr!r}")
    codec = codec or FrameCodec()
    source = RobomimicHdf5(in_path, cache_dir=cache_dir)  # validated: demos, num_samples against every array
    check_output_dir(out_dir, str(in_path))
    with source.open() as f:  # the output must fit the disk: estimated from shapes and a few frames (frame_ratio)
        demos = source.stored_demos(f)
        every = [name for name, _ in datasets(f[f"data/{demos[0]}"])]
        # every demo's actions have a row per step (the file's num_samples is right); any other dataset of another
        # length is left out of the shards (read_all), refused where a config serves it (sequence.data_size): a
        # backend converting on first use refused an observation the config did not serve (a reviewer's reproduction)
        source.check_sized(["actions"])
        size = source.data_size(f, demos, [name for name in every if name not in source.unsized])
    check_conversion_disk(
        size,
        out_dir,
        video=video is not None,
        ratio=lambda: frame_ratio(source, codec),
        command="robo-loaders convert robomimic",
        alternatives=["--frames h264 (video members, ~20x smaller)"] if video is None else (),
        workers=num_workers,
    )
    fp = fingerprint or source.fingerprint()
    with source.open() as f:
        meta = source.metadata(f)
        sizes = {d: source.nbytes(f, d) for d in meta["demos"]}
    options = {"codec": codec.as_dict(), "shard_bytes": shard_bytes}
    # frames compress about 2x (video 20x or more), so plan units on that many times the target shard size
    ratio = 2
    if video is not None:
        video.check_available()
        with source.open() as f:  # every camera's frame size, from the first demo's shapes, before anything is planned
            for name, ds in datasets(f[f"data/{meta['demos'][0]}"]):
                if as_video(name, np.empty((0, *ds.shape[1:]), ds.dtype), video_keys):
                    check_frame_size(ds.shape[1], ds.shape[2], video, f"{in_path}: data/{meta['demos'][0]}/{name}")
        if video.fps == DEFAULT_FPS:
            video = dataclasses.replace(video, fps=_recorded_fps(meta))
        meta["video"] = options["video"] = video.as_dict()  # resuming with other settings is refused
        if video_keys is not None:
            meta["video_keys"] = options["video_keys"] = sorted(video_keys)
        if float(min_psnr) != DEFAULT_MIN_PSNR:
            # another floor than an interrupted run's is refused on resume: its done segments were held to that one
            # (a run killed at --min-psnr 0, resumed at the default, published a 26 dB segment; a reviewer's). The
            # default is left out, so conversions on first use keep the options they were planned with
            options["min_psnr"] = float(min_psnr)
        ratio = 20
    per_unit = manifest.unit_bytes(sum(sizes.values()), ratio * shard_bytes, num_workers)
    units = manifest.units_by_size(meta["demos"], sizes, per_unit)
    manifest.plan(out_dir, fp.content, units, options, source_files={"path": os.path.abspath(in_path), "names": None})
    args = (os.path.abspath(in_path), out_dir, codec.as_dict(), lease_s) + (
        (video.as_dict(), None if video_keys is None else sorted(video_keys), float(min_psnr)) if video else ()
    )
    res = executors.execute(
        executor,
        out_dir,
        _worker,
        args,
        num_workers,
        codec,
        meta,
        {"path": fp.path, "fingerprint": fp.as_dict()},
        f"convert {os.path.basename(in_path)}",
        progress,
        **dict(executor_options or {}),
    )
    if isinstance(res, executors.Submitted):
        return res.as_dict()
    manifest.withdraw_if_source_changed(out_dir, fp, source.fingerprint(fp), in_path)
    out = {"episodes": res.episodes, "shards": res.shards}
    if video is not None:
        out["video"] = video_report(out_dir, in_path)
    return out


def video_report(out_dir: str, in_path: str | None = None) -> dict:
    """Sizes and PSNR of converted shards: per video field (camera), its bytes against the raw frames and its PSNR
    over all its frames (from the loss each segment recorded when encoded: nothing is decoded); overall, the
    shards' bytes against the HDF5 file's.

    Args:
        out_dir: The robo-shards directory.
        in_path: The HDF5 file it was converted from (``None``: no overall comparison).

    Returns:
        ``settings`` (the video settings recorded), ``shards_bytes``, ``cameras`` (``{field: {psnr_db,
        video_bytes, raw_bytes, ratio}}``) and, with ``in_path``, ``hdf5_bytes`` and ``ratio``.

    Raises:
        ShardError: the shards cannot be read.
    """
    reader = ShardReader(out_dir)
    fields: dict[str, dict] = {}
    for i, ep in enumerate(reader.episodes):
        header, _ = reader.read_episode(i, fields=[])  # the header only
        for field, desc in header["fields"].items():
            if desc.get("kind") != "video":
                continue
            row = fields.setdefault(field, {"sse": 0.0, "values": 0, "video_bytes": 0, "raw_bytes": 0})
            values = int(np.prod(desc["shape"]))
            row["sse"] += float(desc.get("mse") or 0.0) * values
            row["values"] += values
            row["raw_bytes"] += values
            row["video_bytes"] += ep["members"][desc["member"]]["size"]
    cameras = {
        k: {
            "psnr_db": round(psnr_from_mse(r["sse"] / max(1, r["values"])), 2),
            "video_bytes": r["video_bytes"],
            "raw_bytes": r["raw_bytes"],
            "ratio": round(r["raw_bytes"] / max(1, r["video_bytes"]), 1),
        }
        for k, r in sorted(fields.items())
    }
    shard_bytes = sum(s["bytes"] for s in reader.shards.values())
    out = {"settings": reader.dataset["metadata"].get("video"), "shards_bytes": shard_bytes, "cameras": cameras}
    if in_path is not None:
        out["hdf5_bytes"] = os.path.getsize(in_path)
        out["ratio"] = round(out["hdf5_bytes"] / max(1, shard_bytes), 2)
    return out


def format_video_report(report: dict) -> str:
    """A :func:`video_report` as the lines ``robo-loaders convert robomimic --frames ...`` prints: the settings,
    the size against the HDF5 (when known), then each camera's PSNR and ratio.

    Args:
        report: The report.

    Returns:
        The lines, joined by newlines.
    """
    s = report.get("settings") or {}
    lines = [f"frames: {s.get('codec')} (crf {s.get('crf')}, gop {s.get('gop')}, {s.get('pix_fmt')})"]
    if "hdf5_bytes" in report:
        lines.append(
            f"size: {format_bytes(report['shards_bytes'])} of shards for {format_bytes(report['hdf5_bytes'])} "
            f"of HDF5 ({report['ratio']}x smaller)"
        )
    for k, c in report["cameras"].items():
        lines.append(
            f"  {k}: PSNR {c['psnr_db']:.2f} dB, {format_bytes(c['video_bytes'])} of video for "
            f"{format_bytes(c['raw_bytes'])} of frames ({c['ratio']}x)"
        )
    return "\n".join(lines)


def _canonical(value) -> str:
    """``value`` as the JSON ``dataset.json`` keeps it, compared as text: a NaN attribute equals itself (as Python
    objects it never does, so an untouched source with a NaN attribute failed ``verify``: a reviewer's
    reproduction)."""
    return json.dumps(value, sort_keys=True, default=str)


def verify_robomimic(out_dir: str, in_path: str) -> list[str]:
    """Checksums and decoding (``verify_dir``), then the filter keys and attributes, and every demo's arrays against
    the source file: lossless ones
    byte for byte, video ones by their loss against the source matching the loss recorded at conversion (within
    1%). What ``robo-loaders verify --source`` runs on a robomimic conversion.

    Args:
        out_dir: The robo-shards directory.
        in_path: The robomimic HDF5 file it was converted from.

    Returns:
        One line per problem (empty: the shards match the source): the arrays, the filter keys and the data and
        demo attributes. The comparison stops at the first check that fails: shard problems, then different demo
        lists.

    Raises:
        SourceError: ``in_path`` is not a valid robomimic file.
    """
    problems = verify_dir(out_dir)
    if problems:
        return problems
    reader = ShardReader(out_dir)
    source = RobomimicHdf5(in_path)
    with source.open() as f:
        demos = source.stored_demos(f)
        if [e["name"] for e in reader.episodes] != demos:
            return [f"{out_dir}: holds {len(reader.episodes)} demos, {in_path} has {len(demos)}"]
        # what a backend reading the shards serves besides the arrays (filter keys, env metadata): compared too
        # (a mask or env_args edited in the source verified "ok": a reviewer's reproduction)
        kept, now = reader.dataset.get("metadata") or {}, source.metadata(f)
        for part, what in (("masks", "filter keys (mask/)"), ("data_attrs", "data attributes"), ("demo_attrs", "")):
            if _canonical(kept.get(part)) != _canonical(now[part]):
                if part == "demo_attrs":
                    demos_differing = [
                        d for d in now[part] if _canonical((kept.get(part) or {}).get(d)) != _canonical(now[part][d])
                    ]
                    what = f"attributes of {', '.join(demos_differing[:5]) or 'its demos'}"
                problems.append(f"{out_dir}: its {what} differ from {in_path}'s")
        # a bar: the comparison reads the whole source again (~30 s a GB here), silent until its end (a reviewer's)
        for i, d in enumerate(tqdm(demos, desc="verify against the source", unit="demo", mininterval=0.5)):
            header, fields = reader.read_episode(i)
            n = source.length(f, d)  # per-demo metadata of another length is not converted (read_all)
            src = {  # as read_all converts them: strings and other objects left out
                k: ds for k, ds in datasets(f[f"data/{d}"]) if ds.ndim and ds.shape[0] == n and not ds.dtype.hasobject
            }
            if set(fields) != set(src):
                problems.append(
                    f"{d}: fields {sorted(fields)} != source {sorted(src)}"
                    if src
                    else f"{d}: the source has no arrays of its {n} steps (its num_samples or its arrays changed)"
                )
                continue
            for k, ds in src.items():
                a = in_native_order(ds[()])
                if fields[k].dtype != a.dtype or fields[k].shape != a.shape:
                    problems.append(f"{d}/{k}: differs from the source")
                elif header["fields"][k]["kind"] == "video":
                    # lossy: the frames must be those measured when converting (within 1%: another FFmpeg's
                    # colour conversion may round a few pixels differently; another demo's frames are far off)
                    recorded, mse = header["fields"][k].get("mse"), squared_error(fields[k], a) / max(1, a.size)
                    if not isinstance(recorded, float) or not math.isclose(mse, recorded, rel_tol=1e-2, abs_tol=1e-6):
                        problems.append(
                            f"{d}/{k}: decodes to frames of MSE {mse:.6g} against the source, "
                            f"{recorded!r} when it was converted"
                        )
                elif fields[k].tobytes() != a.tobytes():  # bytes: a NaN equals itself (np.array_equal says not)
                    problems.append(f"{d}/{k}: differs from the source")
    return problems
