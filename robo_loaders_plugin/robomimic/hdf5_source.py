"""Reading a robomimic HDF5 file with errors that name the file, demo and key (robomimic itself asserts or
raises a bare KeyError deep inside a DataLoader worker)."""
from __future__ import annotations

import os

import h5py
import numpy as np

from robo_loaders_plugin.spec import RoboLoadersError


class DatasetFileError(RoboLoadersError):
    pass


def open_hdf5(path: str) -> h5py.File:
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        raise DatasetFileError(f"robomimic dataset {path} does not exist (check train.data)")
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise DatasetFileError(f"cannot open robomimic dataset {path}: it is truncated, corrupt or not an HDF5 "
                               f"file ({exc}); re-download or regenerate it") from exc


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
        raise DatasetFileError(f"demo names must look like demo_<int> (robomimic sorts by int(name[5:])), "
                               f"found {bad[:5]}")
    return sorted(names, key=lambda n: int(n[5:]))


def demos_for_filter(f: h5py.File, filter_key: str | None) -> list[str]:
    if "data" not in f:
        raise DatasetFileError(f"{f.filename}: no 'data' group; this is not a robomimic dataset")
    if filter_key is None:
        return sorted_demos(f["data"].keys())
    masks = sorted(f["mask"].keys()) if "mask" in f else []
    if filter_key not in masks:
        raise DatasetFileError(f"{f.filename}: filter key {filter_key!r} not found under mask/ "
                               f"(available: {masks or 'none'}); fix train.hdf5_filter_key / "
                               "train.hdf5_validation_filter_key")
    names = [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in np.array(f[f"mask/{filter_key}"][:])]
    missing = [n for n in names if n not in f["data"]]
    if missing:
        raise DatasetFileError(f"{f.filename}: mask/{filter_key} lists demos missing from data/: {missing[:5]}")
    return sorted_demos(names)


def demo_length(f: h5py.File, demo: str) -> int:
    g = f[f"data/{demo}"]
    if "num_samples" not in g.attrs:
        raise DatasetFileError(f"{f.filename}: data/{demo} has no 'num_samples' attribute (robomimic requires it)")
    n = int(g.attrs["num_samples"])
    if n < 1:
        raise DatasetFileError(f"{f.filename}: data/{demo} has num_samples={n}; robomimic needs at least one "
                               "step per demo (remove the demo or fix the attribute)")
    return n


def read_array(f: h5py.File, demo: str, key: str, length: int) -> np.ndarray:
    """``data/<demo>/<key>`` fully read, with a clear error when missing, unreadable or of the wrong length."""
    path = f"data/{demo}/{key}"
    if path not in f:
        group, _, leaf = key.rpartition("/")
        where = f[f"data/{demo}/{group}"] if group and f"data/{demo}/{group}" in f else f[f"data/{demo}"]
        raise DatasetFileError(f"{f.filename}: {path} is missing (available under {where.name}: "
                               f"{sorted(where.keys())}); check the obs keys in observation.modalities, "
                               "train.dataset_keys, or hdf5_load_next_obs")
    try:
        arr = f[path][()]
    except (OSError, RuntimeError, ValueError) as exc:
        raise DatasetFileError(f"{f.filename}: cannot read {path} ({exc}); the file is truncated or corrupt") \
            from exc
    if arr.ndim == 0 or arr.shape[0] != length:
        raise DatasetFileError(f"{f.filename}: {path} has shape {arr.shape} but data/{demo} has "
                               f"num_samples={length}")
    return arr
