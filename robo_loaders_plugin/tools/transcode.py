"""``robo-loaders transcode ROOT OUT``: a LeRobot v3 dataset with every video re-encoded as H.264 or HEVC, so that
NVDEC can decode it on GPUs without AV1 decoding (A100, H100/H200, V100, T4; LeRobot writes AV1 by default).
User guide: docs/transcode.md.

Why in ``tools`` and not in ``robo_loaders_plugin.lerobot``: it reads and writes the v3 format on disk with
PyAV, torchcodec and :class:`~robo_loaders_plugin.sources.lerobot_v3.LeRobotV3` only and never imports LeRobot
(``robo_loaders_plugin.lerobot`` is the adapter that touches the framework); it runs wherever the v3 reader does.

What OUT holds:

- ``meta/`` and ``data/`` (and every other file outside ``videos/`` whose path has no hidden component) copied byte
  for byte from ROOT, except ``meta/info.json``: in each video feature's ``info`` the stream fields are probed from
  the new files as LeRobot's ``get_video_info`` probes them (``video.codec``, ``video.pix_fmt``, size, fps,
  channels) and the encoder fields are the ones used (``video.g``, ``video.crf``, ``video.preset``,
  ``video.fast_decode`` 0, ``video.extra_options`` {}, ``video.video_backend`` "pyav"), so LeRobot's
  ``encoder_config_from_video_info`` rebuilds this encoder; nothing else in it changes.
- every video file the episodes use, decoded with PyAV and re-encoded frame for frame (the decoded YUV frames go to
  the encoder: no RGB round trip): the same number of frames with the same presentation timestamps, in the source's
  time base (checked on the output before it is kept), yuv420p, the source's colour range/space tags. Every
  episode's ``from_timestamp``/``to_timestamp`` therefore selects the same frames. Keyframes every ``gop`` frames
  and, forced (IDR), at the first frame of every episode stored in the file: decoding an episode's segment starts
  at its own first frame.
- ``.robo-loaders-transcode/``: ``manifest.json`` (the work units), locks, and ``report.json`` (per camera and per
  file: sizes and PSNR against the source). ``meta/info.json`` is written last, once every video is done: a
  partial OUT is not a loadable dataset.

Quality: each output is decoded with torchcodec exactly as LeRobot decodes it (``seek_mode="approximate"``) and
compared with the source decoded the same way, frame by frame: the same frame count, ``average_fps`` and frame
timestamps, and per-frame PSNR over the RGB uint8 pixels (peak 255; identical frames count as ``PSNR_CAP`` dB).
Every frame is compared unless ``psnr_frames`` asks for N evenly spaced frames per file (the report says how many
were compared). A file with a compared frame below ``min_psnr`` is not kept: the transcode fails naming it.

Parallel and resumable as the converters (``storage/shards/manifest.py``, ``executors.py``): one work unit per
video file, leased under a lock by whichever worker or executor task is free; an output is encoded to a temporary
name (one per unit: only the lease holder writes it) and renamed once verified; a killed transcode run again
redoes only the files not recorded done (and any done file since deleted or resized).
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import json
import math
import os
import shutil
import time
from collections.abc import Mapping
from fractions import Fraction

import click

from robo_loaders_plugin.core.command_help import Command
from robo_loaders_plugin.core.errors import RoboLoadersError, SourceError
from robo_loaders_plugin.core.files import atomic_write_json
from robo_loaders_plugin.sources.lerobot_v3 import LeRobotV3
from robo_loaders_plugin.storage.shards import executors, manifest
from robo_loaders_plugin.storage.shards.format import ShardError, _atomic_json
from robo_loaders_plugin.storage.video import MIN_HEVC_HEIGHT, MIN_HEVC_WIDTH

STATE_DIR = ".robo-loaders-transcode"
REPORT = "report.json"
ENCODERS = {"h264": "libx264", "hevc": "libx265"}  # --codec -> PyAV/FFmpeg encoder
DEFAULT_CRF = {"h264": 18, "hevc": 20}
DEFAULT_GOP = 10
# libx264's and libx265's speed presets: checked before anything is written (a typo failed in the first worker, after
# OUT recorded it, so the corrected command was refused as "other options": a reviewer's reproduction)
PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow", "placebo")
DEFAULT_MIN_PSNR = 35.0  # dB, per frame, against the source as decoded by torchcodec
PSNR_CAP = 100.0  # dB reported for a frame identical to the source (MSE 0)
COMPARE_CHUNK = 32  # frames decoded at once per file when comparing
TMP_SUFFIX = ".tmp-transcode"


class TranscodeError(RoboLoadersError):
    """The transcode cannot run (OUT is something else, an encoder is missing) or its output would be wrong."""


# ---- checks before anything is written ---------------------------------------------------------------------------


def check_encoder(codec: str) -> str:
    """The FFmpeg encoder PyAV uses for ``codec``, checked to exist in this PyAV build.

    Args:
        codec: ``h264`` or ``hevc``.

    Returns:
        The encoder's name (``libx264``, ``libx265``).

    Raises:
        TranscodeError: an unknown codec, or an encoder this PyAV lacks (the message lists the H.264/HEVC encoders it
            has).
    """
    import av

    if codec not in ENCODERS:
        raise TranscodeError(f"--codec {codec!r}: choose one of {', '.join(ENCODERS)}")
    name = ENCODERS[codec]
    try:
        av.codec.Codec(name, "w")
    except av.codec.codec.UnknownCodecError:
        have = []
        for other in sorted(set(ENCODERS.values()) | {"libopenh264", "h264_nvenc", "hevc_nvenc"}):
            with contextlib.suppress(av.codec.codec.UnknownCodecError):
                av.codec.Codec(other, "w")
                have.append(other)
        lavc = ".".join(map(str, av.library_versions.get("libavcodec", ())))
        raise TranscodeError(
            f"--codec {codec} needs the {name} encoder, which the FFmpeg of the installed PyAV "
            f"{av.__version__} (libavcodec {lavc}) does not have (H.264/HEVC encoders it has: "
            f"{', '.join(have) or 'none'}); install a PyAV build with {name} or choose another "
            "--codec"
        ) from None
    return name


def _check_torchcodec() -> None:
    try:
        from torchcodec.decoders import VideoDecoder  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - RuntimeError/OSError when FFmpeg's shared libraries are missing
        raise TranscodeError(
            f"transcode compares every output with its source through torchcodec (as LeRobot "
            f"decodes), which cannot be loaded here: {exc}"
        ) from None


def _check_source(source: LeRobotV3) -> None:
    version = str(source.info.get("codebase_version", ""))
    if not version.startswith("v3"):
        raise SourceError(
            f"{source.root}: a LeRobot {version or 'unversioned'} dataset; transcode reads the v3.0 "
            "format (convert it with LeRobot's v2.1 -> v3.0 converter first)"
        )
    if not source.video_keys or not source.info.get("video_path"):
        raise SourceError(f"{source.root}: no video features in meta/info.json; there is nothing to transcode")
    for key in source.video_keys:
        info = source.features[key].get("info") or {}
        if info.get("is_depth_map") or info.get("video.is_depth_map"):
            raise TranscodeError(
                f"{source.root}: {key} is a depth map ({info.get('video.pix_fmt')}); transcode "
                "re-encodes RGB yuv420p cameras only"
            )
        pix_fmt = info.get("video.pix_fmt", "yuv420p")
        if pix_fmt != "yuv420p":
            raise TranscodeError(
                f"{source.root}: {key} is {pix_fmt}; transcode keeps yuv420p cameras as they are "
                "and re-encodes nothing else"
            )


def _frame_dim(feature: dict, name: str) -> int | None:
    """A video feature's ``width`` or ``height`` from ``info.json`` (its ``info``, else its shape by its names)."""
    info = feature.get("info") or {}
    names = list(feature.get("names") or [])
    shape = list(feature.get("shape") or [])
    value = info.get(f"video.{name}") or (
        shape[names.index(name)] if name in names and len(shape) == len(names) else None
    )
    return None if value is None else int(value)


def _check_frame_size(source: LeRobotV3, codec: str) -> None:
    """Refuse what an encoder cannot do, before the options are recorded and a worker fails on it (an odd size
    in yuv420p, what the output is always in, failed both encoders with a PyAV traceback, and the output was then
    locked to the failed options; a reviewer's reproduction)."""
    for key in source.video_keys:
        width, height = _frame_dim(source.features[key], "width"), _frame_dim(source.features[key], "height")
        if width is None or height is None:
            continue
        if width % 2 or height % 2:
            raise TranscodeError(
                f"{source.root}: {key} is {width}x{height}; the transcode writes yuv420p, which {codec} cannot "
                "encode at an odd width or height: keep the source's videos (video_stream reads them as they are)"
            )
        if codec == "hevc" and (width < MIN_HEVC_WIDTH or height < MIN_HEVC_HEIGHT):
            raise TranscodeError(
                f"{source.root}: {key} is {width}x{height}; libx265 cannot encode frames narrower than "
                f"{MIN_HEVC_WIDTH} or lower than {MIN_HEVC_HEIGHT} pixels (narrower ones abort the whole process), "
                "so HEVC is refused here: use --codec h264"
            )


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


def _check_out(root: str, out: str) -> None:
    if _inside(out, root) or _inside(root, out):
        raise TranscodeError(f"OUT {out} and ROOT {root} overlap; write the transcode to a separate directory")
    if os.path.exists(out) and not os.path.isdir(out):
        raise TranscodeError(f"OUT {out} exists and is not a directory")
    if os.path.isdir(out) and os.listdir(out) and not os.path.exists(os.path.join(out, STATE_DIR, manifest.MANIFEST)):
        raise TranscodeError(
            f"OUT {out} exists, is not empty and is not a transcode (no {STATE_DIR}/"
            f"{manifest.MANIFEST}); give a new or empty directory"
        )
    from robo_loaders_plugin.core.paths import writable_dir_problem

    problem = writable_dir_problem(out)  # a read-only or full location was an OSError traceback (a reviewer's)
    if problem:
        raise TranscodeError(f"OUT {out}: {problem}; give a directory you can write to")


def _check_recorded(out: str, source_id: dict, options: dict) -> None:
    """Refuse an OUT that is a transcode of another source or with other options, saying which."""
    path = os.path.join(out, STATE_DIR, manifest.MANIFEST)
    try:
        with open(path) as f:
            m = json.load(f)
    except FileNotFoundError:
        return
    except ValueError as exc:
        raise TranscodeError(f"{path} is damaged ({exc}); delete {out} and transcode again") from None
    if m.get("version") != manifest.MANIFEST_VERSION:
        return  # planned again from scratch by manifest.plan
    if m.get("source") != source_id:
        was = ""
        with contextlib.suppress(OSError, ValueError, KeyError), open(os.path.join(out, STATE_DIR, REPORT)) as f:
            was = f" (recorded source: {json.load(f)['source']['path']})"
        raise TranscodeError(
            f"OUT {out} is a transcode of another dataset, or of ROOT before it changed{was}; "
            "give a new or empty directory"
        )
    recorded = m.get("options", {})
    if recorded != options:
        diff = ", ".join(
            f"{k} {recorded.get(k)!r} (asked {options.get(k)!r})"
            for k in sorted(set(recorded) | set(options))
            if recorded.get(k) != options.get(k)
        )
        raise TranscodeError(
            f"OUT {out} is a transcode of this ROOT with other options: {diff}; run with the same "
            "options to resume it, or give a new or empty directory"
        )


# ---- planning ----------------------------------------------------------------------------------------------------


def video_files(source: LeRobotV3) -> dict[str, dict]:
    """Every video file the episodes use, by path relative to the root.

    Args:
        source: The LeRobot v3 dataset.

    Returns:
        ``{relative path: {"key": camera, "starts": [from_timestamp of each episode stored in it]}}``, sorted by path.

    Raises:
        SourceError: a file the episodes use is missing.
    """
    files: dict[str, dict] = {}
    for ep in sorted(source.episodes):
        row = source.episodes[ep]
        for key in source.video_keys:
            rel = source.info["video_path"].format(
                video_key=key, chunk_index=row[f"videos/{key}/chunk_index"], file_index=row[f"videos/{key}/file_index"]
            )
            entry = files.setdefault(rel, {"key": key, "starts": []})
            entry["starts"].append(float(row[f"videos/{key}/from_timestamp"]))
    for rel, entry in files.items():
        if not os.path.isfile(os.path.join(str(source.root), rel)):
            raise SourceError(f"{source.root}: {rel} (used by the episodes of {entry['key']}) is missing")
    return dict(sorted(files.items()))


def _table_files(root: str) -> list[str]:
    """Files copied as they are: everything outside ``videos/`` and hidden paths, but ``meta/info.json``."""
    out = []
    for d, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(d, root)
        dirs[:] = sorted(n for n in dirs if not n.startswith(".") and not (rel_dir == "." and n == "videos"))
        for n in sorted(files):
            rel = os.path.normpath(os.path.join(rel_dir, n))
            if not n.startswith(".") and rel != os.path.join("meta", "info.json"):
                out.append(rel)
    return out


def _copy_tables(root: str, out: str) -> int:
    """Copy the table files (atomically; a file already copied, same size and mtime, is kept); returns bytes."""
    total = 0
    for rel in _table_files(root):
        src, dst = os.path.join(root, rel), os.path.join(out, rel)
        st = os.stat(src)
        total += st.st_size
        with contextlib.suppress(OSError):
            d = os.stat(dst)
            if d.st_size == st.st_size and d.st_mtime_ns == st.st_mtime_ns:
                continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        tmp = f"{dst}.tmp-{os.getpid()}"
        try:
            shutil.copy2(src, tmp)
            os.replace(tmp, dst)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return total


def _worker_threads(executor: str, num_workers: int) -> int | None:
    """Encoder threads per worker: this machine's cores shared by the workers (Slurm tasks: the encoder's own
    choice over the cores the task was given)."""
    if executor == "datatrove-slurm":
        return None
    return max(1, len(os.sched_getaffinity(0)) // max(1, int(num_workers)))


# ---- one unit: one video file ------------------------------------------------------------------------------------


def _probe(path: str):
    """(video stream facts, sorted [(pts, duration)] of its frames) from demuxing only."""
    import av

    with av.open(path) as c:
        if len(c.streams) != 1 or len(c.streams.video) != 1:
            kinds = ", ".join(s.type for s in c.streams)
            raise TranscodeError(f"{path}: streams [{kinds}]; transcode handles files holding one video stream")
        st = c.streams.video[0]
        cc = st.codec_context
        facts = {
            "time_base": st.time_base,
            "rate": st.average_rate or st.guessed_rate or st.base_rate,
            "width": cc.width,
            "height": cc.height,
            "pix_fmt": cc.pix_fmt,
            "colour": {a: getattr(cc, a) for a in ("color_range", "colorspace", "color_primaries", "color_trc")},
        }
        frames = sorted(
            (int(p.pts), int(p.duration or 0), bool(p.is_keyframe)) for p in c.demux(st) if p.size and p.pts is not None
        )
    return facts, frames


def _av_errors() -> tuple[type[BaseException], ...]:
    """PyAV's errors (FFmpeg's, raised by the codecs), imported where a worker encodes."""
    import av

    return (av.FFmpegError,)


def _encode(src: str, dst: str, starts_s: list[float], settings: Mapping) -> dict:
    """Re-encode ``src`` into ``dst`` frame for frame (see the module docstring); returns what was checked."""
    import av
    from av.video.frame import PictureType

    facts, frames = _probe(src)
    if not frames:
        raise TranscodeError(f"{src}: holds no video frames")
    if facts["pix_fmt"] != "yuv420p":
        raise TranscodeError(f"{src}: pixel format {facts['pix_fmt']}; transcode handles yuv420p video only")
    tb, rate = facts["time_base"], Fraction(facts["rate"])
    pts = [p for p, _, _ in frames]
    if len(set(pts)) != len(pts):
        raise TranscodeError(f"{src}: several frames share a timestamp; cannot keep the frame timing")
    # the encoder counts in frames when every timestamp is a whole frame (x264/x265 then write exact durations);
    # otherwise it gets the source's time base as it is
    in_frames = all((Fraction(p) * tb * rate).denominator == 1 for p in pts)
    codec_tb = 1 / rate if in_frames else tb
    seconds = [float(p * tb) for p in pts]
    keyframes = set()
    for start in starts_s:  # the frame shown at each episode's from_timestamp
        i = bisect.bisect_left(seconds, start)
        near = min((j for j in (i - 1, i) if 0 <= j < len(pts)), key=lambda j: abs(seconds[j] - start))
        if abs(seconds[near] - start) <= 0.5 / rate:
            keyframes.add(pts[near])
    encoder = ENCODERS[settings["codec"]]
    opts = {"g": str(settings["gop"]), "crf": str(settings["crf"]), "forced-idr": "1"}
    if settings.get("preset"):
        opts["preset"] = str(settings["preset"])
    threads = settings.get("threads")
    if encoder == "libx265":
        # closed GOPs: x265's default open GOPs put frames before a keyframe in display order after it in decode
        # order, referencing the previous GOP; a seek to that keyframe (LeRobot's approximate seek) drops them
        opts["x265-params"] = "log-level=error:open-gop=0" + (f":pools={threads}" if threads else "")
    elif threads:
        opts["threads"] = str(threads)
    decoded = 0
    with av.open(src) as inp, av.open(dst, "w", format="mp4", options={"movflags": "faststart"}) as out:
        ist = inp.streams.video[0]
        ost = out.add_stream(encoder, rate=rate, options=opts)
        ost.width, ost.height, ost.pix_fmt = facts["width"], facts["height"], "yuv420p"
        ost.time_base = tb
        ost.codec_context.time_base = codec_tb
        for attr, value in facts["colour"].items():
            setattr(ost.codec_context, attr, value)
        for frame in inp.decode(ist):
            if frame.pts is None or frame.format.name != "yuv420p":
                raise TranscodeError(f"{src}: frame {decoded} decodes without a timestamp or not as yuv420p")
            src_pts = frame.pts
            frame.pts = int(Fraction(src_pts) * tb / codec_tb)
            frame.time_base = codec_tb
            frame.pict_type = PictureType.I if src_pts in keyframes else PictureType.NONE
            for packet in ost.encode(frame):
                out.mux(packet)
            decoded += 1
        for packet in ost.encode(None):
            out.mux(packet)
    if decoded != len(frames):
        raise TranscodeError(f"{src}: {decoded} frames decoded, {len(frames)} stored; the file is damaged")
    out_facts, out_frames = _probe(dst)
    out_tb = out_facts["time_base"]
    if [Fraction(p) * out_tb for p, _, _ in out_frames] != [Fraction(p) * tb for p in pts]:
        raise TranscodeError(
            f"{src}: the {settings['codec']} output does not keep the source's frame timestamps "
            f"({len(out_frames)} frames vs {len(pts)}); not kept"
        )
    out_keys = {Fraction(p) * out_tb for p, _, k in out_frames if k}
    missing = [float(p * tb) for p in sorted(keyframes) if Fraction(p) * tb not in out_keys]
    if missing:
        raise TranscodeError(f"{src}: the encoder did not start a keyframe at episode start(s) {missing[:3]} s")
    return {
        "frames": len(frames),
        "keyframes": len(out_keys),
        "episode_keyframes": len(keyframes),
        "source_keyframes": sum(k for _, _, k in frames),
    }


def compare(src: str, out: str, psnr_frames: int | None = None) -> dict:
    """Decode both files with torchcodec as LeRobot does and compare them.

    Same frame count, average fps and frame timestamps (else an error), and per-frame PSNR of ``out`` against
    ``src`` over every frame, or over ``psnr_frames`` evenly spaced ones.

    Args:
        src: The source video.
        out: Its re-encode.
        psnr_frames: How many evenly spaced frames to compare (``None``, or at least the frame count: all).

    Returns:
        ``{"compared", "psnr_sum", "psnr_mean", "psnr_min", "psnr_min_frame"}``.

    Raises:
        TranscodeError: the frame count, rate or timestamps differ (LeRobot would look up other frames).
    """
    import numpy as np
    import torch
    from torchcodec.decoders import VideoDecoder

    a, b = VideoDecoder(src, seek_mode="approximate"), VideoDecoder(out, seek_mode="approximate")
    ma, mb = a.metadata, b.metadata
    if (ma.num_frames, ma.average_fps) != (mb.num_frames, mb.average_fps):
        raise TranscodeError(
            f"{out}: torchcodec sees {mb.num_frames} frames at {mb.average_fps} fps, the source "
            f"{src} {ma.num_frames} at {ma.average_fps}; LeRobot would look up other frames"
        )
    n = int(ma.num_frames)
    if psnr_frames is None or psnr_frames >= n:
        batches = [list(range(i, min(n, i + COMPARE_CHUNK))) for i in range(0, n, COMPARE_CHUNK)]
    else:
        idx = np.unique(np.linspace(0, n - 1, max(1, int(psnr_frames))).round().astype(int)).tolist()
        batches = [idx[i : i + COMPARE_CHUNK] for i in range(0, len(idx), COMPARE_CHUNK)]
    values, frames = [], []
    for batch in batches:
        contiguous = batch == list(range(batch[0], batch[-1] + 1))
        fa = a.get_frames_in_range(batch[0], batch[-1] + 1) if contiguous else a.get_frames_at(indices=batch)
        fb = b.get_frames_in_range(batch[0], batch[-1] + 1) if contiguous else b.get_frames_at(indices=batch)
        if not torch.equal(fa.pts_seconds, fb.pts_seconds):
            raise TranscodeError(f"{out}: frames {batch[0]}..{batch[-1]} decode at other timestamps than in {src}")
        mse = (fa.data.to(torch.float32) - fb.data.to(torch.float32)).pow_(2).mean(dim=(1, 2, 3)).double()
        psnr = torch.where(
            mse > 0, 10 * torch.log10(255.0**2 / mse.clamp(min=1e-12)), torch.full_like(mse, PSNR_CAP)
        ).clamp(max=PSNR_CAP)
        values.extend(psnr.tolist())
        frames.extend(batch)
    worst = min(range(len(values)), key=values.__getitem__)
    return {
        "compared": len(values),
        "psnr_sum": float(sum(values)),
        "psnr_mean": float(sum(values) / len(values)),
        "psnr_min": float(values[worst]),
        "psnr_min_frame": int(frames[worst]),
    }


def transcode_file(src: str, dst: str, starts_s: list[float], settings: Mapping) -> dict:
    """Encode ``src`` to ``dst``'s temporary name, check timing and PSNR, fsync, rename.

    On any failure the temporary file is removed and ``dst`` is left as it was.

    Args:
        src: The source video.
        dst: Where the re-encode goes.
        starts_s: The ``from_timestamp`` of each episode stored in the file (each gets a forced keyframe).
        settings: ``codec``, ``crf``, ``gop``, ``preset``, ``threads``, ``min_psnr``, ``psnr_frames``.

    Returns:
        The unit's index entry without its name: what was encoded and compared, sizes and timings.

    Raises:
        TranscodeError: the source cannot be transcoded frame for frame, the output does not keep its timing or
            keyframes, or a compared frame is below ``min_psnr``.
    """
    tmp = dst + TMP_SUFFIX
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    try:
        t0 = time.perf_counter()
        try:
            encoded = _encode(src, tmp, starts_s, settings)
        except _av_errors() as exc:  # the encoder's or decoder's own failure: named, not a PyAV traceback
            raise TranscodeError(f"{src}: the {settings['codec']} re-encode failed ({exc})") from exc
        t1 = time.perf_counter()
        checked = compare(src, tmp, settings.get("psnr_frames"))
        t2 = time.perf_counter()
        floor = float(settings["min_psnr"])
        if checked["psnr_min"] < floor:
            raise TranscodeError(
                f"{src}: frame {checked['psnr_min_frame']} of the {settings['codec']} re-encode is "
                f"{checked['psnr_min']:.2f} dB from the source, below --min-psnr {floor:g} (mean "
                f"{checked['psnr_mean']:.2f} dB); use a lower --crf (now {settings['crf']}) or a lower --min-psnr"
            )
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        size = os.path.getsize(tmp)
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return {
        **encoded,
        **checked,
        "source_bytes": os.path.getsize(src),
        "bytes": size,
        "encode_s": round(t1 - t0, 3),
        "compare_s": round(t2 - t1, 3),
    }


def _worker(args) -> int:
    """Lease and transcode units (one video file each) until none is left; returns how many this process did. A
    unit that fails is given back before the error propagates."""
    state, root, out, files, settings = args
    done = 0
    while (unit := manifest.lease(state)) is not None:
        rel = unit["episodes"][0]
        try:
            before = manifest.source_stat_digest(state)
            entry = transcode_file(os.path.join(root, rel), os.path.join(out, rel), files[rel]["starts"], settings)
            entry = {"name": rel, "key": files[rel]["key"], **entry}
            after = manifest.source_stat_digest(state)
            # the stat the file was encoded under; changed meanwhile: none matches (publishing encodes it again)
            manifest.complete(
                state,
                unit["id"],
                [entry],
                [{"name": os.path.join(os.pardir, rel), "bytes": entry["bytes"]}],
                before if before == after else "changed",
            )
        except BaseException:
            with contextlib.suppress(Exception):  # the original error matters; the lock goes in any case
                manifest.release(state, unit["id"])
            raise
        done += 1
    return done


# ---- publishing: meta/info.json and the report -------------------------------------------------------------------


def video_info(path: str) -> dict:
    """The stream fields of a video feature's ``info``, probed as LeRobot's ``get_video_info`` probes them.

    Args:
        path: A video file.

    Returns:
        ``video.height``, ``video.width``, ``video.codec``, ``video.pix_fmt``, ``video.fps``, ``video.channels``.
    """
    import av

    with av.open(path) as c:
        st = c.streams.video[0]
        return {
            "video.height": st.height,
            "video.width": st.width,
            "video.codec": st.codec.canonical_name,
            "video.pix_fmt": st.pix_fmt,
            "video.fps": int(st.base_rate),
            "video.channels": len(av.VideoFormat(st.pix_fmt).components),
        }


def _camera_rows(entries: list[dict]) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    for e in entries:
        r = rows.setdefault(
            e["key"],
            {
                "files": 0,
                "frames": 0,
                "compared": 0,
                "source_bytes": 0,
                "bytes": 0,
                "psnr_sum": 0.0,
                "psnr_min": math.inf,
                "psnr_min_at": None,
            },
        )
        for k in ("frames", "compared", "source_bytes", "bytes", "psnr_sum"):
            r[k] += e[k]
        r["files"] += 1
        if e["psnr_min"] < r["psnr_min"]:
            r["psnr_min"], r["psnr_min_at"] = e["psnr_min"], f"{e['name']} frame {e['psnr_min_frame']}"
    for r in rows.values():
        r["size_ratio"] = r["bytes"] / r["source_bytes"] if r["source_bytes"] else None
        r["psnr_mean"] = r.pop("psnr_sum") / r["compared"]
    return rows


class TranscodePublisher(manifest.Publisher):
    """Once every file is done: check the PSNR floor over all of them, write ``report.json``, then
    ``meta/info.json`` (last: OUT becomes a loadable dataset)."""

    unit = "file"

    def publish(self, out_dir, entries, metadata, source) -> None:
        """Publish the transcode once every file is done: check the PSNR floor over all of them, write
        ``report.json``, then ``meta/info.json`` (last: OUT becomes a loadable dataset).

        Args:
            out_dir: The state directory (``OUT/.robo-loaders-transcode``).
            entries: Every file's index entry, in plan order.
            metadata: The source's ``info``, the options, ``min_psnr`` and ``psnr_frames``.
            source: The source's path and content digest, recorded in the report.

        Raises:
            TranscodeError: a file done by an earlier run is below this run's ``min_psnr``.
        """
        out = os.path.dirname(os.path.abspath(out_dir))
        floor = float(metadata["min_psnr"])
        low = [e for e in entries if e["psnr_min"] < floor]
        if low:  # done with a lower --min-psnr in an earlier run
            raise TranscodeError(
                f"{out}: {len(low)} file(s) were transcoded below --min-psnr {floor:g} in an earlier "
                f"run (e.g. {low[0]['name']}: {low[0]['psnr_min']:.2f} dB); lower --min-psnr, or "
                "transcode into a new directory with a lower --crf"
            )
        options = metadata["options"]
        info = copy.deepcopy(metadata["info"])
        for key, feature in info["features"].items():
            if feature.get("dtype") != "video":
                continue
            first = next(e["name"] for e in entries if e["key"] == key)
            new = feature.setdefault("info", {})
            new.update(video_info(os.path.join(out, first)))
            new.update(
                {
                    "video.g": options["gop"],
                    "video.crf": options["crf"],
                    "video.preset": options["preset"],
                    "video.fast_decode": 0,
                    "video.video_backend": "pyav",
                    "video.extra_options": {},
                }
            )
        report = {
            "source": dict(source),
            "out": out,
            "options": options,
            "min_psnr": floor,
            "psnr_frames": metadata.get("psnr_frames") or "all",
            "cameras": _camera_rows(entries),
            "files": entries,
        }
        _atomic_json(os.path.join(out_dir, REPORT), report)
        # laid out as LeRobot's write_info writes it
        atomic_write_json(os.path.join(out, "meta", "info.json"), info, indent=4, ensure_ascii=False)


# ---- the whole run -----------------------------------------------------------------------------------------------


def transcode(
    root,
    out,
    *,
    codec: str = "h264",
    crf: int | None = None,
    gop: int = DEFAULT_GOP,
    preset: str | None = None,
    num_workers: int = 1,
    psnr_frames: int | None = None,
    min_psnr: float = DEFAULT_MIN_PSNR,
    executor: str = "local",
    executor_options: Mapping | None = None,
    progress: bool = True,
) -> dict:
    """Transcode the LeRobot v3 dataset at ``root`` into ``out`` (see the module's docstring); run it again to
    resume.

    Everything is checked before anything is written: the options, the encoder, torchcodec, the source (v3,
    yuv420p RGB cameras, frame sizes the encoder handles) and ``out`` (new, empty, or a transcode of this source
    with these options).

    Args:
        root: The LeRobot v3 dataset.
        out: The output directory.
        codec: ``h264`` or ``hevc``.
        crf: Quality, 0..51 (default: :data:`DEFAULT_CRF` of the codec).
        gop: A keyframe every ``gop`` frames (plus one at every episode's first frame).
        preset: The x264/x265 speed preset (``None``: the encoder's default).
        num_workers: Video files encoded at once (processes, or executor tasks).
        psnr_frames: Frames compared per file (``None``: all).
        min_psnr: The lowest PSNR (dB) a compared frame may have (0 disables).
        executor: ``local``, ``datatrove-local`` or ``datatrove-slurm`` (``storage.shards.executors``).
        executor_options: The executor's options.
        progress: Whether to show a progress bar.

    Returns:
        The report (``out/.robo-loaders-transcode/report.json``), or for ``datatrove-slurm`` the submitted job.

    Raises:
        TranscodeError: a bad option, a missing encoder or torchcodec, an ``out`` that is something else, or a file
            that cannot be transcoded faithfully.
        SourceError: ``root`` is not a v3 dataset with videos, or a video file is missing.
        ExecutorError: a bad executor or executor option.
    """
    executors.check_options(executor, executor_options or {}, os.path.join(out, STATE_DIR), source=str(root))
    encoder = check_encoder(codec)
    crf = DEFAULT_CRF[codec] if crf is None else int(crf)
    if not 0 <= crf <= 51:
        raise TranscodeError(f"--crf {crf}: must be within 0..51")
    if int(gop) < 1:
        raise TranscodeError(f"--gop {gop}: must be at least 1")
    if preset is not None and preset not in PRESETS:
        raise TranscodeError(f"--preset {preset!r}: must be one of {', '.join(PRESETS)}")
    if psnr_frames is not None and int(psnr_frames) < 1:
        raise TranscodeError(f"--psnr-frames {psnr_frames}: 'all' or at least 1")
    if not math.isfinite(min_psnr) or min_psnr < 0:  # NaN compared false everywhere: the floor off, said nowhere
        raise TranscodeError(f"--min-psnr {min_psnr}: must be a number of dB >= 0 (0: no floor)")
    _check_torchcodec()
    source = LeRobotV3(root)
    _check_source(source)
    _check_frame_size(source, codec)
    src_root, out = str(source.root), os.path.realpath(os.path.expanduser(str(out)))
    _check_out(src_root, out)
    files = video_files(source)
    fp = source.fingerprint()
    source_id = {"content": fp.content}
    options = {"codec": codec, "encoder": encoder, "crf": crf, "gop": int(gop), "preset": preset}
    _check_recorded(out, source_id, options)
    state = os.path.join(out, STATE_DIR)
    try:
        # each file's encoding records the stat of the source's files it was read under: a file swapped while it was
        # encoded and put back with its mtime (cp -p) was published from the other recording (a reviewer's
        # reproduction; the end-of-run check compares names, sizes, mtimes and content, all equal again)
        source_files = {"path": fp.path, "names": [f[0] for f in fp.files]}
        m = manifest.plan(state, source_id, [[rel] for rel in files], options, source_files=source_files)
    except ShardError as exc:
        raise TranscodeError(f"{out}: {exc}") from None
    if any(u["state"] != "done" for u in m["units"]):  # a partial OUT must not load as a dataset
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(out, "meta", "info.json"))
    _copy_tables(src_root, out)
    settings = {
        **options,
        "threads": _worker_threads(executor, num_workers),
        "min_psnr": float(min_psnr),
        "psnr_frames": None if psnr_frames is None else int(psnr_frames),
    }
    metadata = {
        "info": source.info,
        "options": options,
        "min_psnr": float(min_psnr),
        "psnr_frames": settings["psnr_frames"],
    }
    res = executors.execute(
        executor,
        state,
        _worker,
        (state, src_root, out, files, settings),
        num_workers,
        TranscodePublisher(),
        metadata,
        {"path": src_root, "content": fp.content},
        f"transcode {os.path.basename(src_root)}",
        progress,
        **dict(executor_options or {}),
    )
    if isinstance(res, executors.Submitted):
        return res.as_dict()
    _withdraw_if_source_changed(out, state, fp, source.fingerprint(fp), src_root)
    with open(os.path.join(state, REPORT)) as f:
        return json.load(f)


def _withdraw_if_source_changed(out: str, state: str, before, after, src_root: str) -> None:
    """Withdraw a finished transcode whose source changed while it ran: OUT no longer loads as a dataset
    (``meta/info.json`` and the report removed) and every file is planned again.

    Why: the files were encoded from the source as it was at each file's turn and compared with it then, so a
    source replaced midway (a camera's video swapped) gave an OUT mixed from two versions, published and, once the
    first version was back with its mtime, accepted again by the same command (a reviewer's reproduction; the
    convert commands re-check their source the same way).

    Raises:
        StaleSourceError: the source's files or content differ from ``before``'s.
    """
    from robo_loaders_plugin.core.errors import StaleSourceError

    if after.identity() == before.identity():
        return
    for path in (os.path.join(out, "meta", "info.json"), os.path.join(state, REPORT)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    try:
        manifest.withdraw_if_source_changed(state, before, after, src_root)
    except StaleSourceError:
        raise StaleSourceError(
            f"{src_root} changed while it was transcoded into {out} ({before.shown_differences(after)}); the "
            "output is withdrawn (it no longer loads as a dataset): transcode again into a new or empty directory "
            "once ROOT no longer changes (or into this one once ROOT is back as it was: every file is transcoded "
            "again)"
        ) from None


def report_table(report: dict) -> str:
    """The report's per-camera rows as a text table (files, frames, compared, sizes, size ratio, PSNR).

    Args:
        report: What :func:`transcode` returns (not for a submitted job).

    Returns:
        The table.
    """
    from tabulate import tabulate

    rows = [
        [
            key,
            r["files"],
            r["frames"],
            "all" if r["compared"] == r["frames"] else r["compared"],
            f"{r['source_bytes'] / 1e6:.3f}",
            f"{r['bytes'] / 1e6:.3f}",
            f"{r['size_ratio']:.2f}",
            f"{r['psnr_mean']:.2f}",
            f"{r['psnr_min']:.2f}",
        ]
        for key, r in report["cameras"].items()
    ]
    return tabulate(
        rows,
        headers=[
            "camera",
            "files",
            "frames",
            "compared",
            "source MB",
            "output MB",
            "size ratio",
            "mean PSNR dB",
            "min PSNR dB",
        ],
    )


# ---- the command line (registered in cli.py, LAZY_COMMANDS: imported when `robo-loaders transcode` runs) ----------


def _psnr_frames(ctx, param, value):
    if value is None or str(value).lower() == "all":
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise click.BadParameter(f"{value!r}: 'all' or a number of frames >= 1")
    return n


_with_executor_options = executors.click_options(f"OUT/{STATE_DIR}/datatrove")


@click.command("transcode", cls=Command)
@click.argument("root", type=click.Path(exists=True, file_okay=False))
@click.argument("out", type=click.Path(file_okay=False))
@click.option(
    "--codec",
    type=click.Choice(list(ENCODERS)),
    default="h264",
    show_default=True,
    help="h264 (libx264) or hevc (libx265): both decode with NVDEC on every NVIDIA data-centre GPU",
)
@click.option(
    "--crf",
    type=click.IntRange(0, 51),
    default=None,
    help=f"quality: lower is better and bigger [h264: {DEFAULT_CRF['h264']}, hevc: {DEFAULT_CRF['hevc']}]",
)
@click.option(
    "--gop",
    type=click.IntRange(min=1),
    default=DEFAULT_GOP,
    show_default=True,
    help="keyframe every N frames (plus one at every episode's first frame)",
)
@click.option("--preset", default=None, type=click.Choice(PRESETS), help="x264/x265 speed preset [medium]")
@click.option(
    "--num-workers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="video files encoded at once (processes, or executor tasks)",
)
@click.option(
    "--psnr-frames",
    default="all",
    show_default=True,
    callback=_psnr_frames,
    help="frames per video file compared with the source: all, or N evenly spaced",
)
@click.option(
    "--min-psnr",
    default=DEFAULT_MIN_PSNR,
    show_default=True,
    type=float,
    help="fail if a compared frame is further from the source than this (dB); 0 disables",
)
@_with_executor_options
def transcode_cmd(root, out, codec, crf, gop, preset, num_workers, psnr_frames, min_psnr, executor, **executor_cli):
    """Re-encode a LeRobot v3 dataset's videos (AV1 by default) as H.264 or HEVC into OUT, for NVDEC decoding on
    GPUs without AV1 support (A100, H100/H200, V100, T4). Tables are copied as they are; frame count and timing are
    kept; every file is compared with its source (PSNR). Re-running the same command resumes an interrupted
    transcode.

    Args:
        root: ROOT, the LeRobot v3 dataset.
        out: OUT, the output directory.
        codec: ``--codec``.
        crf: ``--crf`` (``None``: the codec's default).
        gop: ``--gop``.
        preset: ``--preset``.
        num_workers: ``--num-workers``.
        psnr_frames: ``--psnr-frames`` (``None``: all).
        min_psnr: ``--min-psnr``.
        executor: ``--executor``.
        **executor_cli: The executor's options as the command line gives them
            (:func:`~robo_loaders_plugin.storage.shards.executors.options_from_cli`).
    """
    res = transcode(
        root,
        out,
        codec=codec,
        crf=crf,
        gop=gop,
        preset=preset,
        num_workers=num_workers,
        psnr_frames=psnr_frames,
        min_psnr=min_psnr,
        executor=executor,
        executor_options=executors.options_from_cli(executor, **executor_cli),
    )
    if "job_id" in res:
        click.echo(
            f"submitted Slurm job {res['job_id']}: {res['tasks']} task(s) transcode {res['pending_units']} of "
            f"{res['units']} video file(s) into {out}; the last task writes meta/info.json (logs: "
            f"{res['logging_dir']})"
        )
        return
    opts = res["options"]
    click.echo(
        f"wrote {res['out']}: {sum(r['files'] for r in res['cameras'].values())} video file(s) as "
        f"{opts['codec']} (crf {opts['crf']}, gop {opts['gop']}); PSNR against the source over "
        f"{'every frame' if res['psnr_frames'] == 'all' else str(res['psnr_frames']) + ' frames per file'}, "
        f"floor {res['min_psnr']:g} dB"
    )
    click.echo(report_table(res))
    click.echo(f"report: {os.path.join(res['out'], STATE_DIR, REPORT)}")
