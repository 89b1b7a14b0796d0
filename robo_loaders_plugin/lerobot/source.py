"""Reading a LeRobot v3 dataset once: tabular columns into arrays, every camera frame decoded once.

Why this mirrors LeRobot's own reader closely: samples must be byte-identical to ``LeRobotDataset[i]``. Video
frames are decoded with torchcodec exactly as LeRobot 0.6.1 does (``VideoDecoder(path, seek_mode="approximate")``,
frame index ``round((from_timestamp + timestamp) * average_fps)``, ``get_frames_at``), once per episode and
camera, in file order; PNG image columns are decoded with PIL as the HF ``Image`` feature does. The tolerance
check LeRobot runs on each sample runs here once per frame, so a bad timestamp fails at build time with the file
and episode named instead of in a DataLoader worker mid-epoch.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch

from robo_loaders_plugin.spec import RoboLoadersError


class LeRobotSourceError(RoboLoadersError):
    pass


def arrow_table(hf_dataset):
    """The rows of an HF dataset as one Arrow table (respects any row selection of the dataset)."""
    return hf_dataset.with_format("arrow")[:]


def column_arrays(table, columns, first_row: dict) -> dict[str, np.ndarray]:
    """Tabular columns as numpy arrays, in the dtypes LeRobot's ``hf_transform_to_torch`` produces
    (``torch.tensor`` of Python values: floats become float32, ints int64)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = {}
    n = table.num_rows
    for name in columns:
        ref = first_row[name]
        if not isinstance(ref, torch.Tensor):
            raise LeRobotSourceError(f"column {name!r} holds {type(ref).__name__} values; compressed_cache "
                                     "supports numeric columns, PNG images and videos (use --dataset.backend=native)")
        values = table.column(name).combine_chunks()
        while pa.types.is_list(values.type) or pa.types.is_large_list(values.type) or \
                pa.types.is_fixed_size_list(values.type):
            values = pc.list_flatten(values)
        arr = np.asarray(values.to_numpy(zero_copy_only=False))
        arr = arr.reshape((n,) + tuple(ref.shape))
        out[name] = arr.astype(_numpy_dtype(ref.dtype), copy=False)
        check = torch.from_numpy(np.array(out[name][0]))
        if not torch.equal(check, ref):
            raise LeRobotSourceError(f"column {name!r}: could not reproduce LeRobot's value for row 0 "
                                     f"({check} != {ref}); please report this dataset layout")
    return out


def _numpy_dtype(dtype: torch.dtype):
    return torch.empty((), dtype=dtype).numpy().dtype


def decode_png_column(table, name: str, rows: slice) -> np.ndarray:
    """PNG images of one episode as uint8 (N, C, H, W), decoded as the HF Image feature decodes them."""
    from PIL import Image

    col = table.column(name)[rows.start:rows.stop]
    frames = []
    for i, cell in enumerate(col.to_pylist()):
        data = cell.get("bytes") if isinstance(cell, dict) else None
        if data is None and isinstance(cell, dict) and cell.get("path"):
            data = Path(cell["path"]).read_bytes()
        if data is None:
            raise LeRobotSourceError(f"image column {name!r}, row {rows.start + i}: no PNG bytes or path")
        img = Image.open(io.BytesIO(data))
        img.load()
        if img.mode != "RGB":
            raise LeRobotSourceError(f"image column {name!r}: mode {img.mode} images are not supported by "
                                     "compressed_cache (RGB only); use --dataset.backend=native")
        frames.append(np.asarray(img).transpose(2, 0, 1))
    return np.ascontiguousarray(np.stack(frames)) if frames else np.zeros((0,), np.uint8)


class EpisodeVideoReader:
    """One torchcodec decoder per video file, opened lazily, reused for every episode stored in that file."""

    def __init__(self, root: Path, meta, tolerance_s: float):
        self.root = Path(root)
        self.meta = meta
        self.tolerance_s = tolerance_s
        self._decoders: dict[str, object] = {}

    def _decoder(self, path: Path, ep_idx: int, key: str):
        from torchcodec.decoders import VideoDecoder

        p = str(path)
        if p not in self._decoders:
            if not path.exists():
                raise LeRobotSourceError(f"video file {path} (episode {ep_idx}, {key}) is missing")
            self._decoders.clear()  # episodes are read in file order: one open decoder at a time is enough
            try:
                self._decoders[p] = VideoDecoder(p, seek_mode="approximate")
            except Exception as exc:
                raise LeRobotSourceError(f"cannot open video {path} (episode {ep_idx}, {key}): {exc}; the file is "
                                         "truncated or corrupt") from exc
        return self._decoders[p]

    def episode_frames(self, ep_idx: int, key: str, timestamps: np.ndarray) -> np.ndarray:
        """uint8 (N, C, H, W) frames of one episode's rows, in row order."""
        ep = self.meta.episodes[ep_idx]
        path = self.root / self.meta.get_video_file_path(ep_idx, key)
        dec = self._decoder(path, ep_idx, key)
        query = [float(ep[f"videos/{key}/from_timestamp"]) + float(ts) for ts in timestamps.tolist()]
        fps = dec.metadata.average_fps
        indices = [round(ts * fps) for ts in query]
        try:
            batch = dec.get_frames_at(indices=indices)
        except Exception as exc:
            raise LeRobotSourceError(f"decoding {path} (episode {ep_idx}, {key}, frames {indices[0]}..{indices[-1]}) "
                                     f"failed: {exc}; the file is truncated or corrupt") from exc
        pts = batch.pts_seconds.numpy()
        dist = np.abs(pts - np.asarray(query))
        bad = np.flatnonzero(~(dist < self.tolerance_s))
        if bad.size:
            i = int(bad[0])
            raise LeRobotSourceError(
                f"{path}: episode {ep_idx}, {key}: {bad.size} frame(s) violate the timestamp tolerance "
                f"(tolerance_s={self.tolerance_s}); first: row {i} queries t={query[i]:.6f}s, nearest frame at "
                f"{pts[i]:.6f}s. LeRobotDataset would raise FrameTimestampError on these samples; fix the "
                "episode's timestamps or raise --tolerance_s")
        return batch.data.numpy()
