"""The built-in backends, registered through the same hook third-party plugins implement (``core.hookspecs``)."""
from __future__ import annotations

from robo_loaders_plugin.core.hookspecs import hookimpl
from robo_loaders_plugin.core.spec import BATCH, INDEXED, SAMPLE, BackendSpec

COMPRESSED_CACHE_OPTIONS = {
    "codec": (str, "lz4hc", "Blosc2 codec for camera frames: lz4hc, lz4, zstd, blosclz"),
    "level": (int, 5, "compression level 0..9"),
    "filter": (str, "none", "Blosc2 filter: none, shuffle, bitshuffle"),
    "max_memory": ((int, str), None, "fail if the compressed cache would exceed this size (bytes or '2GB')"),
    "cache_dir": (str, None, "persist the cache in this cache directory and reuse it while the source and options "
                             "are unchanged (default: RAM only, rebuilt every run)"),
    "build_workers": (int, None, "threads compressing frames while building (default: number of CPUs, max 8)"),
    "loader": (str, "threads", "robomimic: 'threads': num_data_workers threads build whole batches in the training "
                               "process (no worker processes, no collate copy); 'dataloader': robomimic's DataLoader"),
}


DATAPIPE_OPTIONS = {
    "shards": (str, None, "a robo-shards directory made by 'robo-loaders convert' (default: convert into the cache "
                          "directory on first use)"),
    "cache_dir": (str, None, "the cache directory conversions on first use go to (default: $ROBO_LOADERS_CACHE or "
                             "~/.cache/robo-loaders)"),
    "check_source": (bool, True, "refuse 'shards' converted from a source whose content differs from the one "
                                 "training reads (false: serve them anyway)"),
    "shuffle_buffer": (int, None, "episodes open at once; windows are drawn at random from them, so more mixes "
                                  "batches better (default: 16 for robomimic, whose open episodes are held "
                                  "decoded; 64 for LeRobot, whose stay compressed)"),
    "seed": (int, None, "shuffling seed (default: train.seed / lerobot-train's --seed); the order is a function "
                        "of (seed, pass)"),
    "prefetch": (int, 2, "batches prefetched ahead of training"),
    "convert_workers": (int, 1, "processes converting on first use"),
    "cache_episodes": (int, 64, "episodes kept in memory (at least 2 x shuffle_buffer)"),
    "replacement": (bool, False, "draw each pass's windows with replacement (same count per pass, repeats "
                                 "allowed) instead of every window exactly once"),
}


GPU_RESAMPLER_OPTIONS = {
    "device": (str, "auto", "where batches are built: 'auto' (the training GPU when there is one, else the CPU), "
                            "'cpu', 'cuda' or 'cuda:N'"),
    "max_device_memory": ((int, str), None, "GPU memory the episodes may take (bytes or '8GB'; default: half of the "
                                            "free memory); beyond it they stay in pinned host memory"),
    "target_fps": ((int, float), None, "the rate windows are counted at (default: the recorded rate); robomimic: "
                                       "seq_length and frame_stack steps at this rate; LeRobot: the policy's delta "
                                       "steps at this rate"),
    "source_fps": ((int, float), None, "robomimic: the rate the HDF5 was recorded at (default: its env_args' "
                                       "control_freq)"),
    "delta_timestamps": (dict, None, "LeRobot: offsets in seconds per key, at any offsets (not only multiples of "
                                     "1/fps), instead of the policy's"),
    "modes": (dict, None, "per field: 'linear' (default for float fields), 'previous' (default for integer and "
                          "boolean fields), 'nearest' (default, and only choice with 'previous', for frames)"),
}


VIDEO_STREAM_OPTIONS = {
    "source": (str, None, "where the dataset is read from: a local path or any fsspec URL (s3://, http(s)://, "
                          "hf://); default: the dataset's root. robomimic: a directory made by 'robo-loaders "
                          "convert robomimic IN OUT --frames h264' (default: converted on first use into the cache "
                          "directory)"),
    "storage_options": (dict, None, "fsspec options for 'source' (endpoint, credentials, ...)"),
    "local_cache_dir": (str, None, "remote source: copy each video whole into this directory on first use and "
                                   "decode the local copy from then on (default: stream byte ranges, nothing "
                                   "downloaded whole). Each process checks a copy once against the remote file's "
                                   "size and ETag/mtime and its own SHA-256, and downloads it again (saying why) "
                                   "when the remote file changed or the copy is damaged"),
    "decode_device": (str, "cpu", "'cpu' (byte-identical to LeRobotDataset), 'cuda' (NVDEC), 'auto'"),
    "buffer": (str, "raw", "decoded episodes held 'raw' or compressed with 'lz4' (less memory, some CPU)"),
    "decode_threads": (int, 2, "threads decoding the episodes a pass is about to open"),
    "shuffle_buffer": (int, None, "episodes open at once (default 16); more mixes batches better"),
    "seed": (int, None, "shuffling seed (default: lerobot-train's --seed); the order is a function of (seed, pass)"),
    "prefetch": (int, 2, "batches prefetched ahead of training"),
    "cache_episodes": (int, 32, "decoded episodes kept in memory (at least 2 x shuffle_buffer)"),
    "replacement": (bool, False, "draw each pass's frames with replacement instead of every frame exactly once"),
}


@hookimpl
def robo_loaders_backends():
    return [
        BackendSpec(
            name="native",
            description="the framework's own loader (robomimic SequenceDataset / LeRobotDataset), unchanged",
            frameworks=("robomimic", "lerobot"),
            kind=SAMPLE,
            factories={"robomimic": "robo_loaders_plugin.robomimic.factories:native_dataset",
                       "lerobot": "robo_loaders_plugin.lerobot.factories:native_dataset"},
        ),
        BackendSpec(
            name="compressed_cache",
            description="each episode read (video decoded) once; camera frames kept lossless-compressed in one "
                        "RAM file shared by all workers",
            frameworks=("robomimic", "lerobot"),
            kind=INDEXED,
            factories={"robomimic": "robo_loaders_plugin.robomimic.factories:compressed_cache_dataset",
                       "lerobot": "robo_loaders_plugin.lerobot.factories:compressed_cache_dataset"},
            options=COMPRESSED_CACHE_OPTIONS,
        ),
        BackendSpec(
            name="datapipe",
            description="torchdata.nodes pipeline over robo-shards: parallel read, episode-buffer shuffle, "
                        "whole batches, resumable state",
            frameworks=("robomimic", "lerobot"),
            kind=BATCH,
            factories={"robomimic": "robo_loaders_plugin.robomimic.factories:datapipe_dataset",
                       "lerobot": "robo_loaders_plugin.lerobot.factories:datapipe_dataset"},
            options=DATAPIPE_OPTIONS,
        ),
        BackendSpec(
            name="gpu_resampler",
            description="every episode held as tensors (on the GPU when it fits): whole batches of windows in a "
                        "few gathers, the native sampler's order, optional rate conversion",
            frameworks=("robomimic", "lerobot"),
            kind=INDEXED,
            factories={"robomimic": "robo_loaders_plugin.robomimic.factories:gpu_resampler_dataset",
                       "lerobot": "robo_loaders_plugin.lerobot.factories:gpu_resampler_dataset"},
            options=GPU_RESAMPLER_OPTIONS,
        ),
        BackendSpec(
            name="video_stream",
            description="trains straight from the videos, local or remote (fsspec): each episode's segment decoded "
                        "once per pass, in order, on the CPU or with NVDEC; every frame once per pass, resumable",
            frameworks=("lerobot", "robomimic"),
            kind=BATCH,
            factories={"lerobot": "robo_loaders_plugin.lerobot.factories:video_stream_dataset",
                       # robomimic: from video robo-shards ('robo-loaders convert robomimic ... --frames h264'),
                       # lossy frames, everything else byte-identical
                       "robomimic": "robo_loaders_plugin.robomimic.factories:video_stream_dataset"},
            options=VIDEO_STREAM_OPTIONS,
        ),
    ]
