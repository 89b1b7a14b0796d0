"""The ``gpu_resampler`` backend: every episode held as tensors in tiers (GPU, host raw, host compressed, a compressed
file on disk: ``footprint``, ``tiers``, ``tensors``), kept in the cache directory and mapped on the next start
(``stored_tiers``), whole batches of windows in a few gathers, optional rate conversion.

This module is the plugin the ``robo_loaders`` entry point ``gpu_resampler`` names (as a third party's would be): its
spec and options. It imports nothing heavy (no torch, no Blosc2, no framework): listing backends imports it, and
the factories (``robomimic.py``, ``lerobot.py``) are imported only when a dataset is built.
"""

from __future__ import annotations

from robo_loaders_plugin.backends.requirements import LEROBOT, ROBOMIMIC
from robo_loaders_plugin.core.hookspecs import hookimpl
from robo_loaders_plugin.core.options import MAX_FPS, Option, check_positive_rate, check_size, to_bytes
from robo_loaders_plugin.core.shared_options import check_device, check_modes, check_offsets, check_writable_dir
from robo_loaders_plugin.core.spec import GPU_OPTIONAL, INDEXED, BackendSpec


def _gpu_resampler_constraints(options) -> None:
    lerobot = hasattr(options, "delta_timestamps")  # the option is declared for LeRobot only
    if lerobot and options.delta_timestamps is not None and options.target_fps is not None:
        raise ValueError(
            "give target_fps (the policy's steps at another rate) or delta_timestamps (explicit "
            "offsets in seconds), not both"
        )
    if options.modes and options.target_fps is None and not (lerobot and options.delta_timestamps is not None):
        # modes say how a field is read between two recorded steps, which only rate conversion asks for
        raise ValueError(
            "modes apply to rate conversion (how a field is read between two recorded steps), and "
            "none is set: give target_fps" + (" or delta_timestamps" if lerobot else "") + " too, or leave modes out"
        )


GPU_RESAMPLER_OPTIONS = {
    "device": Option(
        str,
        "auto",
        "where batches are built: 'auto' (the training GPU when there is one, else the CPU), 'cpu', 'cuda' or 'cuda:N'",
        check=check_device,
    ),
    "max_device_memory": Option(
        (float, str),
        None,
        "GPU memory the episodes may take (bytes or '8GB'; default: half "
        "of the free memory); beyond it they stay in pinned host memory",
        check=check_size,
        convert=to_bytes,
    ),
    "max_memory": Option(
        (float, str),
        None,
        "host memory the episodes beyond the GPU may take (bytes or '8GB'; "
        "default: 90% of the available memory), the episode being read while "
        "filling included: held raw while they fit, then with camera frames "
        "compressed (decompressed per batch), then compressed in a file on "
        "disk; refused up front, naming the least that works, below the fields "
        "that are not frames plus the episode being read",
        check=check_size,
        convert=to_bytes,
    ),
    "cache_dir": Option(
        str,
        None,
        "the cache directory it writes in: the tiers built on the first run, mapped on the "
        "next (default: $ROBO_LOADERS_CACHE or ~/.cache/robo-loaders)",
        per_host=True,
        check=check_writable_dir,
    ),
    "target_fps": Option(
        float,
        None,
        "the rate windows are counted at (default: the recorded rate); robomimic: "
        "seq_length and frame_stack steps at this rate; LeRobot: the policy's delta "
        f"steps at this rate (at most {MAX_FPS:g})",
        check=check_positive_rate,
    ),
    "source_fps": Option(
        float,
        None,
        "the rate the HDF5 was recorded at (default: its env_args' control_freq)",
        check=check_positive_rate,
        frameworks=ROBOMIMIC,
    ),
    "delta_timestamps": Option(
        dict,
        None,
        "offsets in seconds per key, at any offsets (not only multiples of 1/fps), instead of the policy's: "
        "for keys it windows, as many offsets per key; keys not named keep the policy's windows",
        check=check_offsets,
        frameworks=LEROBOT,
    ),
    "modes": Option(
        dict,
        None,
        "per field: 'linear' (default for float fields), 'previous' (default for integer "
        "and boolean fields), 'nearest' (default, and only choice with 'previous', for "
        "frames)",
        check=check_modes,
    ),
}


SPEC = BackendSpec(
    name="gpu_resampler",
    description="every episode held as tensors in tiers (on the GPU while it fits, then host memory raw, "
    "then compressed): whole batches of windows in a few gathers, the native sampler's order, "
    "optional rate conversion",
    frameworks=("robomimic", "lerobot"),
    kind=INDEXED,
    gpu=GPU_OPTIONAL,
    factories={
        "robomimic": "robo_loaders_plugin.backends.gpu_resampler.robomimic:gpu_resampler_dataset",
        "lerobot": "robo_loaders_plugin.backends.gpu_resampler.lerobot:gpu_resampler_dataset",
    },
    footprints={
        "robomimic": "robo_loaders_plugin.backends.gpu_resampler.robomimic:gpu_resampler_footprint",
        "lerobot": "robo_loaders_plugin.backends.gpu_resampler.lerobot:gpu_resampler_footprint",
    },
    options=GPU_RESAMPLER_OPTIONS,
    constraints=_gpu_resampler_constraints,
)


@hookimpl
def robo_loaders_backends() -> list[BackendSpec]:
    """This plugin's backend (``core.hookspecs``).

    Returns:
        ``[SPEC]``.
    """
    return [SPEC]
