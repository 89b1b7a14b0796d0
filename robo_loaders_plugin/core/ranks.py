"""This process's share of a multi-process run: which rank it is, and which part of a pass it serves.

Why one rule for every backend: ranks never talk to each other about data. Each computes the pass's global order
from (seed, pass) alone, the same everywhere, and keeps its own piece of it; so every rank serves the same number of
batches (no rank waits forever at the end of a pass), the pieces together are the one-process pass, and a resumed
rank finds its position from (pass, batch) alone.
"""

from __future__ import annotations

import os

import numpy as np

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.log import get_logger

logger = get_logger(__name__)


def rank_share(total: int, rank: int, world_size: int) -> np.ndarray:
    """Positions (in a pass's global serving sequence of ``total`` items) that rank ``rank`` serves.

    Why contiguous pieces: a pass enters episodes in one shuffled order, so a contiguous piece of it is a run of
    whole episodes (two partial ones at most): each rank opens and decodes only its own episodes. Every rank gets
    ``ceil(total / world_size)`` positions, so every rank serves the same number of batches (no rank waits forever
    at the end of a pass); the last pieces are completed with positions from the start of the pass, as
    accelerate's ``even_batches`` completes its last batches (at most ``world_size - 1`` items served twice).

    Args:
        total: How many items the pass serves in one process.
        rank: This process's rank.
        world_size: How many processes share the pass.

    Returns:
        The positions, an ``int64`` array of ``ceil(total / world_size)`` entries (empty when ``total`` is 0).

    Raises:
        ValueError: ``rank`` is not in ``[0, world_size)``.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, {world_size})")
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    per_rank = -(-total // world_size)
    return np.arange(rank * per_rank, (rank + 1) * per_rank, dtype=np.int64) % total


def resolve_ranks(rank: int | None = None, world_size: int | None = None, where: str = "") -> tuple[int, int]:
    """This process's (rank, world size).

    Given explicitly, else from an initialized ``torch.distributed`` process group, else from torchrun's
    ``RANK``/``WORLD_SIZE`` environment variables, else (0, 1).

    Args:
        rank: This process's rank, or ``None`` to find it.
        world_size: How many processes, or ``None`` to find it (give both or neither).
        where: Prefixed to the error messages (names the caller's setting).

    Returns:
        ``(rank, world_size)``.

    Raises:
        RoboLoadersError: only one of ``rank``/``world_size`` given; the environment variables are not integers;
            or the pair is not integers with ``0 <= rank < world_size``.
    """
    if (rank is None) != (world_size is None):
        raise RoboLoadersError(
            f"{where}give both rank= and world_size=, or neither (then torch.distributed or the "
            "RANK/WORLD_SIZE environment variables decide)"
        )
    origin = "rank=/world_size="
    if rank is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            rank, world_size, origin = dist.get_rank(), dist.get_world_size(), "torch.distributed"
        elif "WORLD_SIZE" in os.environ or "RANK" in os.environ:
            try:
                rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
            except ValueError:
                raise RoboLoadersError(
                    f"{where}RANK={os.environ.get('RANK')!r} / WORLD_SIZE="
                    f"{os.environ.get('WORLD_SIZE')!r} are not integers"
                ) from None
            origin = "the RANK/WORLD_SIZE environment variables"
        else:
            return 0, 1
    if type(rank) is not int or type(world_size) is not int or world_size < 1 or not 0 <= rank < world_size:
        raise RoboLoadersError(
            f"{where}rank {rank!r} of world size {world_size!r} (from {origin}) is not valid: "
            "need integers with 0 <= rank < world_size"
        )
    return rank, world_size


def source_identity(path: str) -> str:
    """What identifies a source across hosts: a digest of its files' relative names and sizes.

    Why not mtimes or inodes: they differ between copies of the same data on two hosts, and the ranks of a run must
    agree that they read the same data (:func:`check_ranks_agree`).

    Args:
        path: The source's file or directory.

    Returns:
        The first 16 hex digits of the SHA-256 of the names and sizes.
    """
    import hashlib

    from robo_loaders_plugin.core.files import stat_files

    h = hashlib.sha256()
    for name, size, *_ in stat_files(path):
        h.update(f"{name}\0{size}\n".encode())
    return h.hexdigest()[:16]


def check_ranks_agree(values, where: str, built_for: tuple[int, int] | None = None, alone: bool = False) -> bool:
    """Refuse a multi-process run whose ranks were set up differently: one ``all_gather`` of ``values``.

    Why: every rank computes a pass's global order from (seed, options, data) alone and keeps its own share of it
    (:func:`rank_share`), so ranks that disagree on any of them cut different orders, and the shares overlap
    silently (with the common ``seed + rank`` idiom, some windows are served twice and as many never).

    Every rank of the group must call this at the same point (it is a collective). Every rank decides from the same
    gathered values, so either all of them raise or none does: a refusal never leaves a rank waiting for the others.

    Args:
        values: ``{name: value}`` that must be equal on every rank (the seed, the backend's options, the source's
            identity), picklable; or a function returning it (called only in a multi-process run).
        where: Names the run for the message (the backend and setting).
        built_for: This process's ``(rank, world_size)`` the dataset was split for, when the plugin splits passes
            itself: the group's ranks must hold every share of the group's world size once (``None``: not
            checked).
        alone: The caller gave ``rank=0, world_size=1`` explicitly: a dataset for this process alone (a rank-0
            evaluation set), built on whichever ranks want one. Nothing is gathered (a collective on rank 0 alone
            waited for the other ranks forever: a reviewer's reproduction); in a group of two or more, one line says
            that this process serves every sample.

    Returns:
        Whether the ranks were checked (``False``: no initialised process group of two or more processes).

    Raises:
        RoboLoadersError: naming the first value that differs, and which ranks hold which value; or the ranks'
            splits, when they do not make up the pass once (a share held twice, or another world size).
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    group_world = dist.get_world_size()
    if alone:
        if group_world > 1:
            logger.info(
                f"{where}: built with rank=0, world_size=1 in a torch.distributed group of {group_world}: this "
                "process serves every sample, and the other ranks are not consulted (give no rank=/world_size= "
                "for the group's share)"
            )
        return False
    if group_world < 2:
        if built_for is not None and built_for[1] > 1:
            raise RoboLoadersError(_split_mismatch(where, [built_for]))
        return False
    values = dict(values() if callable(values) else values)
    gathered: list = [None] * group_world
    dist.all_gather_object(gathered, (values, built_for))
    splits = [split for _, split in gathered]
    # the ranks' shares must make up the pass, each once, wherever a rank split its dataset (one built for one
    # process, rank 0 of 1, on every rank of a group of two served every sample twice: a reviewer's reproduction)
    if any(s is not None for s in splits) and sorted(s or (0, 1) for s in splits) != [
        (r, group_world) for r in range(group_world)
    ]:
        raise RoboLoadersError(_split_mismatch(where, splits))
    for key in values:
        by_value: dict[str, list[int]] = {}
        for rank, (got, _) in enumerate(gathered):
            by_value.setdefault(repr(got.get(key)), []).append(rank)
        if len(by_value) > 1:
            held = "; ".join(
                f"rank{'s' if len(r) > 1 else ''} {','.join(map(str, r))}: {v}" for v, r in by_value.items()
            )
            raise RoboLoadersError(
                f"{where}: the {len(gathered)} ranks disagree on {key} ({held}). "
                "Every rank must use the same seed, options, data and batch settings: the plugin "
                "splits each pass across ranks itself, so a per-rank seed (seed + rank) or "
                "per-rank options would serve some samples twice and others never"
            )
    return True


def _split_mismatch(where: str, splits: list) -> str:
    """The refusal for datasets whose splits do not cover the pass once (``splits[r]``: what the process group's
    rank ``r`` built its dataset for)."""
    built = ", ".join("one process" if s is None or s[1] == 1 else f"rank {s[0]} of {s[1]}" for s in splits)
    if len(splits) > 1:
        them = f"the {len(splits)} processes of the torch.distributed group built their datasets"
    else:
        them = "the one process of the torch.distributed group built its dataset"
    return (
        f"{where}: {them} as {built}, so their shares would not make up each pass once; build the dataset "
        "on every rank with the group's rank and world size (give no rank=/world_size=, or torch.distributed's)"
    )


def check_ranks_agree_at_first_pass(values, where: str, rank: int, world_size: int) -> None:
    """At the first pass of a dataset the plugin splits across ranks: the ranks agree (:func:`check_ranks_agree`),
    or the run is refused because nothing can check that they do.

    Why at the first pass too: a custom loop may build the dataset from ``RANK``/``WORLD_SIZE`` before it
    initialises the process group (nothing to check with then); with the ``seed + rank`` idiom that served 277 of
    1054 windows twice and 291 never. The first pass is the last point before data is served; by then a
    multi-process run that synchronises anything has its group. The pass's own order inputs (the DataLoader's batch
    size, shuffle, drop_last) are known only here, so they are checked here whenever the dataset was.

    Args:
        values: ``{name: value}`` every rank must share (as :func:`check_ranks_agree`).
        where: Names the run for the message.
        rank: The rank the dataset was built for.
        world_size: The world size it was built for (more than one: this is a multi-process run).

    Raises:
        RoboLoadersError: the ranks disagree (:func:`check_ranks_agree`), or no process group is initialised, with
            what to do.
    """
    if not check_ranks_agree(values, where, (rank, world_size)):
        raise RoboLoadersError(
            f"{where}: this dataset was built as rank {rank} of {world_size}, but no torch.distributed process group "
            "is initialised at its first pass, so the ranks cannot check that they share the seed, options and data "
            "(a per-rank seed would serve some samples twice and others never); call "
            "torch.distributed.init_process_group() before the first pass (or before building the dataset), or "
            "build it with rank=0, world_size=1 for a process that trains on every sample alone"
        )
