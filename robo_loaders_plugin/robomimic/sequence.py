"""robomimic's ``SequenceDataset`` arguments and fields, read the way its ``dataset_factory`` reads them: what every
backend's robomimic factory starts from.
"""

from __future__ import annotations

import os

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.options import ROBOMIMIC_OPTIONS
from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5
from robo_loaders_plugin.windows.robomimic import SequenceOptions, episode_fields

OPTION_PREFIX = ROBOMIMIC_OPTIONS  # how a robomimic user sets a backend's options, for messages


def window_settings(config, obs_keys) -> dict:
    """The ``train.*`` settings and obs keys that decide what a sample index is: what every rank of a run must share
    (``core.ranks.check_ranks_agree``), read as robomimic's config holds them (the ``native`` backend included).

    Args:
        config: robomimic's config.
        obs_keys: The observation keys served.

    Returns:
        ``{setting: value}``, JSON-able.
    """
    t = config.train
    names = ("seq_length", "frame_stack", "pad_seq_length", "pad_frame_stack", "goal_mode", "hdf5_load_next_obs",
             "hdf5_cache_mode", "hdf5_filter_key")  # fmt: skip
    out = {name: t.get(name) for name in names}
    out["dataset_keys"] = list(t.get("dataset_keys") or [])
    out["obs_keys"] = list(obs_keys)
    return out


def sequence_options(config, obs_keys, dataset_path) -> tuple[SequenceOptions, str]:
    """The SequenceDataset arguments robomimic's dataset_factory would pass, checked the way it checks them, and
    the HDF5 path.

    Args:
        config: robomimic's config.
        obs_keys: The observation keys to serve.
        dataset_path: The HDF5 file (``None``: ``config.train.data``); ``~`` is expanded.

    Returns:
        ``(options, path)``.

    Raises:
        RoboLoadersError: ``hdf5_normalize_obs`` is set (not supported), or ``hdf5_cache_mode``, ``frame_stack``,
            ``seq_length`` or ``goal_mode`` has a value robomimic would not accept (``goal_mode='last'`` also needs
            ``hdf5_load_next_obs``).
    """
    t = config.train
    opts = SequenceOptions(
        obs_keys=tuple(obs_keys),
        dataset_keys=tuple(t.dataset_keys),
        load_next_obs=bool(t.hdf5_load_next_obs),
        frame_stack=int(t.frame_stack),
        seq_length=int(t.seq_length),
        pad_frame_stack=bool(t.pad_frame_stack),
        pad_seq_length=bool(t.pad_seq_length),
        get_pad_mask=False,
        goal_mode=t.goal_mode,
        hdf5_cache_mode=t.hdf5_cache_mode,
    )
    if t.hdf5_normalize_obs:
        raise RoboLoadersError(
            "train.hdf5_normalize_obs=true is not supported by robo-loaders backends (robomimic "
            "0.3.0 normalizes twice and fails for batch > 1); set it to false or use "
            "train.data_backend=null"
        )
    if opts.hdf5_cache_mode not in ("all", "low_dim", None):
        raise RoboLoadersError(f"train.hdf5_cache_mode must be 'all', 'low_dim' or null, got {opts.hdf5_cache_mode!r}")
    if opts.frame_stack < 1 or opts.seq_length < 1:
        raise RoboLoadersError("train.frame_stack and train.seq_length must be >= 1")
    if opts.goal_mode not in (None, "last"):
        raise RoboLoadersError(f"train.goal_mode must be null or 'last', got {opts.goal_mode!r}")
    if opts.goal_mode == "last" and not opts.load_next_obs:
        raise RoboLoadersError(
            "train.goal_mode='last' needs train.hdf5_load_next_obs=true (the goal is the last next_obs)"
        )
    return opts, os.path.expanduser(dataset_path if dataset_path is not None else t.data)


def read_demo(source: RobomimicHdf5, f, demo: str, opts: SequenceOptions, length: int) -> dict:
    """A demo's fields as SequenceDataset serves them (obs keys are read even when missing: the error lists what
    the demo has).

    Args:
        source: The HDF5 source.
        f: Its open handle.
        demo: The demo (``demo_0``).
        opts: SequenceDataset's arguments (:func:`sequence_options`).
        length: The demo's ``num_samples``.

    Returns:
        ``{field: array}``, every field of ``opts.field_names()``.

    Raises:
        SourceError: a key is missing (naming the demo and what it has), unreadable, or of another length.
    """
    return episode_fields(
        lambda k: source.read(f, demo, k, length) if "/" in k or source.has(f, demo, k) else None,
        length,
        opts,
        f"{source.path}: data/{demo}",
    )


def data_size(source: RobomimicHdf5, f, demos: list[str], opts: SequenceOptions):
    """The sizes of what SequenceDataset serves from ``demos`` (``core.data_size.DataSize``), from metadata only.

    Args:
        source: The HDF5 source.
        f: Its open handle.
        demos: The demos served.
        opts: SequenceDataset's arguments (float32 dataset keys under the cache modes).

    Returns:
        The ``DataSize``.

    Raises:
        SourceError: a served field is not sized per step (``RobomimicHdf5.check_sized``) or holds strings
            (``RobomimicHdf5.check_numbers``).
    """
    source.check_sized(opts.field_names())  # before any data is read
    source.check_numbers(f, demos, opts.field_names())
    float32 = opts.dataset_keys if opts.hdf5_cache_mode in ("all", "low_dim") else ()
    return source.data_size(f, demos, opts.field_names(), float32)


def sample_bytes(size, opts: SequenceOptions) -> int:
    """Bytes of one sample as SequenceDataset serves it: every field of ``size`` (``next_obs`` included) over the
    window of ``frame_stack + seq_length - 1`` steps (a ``goal_mode="last"`` goal, one step, is counted as a
    window: an upper bound); what a batch in flight holds per sample (``core.in_flight``).

    Args:
        size: The ``core.data_size.DataSize`` of the served fields (:func:`data_size`).
        opts: SequenceDataset's arguments.

    Returns:
        Bytes.
    """
    window = opts.frame_stack + opts.seq_length - 1
    return int(window * (sum(size.frame_step_bytes.values()) + size.other_step_bytes))


def rgb_keys(config, obs_keys=()) -> set[str]:
    """The observation keys the config serves as RGB images (``observation.modalities.<group>.rgb``, for every
    group: ``obs``, ``goal``, and hbc/iris's ``planner``/``actor`` sub-configs): the only keys a backend may store
    lossy (as video). A key served as ``low_dim`` or ``depth`` stays byte-identical whatever its dtype and shape.

    Args:
        config: robomimic's config.
        obs_keys: The keys served (a mixture component's own names, which robomimic's obs-key registry gives the
            modality of the mixture key they are renamed to: ``compat.register_obs_key_like``); those it calls
            ``rgb`` count too (a renamed camera was stored raw: a reviewer's find).

    Returns:
        The keys.
    """
    from robo_loaders_plugin.robomimic import compat

    found: set[str] = {str(k) for k in obs_keys if compat.obs_modality(str(k)) == "rgb"}

    def walk(node) -> None:
        if not hasattr(node, "keys"):
            return
        for name in list(node.keys()):
            value = node[name]
            if name == "rgb" and isinstance(value, (list, tuple)):
                found.update(str(k) for k in value)
            else:
                walk(value)

    walk(config.observation)
    return found


def training_loop_of(config):
    """The training loop robomimic's ``train()`` runs with this config: ``train.batch_size`` samples per batch,
    built by ``train.num_data_workers`` workers (``core.in_flight``).

    Args:
        config: robomimic's config.

    Returns:
        A ``core.in_flight.TrainingLoop``.
    """
    from robo_loaders_plugin.core.in_flight import TrainingLoop

    return TrainingLoop(int(config.train.batch_size), int(config.train.num_data_workers))


def recorded_fps(source: RobomimicHdf5, f) -> float | None:
    """The rate a robomimic file was recorded at, when its ``env_args`` say (robosuite's ``control_freq``): what
    ``target_fps`` converts from when ``source_fps`` is not given.

    Args:
        source: The file's source (unused: the rate is read from ``f``).
        f: The open HDF5 file.

    Returns:
        The rate in Hz, or ``None`` when ``env_args`` or its ``control_freq`` is missing, unreadable, or not a
        finite rate above 0 (a NaN crashed the window plan with a bare error, 0 or a negative rate gave a
        refusal asking for a target_fps <= 0: a reviewer's reproduction), so the refusals asking for
        ``source_fps`` apply.
    """
    import json
    import math

    try:
        rate = float(json.loads(f["data"].attrs["env_args"])["env_kwargs"]["control_freq"])
    except (KeyError, TypeError, ValueError):
        return None
    return rate if math.isfinite(rate) and rate > 0 else None
