"""The ``datapipe`` backend: a torchdata.nodes pipeline over lossless robo-shards (converted on first use), with a
bounded episode buffer, whole batches and resumable pass state.

This module is the plugin the ``robo_loaders`` entry point ``datapipe`` names (as a third party's would be): its
spec and options. It imports nothing heavy (no torch, no Blosc2, no framework): listing backends imports it, and
the factories (``robomimic.py``, ``lerobot.py``) are imported only when a dataset is built.
"""

from __future__ import annotations

from robo_loaders_plugin.backends.requirements import TORCHCODEC, TORCHDATA
from robo_loaders_plugin.core.hookspecs import hookimpl
from robo_loaders_plugin.core.options import Option
from robo_loaders_plugin.core.shared_options import check_shards_dir, check_writable_dir, pass_options
from robo_loaders_plugin.core.spec import BATCH, BackendSpec

DATAPIPE_OPTIONS = {
    "shards": Option(
        str,
        None,
        "a robo-shards directory made by 'robo-loaders convert' (default: convert into the "
        "cache directory on first use)",
        per_host=True,
        check=check_shards_dir,
    ),
    "cache_dir": Option(
        str,
        None,
        "the cache directory conversions on first use go to (default: $ROBO_LOADERS_CACHE or ~/.cache/robo-loaders)",
        per_host=True,
        check=check_writable_dir,
    ),
    "check_source": Option(
        bool,
        True,
        "refuse 'shards' converted from a source whose content differs from the one "
        "training reads (false: serve them anyway)",
    ),
    "convert_workers": Option(int, 1, "processes converting on first use", min=1, max=256),
    # robomimic holds open episodes decoded (each frame then serves several windows): memory bounds the buffer.
    # LeRobot keeps them compressed (frames decoded per batch): a wide buffer costs little and mixes batches far
    # better (episode mix 0.64 vs 0.26 at 16 on 200 episodes, batch 64)
    **pass_options({"robomimic": 16, "lerobot": 64}, None, "windows"),
}


SPEC = BackendSpec(
    name="datapipe",
    description="torchdata.nodes pipeline over robo-shards: parallel read, episode-buffer shuffle, "
    "whole batches, resumable state",
    frameworks=("robomimic", "lerobot"),
    kind=BATCH,
    factories={
        "robomimic": "robo_loaders_plugin.backends.datapipe.robomimic:datapipe_dataset",
        "lerobot": "robo_loaders_plugin.backends.datapipe.lerobot:datapipe_dataset",
    },
    footprints={
        "robomimic": "robo_loaders_plugin.backends.datapipe.robomimic:datapipe_footprint",
        "lerobot": "robo_loaders_plugin.backends.datapipe.lerobot:datapipe_footprint",
    },
    options=DATAPIPE_OPTIONS,
    requires={"robomimic": (TORCHDATA,), "lerobot": (TORCHDATA, TORCHCODEC)},
)


@hookimpl
def robo_loaders_backends() -> list[BackendSpec]:
    """This plugin's backend (``core.hookspecs``).

    Returns:
        ``[SPEC]``.
    """
    return [SPEC]
