"""``LeRobotDataset`` items served from a frame source (every LeRobot backend but ``native``).

The item rules are ``windows.lerobot``; this class is what ``lerobot-train`` and user code see: the attributes
LeRobot's training script and policies read (``meta``, ``episodes``, ``num_frames``, ``fps``, ...), ``ds[i]``
equal to ``LeRobotDataset[i]``, and ``collate`` for the ``indexed``/``batch`` kinds (``core.iteration``).

The object is picklable (LeRobot 0.6.1 starts DataLoader workers with ``spawn``): it pickles as its frame source
(a store path, or shard locations), small arrays and the native dataset it mirrors (whose HF table pickles by
file).
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

import numpy as np
import torch

from robo_loaders_plugin.core.errors import SourceError
from robo_loaders_plugin.core.indices import item_index
from robo_loaders_plugin.core.iteration import IndexedDataset
from robo_loaders_plugin.core.options import LEROBOT_OPTIONS
from robo_loaders_plugin.core.packed import pack_ints, unpack_ints
from robo_loaders_plugin.frames.base import FrameSource
from robo_loaders_plugin.lerobot import compat
from robo_loaders_plugin.lerobot.compat import ReaderSettings, hf_cache_files, hf_column, reader_settings
from robo_loaders_plugin.storage.buffers import BufferPool
from robo_loaders_plugin.windows import lerobot as rules

if TYPE_CHECKING:
    from robo_loaders_plugin.sources.lerobot_v3 import LeRobotEpisodes, LeRobotV3


OPTION_PREFIX = LEROBOT_OPTIONS  # how a LeRobot user sets a backend's options, for messages


class LeRobotSamples(IndexedDataset):
    """Rows of ``native`` (in its row order) from ``frames``, whose units are the episode runs in that order.

    Who drives its passes is the backend choice's kind (``core.spec``): LeRobot's DataLoader for a ``sample``
    backend (its spawned workers call ``__getitems__``; image transforms draw from their RNG), the training
    process's threads for an ``indexed`` one (``collate``), the pipeline for a ``batch`` one.

    Args:
        native: The ``LeRobotDataset`` LeRobot's factory built (episode selection, delta timestamps, transforms).
        frames: Where every episode run's fields are read from.
        runs: ``(episode, start row, end row)`` of each run, in ``native``'s row order.
        columns: The tabular columns served, in LeRobot's order.
        video_keys: Camera keys stored as video.
        image_keys: Camera keys stored as images.
        backend_name: Shown in ``repr``.
        location: Where the frames live (a cache file, a shards directory, tensors on a device, a video URL).
        delta_steps: Each delta key's offsets in recorded steps, when they are not LeRobot's own
            ``delta_indices`` (rate conversion; fractional offsets are read by ``modes``).
        modes: How each delta key is read between recorded steps.
        units: The frame source's units when they are not the episode runs (parts of episodes, in row order:
            ``frames.chunks``); ``None``: the runs.
        transition_ends: For ``next.*`` keys at a converted rate, the integer offsets they are read at
            (``windows.lerobot.transition_ends``); ``None``: read at their offsets.
        target_fps: The rate the policy's windows are served at when it is not the recorded one (then
            lerobot-train's sampler leaves out the policy's ``drop_n_last_frames`` in steps at this rate:
            ``sampler_drop``); ``None``: the recorded rate.
        **kwargs: ``serving`` (``core.iteration.Serving``) and, for subclasses, their bases' arguments.
    """

    def __init__(
        self,
        native,
        frames: FrameSource,
        runs: list[tuple[int, int, int]],
        columns: list[str],
        video_keys: list[str],
        image_keys: list[str],
        backend_name: str,
        location: str = "",
        delta_steps: dict | None = None,
        modes: dict | None = None,
        units: list[tuple[int, int, int]] | None = None,
        transition_ends: dict | None = None,
        target_fps: float | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.location = location
        self.target_fps = target_fps
        # recorded frames lerobot-train's sampler leaves out at each episode's end, when not the policy's own
        # drop_n_last_frames (set by lerobot.single.convert at a converted rate; applied by lerobot.integration.cycle)
        self.sampler_drop: int | None = None
        settings = reader_settings(native)
        self._native = native  # the LeRobotDataset this one mirrors: meta, episode selection, HF table
        self.meta = native.meta
        self.repo_id = native.repo_id
        self.root = native.root
        self.episodes = native.episodes
        self.tolerance_s = settings.tolerance_s
        self.frames = frames
        self.backend_name = backend_name
        # index arrays of one entry per run (per row: numpy only, issue 22)
        run_episode = np.fromiter((ep for ep, _, _ in runs), dtype=np.int64, count=len(runs))
        run_rows = rules.RowMap(np.fromiter((e - s for _, s, e in runs), dtype=np.int64, count=len(runs)))
        # the frame source's units: the runs, or parts of them in the same row order (frames.chunks)
        self.rowmap = (
            run_rows
            if units is None
            else rules.RowMap(np.fromiter((e - s for _, s, e in units), dtype=np.int64, count=len(units)))
        )
        self._runs = runs
        first, last = episode_bounds(self.meta, run_episode)
        self.windows = rules.DeltaWindows.of_runs(
            run_rows,
            first,
            first,
            last,
            settings.delta_indices if delta_steps is None else delta_steps,
            transition_ends,
        )
        self.layout = rules.ItemLayout(
            columns=list(columns),
            video_keys=list(video_keys),
            image_keys=list(image_keys),
            camera_keys=[k for k in self.meta.camera_keys if k not in self.meta.depth_keys],
            tasks=[str(t) for t in self.meta.tasks.index],
            return_uint8=settings.return_uint8,
            image_transforms=settings.image_transforms,
            modes=modes,
        )
        self.image_transforms = settings.image_transforms
        self.delta_indices = settings.delta_indices
        self.return_uint8 = settings.return_uint8
        # batch arrays reused once nothing references them (fresh ones page-fault): arrays of one shape share a key
        # (the int64 columns of a batch, cameras of one size), and about 8 batches are in flight (assembling,
        # prefetched, in the training step); the pool keeps only arrays that were alive together
        fields = len(self.layout.columns) + len(self.layout.video_keys) + len(self.delta_indices or {})
        self.buffer_pool = BufferPool(max_per_shape=8 * max(1, fields))

    def __getstate__(self):
        """Pickled with its runs packed (``core.packed``: a list of 10,000 (episode, start, end) tuples was 147 kB of
        a spawned worker's payload, above the pipe's buffer)."""
        state = dict(self.__dict__)
        runs = np.asarray(self._runs, dtype=np.int64).reshape(-1, 3)
        state["_runs"] = [pack_ints(runs[:, c]) for c in range(3)]  # column by column: each nearly regular
        return state

    def __setstate__(self, state):
        columns = [unpack_ints(p) for p in state["_runs"]]
        self.__dict__.update(state)
        self._runs = list(zip(*(c.tolist() for c in columns)))

    # -- what lerobot-train and EpisodeAwareSampler use ----------------------------------------------------------
    def __len__(self):
        return len(self.rowmap)

    @property
    def num_frames(self) -> int:
        """Rows served (``LeRobotDataset.num_frames``)."""
        return len(self.rowmap)

    @property
    def num_episodes(self) -> int:
        """Episodes selected (``LeRobotDataset.num_episodes``): the selection's, else every episode of the dataset."""
        return len(self.episodes) if self.episodes is not None else self.meta.total_episodes

    @property
    def fps(self):
        """The recorded frame rate (``meta.fps``)."""
        return self.meta.fps

    @property
    def features(self):
        """The dataset's features (``meta.features``), as LeRobot's policies read them."""
        return self.meta.features

    @property
    def absolute_to_relative_idx(self):
        """The native dataset's map from absolute ``index`` to its row, for ``EpisodeAwareSampler`` (``None`` without an
        episode selection)."""
        return self._native.absolute_to_relative_idx

    @property
    def hf_dataset(self):
        """The native dataset's HF table (read by code that inspects columns, not by the items served here)."""
        return self._native.hf_dataset

    def __repr__(self):
        return (
            f"{type(self).__name__}(backend={self.backend_name}, repo_id={self.repo_id!r}, "
            f"episodes={self.num_episodes}, frames={self.num_frames}, data={self.location})"
        )

    # -- items --------------------------------------------------------------------------------------------------
    def _check(self, indices) -> np.ndarray:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        bad = idx[(idx < -n) | (idx >= n)]
        if bad.size:
            raise IndexError(f"index {int(bad[0])} out of range for {n} frames")
        return idx % n  # negative indices count from the end, as on LeRobotDataset

    def __getitem__(self, idx):
        return self.__getitems__([item_index(idx, type(self).__name__)])[0]

    def __getitems__(self, indices):
        """A batch of items (torch's DataLoader passes whole batches here): one gather per key, then split."""
        return rules.items(self.layout, self.frames, self.rowmap, self.windows, self._check(indices))

    def collate(self, indices) -> dict:
        """The batch torch's DataLoader would hand ``lerobot-train`` for these indices (the ``indexed``/``batch``
        kinds build batches here, without per-item dicts).

        Args:
            indices: Row indices (negative ones count from the end).

        Returns:
            ``{key: batched tensor or list}``, as LeRobot's default collate of ``[self[i] for i in indices]``.

        Raises:
            IndexError: an index is out of range.
        """
        return rules.collate(
            self.layout, self.frames, self.rowmap, self.windows, self._check(indices), self.buffer_pool
        )

    def episode_of(self, indices=None) -> np.ndarray:
        """Frame-source unit (episode run, or part of one) of rows ``indices``, for the pipeline's episode-buffer
        shuffle and the batches' episode mix.

        Args:
            indices: Row indices (``None``: every row).

        Returns:
            The unit index of each row (int64).
        """
        return self.rowmap.run_of_row if indices is None else self.rowmap.run_of_row[np.asarray(indices)]


def episode_bounds(meta, episodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``dataset_from_index``, ``dataset_to_index``) of ``episodes`` from LeRobot's episode table, one column read
    each. Why not ``meta.episodes[ep][...]`` per episode: each row read formats every stats column of the row (~0.3 ms),
    seconds for ten thousand episodes.

    Args:
        meta: LeRobot's ``LeRobotDatasetMetadata``.
        episodes: Episode indices.

    Returns:
        (first absolute index, end absolute index) of each episode.
    """
    # read in place (compat.episode_boundaries): a column read through ``datasets`` builds a Dataset object,
    # deep-copying its features, ~5 ms a column and component at a mixture's start (issue 44)
    first, end = compat.episode_boundaries(meta.episodes)
    return first[episodes], end[episodes]


def check_supported(native) -> None:
    """Refuse, before anything is read, a dataset the backends that read episodes ahead of time cannot reproduce
    byte for byte.

    Args:
        native: The ``LeRobotDataset`` LeRobot's factory built.

    Raises:
        SourceError: video decoded with another backend than torchcodec, depth features, or language columns;
            the message says to use ``--dataset.backend=native`` (or torchcodec).
    """
    settings = reader_settings(native)
    meta = native.meta
    if meta.video_keys and settings.video_backend != "torchcodec":
        raise SourceError(
            f"robo-loaders decodes video with torchcodec, as LeRobot does by default; this dataset "
            f"uses video_backend={settings.video_backend!r}, whose frames can differ. Use "
            "--dataset.video_backend=torchcodec or --dataset.backend=native"
        )
    if meta.depth_keys:
        raise SourceError(
            f"depth features {meta.depth_keys} are not supported by robo-loaders yet; use --dataset.backend=native"
        )
    if meta.has_language_columns:
        raise SourceError(
            "datasets with language columns are not supported by robo-loaders yet; use --dataset.backend=native"
        )


def check_meta_match(native, source) -> None:
    """What a backend reads of ``meta/`` is what LeRobot's dataset object holds: from ``meta/info.json`` the frame
    rate, the video path template and every feature's name, dtype and shape (in order); from ``meta/episodes``
    every episode's index, length, ``dataset_from_index``/``dataset_to_index`` and, per camera, the video file's
    chunk and file index and the episode's ``from_timestamp`` in it. Values are compared, column by column
    (vectorised: no per-episode Python), never file stats.

    Why: LeRobot reads ``meta/episodes`` through its datasets cache (Arrow files under ``HF_DATASETS_CACHE``),
    keyed by the files' mtimes, so an episodes file edited with its mtime kept leaves ``LeRobotDataset`` decoding the
    old episode boundaries while a backend reads the file's new ones (one ``from_timestamp`` moved by a frame: every
    frame of that episode differs); ``meta/info.json`` is read when the dataset object is built, so an edit after
    that differs the same way. ``meta/tasks.parquet`` is not compared: the backends take the task strings from
    ``native.meta.tasks`` itself.

    Args:
        native: The ``LeRobotDataset`` whose items are served.
        source: The ``sources.lerobot_v3.LeRobotV3`` the backend reads (its ``info`` and ``episode_table``).

    Raises:
        SourceError: a value differs; the message names the file, the first differing value on both sides and how
            to make LeRobot read the file again.
    """
    meta = native.meta
    info_file = f"{source.url}/meta/info.json"
    changed_since = (
        "LeRobot read {} when its dataset object was built and it changed since: build the dataset "
        "again (run again) so that both read the same file"
    )
    theirs = [("fps", meta.fps), ("video_path", meta.video_path), ("features", list(meta.features))]
    mine = [
        ("fps", source.info.get("fps")),
        ("video_path", source.info.get("video_path")),
        ("features", list(source.features)),
    ]
    for key, ft in meta.features.items():
        theirs.append((f"features[{key!r}] dtype and shape", (ft.get("dtype"), _shape(ft.get("shape")))))
        other = source.features.get(key) or {}
        mine.append((f"features[{key!r}] dtype and shape", (other.get("dtype"), _shape(other.get("shape")))))
    for (what, a), (_, b) in zip(mine, theirs):
        if a != b:
            raise SourceError(
                f"{info_file}: {what} is {a!r} there, {b!r} in LeRobot's dataset object; "
                + changed_since.format("meta/info.json")
            )

    table = meta.episodes
    cache_dirs = sorted({os.path.dirname(f) for f in hf_cache_files(table)})
    if cache_dirs:
        held = f"LeRobot's dataset object, read from its datasets cache ({', '.join(cache_dirs)})"
        refresh = (
            "LeRobot's datasets cache is keyed by the files' mtimes, so a file changed with its mtime kept "
            "(cp -p, rsync -t, an edit with the mtime restored) leaves it serving the old values: delete "
            f"{' and '.join(cache_dirs)} (or point HF_DATASETS_CACHE at an empty directory) so that LeRobot "
            "reads the files again, then run again"
        )
    else:
        held = "LeRobot's dataset object (held in memory)"
        refresh = changed_since.format("meta/episodes")
    # LeRobot's table read in place (compat.hf_table_columns), not through with_format("arrow")[:]: that copies
    # the dataset object, deep-copying its features three times, per component of a mixture (issue 44 item 3)
    theirs = compat.hf_table_columns(table) if table is not None else None
    mine = source.episode_table
    files = source.episode_files
    where = f"{source.url}/meta/episodes" if len(files) != 1 else files[0][0]
    n = 0 if theirs is None else theirs.num_rows
    if mine.num_rows != n:  # episodes added or removed since LeRobot read the table (a recorder still writing), or
        # a datasets cache that is stale (a file changed with its mtime kept): which one, only the user knows
        stale = f"; if no file changed since, {refresh}" if cache_dirs else ""
        raise SourceError(
            f"{where}: {mine.num_rows} episodes there, {n} in {held}; " + changed_since.format("meta/episodes") + stale
        )
    episode = _column(mine, "episode_index")
    if episode is not None and not np.array_equal(episode, np.arange(len(episode))):
        # LeRobot 0.6.1 takes an episode's video timestamps from the row at its index: rows out of order gave its
        # items another episode's frames, and the backends (which look the row up by its episode_index) other ones
        # than LeRobot's (a reviewer's reproduction)
        r = int(np.flatnonzero(episode != np.arange(len(episode)))[0])
        raise SourceError(
            f"{where}: row {r} holds episode {int(episode[r])}; LeRobot reads an episode's row by its index, so "
            "its items would be built from another episode's metadata: write meta/episodes in episode order, "
            "0 to N-1 (as LeRobot's own writer does)"
        )
    columns = ["episode_index", "length", "dataset_from_index", "dataset_to_index"] + [
        f"videos/{k}/{c}" for k in source.video_keys for c in ("chunk_index", "file_index", "from_timestamp")
    ]
    for name in columns:
        a = _column(mine, name)
        b = _column(theirs, name)
        if a is None or b is None:
            if a is not None or b is not None:
                raise SourceError(
                    f"{where}: column {name!r} is {'a number' if a is not None else 'missing'} there, "
                    f"{'a number' if b is not None else 'missing'} in {held}; {refresh}"
                )
            continue
        same = (a == b) | ((a != a) & (b != b)) if a.dtype.kind == "f" or b.dtype.kind == "f" else a == b
        if not same.all():
            differs = np.flatnonzero(~same)
            r = int(differs[0])
            ends = np.cumsum([rows for _, rows in files])
            path = files[int(np.searchsorted(ends, r, side="right"))][0]
            episode = _column(mine, "episode_index")
            ep = f"episode {int(episode[r])}" if episode is not None else f"row {r}"
            raise SourceError(
                f"{path}: {ep}'s {name} is {a[r].item()!r} there, {b[r].item()!r} in {held} "
                f"({len(differs)} of {n} episodes differ in it); {refresh}"
            )


def _shape(shape):
    """A feature's shape as a tuple (``info.json`` holds lists, LeRobot's ``DatasetInfo`` tuples)."""
    return tuple(shape) if isinstance(shape, (list, tuple)) else shape


def _column(table, name: str) -> np.ndarray | None:
    """A numeric column of an Arrow table as numpy (``None``: not in the table, or not numeric)."""
    if table is None or name not in table.column_names:
        return None
    arr = np.asarray(table.column(name).to_numpy())
    return arr if arr.dtype.kind in "biuf" else None


def check_rows_match(
    native,
    columns: list[str],
    index_column: np.ndarray,
    served: dict,
    read_from: str | None = None,
    images: dict | None = None,
) -> None:
    """The rows a backend serves are the native dataset's rows, in its order, with LeRobot's values: every tabular
    column's dtype and shape against LeRobot's first row, and **every value** of every served tabular column against
    what LeRobot's dataset object holds (``native.hf_dataset``'s Arrow table), compared as a SHA-256 of each
    column's bytes in the dtype LeRobot serves it (vectorised: no per-row Python).

    Why every row: LeRobot reads the parquet files through its datasets cache (Arrow files under
    ``HF_DATASETS_CACHE``), which is keyed by the files' mtimes, so a data file edited with its mtime kept leaves
    LeRobot serving the old values while a backend reads the new ones; a guard against any drift from LeRobot's
    own reader too.

    Args:
        native: The ``LeRobotDataset`` whose rows are served.
        columns: The tabular columns the backend serves, in LeRobot's order.
        index_column: The ``index`` column of every row the backend read, in its order.
        served: ``{column: array of every row, in the native dataset's order}`` for the numeric columns the
            backend serves (columns LeRobot does not serve as tensors are skipped).
        read_from: Where the backend read them, for messages (``None``: the data parquet files).
        images: ``{column: Arrow column of HF Image structs, every row in the native order}``: the PNG image columns
            as the data files hold them now, their bytes compared with LeRobot's (a reviewer's reproduction: left
            out, a PNG replaced with the mtime kept was served new by a backend and old by LeRobot, unnoticed).

    Raises:
        SourceError: the columns, the rows (``index``), a column's dtype or shape, or any value differs from
            LeRobot's; for values, the message names the first differing row and how to refresh LeRobot's cache.
    """
    import hashlib
    import os

    hf = native.hf_dataset
    # the names in the table's order (datasets orders its features as the table): ``hf.features`` deep-copies
    # every feature at each read (~1 ms a component of a mixture)
    native_columns = list(hf.column_names)
    if native_columns != list(columns):
        raise SourceError(f"{native.root}: columns {list(columns)} differ from LeRobot's {native_columns}")
    native_index = np.asarray(hf_column(hf, "index").to_numpy(zero_copy_only=False))
    if not np.array_equal(native_index, index_column):
        raise SourceError(
            f"{native.root}: the rows robo-loaders reads are not LeRobotDataset's rows (index column "
            "differs); please report this dataset layout"
        )
    ref = hf[0]
    mine_from = read_from or f"the data parquet files under {native.root}/data"
    cache_files = sorted({os.path.dirname(f) for f in hf_cache_files(hf)})
    theirs_from = (
        f"LeRobot's dataset object, read from its datasets cache ({', '.join(cache_files)})"
        if cache_files
        else "LeRobot's dataset object (held in memory)"
    )

    def digest(a: np.ndarray) -> str:
        return hashlib.sha256(np.ascontiguousarray(a).view(np.uint8).reshape(-1)).hexdigest()

    for name, values in served.items():
        if not isinstance(ref[name], torch.Tensor):
            continue
        values = np.asarray(values)
        mine = torch.from_numpy(np.array(values[0]))
        if mine.dtype != ref[name].dtype or mine.shape != ref[name].shape:
            raise SourceError(
                f"{native.root}: column {name!r}: LeRobot serves {ref[name].dtype} of shape "
                f"{tuple(ref[name].shape)}, robo-loaders read {mine.dtype} of shape {tuple(mine.shape)}; "
                "please report this dataset layout"
            )
        theirs = _as_served(hf_column(hf, name), values.dtype, values.shape)
        if theirs is None:
            raise SourceError(
                f"{native.root}: column {name!r}: {theirs_from} does not hold {values.shape} values "
                f"of it as {mine_from} do; please report this dataset layout"
            )
        if digest(values) != digest(theirs):
            n = len(values)
            differs = np.flatnonzero(
                (
                    np.ascontiguousarray(values).reshape(n, -1).view(np.uint8)
                    != np.ascontiguousarray(theirs).reshape(n, -1).view(np.uint8)
                ).any(axis=1)
            )
            r = int(differs[0])
            raise SourceError(
                f"{native.root}: column {name!r} differs at {len(differs)} of {n} rows (first: row {r}, index "
                f"{int(native_index[r])}: {_shown(values[r])} in {mine_from}, {_shown(theirs[r])} in {theirs_from}). "
                + _stale_cache_advice(cache_files)
            )
    for name, column in (images or {}).items():
        differs = _image_rows_differing(hf_column(hf, name), column)
        if differs.size:
            r = int(differs[0])
            raise SourceError(
                f"{native.root}: image column {name!r} differs at {differs.size} of {len(native_index)} rows (first: "
                f"row {r}, index {int(native_index[r])}: other PNG bytes in the data parquet files than in "
                f"{theirs_from}). " + _stale_cache_advice(cache_files)
            )


def _stale_cache_advice(cache_files: list[str]) -> str:
    """What a refusal of values LeRobot's cache holds otherwise says to do."""
    return (
        "LeRobot's datasets cache is keyed by the files' mtimes, so a data file changed with its mtime kept "
        "(cp -p, rsync -t, an edit with the mtime restored) leaves it serving the old values: delete "
        f"{' and '.join(cache_files) or 'the cache'} (or point HF_DATASETS_CACHE at an empty directory) so "
        "that LeRobot reads the files again, then run again"
    )


def _image_rows_differing(theirs, mine) -> np.ndarray:
    """The rows whose PNG bytes differ between two Arrow columns of HF Image structs (``bytes``, ``path``), or whose
    counts differ (then every row)."""
    import pyarrow.compute as pc

    def png_bytes(col):
        return pc.struct_field(col, "bytes") if hasattr(col.type, "num_fields") else col

    a, b = png_bytes(theirs), png_bytes(mine)
    if len(a) != len(b):
        return np.arange(max(len(a), len(b)))
    same = pc.fill_null(pc.or_kleene(pc.equal(a, b), pc.and_(pc.is_null(a), pc.is_null(b))), False)
    return np.flatnonzero(~np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool))


def _shown(row: np.ndarray) -> str:
    """A row's values for a one-line message: numpy's printout (at most 3 values each end of a long row) with its
    line breaks and the padding that aligned them removed (it breaks lines past 75 characters)."""
    text = np.array2string(
        np.asarray(row), threshold=8, edgeitems=3, precision=6, separator=", ", max_line_width=1 << 30
    )
    return " ".join(text.split()).replace("[ ", "[").replace(" ,", ",").replace(" ]", "]")


def _as_served(col, dtype: np.dtype, shape: tuple) -> np.ndarray | None:
    """An Arrow column of LeRobot's table as the (rows, ...) array of ``dtype`` a backend serves (lists
    flattened), or None when it does not hold that many values."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        values = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        while (
            pa.types.is_list(values.type)
            or pa.types.is_large_list(values.type)
            or pa.types.is_fixed_size_list(values.type)
        ):
            values = pc.list_flatten(values)
        arr = np.asarray(values.to_numpy(zero_copy_only=False))
        if arr.size != int(np.prod(shape, dtype=np.int64)) or arr.dtype.hasobject:
            return None
        return arr.reshape(shape).astype(dtype, copy=False)
    except (pa.ArrowException, ValueError, TypeError):
        return None


def native_source(native) -> tuple[LeRobotV3, ReaderSettings]:
    """The LeRobot v3 source under a ``LeRobotDataset`` and its reader settings (tolerance, ``delta_indices``,
    transforms), after checking that robo-loaders reproduces its items: the version, the layout, and that the
    ``meta/`` read from disk is the one the dataset object holds (an edited ``meta/`` is refused, naming the file).

    Args:
        native: The ``LeRobotDataset`` LeRobot's factory built.

    Returns:
        ``(LeRobotV3, reader settings)``.

    Raises:
        CompatError: not LeRobot 0.6.x.
        SourceError: a layout robo-loaders does not reproduce, or ``meta/`` differs from the dataset object's.
    """
    return checked_once(native, "native_source", lambda: _checked_source(native))


def _checked_source(native) -> tuple[LeRobotV3, ReaderSettings]:
    """What :func:`native_source` gives, checked now."""
    from robo_loaders_plugin.lerobot.compat import active_reads, check_version
    from robo_loaders_plugin.sources.lerobot_v3 import LeRobotV3

    check_version()
    check_supported(native)
    source = LeRobotV3(native.root, table_reads=active_reads())  # a mixture's: LeRobot's reads, files unchanged
    check_meta_match(native, source)  # the meta/ the backend reads is the one LeRobot's object holds
    return source, reader_settings(native)


# what checked_once computed inside sources_checked_once() blocks (innermost last): (id, what) -> (native, result)
_CHECKED: list[dict] = []


def checked_once(native, what: str, compute):
    """``compute()`` for a ``LeRobotDataset``, given again for the same object and ``what`` inside one
    :func:`sources_checked_once` block (outside one: computed at each call).

    Why: a mixture's footprint plan and its build ask a store for the same metadata-only answer about each
    component moments apart (``sdk.serve``'s sizes, key and batches in flight from ``meta/``: ~0.7 ms a component,
    twice); the block spans one build, and what the build reads next is checked on its own.

    Args:
        native: The ``LeRobotDataset``.
        what: Names the answer (one per caller).
        compute: ``compute()`` gives it; it must read nothing but ``native`` and its ``meta/``.

    Returns:
        ``compute()``'s result, the block's first for this object and ``what``.
    """
    if not _CHECKED:
        return compute()
    held = _CHECKED[-1].get((id(native), what))
    if held is not None and held[0] is native:
        return held[1]
    result = compute()
    _CHECKED[-1][(id(native), what)] = (native, result)
    return result


@contextlib.contextmanager
def sources_checked_once():
    """While active, :func:`native_source` checks each ``LeRobotDataset``'s ``meta/`` once and gives the same
    source to every later call for that dataset object.

    Why: a mixture plans every component's footprint, then builds each one's backend dataset, moments apart; each
    step checked the component's ``meta/`` against LeRobot's object again (~10 ms a component, twice). The block
    spans one build (``lerobot.mixture.build_mixture``); what the backends read next (the rows, the stores) is
    checked on its own.
    """
    _CHECKED.append({})
    try:
        yield
    finally:
        _CHECKED.pop()


def native_episodes(native, decode_device: str = "cpu", checked=None) -> LeRobotEpisodes:
    """The episodes a ``LeRobotDataset`` selects, read the way it reads them (tables, and videos decoded with
    torchcodec at its tolerance), after :func:`native_source`'s checks and with every row checked against the
    dataset object's (:func:`check_rows_match`).

    Args:
        native: The ``LeRobotDataset`` LeRobot's factory built.
        decode_device: ``"cpu"`` (byte-identical to LeRobotDataset) or ``"cuda"`` (NVDEC).
        checked: What :func:`native_source` returned for ``native`` in the same build, when the caller has it
            (``None``: checked here). Why: each check reads ``meta/`` again, ~5 ms a component of a mixture.

    Returns:
        Its :class:`~robo_loaders_plugin.sources.lerobot_v3.LeRobotEpisodes`.

    Raises:
        CompatError: not LeRobot 0.6.x.
        SourceError: a layout robo-loaders does not reproduce, or rows that differ from what the dataset object
            holds.
    """
    from robo_loaders_plugin.sources.lerobot_v3 import LeRobotEpisodes, window_gaps

    source, settings = checked or native_source(native)
    episodes = LeRobotEpisodes(source, settings.tolerance_s, native.episodes, decode_device=decode_device)
    episodes.videos.window_gaps = window_gaps(settings.delta_indices, source.video_keys)
    check_rows_match(native, episodes.columns, episodes.arrays["index"], episodes.arrays, images=episodes.images())
    return episodes


def windows_at_risk(source, settings, tolerance_s: float | None = None) -> dict[str, int]:
    """The cameras whose ``delta_timestamps`` windows could pick other frames than a store made without their check
    holds (``sources.lerobot_v3.gaps_at_risk`` of the windows' ``window_gaps``): what a kept store's key names and
    its build checks.

    Args:
        source: The dataset's :class:`~robo_loaders_plugin.sources.lerobot_v3.LeRobotV3`.
        settings: Its reader settings (:func:`native_source`): the windows and the run's tolerance.
        tolerance_s: The tolerance a given conversion was made with (``None``: the run's).

    Returns:
        ``{camera: smallest step of its window}`` of the cameras at risk (empty: none).
    """
    from robo_loaders_plugin.sources.lerobot_v3 import gaps_at_risk, window_gaps

    tolerance = settings.tolerance_s if tolerance_s is None else tolerance_s
    return gaps_at_risk(window_gaps(settings.delta_indices, source.video_keys), tolerance, source.fps)


def camera_reach(delta_indices: dict | None, cameras) -> tuple[int, int]:
    """Rows a camera window reaches before and after its item (LeRobot's ``delta_indices`` of the cameras).

    Args:
        delta_indices: LeRobot's ``delta_indices`` (``None``: single frames).
        cameras: The camera keys.

    Returns:
        ``(rows before, rows after)``.
    """
    deltas = [d for k, v in (delta_indices or {}).items() if k in cameras for d in v]
    if not deltas:
        return 0, 0
    return max(0, -int(np.floor(min(deltas)))), max(0, int(np.ceil(max(deltas))))


def sample_bytes(size, settings, delta_steps: dict | None = None) -> int:
    """Bytes of one item as ``LeRobotDataset`` serves it, from metadata: camera frames as float32 (uint8 with
    ``return_uint8``), each key over its ``delta_timestamps`` window; the other columns together over the longest
    window among them (an upper bound: ``DataSize`` sums their bytes per step). What a batch in flight holds per
    sample (``core.in_flight``).

    Args:
        size: The dataset's ``core.data_size.DataSize`` (``LeRobotV3.data_size``).
        settings: Its ``ReaderSettings``.
        delta_steps: Each windowed key's offsets when a backend replaces LeRobot's (a rate-converting backend's;
            ``None``: ``settings.delta_indices``).

    Returns:
        Bytes.
    """
    deltas = delta_steps if delta_steps is not None else (settings.delta_indices or {})
    per_pixel = 1 if settings.return_uint8 else 4
    frames = sum(b * per_pixel * len(deltas.get(k, (0,))) for k, b in size.frame_step_bytes.items())
    other = max((len(v) for k, v in deltas.items() if k not in size.frame_step_bytes), default=1)
    return int(frames + size.other_step_bytes * other)


def pipeline_batches(size, settings) -> tuple[int, int | None]:
    """What a pipeline-served backend's buffer plan counts beside its units (``pipeline.buffer_plan``): one batch of
    the training loop the adapter stated (``core.in_flight``: lerobot-train's ``--batch_size``), and the threads
    building batches (one per ``--num_workers``).

    Args:
        size: The dataset's ``core.data_size.DataSize``.
        settings: Its ``ReaderSettings``.

    Returns:
        ``(batch bytes, threads)``; ``(0, None)`` outside a stated loop (the bound then names the batches instead of
        counting them).
    """
    from robo_loaders_plugin.core.in_flight import current_training_loop

    loop = current_training_loop()
    if loop is None:
        return 0, None
    return int(loop.batch_size) * sample_bytes(size, settings), max(1, int(loop.workers))


def unit_bytes(size, source, settings, *, frame_ratio: float, row_bytes: bool, margin_always: bool):
    """Bytes a pipeline-served backend's buffer holds per unit, from metadata before anything is read: episodes,
    long ones in parts (``frames.chunks``), each with the rows its camera windows reach outside it; and what a unit
    is called. The one estimate the pipeline-served backends size their buffers with.

    Args:
        size: The selected episodes' ``core.data_size.DataSize`` (``source.data_size(native.episodes)``, read once
            by the caller: it walks the dataset's files for their size).
        source: Its ``LeRobotV3`` (:func:`native_source`).
        settings: Its ``ReaderSettings``.
        frame_ratio: Decoded camera bytes per byte held (``1.0``: held decoded).
        row_bytes: Whether a unit also holds the fields that are not camera frames.
        margin_always: Whether whole episodes are loaded with their windows' reach too (else only parts).

    Returns:
        ``(int64 bytes per unit, "units" or "episodes")``.
    """
    from robo_loaders_plugin.frames.chunks import split_lengths
    from robo_loaders_plugin.pipeline.buffer_plan import held_bytes

    step = sum(size.frame_step_bytes.values())
    units = split_lengths(size.lengths, step)
    parts = len(units) > len(size.lengths)
    reach = sum(camera_reach(settings.delta_indices, source.video_keys + source.image_keys))
    per_row = step / frame_ratio + (size.other_step_bytes if row_bytes else 0)
    held = held_bytes(units, per_row, reach if (parts or margin_always) else 0)
    return held, "units" if parts else "episodes"
