"""Backend factories for robomimic: ``factory(config, obs_keys, filter_by_attribute, dataset_path, **options)``."""
from __future__ import annotations

import os

import numpy as np
from tqdm.auto import tqdm

from robo_loaders_plugin.backends.compressed_cache.build import check_codec_options, fingerprint, open_or_build, \
    summarize
from robo_loaders_plugin.codecs import FrameCodec
from robo_loaders_plugin.robomimic import hdf5_source
from robo_loaders_plugin.robomimic.sequence import StoreSequenceDataset
from robo_loaders_plugin.spec import BackendOptionError, RoboLoadersError

FRAME_MIN_BYTES = 1024  # per-step arrays at least this large (camera frames, depth maps) are compressed


def native_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None):
    """robomimic's own SequenceDataset, built by robomimic's own (unpatched) dataset_factory."""
    from robo_loaders_plugin.robomimic.patches import original

    return original("dataset_factory")(config, obs_keys, filter_by_attribute=filter_by_attribute,
                                       dataset_path=dataset_path)


def sequence_options(config, obs_keys, filter_by_attribute, dataset_path) -> dict:
    """The SequenceDataset arguments robomimic's dataset_factory would pass, checked the way it checks them."""
    t = config.train
    opts = dict(
        hdf5_path=os.path.expanduser(dataset_path if dataset_path is not None else t.data),
        obs_keys=tuple(obs_keys), dataset_keys=tuple(t.dataset_keys), load_next_obs=bool(t.hdf5_load_next_obs),
        frame_stack=int(t.frame_stack), seq_length=int(t.seq_length), pad_frame_stack=bool(t.pad_frame_stack),
        pad_seq_length=bool(t.pad_seq_length), get_pad_mask=False, goal_mode=t.goal_mode,
        hdf5_cache_mode=t.hdf5_cache_mode, filter_by_attribute=filter_by_attribute,
    )
    if t.hdf5_normalize_obs:
        raise RoboLoadersError("train.hdf5_normalize_obs=true is not supported by robo-loaders backends (robomimic "
                               "0.3.0 normalizes twice and fails for batch > 1); set it to false or use "
                               "train.data_backend=null")
    if opts["hdf5_cache_mode"] not in ("all", "low_dim", None):
        raise RoboLoadersError(f"train.hdf5_cache_mode must be 'all', 'low_dim' or null, got "
                               f"{opts['hdf5_cache_mode']!r}")
    if opts["frame_stack"] < 1 or opts["seq_length"] < 1:
        raise RoboLoadersError("train.frame_stack and train.seq_length must be >= 1")
    if opts["goal_mode"] not in (None, "last"):
        raise RoboLoadersError(f"train.goal_mode must be null or 'last', got {opts['goal_mode']!r}")
    if opts["goal_mode"] == "last" and not opts["load_next_obs"]:
        raise RoboLoadersError("train.goal_mode='last' needs train.hdf5_load_next_obs=true (the goal is the last "
                               "next_obs)")
    return opts


def episode_fields(read, length: int, opts: dict, where: str) -> dict:
    """One demo's arrays as SequenceDataset serves them: ``obs/<k>`` and ``next_obs/<k>`` in file dtypes, dataset
    keys cast to float32 under ``hdf5_cache_mode`` all/low_dim (a missing key becomes zeros (L, 1), as robomimic
    substitutes). ``read(key)`` returns the array or None when the file lacks it."""
    cache_mode = opts["hdf5_cache_mode"]
    out = {}
    prefixes = ["obs"] + (["next_obs"] if opts["load_next_obs"] or opts["goal_mode"] == "last" else [])
    for prefix in prefixes:
        for k in opts["obs_keys"]:
            a = read(f"{prefix}/{k}")
            if a is None:
                raise hdf5_source.DatasetFileError(f"{where}/{prefix}/{k} is missing; check the obs keys in "
                                                   "observation.modalities or hdf5_load_next_obs")
            out[f"{prefix}/{k}"] = a
    for k in opts["dataset_keys"]:
        a = read(k)
        if a is not None:
            out[k] = a.astype(np.float32) if cache_mode in ("all", "low_dim") else a
        elif cache_mode in ("all", "low_dim"):
            out[k] = np.zeros((length, 1), dtype=np.float32)  # what SequenceDataset substitutes
        else:
            raise hdf5_source.DatasetFileError(
                f"{where}/{k} is missing; with hdf5_cache_mode=null robomimic would fail on it too. Remove {k!r} "
                "from train.dataset_keys or add it to the file")
    return out


# -- building the store ---------------------------------------------------------------------------------------
def build_robomimic_store(opts: dict, codec: FrameCodec, cache_dir: str | None, max_memory, build_workers,
                          desc: str):
    """Read each selected demo once, in order, and write the store. Returns (EpisodeStore, owner, reused)."""
    path = opts["hdf5_path"]
    cache_mode = opts["hdf5_cache_mode"]
    with hdf5_source.open_hdf5(path) as f:
        demos = hdf5_source.demos_for_filter(f, opts["filter_by_attribute"])
        if not demos:
            raise RoboLoadersError(f"{path}: no demos selected (filter key {opts['filter_by_attribute']!r} is empty)")
        fields = [f"obs/{k}" for k in opts["obs_keys"]]
        if opts["load_next_obs"] or opts["goal_mode"] == "last":
            fields += [f"next_obs/{k}" for k in opts["obs_keys"]]
        st = os.stat(path)
        fp = fingerprint({"file": os.path.realpath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                          "demos": demos, "fields": fields + list(opts["dataset_keys"]),
                          "float32_dataset_keys": cache_mode in ("all", "low_dim"), "codec": codec.as_dict(),
                          "frame_min_bytes": FRAME_MIN_BYTES, "v": 1})

        def write(writer):
            for demo in tqdm(demos, desc=desc, unit="demo", mininterval=0.5):
                L = hdf5_source.demo_length(f, demo)
                # obs keys are read even when missing: read_array's error lists what the demo has
                arrays = episode_fields(lambda k: hdf5_source.read_array(f, demo, k, L)
                                        if "/" in k or f"data/{demo}/{k}" in f else None, L, opts,
                                        f"{path}: data/{demo}")
                writer.add_episode(demo, arrays, {n for n in fields if arrays[n][0].nbytes >= FRAME_MIN_BYTES})

        return open_or_build(fp, "robomimic", write, codec=codec, cache_dir=cache_dir, max_memory=max_memory,
                             build_workers=build_workers, option_prefix="train.data_backend_kwargs",
                             meta={"source": os.path.realpath(path), "framework": "robomimic"})


def compressed_cache_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, codec="lz4hc",
                             level=5, filter="none", max_memory=None, cache_dir=None, build_workers=None,
                             loader="threads"):
    opts = sequence_options(config, obs_keys, filter_by_attribute, dataset_path)
    frame_codec = check_codec_options(codec, level, filter, max_memory, build_workers, "train.data_backend_kwargs")
    if loader not in ("threads", "dataloader"):
        raise BackendOptionError(f"train.data_backend_kwargs.loader must be 'threads' or 'dataloader', got {loader!r}")
    split = filter_by_attribute or "all demos"
    store, owner, reused = build_robomimic_store(opts, frame_codec, cache_dir, max_memory, build_workers,
                                                 desc=f"compressed_cache [{split}]")
    ds = StoreSequenceDataset(store, **opts, demos=[e["name"] for e in store.episodes], store_owner=owner)
    ds.in_process_batches = loader == "threads"
    ds.build_summary = summarize(store, ds.n_demos, len(ds), reused) + f", batches built by {loader}"
    return ds
