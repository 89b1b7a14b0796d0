"""A LeRobot v3 dataset written the way LeRobot's own writer writes it, fast enough for a million frames.

Why a second writer: ``LeRobotDataset.add_frame/save_episode`` writes every camera frame as a PNG, encodes each
episode from those files, then appends the episode to the camera's video file by rewriting the whole file
(``concatenate_video_files([latest, episode])``), and builds a ``datasets.Dataset`` per episode: its cost grows
with the square of the episodes per video file (measured in docs/benchmarks.md). This writer makes the same
files with the same LeRobot functions where they are cheap (``LeRobotDatasetMetadata.create/save_episode_tasks/
save_episode/update_video_info/finalize``, ``compute_episode_stats``, ``get_hf_features_from_features``,
``concatenate_video_files``, ``get_video_duration_in_s``) and replaces only the costly steps by their equivalent:
frames encoded from memory with the options ``encode_video_frames`` uses (no PNG round trip, which is lossless),
each video file concatenated once from its episodes, the data parquet written one row group per episode as
LeRobot writes it. ``tests/test_sample_data_fast.py`` checks that both writers give the same dataset (every file's
content and every ``LeRobotDataset`` item) on a small copy.

One difference at size: LeRobot starts a new video file when the growing file plus the next episode would reach
``video_files_size_in_mb``; here the growing file's size is the sum of its episodes' files (the concatenated file
differs by its container header), so a file may close one episode earlier or later than LeRobot's would.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from robo_loaders_plugin.core.sched import keeps_scheduling
from robo_loaders_plugin.sample_data.lerobot_v3 import MODES, check_image_size, episode_contents
from robo_loaders_plugin.sample_data.outputs import replacing_dir


@keeps_scheduling
def _encode(frames: np.ndarray, path: Path, fps: int, encoder, threads=None) -> None:
    """``lerobot.datasets.video_utils.encode_video_frames`` from an (n, h, w, 3) uint8 array instead of PNG files."""
    import av

    options = encoder.get_codec_options(threads, as_strings=True)
    with av.open(str(path), "w") as output:
        stream = output.add_stream(encoder.vcodec, fps, options=options)
        stream.pix_fmt = encoder.pix_fmt
        stream.width, stream.height = int(frames.shape[2]), int(frames.shape[1])
        for frame in frames:
            packet = stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24"))
            if packet:
                output.mux(packet)
        packet = stream.encode()
        if packet:
            output.mux(packet)


def _video_stats(frames: np.ndarray) -> dict:
    """``compute_episode_stats``'s statistics of a camera, from the frames instead of their PNG files."""
    from lerobot.datasets.compute_stats import (
        DEFAULT_QUANTILES,
        auto_downsample_height_width,
        get_feature_stats,
        sample_indices,
    )

    sampled = [
        auto_downsample_height_width(np.ascontiguousarray(frames[i].transpose(2, 0, 1)))
        for i in sample_indices(len(frames))
    ]
    images = np.stack(sampled).astype(np.uint8, copy=False)
    stats = get_feature_stats(images, axis=(0, 2, 3), keepdims=True, quantile_list=DEFAULT_QUANTILES)
    return {k: v if k == "count" else np.squeeze(v / 255.0, axis=0) for k, v in stats.items()}


def write_lerobot_fast(
    root,
    *,
    repo_id: str = "local/sample",
    episode_lengths=(30, 45, 22, 50, 37),
    cameras: int = 1,
    image_size=(32, 48),
    mode: str = "h264",
    fps: int = 20,
    seed: int = 0,
    video_files_size_in_mb: float | None = None,
    data_files_size_in_mb: float | None = None,
    overwrite: bool = False,
    progress: bool = True,
    actions_from_state: bool = False,
    scenes: int | None = None,
    batch_episodes: int = 256,
    content: str = "renders",
    noise: float = 1.0,
    state_dim: int = 6,
    action_dim: int = 4,
) -> Path:
    """Write the dataset :func:`~robo_loaders_plugin.sample_data.lerobot_v3.write_lerobot_dataset` writes with the
    same arguments, without LeRobot's per-frame files and per-episode rewrites.

    Args:
        root: The dataset directory (must not exist unless ``overwrite``).
        repo_id, episode_lengths, cameras, image_size, fps, seed, actions_from_state, scenes, content, noise,
            state_dim, action_dim: As for ``write_lerobot_dataset`` (the same content, from ``episode_contents``;
            robots of other sizes: the content's vectors repeated or cut).
        mode: "h264" or "av1" (video cameras; PNG images in the parquet files are not written by this writer).
        video_files_size_in_mb, data_files_size_in_mb: LeRobot's file size limits (default: LeRobot's).
        overwrite: Replace ``root`` if it exists.
        progress: Show a progress bar.
        batch_episodes: Episodes converted to Arrow at once (each still written as its own row group).

    Returns:
        ``root``.

    Raises:
        ValueError: ``mode`` is not a video mode, or a frame size its encoder cannot take (``check_image_size``).
        FileExistsError: ``root`` exists and ``overwrite`` is false.
    """
    import datasets
    import pyarrow.parquet as pq
    from lerobot.configs import RGBEncoderConfig
    from lerobot.datasets.compute_stats import compute_episode_stats
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata
    from lerobot.datasets.feature_utils import get_hf_features_from_features
    from lerobot.datasets.io_utils import embed_images, write_info
    from lerobot.datasets.utils import update_chunk_file_indices
    from lerobot.datasets.video_utils import concatenate_video_files, get_video_duration_in_s

    if mode not in MODES or MODES[mode] is None:
        raise ValueError(f"the fast writer writes video cameras: mode must be 'h264' or 'av1', got {mode!r}")
    check_image_size(image_size, mode)
    final = Path(root)
    with replacing_dir(final, overwrite) as root:
        h, w = image_size
        feats = {
            "observation.state": {
                "dtype": "float32",
                "shape": (state_dim,),
                "names": [f"s{i}" for i in range(state_dim)],
            },
            "action": {"dtype": "float32", "shape": (action_dim,), "names": [f"a{i}" for i in range(action_dim)]},
        }
        video_keys = [f"observation.images.cam{c}" for c in range(cameras)]
        for key in video_keys:
            feats[key] = {"dtype": "video", "shape": (h, w, 3), "names": ["height", "width", "channels"]}
        encoder = RGBEncoderConfig(vcodec=MODES[mode])
        meta = LeRobotDatasetMetadata.create(
            repo_id=repo_id,
            fps=fps,
            features=feats,
            root=root,
            use_videos=True,
            video_files_size_in_mb=video_files_size_in_mb,
            data_files_size_in_mb=data_files_size_in_mb,
        )
        features = meta.features
        hf_features = get_hf_features_from_features(features)
        work = Path(tempfile.mkdtemp(prefix=".fast-writer-", dir=root))
        encoded: dict = {}  # (camera, scene, length) -> (episode file, duration, stats) of a reused scene
        videos = {key: {"chunk": 0, "file": 0, "mb": 0.0, "end": 0.0, "parts": []} for key in video_keys}
        data = {"chunk": 0, "file": 0, "writer": None, "path": None, "start": 0}
        pending: list = []  # (episode, content, columns, stats, metadata) whose data is not written yet
        frames_so_far = 0

        def close_video_file(key):
            v = videos[key]
            if v["parts"]:
                out = root / meta.video_path.format(video_key=key, chunk_index=v["chunk"], file_index=v["file"])
                out.parent.mkdir(parents=True, exist_ok=True)
                if len(v["parts"]) == 1:  # LeRobot moves a file's first episode in place; it remuxes from the second
                    shutil.copyfile(v["parts"][0], out)
                else:
                    concatenate_video_files(v["parts"], out)
                v["parts"] = []

        def video_of(ep: int, key: str, c: int, content) -> dict:
            """Where the episode's video goes (LeRobot's ``_save_episode_video`` rule) and its statistics."""
            cache_key = (c,) + content.scene if content.scene is not None else None
            if cache_key is not None and cache_key in encoded:
                path, duration, stats = encoded[cache_key]
            else:
                path = work / f"{key}-{ep:06d}.mp4"
                _encode(content.frames[c], path, fps, encoder)
                duration, stats = get_video_duration_in_s(path), _video_stats(content.frames[c])
                if cache_key is not None:
                    encoded[cache_key] = (path, duration, stats)
            size_mb = os.path.getsize(path) / (1024**2)
            v = videos[key]
            if ep > 0 and v["mb"] + size_mb >= meta.video_files_size_in_mb:
                close_video_file(key)
                v["chunk"], v["file"] = update_chunk_file_indices(v["chunk"], v["file"], meta.chunks_size)
                v["mb"], v["end"] = 0.0, 0.0
            start = v["end"] if ep > 0 else 0.0
            v["parts"].append(Path(path))
            v["mb"] += size_mb
            v["end"] = start + duration
            if ep == 0:  # LeRobot records the codec's settings from the first episode's file
                first = root / meta.video_path.format(video_key=key, chunk_index=0, file_index=0)
                first.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, first)
                meta.update_video_info(key, video_encoder=encoder)
                write_info(meta.info, meta.root)
            return {
                f"videos/{key}/chunk_index": v["chunk"],
                f"videos/{key}/file_index": v["file"],
                f"videos/{key}/from_timestamp": start,
                f"videos/{key}/to_timestamp": v["end"],
            }, stats

        def write_data(batch):
            """Each episode of ``batch`` as one row group of the data parquet (LeRobot's schema and file rule), then
            its metadata (which names the data file)."""
            table = datasets.Dataset.from_dict(
                {k: np.concatenate([b[2][k] for b in batch]) for k in hf_features}, features=hf_features, split="train"
            ).with_format("arrow")[:]
            offset = 0
            for ep, content, buffer, stats, ep_metadata in batch:
                n = content.length
                piece = table.slice(offset, n)
                offset += n
                if data["writer"] is not None:
                    size_mb = os.path.getsize(data["path"]) / (1024**2)
                    written = buffer["index"][0] - data["start"]
                    per_frame = size_mb / written if written > 0 else 0
                    if size_mb + per_frame * n >= meta.data_files_size_in_mb:
                        data["writer"].close()
                        data["writer"] = None
                        data["chunk"], data["file"] = update_chunk_file_indices(
                            data["chunk"], data["file"], meta.chunks_size
                        )
                        data["start"] = int(buffer["index"][0])
                if data["writer"] is None:
                    data["path"] = root / meta.data_path.format(chunk_index=data["chunk"], file_index=data["file"])
                    data["path"].parent.mkdir(parents=True, exist_ok=True)
                    # the file's schema is its first episode's table's as LeRobot makes it (its metadata holds that
                    # table's datasets fingerprint): that one episode goes through LeRobot's own steps
                    first = embed_images(
                        datasets.Dataset.from_dict(
                            {k: buffer[k] for k in hf_features}, features=hf_features, split="train"
                        )
                    )
                    data["writer"] = pq.ParquetWriter(
                        data["path"],
                        schema=first.with_format("arrow")[:].schema,
                        compression="snappy",
                        use_dictionary=True,
                    )
                data["writer"].write_table(piece)
                ep_metadata["data/chunk_index"], ep_metadata["data/file_index"] = data["chunk"], data["file"]
                ordered = {k: stats[k] for k in features if k in stats}  # compute_episode_stats' order: the features'
                meta.save_episode(ep, n, [content.task], ordered, ep_metadata)

        contents = episode_contents(
            episode_lengths,
            cameras=cameras,
            image_size=(h, w),
            fps=fps,
            seed=seed,
            actions_from_state=actions_from_state,
            scenes=scenes,
            content=content,
            noise=noise,
        )
        for ep, content in enumerate(
            tqdm(
                contents,
                total=len(episode_lengths),
                desc=f"sample-data {final.name}",
                unit="episode",
                disable=not progress,
            )
        ):
            n = content.length
            meta.save_episode_tasks([content.task])
            buffer = {
                "observation.state": _resized(content.state, state_dim),
                "action": _resized(content.action, action_dim),
                "timestamp": np.arange(n, dtype=np.int64) / fps,
                "frame_index": np.arange(n, dtype=np.int64),
                "episode_index": np.full((n,), ep),
                "index": np.arange(frames_so_far, frames_so_far + n),
                "task_index": np.full((n,), meta.get_task_index(content.task)),
            }
            stats = compute_episode_stats(buffer, features)
            ep_metadata = {
                "data/chunk_index": None,
                "data/file_index": None,
                "dataset_from_index": frames_so_far,
                "dataset_to_index": frames_so_far + n,
                "episode_index": ep,
            }
            for c, key in enumerate(video_keys):
                where, stats[key] = video_of(ep, key, c, content)
                ep_metadata.update(where)
            pending.append((ep, content, buffer, stats, ep_metadata))
            if len(pending) >= batch_episodes:
                write_data(pending)
                pending.clear()
            frames_so_far += n
        if pending:
            write_data(pending)
        for key in video_keys:
            close_video_file(key)
        if data["writer"] is not None:
            data["writer"].close()
        meta.finalize()
        shutil.rmtree(work, ignore_errors=True)
    return final


def _resized(rows: np.ndarray, size: int) -> np.ndarray:
    """Each row repeated or cut to ``size`` entries, as ``np.resize`` makes one row (LeRobot's writer's frames)."""
    return np.ascontiguousarray(rows[:, np.arange(size) % rows.shape[1]])
