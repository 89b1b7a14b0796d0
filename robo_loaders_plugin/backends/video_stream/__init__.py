"""The ``video_stream`` backend: trains straight from videos, local or remote, each episode's segment decoded once per
pass into a bounded buffer.

This module is the plugin the ``robo_loaders`` entry point ``video_stream`` names (as a third party's would be): its
spec and options. It imports nothing heavy (no torch, no Blosc2, no framework): listing backends imports it, and
the factories (``robomimic.py``, ``lerobot.py``) are imported only when a dataset is built.
"""

from __future__ import annotations

from robo_loaders_plugin.backends.requirements import LEROBOT, PYAV, TORCHCODEC, TORCHDATA
from robo_loaders_plugin.core.hookspecs import hookimpl
from robo_loaders_plugin.core.options import Option
from robo_loaders_plugin.core.shared_options import check_storage_options, check_writable_dir, pass_options
from robo_loaders_plugin.core.spec import (
    BATCH,
    GPU_NO,
    GPU_OPTIONAL,
    LOSSY_FRAMES,
    NOT_BIT_IDENTICAL_ON_NVDEC,
    BackendSpec,
)


def _video_stream_constraints(options) -> None:
    """A local ``source`` must be there, checked at argument parsing: robomimic's is a directory of video shards,
    LeRobot's a dataset root (a URL is opened when the dataset is built)."""
    from robo_loaders_plugin.core.paths import existing_dir_problem, shards_dir_problem

    source = options.source
    if not source:
        return
    remote = "://" in source and not source.startswith("file://")
    if remote and options.framework == "robomimic":  # read as a relative path: a garbled "does not exist" (a review)
        raise ValueError(
            f"source {source!r} is a URL; robomimic's video shards are read from a local directory (URLs are for "
            "LeRobot datasets): copy the shards here and give their path"
        )
    if remote:
        return
    path = source[len("file://") :] if source.startswith("file://") else source
    if options.framework == "robomimic":
        problem = shards_dir_problem(path)
        if problem:
            raise ValueError(
                "source must be a directory 'robo-loaders convert robomimic IN OUT --frames h264' wrote "
                f"(left out, the file is converted on first use into the cache directory): {problem}"
            )
    else:
        problem = existing_dir_problem(path)
        if problem:
            raise ValueError(f"source must be a LeRobot dataset root or a URL: {problem}")


VIDEO_STREAM_OPTIONS = {
    "source": Option(
        str,
        None,
        "where the dataset is read from. LeRobot: a local path or any fsspec URL (s3://, "
        "http(s)://, hf://; default: the dataset's root). robomimic: a directory made by "
        "'robo-loaders convert robomimic IN OUT --frames h264' (default: converted on "
        "first use into the cache directory)",
        per_host=True,
    ),
    "storage_options": Option(
        dict,
        None,
        "fsspec options for 'source' (endpoint, credentials, ...)",
        check=check_storage_options,
        frameworks=LEROBOT,
    ),
    "local_cache_dir": Option(
        str,
        None,
        "remote source: copy each video whole into this directory on first use and "
        "decode the local copy from then on (default: stream byte ranges). Each "
        "copy is checked against the remote file's size and ETag/mtime and its own "
        "SHA-256, and downloaded again (saying why) when either changed",
        frameworks=LEROBOT,
        per_host=True,
        check=check_writable_dir,
    ),
    "cache_dir": Option(
        str,
        None,
        "the cache directory it writes in: robomimic's conversion on first use, LeRobot's "
        "copy of a remote dataset's tables (default: $ROBO_LOADERS_CACHE or "
        "~/.cache/robo-loaders)",
        per_host=True,
        check=check_writable_dir,
    ),
    "decode_device": Option(
        str,
        "cpu",
        "'cpu' (byte-identical to LeRobotDataset), 'cuda' (NVDEC), 'auto'; "
        "robomimic video shards are decoded on the CPU",
        choices=("cpu", "cuda", "auto"),
        framework_choices={"robomimic": ("cpu", "auto")},
    ),
    "buffer": Option(
        str,
        "raw",
        "decoded episodes held 'raw' or compressed with 'lz4' (less memory, some CPU)",
        choices=("raw", "lz4"),
    ),
    "decode_threads": Option(int, 2, "threads decoding the episodes a pass is about to open", min=0, max=64),
    # decoded episodes are held raw: their memory bounds the buffer (a 100-frame episode of two 84x84 cameras is 4 MB,
    # a 20-s one of three 480p cameras 1.7 GB: sized in bytes, cache_memory)
    **pass_options({"robomimic": 16, "lerobot": 16}, None, "frames"),
}


SPEC = BackendSpec(
    name="video_stream",
    description="trains straight from the videos, local or remote (fsspec): each episode's segment decoded "
    "once per pass, in order, on the CPU or with NVDEC; every frame once per pass, resumable",
    frameworks=("lerobot", "robomimic"),
    kind=BATCH,
    # robomimic: from video robo-shards ('robo-loaders convert robomimic ... --frames h264'), lossy frames,
    # everything else byte-identical; LeRobot: LeRobot's own videos, decoded as LeRobotDataset decodes them
    lossless={"lerobot": NOT_BIT_IDENTICAL_ON_NVDEC, "robomimic": LOSSY_FRAMES},
    gpu={"lerobot": GPU_OPTIONAL, "robomimic": GPU_NO},
    factories={
        "lerobot": "robo_loaders_plugin.backends.video_stream.lerobot:video_stream_dataset",
        "robomimic": "robo_loaders_plugin.backends.video_stream.robomimic:video_stream_dataset",
    },
    footprints={
        "robomimic": "robo_loaders_plugin.backends.video_stream.robomimic:video_stream_footprint",
        "lerobot": "robo_loaders_plugin.backends.video_stream.lerobot:video_stream_footprint",
    },
    options=VIDEO_STREAM_OPTIONS,
    requires={"robomimic": (TORCHDATA, PYAV, TORCHCODEC), "lerobot": (TORCHDATA, TORCHCODEC)},
    constraints=_video_stream_constraints,
    remote_source_option="source",
    remote_storage_option="storage_options",
)


@hookimpl
def robo_loaders_backends() -> list[BackendSpec]:
    """This plugin's backend (``core.hookspecs``).

    Returns:
        ``[SPEC]``.
    """
    return [SPEC]
