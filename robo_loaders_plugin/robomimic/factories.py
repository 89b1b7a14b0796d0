"""Backend factories for robomimic: ``factory(config, obs_keys, filter_by_attribute, dataset_path, **options)``."""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import uuid
import weakref

import numpy as np
from tqdm.auto import tqdm

from robo_loaders_plugin.backends.compressed_cache.store import EpisodeStore, StoreError, StoreWriter, \
    default_shm_dir
from robo_loaders_plugin.codecs import FrameCodec
from robo_loaders_plugin.codecs.frames import CodecError
from robo_loaders_plugin.robomimic import hdf5_source
from robo_loaders_plugin.robomimic.sequence import StoreSequenceDataset
from robo_loaders_plugin.spec import BackendOptionError, RoboLoadersError
from robo_loaders_plugin.units import format_bytes, parse_bytes

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


# -- building the store ---------------------------------------------------------------------------------------
def _fingerprint(path: str, demos, fields, cache_mode, codec: FrameCodec) -> str:
    st = os.stat(path)
    desc = {"file": os.path.realpath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "demos": demos,
            "fields": fields, "float32_dataset_keys": cache_mode in ("all", "low_dim"), "codec": codec.as_dict(),
            "frame_min_bytes": FRAME_MIN_BYTES, "v": 1}
    return hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:24]


def _sweep_stale(shm_dir: str) -> None:
    """Remove RAM caches left by processes that died without cleaning up (their pid is in the name)."""
    for p in glob.glob(os.path.join(shm_dir, "robo-loaders-*.rlc*")):
        m = re.match(r"robo-loaders-(\d+)-", os.path.basename(p))
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            try:
                os.unlink(p)
            except OSError:
                pass


class _RamFile:
    """Owns a non-persistent store file: deletes it when the dataset is collected or the builder exits.
    Forked DataLoader workers inherit this object; only the building process may delete the file."""

    def __init__(self, path):
        self.path = path
        self._pid = os.getpid()
        self._finalizer = weakref.finalize(self, _unlink_if_owner, path, self._pid)

    def __getstate__(self):  # spawn workers get a harmless handle that never deletes
        return {"path": self.path}

    def __setstate__(self, state):
        self.path, self._pid, self._finalizer = state["path"], None, None


def _unlink_if_owner(path, pid):
    if os.getpid() == pid and os.path.exists(path):
        os.unlink(path)


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
        fp = _fingerprint(path, demos, fields + list(opts["dataset_keys"]), cache_mode, codec)
        if cache_dir:
            store_path = os.path.join(os.path.expanduser(cache_dir), f"robomimic-{fp}.rlc")
            if os.path.exists(store_path):
                try:
                    store = EpisodeStore(store_path)
                    if store.meta.get("fingerprint") == fp:
                        return store, None, True
                except StoreError as exc:
                    print(f"[robo-loaders] ignoring unusable cache {store_path} ({exc}); rebuilding")
        else:
            shm = default_shm_dir()
            _sweep_stale(shm)
            store_path = os.path.join(shm, f"robo-loaders-{os.getpid()}-{fp}-{uuid.uuid4().hex[:8]}.rlc")
        max_bytes = parse_bytes(max_memory, "data_backend_kwargs.max_memory") if max_memory is not None else None
        workers = build_workers or min(8, os.cpu_count() or 1)
        writer = StoreWriter(store_path, codec, max_bytes=max_bytes, workers=workers)
        try:
            for demo in tqdm(demos, desc=desc, unit="demo", mininterval=0.5):
                L = hdf5_source.demo_length(f, demo)
                arrays, compressed = {}, set()
                for name in fields:
                    a = hdf5_source.read_array(f, demo, name, L)
                    arrays[name] = a
                    if a[0].nbytes >= FRAME_MIN_BYTES:
                        compressed.add(name)
                for k in opts["dataset_keys"]:
                    if f"data/{demo}/{k}" in f:
                        a = hdf5_source.read_array(f, demo, k, L)
                        arrays[k] = a.astype(np.float32) if cache_mode in ("all", "low_dim") else a
                    elif cache_mode in ("all", "low_dim"):
                        arrays[k] = np.zeros((L, 1), dtype=np.float32)  # what SequenceDataset substitutes
                    else:
                        raise hdf5_source.DatasetFileError(
                            f"{path}: data/{demo}/{k} is missing; with hdf5_cache_mode=null robomimic would fail "
                            f"on it too. Remove {k!r} from train.dataset_keys or add it to the file")
                writer.add_episode(demo, arrays, compressed)
            writer.finish({"fingerprint": fp, "source": os.path.realpath(path), "framework": "robomimic"})
        except BaseException:
            writer.abort()
            raise
    owner = None if cache_dir else _RamFile(store_path)
    return EpisodeStore(store_path), owner, False


def compressed_cache_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, codec="lz4hc",
                             level=5, filter="none", max_memory=None, cache_dir=None, build_workers=None,
                             loader="threads"):
    opts = sequence_options(config, obs_keys, filter_by_attribute, dataset_path)
    try:
        frame_codec = FrameCodec(codec, level, filter)
        if max_memory is not None:
            parse_bytes(max_memory, "train.data_backend_kwargs.max_memory")
    except (CodecError, ValueError) as exc:
        raise BackendOptionError(f"train.data_backend_kwargs: {exc}") from None
    if loader not in ("threads", "dataloader"):
        raise BackendOptionError(f"train.data_backend_kwargs.loader must be 'threads' or 'dataloader', got {loader!r}")
    if build_workers is not None and build_workers < 1:
        raise BackendOptionError("train.data_backend_kwargs.build_workers must be >= 1")
    split = filter_by_attribute or "all demos"
    store, owner, reused = build_robomimic_store(opts, frame_codec, cache_dir, max_memory, build_workers,
                                                 desc=f"compressed_cache [{split}]")
    ds = StoreSequenceDataset(store, **opts, demos=[e["name"] for e in store.episodes], store_owner=owner)
    ds.in_process_batches = loader == "threads"
    ds.build_summary = summarize(store, ds, reused) + f", batches built by {loader}"
    return ds


def summarize(store: EpisodeStore, ds, reused: bool) -> str:
    st = store.stats
    ratio = st["decoded_frame_nbytes"] / st["compressed_nbytes"] if st["compressed_nbytes"] else float("nan")
    where = f"{'reused ' if reused else ''}{store.path}"
    return (f"{ds.n_demos} demos, {len(ds)} samples, cache {format_bytes(store.file_nbytes)} "
            f"(frames {format_bytes(st['decoded_frame_nbytes'])} -> {format_bytes(st['compressed_nbytes'])}, "
            f"{ratio:.2f}x; low-dim {format_bytes(st['raw_nbytes'])}) at {where}")
