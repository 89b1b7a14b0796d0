"""The built-in backends, registered through the same hook third-party plugins implement (``core.hookspecs``).

Every option is declared here once (``core.options.Option``): its type, default, allowed values and the frameworks
it applies to. The factories receive the checked, typed options object; ``robo-loaders list --json``, the README's
backend table and the option tables of docs/backends.md are generated from these declarations. This module is
imported whenever a backend is looked up, so it imports nothing heavy (no torch, no Blosc2, no framework).
"""
from __future__ import annotations

from robo_loaders_plugin.core.codecs import CODECS, DEFAULT_CODEC, DEFAULT_FILTER, FILTERS
from robo_loaders_plugin.core.hookspecs import hookimpl
from robo_loaders_plugin.core.options import MAX_FPS, Option, check_positive_rate, check_size, to_bytes
from robo_loaders_plugin.core.spec import (BATCH, GPU_NO, GPU_OPTIONAL, INDEXED, LOSSY_FRAMES, NOT_BIT_IDENTICAL_ON_NVDEC,
                                           SAMPLE, BackendSpec)

ROBOMIMIC, LEROBOT = ("robomimic",), ("lerobot",)


def _extra(name: str) -> str:
    return f"pip install 'robo-loaders-plugin[{name}]'"


# what each backend imports beyond the base install, and the extra that installs it
TORCHDATA = ("torchdata", _extra("datapipe"))
TORCHCODEC = ("torchcodec", _extra("video"))
PYAV = ("av", _extra("video"))



def check_device(value: str) -> None:
    """Check the ``device`` option's value at argument parsing: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (whether a
    GPU is there is checked when the dataset is built).

    Args:
        value: The value given.

    Raises:
        ValueError: any other value.
    """
    if value in ("auto", "cpu", "cuda"):
        return
    head, _, index = value.partition(":")
    if head != "cuda" or not index.isdigit():
        raise ValueError(f"must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {value!r}")


def check_offsets(value: dict) -> None:
    """Check the ``delta_timestamps`` option's value at argument parsing: ``{key: [offset in seconds, ...]}`` with
    finite offsets within ``MAX_OFFSET_S`` either side, at most ``MAX_WINDOW`` per key (which keys exist is checked
    against the dataset).

    Args:
        value: The value given.

    Raises:
        ValueError: a key's offsets are not a non-empty list or tuple, an offset is not a finite number (a
            ``bool`` is refused), is beyond ``MAX_OFFSET_S``, or a key has more than ``MAX_WINDOW`` offsets.
    """
    for key, offsets in value.items():
        if not isinstance(offsets, (list, tuple)) or not offsets:
            raise ValueError(f"[{key!r}] must be a non-empty list of offsets in seconds, got {offsets!r}")
        for x in offsets:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x or x in (float("inf"), float("-inf")):
                raise ValueError(f"[{key!r}] must hold finite numbers of seconds, got {x!r}")
            if abs(x) > MAX_OFFSET_S:
                raise ValueError(f"[{key!r}] offset {x!r} s is beyond +-{MAX_OFFSET_S:g} s")
        if len(offsets) > MAX_WINDOW:
            raise ValueError(f"[{key!r}] has {len(offsets)} offsets, more than {MAX_WINDOW}")


def check_modes(value: dict) -> None:
    """Check the ``modes`` option's value at argument parsing: ``{field: mode}`` with a known mode (``nearest``,
    ``previous`` or ``linear``; which fields exist is checked against the dataset).

    Args:
        value: The value given.

    Raises:
        ValueError: a mode is not one of the three.
    """
    for key, mode in value.items():
        if mode not in ("nearest", "previous", "linear"):
            raise ValueError(f"[{key!r}] must be 'nearest', 'previous' or 'linear', got {mode!r}")


# byte sizes (max_memory, cache_memory, max_device_memory) are a number of bytes or text like '2GB': a number, not
# only an integer, because JSON writes 2e9 for two gigabytes (core.units.parse_bytes rounds down to whole bytes)


def check_writable_dir(value: str) -> None:
    """Check a directory option a backend writes in (``cache_dir``, ``local_cache_dir``) at argument parsing: it is
    created when missing, and must take a file (``core.paths.writable_dir_problem``).

    Args:
        value: The value given.

    Raises:
        ValueError: a file, or a directory that cannot be created or written in, with the reason.
    """
    from robo_loaders_plugin.core.paths import writable_dir_problem

    problem = writable_dir_problem(value)
    if problem:
        raise ValueError(f"must be a directory you can write to: {problem}")


def check_shards_dir(value: str) -> None:
    """Check the ``shards`` option at argument parsing: a directory ``robo-loaders convert`` wrote
    (``core.paths.shards_dir_problem``; the reader checks the rest when it opens it).

    Args:
        value: The value given.

    Raises:
        ValueError: it does not exist, is a file, has no ``index.json``, or holds a conversion not finished.
    """
    from robo_loaders_plugin.core.paths import shards_dir_problem

    problem = shards_dir_problem(value)
    if problem:
        raise ValueError(f"must be a directory 'robo-loaders convert' wrote (left out, the dataset is converted on "
                         f"first use into the cache directory): {problem}")


MAX_WINDOW = 10_000      # steps or offsets in one window
MAX_OFFSET_S = 3_600.0   # one hour either side of a frame


def check_storage_options(value: dict) -> None:
    """Check the ``storage_options`` option's value at argument parsing: fsspec options, keyed by name (what they
    hold is fsspec's to check when the source is opened).

    Args:
        value: The value given.

    Raises:
        ValueError: a key is not a string.
    """
    if not all(isinstance(k, str) for k in value):
        raise ValueError("must be a JSON object of fsspec options")


# the options of every pipeline-served backend (pipeline.options.PassOptions), the same declaration for each
def pass_options(shuffle_default: dict, cache_default: int, items: str) -> dict:
    """Declarations of the pass options (``shuffle_buffer``, ``seed``, ``prefetch``, ``cache_episodes``,
    ``cache_memory``, ``replacement``), shared by every pipeline-served backend so they mean the same everywhere.

    Args:
        shuffle_default: ``shuffle_buffer``'s default per framework (``{"robomimic": 16, ...}``), in episodes.
        cache_default: ``cache_episodes``' default (``None``: as many episodes as ``cache_memory`` holds).
        items: What a pass draws (``"windows"``, ``"frames"``), for the help.

    Returns:
        ``{option name: Option}``.
    """
    return {
        "shuffle_buffer": Option(int, None, f"episodes open at once; {items} are drawn at random from them, so more "
                                            "mixes batches better (default: "
                                            + "; ".join(f"{v} for {fw}" for fw, v in shuffle_default.items()) + ")",
                                 min=1, framework_defaults=shuffle_default),
        "seed": Option(int, None, "shuffling seed (default: train.seed / lerobot-train's --seed); the order is a "
                                  "function of (seed, pass), so a resumed run continues on the same next batch"),
        "prefetch": Option(int, 2, "batches prefetched ahead of training", min=0, max=1024),
        "cache_episodes": Option(int, cache_default, "episodes kept in memory (at least 2 x shuffle_buffer)"
                                 + ("; default: as many as cache_memory holds" if cache_default is None else ""),
                                 min=1),
        "cache_memory": Option((float, str), None, "memory the episode buffer may take (bytes, '2GB', '512MiB'; "
                                                 "default 1GB): as many episodes (parts of long ones for "
                                                 "video_stream on LeRobot) are kept as fit, and the shuffle buffer "
                                                 "is at most half of them unless given (less when a batch opens "
                                                 "many: the log says); cache_episodes, when given, decides "
                                                 "instead", check=check_size, convert=to_bytes),
        "replacement": Option(bool, False, f"draw each pass's {items} with replacement (same count per pass, repeats "
                                           "allowed) instead of every one exactly once"),
    }


COMPRESSED_CACHE_OPTIONS = {
    "codec": Option(str, DEFAULT_CODEC, "Blosc2 codec for camera frames (docs/codecs.md)", choices=CODECS),
    "level": Option(int, 5, "compression level", min=0, max=9),
    "filter": Option(str, DEFAULT_FILTER, "Blosc2 filter", choices=FILTERS),
    "max_memory": Option((float, str), None, "RAM the cache may take (bytes, '2GB', '512MiB'); a cache that may not "
                                           "fit it, or /dev/shm, is kept file-backed in the cache directory on "
                                           "disk instead (mapped, byte-identical; the log says so)",
                         check=check_size, convert=to_bytes),
    "cache_dir": Option(str, None, "persist the cache in this cache directory and reuse it while the source and "
                                   "options are unchanged (default: RAM only, rebuilt every run)", per_host=True,
                         check=check_writable_dir),
    "build_workers": Option(int, None, "threads compressing frames while building (default: number of CPUs, max 8)",
                            min=1, max=256),
    "loader": Option(str, "threads", "'threads': num_data_workers threads build whole batches in the training "
                                     "process (no worker processes, no collate copy); 'dataloader': robomimic's "
                                     "DataLoader", choices=("threads", "dataloader"), frameworks=ROBOMIMIC,
                     kinds={"threads": INDEXED, "dataloader": SAMPLE}),
}


DATAPIPE_OPTIONS = {
    "shards": Option(str, None, "a robo-shards directory made by 'robo-loaders convert' (default: convert into the "
                                "cache directory on first use)", per_host=True, check=check_shards_dir),
    "cache_dir": Option(str, None, "the cache directory conversions on first use go to (default: "
                                   "$ROBO_LOADERS_CACHE or ~/.cache/robo-loaders)", per_host=True,
                        check=check_writable_dir),
    "check_source": Option(bool, True, "refuse 'shards' converted from a source whose content differs from the one "
                                       "training reads (false: serve them anyway)"),
    "convert_workers": Option(int, 1, "processes converting on first use", min=1, max=256),
    # robomimic holds open episodes decoded (each frame then serves several windows): memory bounds the buffer.
    # LeRobot keeps them compressed (frames decoded per batch): a wide buffer costs little and mixes batches far
    # better (episode mix 0.64 vs 0.26 at 16 on 200 episodes, batch 64)
    **pass_options({"robomimic": 16, "lerobot": 64}, None, "windows"),
}


def _gpu_resampler_constraints(options) -> None:
    lerobot = hasattr(options, "delta_timestamps")  # the option is declared for LeRobot only
    if lerobot and options.delta_timestamps is not None and options.target_fps is not None:
        raise ValueError("give target_fps (the policy's steps at another rate) or delta_timestamps (explicit "
                         "offsets in seconds), not both")
    if options.modes and options.target_fps is None and not (lerobot and options.delta_timestamps is not None):
        # modes say how a field is read between two recorded steps, which only rate conversion asks for
        raise ValueError("modes apply to rate conversion (how a field is read between two recorded steps), and "
                         "none is set: give target_fps" + (" or delta_timestamps" if lerobot else "") +
                         " too, or leave modes out")


def _video_stream_constraints(options) -> None:
    """A local ``source`` must be there, checked at argument parsing: robomimic's is a directory of video shards,
    LeRobot's a dataset root (a URL is opened when the dataset is built)."""
    from robo_loaders_plugin.core.paths import existing_dir_problem, shards_dir_problem

    source = options.source
    if not source or ("://" in source and not source.startswith("file://")):
        return
    path = source[len("file://"):] if source.startswith("file://") else source
    if options.framework == "robomimic":
        problem = shards_dir_problem(path)
        if problem:
            raise ValueError("source must be a directory 'robo-loaders convert robomimic IN OUT --frames h264' wrote "
                             f"(left out, the file is converted on first use into the cache directory): {problem}")
    else:
        problem = existing_dir_problem(path)
        if problem:
            raise ValueError(f"source must be a LeRobot dataset root or a URL: {problem}")


GPU_RESAMPLER_OPTIONS = {
    "device": Option(str, "auto", "where batches are built: 'auto' (the training GPU when there is one, else the "
                                  "CPU), 'cpu', 'cuda' or 'cuda:N'", check=check_device),
    "max_device_memory": Option((float, str), None, "GPU memory the episodes may take (bytes or '8GB'; default: half "
                                                  "of the free memory); beyond it they stay in pinned host memory",
                                check=check_size, convert=to_bytes),
    "max_memory": Option((float, str), None, "host memory the episodes beyond the GPU may take (bytes or '8GB'; "
                                           "default: 90% of the available memory), the episode being read while "
                                           "filling included: held raw while they fit, then with camera frames "
                                           "compressed (decompressed per batch), then compressed in a file on "
                                           "disk; refused up front, naming the least that works, below the fields "
                                           "that are not frames plus the episode being read", check=check_size, convert=to_bytes),
    "cache_dir": Option(str, None, "the cache directory it writes in: the compressed frames, when host memory cannot "
                                   "hold them, in a file on disk (default: $ROBO_LOADERS_CACHE or "
                                   "~/.cache/robo-loaders)", per_host=True, check=check_writable_dir),
    "target_fps": Option(float, None, "the rate windows are counted at (default: the recorded rate); robomimic: "
                                      "seq_length and frame_stack steps at this rate; LeRobot: the policy's delta "
                                      f"steps at this rate (at most {MAX_FPS:g})", check=check_positive_rate),
    "source_fps": Option(float, None, "the rate the HDF5 was recorded at (default: its env_args' control_freq)",
                         check=check_positive_rate, frameworks=ROBOMIMIC),
    "delta_timestamps": Option(dict, None, "offsets in seconds per key, at any offsets (not only multiples of "
                                           "1/fps), instead of the policy's", check=check_offsets,
                               frameworks=LEROBOT),
    "modes": Option(dict, None, "per field: 'linear' (default for float fields), 'previous' (default for integer "
                                "and boolean fields), 'nearest' (default, and only choice with 'previous', for "
                                "frames)", check=check_modes),
}


VIDEO_STREAM_OPTIONS = {
    "source": Option(str, None, "where the dataset is read from. LeRobot: a local path or any fsspec URL (s3://, "
                                "http(s)://, hf://; default: the dataset's root). robomimic: a directory made by "
                                "'robo-loaders convert robomimic IN OUT --frames h264' (default: converted on "
                                "first use into the cache directory)", per_host=True),
    "storage_options": Option(dict, None, "fsspec options for 'source' (endpoint, credentials, ...)",
                              check=check_storage_options, frameworks=LEROBOT),
    "local_cache_dir": Option(str, None, "remote source: copy each video whole into this directory on first use and "
                                         "decode the local copy from then on (default: stream byte ranges). Each "
                                         "copy is checked against the remote file's size and ETag/mtime and its own "
                                         "SHA-256, and downloaded again (saying why) when either changed",
                              frameworks=LEROBOT, per_host=True, check=check_writable_dir),
    "cache_dir": Option(str, None, "the cache directory it writes in: robomimic's conversion on first use, LeRobot's "
                                   "copy of a remote dataset's tables (default: $ROBO_LOADERS_CACHE or "
                                   "~/.cache/robo-loaders)", per_host=True, check=check_writable_dir),
    "decode_device": Option(str, "cpu", "'cpu' (byte-identical to LeRobotDataset), 'cuda' (NVDEC), 'auto'; "
                                        "robomimic video shards are decoded on the CPU",
                            choices=("cpu", "cuda", "auto"), framework_choices={"robomimic": ("cpu", "auto")}),
    "buffer": Option(str, "raw", "decoded episodes held 'raw' or compressed with 'lz4' (less memory, some CPU)",
                     choices=("raw", "lz4")),
    "decode_threads": Option(int, 2, "threads decoding the episodes a pass is about to open", min=0, max=64),
    # decoded episodes are held raw: their memory bounds the buffer (a 100-frame episode of two 84x84 cameras is 4 MB,
    # a 20-s one of three 480p cameras 1.7 GB: sized in bytes, cache_memory)
    **pass_options({"robomimic": 16, "lerobot": 16}, None, "frames"),
}


@hookimpl
def robo_loaders_backends():
    """The built-in backends, through the same hook third-party plugins implement (``core.hookspecs``), so the
    registry treats them alike.

    Returns:
        A list of :class:`~robo_loaders_plugin.core.spec.BackendSpec`: ``native``, ``compressed_cache``,
        ``datapipe``, ``gpu_resampler`` and ``video_stream``.
    """
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
                        "RAM file shared by all workers (file-backed on local disk when RAM cannot hold it)",
            frameworks=("robomimic", "lerobot"),
            # LeRobot: its DataLoader's workers stay in charge (image transforms draw from their RNG)
            kind={"robomimic": INDEXED, "lerobot": SAMPLE},
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
            requires={"robomimic": (TORCHDATA,), "lerobot": (TORCHDATA, TORCHCODEC)},
        ),
        BackendSpec(
            name="gpu_resampler",
            description="every episode held as tensors in tiers (on the GPU while it fits, then host memory raw, "
                        "then compressed): whole batches of windows in a few gathers, the native sampler's order, "
                        "optional rate conversion",
            frameworks=("robomimic", "lerobot"),
            kind=INDEXED,
            gpu=GPU_OPTIONAL,
            factories={"robomimic": "robo_loaders_plugin.robomimic.factories:gpu_resampler_dataset",
                       "lerobot": "robo_loaders_plugin.lerobot.factories:gpu_resampler_dataset"},
            options=GPU_RESAMPLER_OPTIONS,
            constraints=_gpu_resampler_constraints,
        ),
        BackendSpec(
            name="video_stream",
            description="trains straight from the videos, local or remote (fsspec): each episode's segment decoded "
                        "once per pass, in order, on the CPU or with NVDEC; every frame once per pass, resumable",
            frameworks=("lerobot", "robomimic"),
            kind=BATCH,
            # robomimic: from video robo-shards ('robo-loaders convert robomimic ... --frames h264'), lossy frames,
            # everything else byte-identical; LeRobot: LeRobot's own videos, decoded as LeRobotDataset decodes them
            lossless={"lerobot": NOT_BIT_IDENTICAL_ON_NVDEC, "robomimic": LOSSY_FRAMES},
            gpu={"lerobot": GPU_OPTIONAL, "robomimic": GPU_NO},
            factories={"lerobot": "robo_loaders_plugin.lerobot.factories:video_stream_dataset",
                       "robomimic": "robo_loaders_plugin.robomimic.factories:video_stream_dataset"},
            options=VIDEO_STREAM_OPTIONS,
            requires={"robomimic": (TORCHDATA, PYAV), "lerobot": (TORCHDATA, TORCHCODEC)},
            constraints=_video_stream_constraints,
            remote_source_option="source",
            remote_storage_option="storage_options",
        ),
    ]

