"""Option checks and declarations that several backends share, declared once so an option means the same in every
backend that takes it.

Imported whenever a backend is looked up (a spec's options are built at listing), so it imports nothing heavy: no
torch, no Blosc2, no framework.
"""

from __future__ import annotations

from robo_loaders_plugin.core.options import Option, check_size, to_bytes


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
        raise ValueError(
            f"must be a directory 'robo-loaders convert' wrote (left out, the dataset is converted on "
            f"first use into the cache directory): {problem}"
        )


MAX_WINDOW = 10_000  # steps or offsets in one window


MAX_OFFSET_S = 3_600.0  # one hour either side of a frame


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
def pass_options(
    shuffle_buffer: int | dict, cache_episodes: int | None = 64, items: str = "windows"
) -> dict[str, Option]:
    """The declarations of the options every pipeline-served (``batch`` kind) backend takes (``shuffle_buffer``,
    ``seed``, ``prefetch``, ``cache_episodes``, ``cache_memory``, ``replacement``, ``warm_up``; read back with
    ``PassOptions.of``), declared once so that they mean the same in every backend, the built-in ones included.

    Args:
        shuffle_buffer: ``shuffle_buffer``'s default in episodes, or ``{framework: default}``.
        cache_episodes: ``cache_episodes``' default (``None``: as many episodes as ``cache_memory`` holds).
        items: What a pass draws (``"windows"``, ``"frames"``), for the help text.

    Returns:
        ``{option name: Option}``, to merge into a ``BackendSpec``'s ``options``.
    """
    shuffle_default = (
        shuffle_buffer if isinstance(shuffle_buffer, dict) else {"robomimic": shuffle_buffer, "lerobot": shuffle_buffer}
    )
    return {
        "shuffle_buffer": Option(
            int,
            None,
            f"episodes open at once; {items} are drawn at random from them, so more "
            "mixes batches better (default: " + "; ".join(f"{v} for {fw}" for fw, v in shuffle_default.items()) + ")",
            min=1,
            framework_defaults=shuffle_default,
        ),
        "seed": Option(
            int,
            None,
            "shuffling seed (default: train.seed / lerobot-train's --seed); the order is a "
            "function of (seed, pass), so a resumed run continues on the same next batch",
            min=0,  # numpy's seed sequence takes no negative seed: -1 failed at the first batch, naming nothing
        ),
        "prefetch": Option(int, 2, "batches prefetched ahead of training", min=0, max=1024),
        "cache_episodes": Option(
            int,
            cache_episodes,
            "episodes kept in memory (at least 2 x shuffle_buffer)"
            + ("; default: as many as cache_memory holds" if cache_episodes is None else ""),
            min=1,
        ),
        "cache_memory": Option(
            (float, str),
            None,
            "memory the episode buffer may take (bytes, '2GB', '512MiB'; "
            "default: the whole dataset when it takes at most 25% of the available memory, "
            "each episode then loaded once per run, else 1GB; 1GB per component of a mixture): "
            "as many episodes (or parts of long ones, "
            "for a backend buffering parts) are kept as fit, and the shuffle buffer "
            "is at most half of what the budget named holds (cache_memory, else 1GB, "
            "whatever memory is free, so that a pass resumed with less memory free goes "
            "on in its own order) unless given (less when a batch opens "
            "many: the log says); a budget under 1GB that cannot hold two of the largest "
            "episodes (or parts) is refused; cache_episodes, when given, decides instead",
            check=check_size,
            convert=to_bytes,
        ),
        "replacement": Option(
            bool,
            False,
            f"draw each pass's {items} with replacement (same count per pass, repeats "
            "allowed) instead of every one exactly once",
        ),
        "warm_up": Option(
            bool,
            True,
            "the first batches of a run's first pass are drawn from 2, 4, 8 ... open episodes, "
            "the first served once the few holding it are loaded (false: from a full "
            "shuffle_buffer, the first batch waiting for all of it)",
        ),
    }
