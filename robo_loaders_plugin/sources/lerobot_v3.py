"""LeRobot v3 datasets on disk (``meta/info.json``, ``meta/episodes``, ``meta/tasks.parquet``, ``data/``,
``videos/``), read with pyarrow and torchcodec only: no LeRobot import, so the same source serves the converters,
the compressed cache and later remote (fsspec) datasets.

Why it mirrors LeRobot 0.6.1 so closely: items must be byte-identical to ``LeRobotDataset[i]``.

- Tabular columns are served as LeRobot's ``hf_transform_to_torch`` serves them (``torch.tensor`` of the Python
  values): floats as float32, integers as int64, booleans as bool, a feature of shape (1,) as a scalar, in the order
  of ``info.json``'s features (video features have no column). The adapter checks the first row against LeRobot's.
- Video frames are decoded with torchcodec exactly as LeRobot does (``VideoDecoder(path, seek_mode="approximate")``,
  frame index ``round((from_timestamp + timestamp) * average_fps)``, ``get_frames_at``), once per episode and
  camera, in file order; the timestamp-tolerance check LeRobot runs per sample runs here once per frame, so a bad
  timestamp fails naming the file and episode. PNG image columns are decoded with PIL as the HF ``Image``
  feature does.

Content digest (see ``storage.fingerprint``): every file under ``meta/`` and ``data/`` in full (JSON and parquet:
the tables), and each video file's size plus 16 evenly spaced 64 KiB blocks (whole when under 1 MiB).
"""
from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np

from robo_loaders_plugin.core.errors import SourceError
from robo_loaders_plugin.storage import fingerprint as fp

REQUIRED_COLUMNS = ("index", "episode_index", "timestamp", "task_index")


def _numpy_dtype(feature_dtype: str):
    """The dtype ``torch.tensor`` gives the Python values the HF dataset yields for a feature dtype."""
    if feature_dtype == "bool":
        return np.dtype(bool)
    if feature_dtype.startswith("float"):
        return np.dtype(np.float32)
    if feature_dtype.startswith(("int", "uint")):
        return np.dtype(np.int64)
    return None


class LeRobotV3:
    """The dataset at ``root``: metadata and tables, read once; episodes decoded on request."""

    def __init__(self, root):
        self.root = Path(os.path.realpath(os.path.expanduser(str(root))))
        info_path = self.root / "meta" / "info.json"
        if not info_path.exists():
            raise SourceError(f"{self.root}: meta/info.json not found; not a LeRobot v3 dataset root")
        try:
            self.info = json.loads(info_path.read_text())
        except json.JSONDecodeError as exc:
            raise SourceError(f"{info_path}: not valid JSON ({exc})") from None
        self.fps = self.info["fps"]
        self.features = self.info["features"]
        self.video_keys = [k for k, f in self.features.items() if f["dtype"] == "video"]
        self.image_keys = [k for k, f in self.features.items() if f["dtype"] == "image"]
        self.columns = [k for k, f in self.features.items() if f["dtype"] != "video"]
        self._episodes = None
        self._tasks = None

    @property
    def path(self) -> str:
        return str(self.root)

    # -- metadata ------------------------------------------------------------------------------------------------
    @property
    def episodes(self) -> dict[int, dict]:
        """meta/episodes rows by ``episode_index`` (stats columns left out)."""
        if self._episodes is None:
            import pyarrow.parquet as pq

            paths = sorted((self.root / "meta" / "episodes").glob("*/*.parquet"))
            if not paths:
                raise SourceError(f"{self.root}: no meta/episodes/*/*.parquet; the dataset is incomplete")
            rows = {}
            for p in paths:
                t = pq.read_table(p, columns=[c for c in pq.read_schema(p).names if not c.startswith("stats/")])
                for r in t.to_pylist():
                    rows[int(r["episode_index"])] = r
            self._episodes = rows
        return self._episodes

    @property
    def tasks(self) -> list[str]:
        """Task strings by position, as LeRobot looks them up (``meta.tasks.iloc[task_index].name``)."""
        if self._tasks is None:
            path = self.root / "meta" / "tasks.parquet"
            if not path.exists():
                self._tasks = []
            else:
                import pandas as pd

                self._tasks = [str(t) for t in pd.read_parquet(path).index]
        return self._tasks

    def stats(self) -> dict | None:
        path = self.root / "meta" / "stats.json"
        return json.loads(path.read_text()) if path.exists() else None

    def video_path(self, ep: int, key: str) -> Path:
        row = self.episodes[ep]
        return self.root / self.info["video_path"].format(video_key=key, chunk_index=row[f"videos/{key}/chunk_index"],
                                                          file_index=row[f"videos/{key}/file_index"])

    def data_files(self) -> list[Path]:
        paths = sorted((self.root / "data").glob("*/*.parquet"))
        if not paths:
            raise SourceError(f"{self.root}: no data/*/*.parquet files; the dataset is incomplete")
        return paths

    def column_spec(self, name: str) -> tuple[np.dtype, tuple]:
        """(dtype, per-row shape) LeRobot serves tabular column ``name`` in."""
        ft = self.features[name]
        dtype = _numpy_dtype(ft["dtype"])
        if dtype is None:
            raise SourceError(f"{self.root}: column {name!r} has dtype {ft['dtype']!r}; robo-loaders backends serve "
                              "numeric columns, PNG images and videos (use --dataset.backend=native)")
        shape = tuple(ft["shape"])
        return dtype, (() if shape == (1,) else shape)

    # -- tables ---------------------------------------------------------------------------------------------------
    def read_table(self, columns: list[str], episodes: list[int] | None = None):
        """The data rows (in file order) of ``episodes`` (None: all), as one Arrow table."""
        import pyarrow.dataset as pa_ds

        missing = [c for c in REQUIRED_COLUMNS if c not in self.columns]
        if missing:
            raise SourceError(f"{self.root}: columns {missing} are missing from meta/info.json's features")
        try:
            dataset = pa_ds.dataset([str(p) for p in self.data_files()], format="parquet")
            flt = pa_ds.field("episode_index").isin(list(episodes)) if episodes is not None else None
            return dataset.to_table(columns=list(columns), filter=flt)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise SourceError(f"{self.root}: cannot read the data parquet files ({exc}); they are truncated or "
                              "corrupt") from exc

    def column_arrays(self, table, columns) -> dict[str, np.ndarray]:
        """Tabular columns as numpy arrays in the dtypes and shapes LeRobot serves them."""
        import pyarrow as pa
        import pyarrow.compute as pc

        out = {}
        n = table.num_rows
        for name in columns:
            dtype, shape = self.column_spec(name)
            values = table.column(name).combine_chunks()
            while pa.types.is_list(values.type) or pa.types.is_large_list(values.type) or \
                    pa.types.is_fixed_size_list(values.type):
                values = pc.list_flatten(values)
            arr = np.asarray(values.to_numpy(zero_copy_only=False))
            if arr.size != n * int(np.prod(shape, dtype=np.int64)):
                raise SourceError(f"{self.root}: column {name!r} holds {arr.size} values for {n} rows, but its feature "
                                  f"shape is {list(self.features[name]['shape'])}")
            out[name] = arr.reshape((n,) + shape).astype(dtype, copy=False)
        return out

    def episode_runs(self, episode_index: np.ndarray) -> list[tuple[int, int, int]]:
        """(episode, first row, end row) of each contiguous run; each episode one run of its recorded length."""
        if len(episode_index) == 0:
            raise SourceError(f"{self.root}: the dataset selects no frames")
        cuts = np.flatnonzero(np.diff(episode_index)) + 1
        starts = np.concatenate([[0], cuts])
        ends = np.concatenate([cuts, [len(episode_index)]])
        runs = [(int(episode_index[s]), int(s), int(e)) for s, e in zip(starts, ends)]
        seen = set()
        for ep, s, e in runs:
            if ep in seen:
                raise SourceError(f"{self.root}: episode {ep}'s frames are not contiguous in the data files; "
                                  "robo-loaders needs each episode's rows together (as LeRobot writes them)")
            seen.add(ep)
            if ep not in self.episodes:
                raise SourceError(f"{self.root}: episode {ep} has rows in data/ but no entry in meta/episodes")
            length = int(self.episodes[ep]["length"])
            if e - s != length:
                raise SourceError(f"{self.root}: episode {ep}: {e - s} rows in the data files but meta/episodes says "
                                  f"length={length}; the dataset is inconsistent")
        return runs

    # -- frames ---------------------------------------------------------------------------------------------------
    def png_frames(self, table, name: str, rows: slice) -> np.ndarray:
        """PNG images of a row range as uint8 (N, C, H, W), decoded as the HF Image feature decodes them."""
        from PIL import Image

        col = table.column(name)[rows.start:rows.stop]
        frames = []
        for i, cell in enumerate(col.to_pylist()):
            data = cell.get("bytes") if isinstance(cell, dict) else None
            if data is None and isinstance(cell, dict) and cell.get("path"):
                data = Path(cell["path"]).read_bytes()
            if data is None:
                raise SourceError(f"{self.root}: image column {name!r}, row {rows.start + i}: no PNG bytes or path")
            img = Image.open(io.BytesIO(data))
            img.load()
            if img.mode != "RGB":
                raise SourceError(f"{self.root}: image column {name!r}: mode {img.mode} images are not supported by "
                                  "robo-loaders backends (RGB only); use --dataset.backend=native")
            frames.append(np.asarray(img).transpose(2, 0, 1))
        return np.ascontiguousarray(np.stack(frames)) if frames else np.zeros((0,), np.uint8)

    # -- staleness ------------------------------------------------------------------------------------------------
    def fingerprint(self, recorded: fp.Fingerprint | None = None) -> fp.Fingerprint:
        return fp.fingerprint(str(self.root), self._digest, recorded)

    def _digest(self) -> str:
        h = fp.new_digest()
        for name, size, *_ in fp.stat_files(str(self.root)):
            h.update(f"{name}:{size}".encode())
            path = str(self.root / name)
            if name.startswith(("meta/", "data/")):
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
            else:
                fp.hash_file(h, path, size)
        return h.hexdigest()


class VideoFrames:
    """One torchcodec decoder per video file, opened lazily and reused for every episode stored in that file."""

    def __init__(self, source: LeRobotV3, tolerance_s: float):
        self.source = source
        self.tolerance_s = float(tolerance_s)
        self._decoders: dict[str, object] = {}

    def _decoder(self, path: Path, ep: int, key: str):
        from torchcodec.decoders import VideoDecoder

        p = str(path)
        if p not in self._decoders:
            if not path.exists():
                raise SourceError(f"video file {path} (episode {ep}, {key}) is missing")
            self._decoders.clear()  # episodes are read in file order: one open decoder at a time is enough
            try:
                self._decoders[p] = VideoDecoder(p, seek_mode="approximate")
            except Exception as exc:
                raise SourceError(f"cannot open video {path} (episode {ep}, {key}): {exc}; the file is truncated or "
                                  "corrupt") from exc
        return self._decoders[p]

    def episode(self, ep: int, key: str, timestamps: np.ndarray) -> np.ndarray:
        """uint8 (N, C, H, W) frames of one episode's rows, in row order."""
        path = self.source.video_path(ep, key)
        dec = self._decoder(path, ep, key)
        start = float(self.source.episodes[ep][f"videos/{key}/from_timestamp"])
        query = [start + float(ts) for ts in timestamps.tolist()]
        fps = dec.metadata.average_fps
        indices = [round(ts * fps) for ts in query]
        try:
            batch = dec.get_frames_at(indices=indices)
        except Exception as exc:
            raise SourceError(f"decoding {path} (episode {ep}, {key}, frames {indices[0]}..{indices[-1]}) failed: "
                              f"{exc}; the file is truncated or corrupt") from exc
        pts = batch.pts_seconds.numpy()
        dist = np.abs(pts - np.asarray(query))
        bad = np.flatnonzero(~(dist < self.tolerance_s))
        if bad.size:
            i = int(bad[0])
            raise SourceError(
                f"{path}: episode {ep}, {key}: {bad.size} frame(s) violate the timestamp tolerance "
                f"(tolerance_s={self.tolerance_s}); first: row {i} queries t={query[i]:.6f}s, nearest frame at "
                f"{pts[i]:.6f}s. LeRobotDataset would raise FrameTimestampError on these samples; fix the "
                "episode's timestamps or raise --tolerance_s")
        return batch.data.numpy()


class LeRobotEpisodes:
    """The episodes a run uses, each as one record: its tabular columns and every camera's decoded frames.

    Built once per process; the compressed cache and the shard converter both read episodes through it."""

    def __init__(self, source: LeRobotV3, tolerance_s: float, episodes: list[int] | None = None):
        self.source = source
        self.tolerance_s = float(tolerance_s)
        self.columns = list(source.columns)
        self.table = source.read_table(self.columns, episodes)
        numeric = [c for c in self.columns if c not in source.image_keys]
        self.arrays = source.column_arrays(self.table, numeric)
        self.runs = source.episode_runs(self.arrays["episode_index"])
        for ep, s, e in self.runs:
            first = int(source.episodes[ep]["dataset_from_index"])
            if not np.array_equal(self.arrays["index"][s:e], np.arange(first, first + e - s)):
                raise SourceError(f"{source.root}: episode {ep}: the 'index' column is not {first}..{first + e - s - 1}; "
                                  "the dataset is inconsistent")
        self._rows = {ep: (s, e) for ep, s, e in self.runs}
        self.videos = VideoFrames(source, tolerance_s)

    @property
    def camera_keys(self) -> list[str]:
        return list(self.source.video_keys) + list(self.source.image_keys)

    def frame_bytes(self, ep: int) -> int:
        s, e = self._rows[ep]
        per_frame = sum(int(np.prod(self.source.features[k]["shape"])) for k in self.camera_keys)
        return (e - s) * per_frame

    def read(self, ep: int) -> tuple[dict, set]:
        """(fields, names of the camera fields) of episode ``ep``."""
        s, e = self._rows[ep]
        fields = {k: a[s:e] for k, a in self.arrays.items()}
        for key in self.source.video_keys:
            fields[key] = self.videos.episode(ep, key, self.arrays["timestamp"][s:e])
        for key in self.source.image_keys:
            fields[key] = self.source.png_frames(self.table, key, slice(s, e))
        return fields, set(self.camera_keys)
