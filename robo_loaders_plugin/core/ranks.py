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
        raise RoboLoadersError(f"{where}give both rank= and world_size=, or neither (then torch.distributed or the "
                               "RANK/WORLD_SIZE environment variables decide)")
    origin = "rank=/world_size="
    if rank is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            rank, world_size, origin = dist.get_rank(), dist.get_world_size(), "torch.distributed"
        elif "WORLD_SIZE" in os.environ or "RANK" in os.environ:
            try:
                rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
            except ValueError:
                raise RoboLoadersError(f"{where}RANK={os.environ.get('RANK')!r} / WORLD_SIZE="
                                       f"{os.environ.get('WORLD_SIZE')!r} are not integers") from None
            origin = "the RANK/WORLD_SIZE environment variables"
        else:
            return 0, 1
    if type(rank) is not int or type(world_size) is not int or world_size < 1 or not 0 <= rank < world_size:
        raise RoboLoadersError(f"{where}rank {rank!r} of world size {world_size!r} (from {origin}) is not valid: "
                               "need integers with 0 <= rank < world_size")
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

    from robo_loaders_plugin.storage.fingerprint import stat_files

    h = hashlib.sha256()
    for name, size, *_ in stat_files(path):
        h.update(f"{name}\0{size}\n".encode())
    return h.hexdigest()[:16]


def check_ranks_agree(values, where: str) -> None:
    """Refuse a multi-process run whose ranks were set up differently: one ``all_gather`` of ``values``.

    Why: every rank computes a pass's global order from (seed, options, data) alone and keeps its own share of it
    (:func:`rank_share`), so ranks that disagree on any of them cut different orders, and the shares overlap
    silently (with the common ``seed + rank`` idiom, datapipe served 48 of 148 windows twice and 48 never).

    Args:
        values: ``{name: value}`` that must be equal on every rank (the seed, the backend's options, the source's
            identity), picklable; or a function returning it (called only in a multi-process run).
        where: Names the run for the message (the backend and setting).

    Raises:
        RoboLoadersError: naming the first value that differs, and which ranks hold which value.

    Does nothing unless ``torch.distributed`` is initialised with more than one process (a custom loop without a
    process group cannot be checked: nothing connects its ranks).
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return
    values = dict(values() if callable(values) else values)
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, values)
    for key in values:
        by_value: dict[str, list[int]] = {}
        for rank, got in enumerate(gathered):
            by_value.setdefault(repr(got.get(key)), []).append(rank)
        if len(by_value) > 1:
            held = "; ".join(f"rank{'s' if len(r) > 1 else ''} {','.join(map(str, r))}: {v}"
                             for v, r in by_value.items())
            raise RoboLoadersError(f"{where}: the {len(gathered)} ranks disagree on {key} ({held}). "
                                   "Every rank must use the same seed, options and data: the plugin splits each "
                                   "pass across ranks itself, so a per-rank seed (seed + rank) or per-rank options "
                                   "would serve some samples twice and others never")

