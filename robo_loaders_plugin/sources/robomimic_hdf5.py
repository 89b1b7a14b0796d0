"""robomimic HDF5 files (``data/demo_<i>/{actions, obs/<k>, next_obs/<k>, ...}``, ``mask/<filter key>``), read
with h5py, with errors that name the file, demo and key (robomimic itself asserts or raises a bare KeyError deep
inside a DataLoader worker).

Content digest (see ``storage.fingerprint``): every byte of the file (attributes, masks, every dataset of every
demo, and whatever else it holds: a change anywhere in it counts).
"""
from __future__ import annotations

import os

import h5py
import numpy as np

from robo_loaders_plugin.core.errors import SourceError
from robo_loaders_plugin.storage import fingerprint as fp

FRAME_MIN_BYTES = 1024  # per-step arrays at least this large (camera frames, depth maps) are frames


def open_hdf5(path: str) -> h5py.File:
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        raise SourceError(f"robomimic dataset {path} does not exist (check train.data)")
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise SourceError(f"cannot open robomimic dataset {path}: it is truncated, corrupt or not an HDF5 file "
                          f"({exc}); re-download or regenerate it") from exc


def sorted_demos(names) -> list[str]:
    """Demos in robomimic's order: ``int(name[5:])``, the key SequenceDataset sorts by."""
    names = list(names)
    bad = []
    for n in names:
        try:
            int(n[5:])
        except ValueError:
            bad.append(n)
    if bad:
        raise SourceError(f"demo names must look like demo_<int> (robomimic sorts by int(name[5:])), found {bad[:5]}")
    return sorted(names, key=lambda n: int(n[5:]))


def _text(v):
    return v.decode() if isinstance(v, bytes) else v.item() if hasattr(v, "item") else v


def datasets(group, prefix=""):
    """(relative name, h5py dataset) of every dataset under ``group``."""
    for k, v in group.items():
        if isinstance(v, h5py.Dataset):
            yield prefix + k, v
        else:
            yield from datasets(v, f"{prefix}{k}/")


class RobomimicHdf5:
    """One robomimic HDF5 file, opened per use (h5py handles must not cross a fork)."""

    def __init__(self, path: str, check: bool = True):
        """``check``: :meth:`validate` the file now (every backend and ``convert`` do; a conversion's worker
        processes skip it, their parent has)."""
        self.path = os.path.expanduser(path)
        with open_hdf5(self.path) as f:  # exists and opens, or a clear error now
            if check:
                self.validate(f)

    def validate(self, f: h5py.File) -> None:
        """The one validation of a robomimic file, for every backend and ``convert`` (shapes and attributes only,
        nothing is read): a ``data`` group of at least one ``demo_<int>`` group, each with ``num_samples >= 1`` and
        every dataset under it (``actions``, ``obs/<key>``, ...) holding one row per step, ``num_samples`` rows.
        Why: robomimic indexes a demo by its ``num_samples`` and reads the arrays at those steps, the converted
        shards by the arrays' length; a file where they disagree would be served as two different datasets."""
        if "data" not in f or not isinstance(f["data"], h5py.Group):
            raise SourceError(f"{self.path}: no 'data' group; this is not a robomimic dataset")
        demos = sorted_demos(f["data"].keys())
        if not demos:
            raise SourceError(f"{self.path}: data/ holds no demos (no demo_<i> group), so there is nothing to convert "
                              "or train on; check that this is the file you meant (train.data)")
        for demo in demos:
            if not isinstance(f[f"data/{demo}"], h5py.Group):
                raise SourceError(f"{self.path}: data/{demo} is not a group of datasets; this is not a robomimic "
                                  "dataset")
            n = self.length(f, demo)
            for name, ds in datasets(f[f"data/{demo}"]):
                rows = ds.shape[0] if ds.ndim else None
                if rows != n:
                    raise SourceError(
                        f"{self.path}: data/{demo}/{name} has {rows if rows is not None else 'no'} rows (shape "
                        f"{ds.shape}) but data/{demo} has num_samples={n}; robomimic indexes the demo by "
                        "num_samples, so the file is inconsistent: fix the attribute or the arrays (or regenerate "
                        "the file)")

    def open(self) -> h5py.File:
        return open_hdf5(self.path)

    # -- episodes -----------------------------------------------------------------------------------------------
    @staticmethod
    def demos(f: h5py.File, filter_key: str | None) -> list[str]:
        if "data" not in f:
            raise SourceError(f"{f.filename}: no 'data' group; this is not a robomimic dataset")
        if filter_key is None:
            return sorted_demos(f["data"].keys())
        masks = sorted(f["mask"].keys()) if "mask" in f else []
        if filter_key not in masks:
            raise SourceError(f"{f.filename}: filter key {filter_key!r} not found under mask/ (available: "
                              f"{masks or 'none'}); fix train.hdf5_filter_key / train.hdf5_validation_filter_key")
        names = [_text(n) for n in np.array(f[f"mask/{filter_key}"][:])]
        missing = [n for n in names if n not in f["data"]]
        if missing:
            raise SourceError(f"{f.filename}: mask/{filter_key} lists demos missing from data/: {missing[:5]}")
        return sorted_demos(names)

    @staticmethod
    def length(f: h5py.File, demo: str) -> int:
        g = f[f"data/{demo}"]
        if "num_samples" not in g.attrs:
            raise SourceError(f"{f.filename}: data/{demo} has no 'num_samples' attribute (robomimic requires it)")
        n = int(g.attrs["num_samples"])
        if n < 1:
            raise SourceError(f"{f.filename}: data/{demo} has num_samples={n}; robomimic needs at least one step "
                              "per demo (remove the demo or fix the attribute)")
        return n

    @staticmethod
    def has(f: h5py.File, demo: str, key: str) -> bool:
        return f"data/{demo}/{key}" in f

    @staticmethod
    def read(f: h5py.File, demo: str, key: str, length: int | None = None) -> np.ndarray:
        """``data/<demo>/<key>`` fully read, with a clear error when missing, unreadable or of the wrong length."""
        path = f"data/{demo}/{key}"
        if path not in f:
            group, _, _leaf = key.rpartition("/")
            where = f[f"data/{demo}/{group}"] if group and f"data/{demo}/{group}" in f else f[f"data/{demo}"]
            raise SourceError(f"{f.filename}: {path} is missing (available under {where.name}: "
                              f"{sorted(where.keys())}); check the obs keys in observation.modalities, "
                              "train.dataset_keys, or hdf5_load_next_obs")
        try:
            arr = f[path][()]
        except (OSError, RuntimeError, ValueError) as exc:
            raise SourceError(f"{f.filename}: cannot read {path} ({exc}); the file is truncated or corrupt") from exc
        if length is not None and (arr.ndim == 0 or arr.shape[0] != length):
            raise SourceError(f"{f.filename}: {path} has shape {arr.shape} but data/{demo} has num_samples={length}")
        return arr

    def read_all(self, f: h5py.File, demo: str) -> tuple[dict, set]:
        """Every dataset of a demo in its file dtype, and the names of those that are camera frames."""
        fields = {key: self.read(f, demo, key) for key, _ in datasets(f[f"data/{demo}"])}
        return fields, {k for k, a in fields.items() if a.ndim > 1 and a[0].nbytes >= FRAME_MIN_BYTES}

    def data_size(self, f: h5py.File, demos: list[str], fields: list[str], float32_fields=()):
        """The :class:`~robo_loaders_plugin.footprints.DataSize` of ``fields`` over ``demos``, from the datasets'
        shapes, dtypes and ``num_samples`` attributes only (no array is read). Fields of the first demo (every demo
        has the same, checked when read); ``float32_fields`` are held as float32 (robomimic's cache modes).

        Returns:
            A ``DataSize``: per-demo lengths, camera-frame bytes per step (per-step arrays of at least
            ``FRAME_MIN_BYTES``) and the other fields' bytes per step.
        """
        from robo_loaders_plugin.footprints import DataSize

        frames, other = {}, 0
        g = f[f"data/{demos[0]}"]
        for key in fields:
            if key not in g or not isinstance(g[key], h5py.Dataset):
                continue
            ds = g[key]
            itemsize = 4 if key in float32_fields and ds.dtype.kind == "f" else ds.dtype.itemsize
            per_step = int(np.prod(ds.shape[1:], dtype=np.int64)) * itemsize
            if ds.ndim > 1 and per_step >= FRAME_MIN_BYTES:
                frames[key] = per_step
            else:
                other += per_step
        lengths = np.array([self.length(f, d) for d in demos], dtype=np.int64)
        return DataSize(lengths, frames, other, source_bytes=os.path.getsize(self.path))

    @staticmethod
    def nbytes(f: h5py.File, demo: str) -> int:
        return sum(ds.nbytes for _, ds in datasets(f[f"data/{demo}"]))

    @staticmethod
    def metadata(f: h5py.File) -> dict:
        """What converted shards keep of the file besides the arrays: attributes, masks, demo order."""
        demos = sorted_demos(f["data"].keys())
        masks = {k: [_text(x) if isinstance(x, bytes) else str(x) for x in f[f"mask/{k}"][:]]
                 for k in (f["mask"].keys() if "mask" in f else [])}
        return {"framework": "robomimic", "data_attrs": {k: _text(v) for k, v in f["data"].attrs.items()},
                "demo_attrs": {d: {k: _text(v) for k, v in f[f"data/{d}"].attrs.items()} for d in demos},
                "masks": masks, "demos": demos}

    # -- staleness ------------------------------------------------------------------------------------------------
    def fingerprint(self, recorded: fp.Fingerprint | None = None) -> fp.Fingerprint:
        return fp.fingerprint(self.path, self._digest, recorded)

    def _digest(self) -> str:
        h = fp.new_digest()
        fp.hash_file(h, os.path.realpath(self.path))
        return h.hexdigest()
