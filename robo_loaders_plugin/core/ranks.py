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
    accelerate's ``even_batches`` completes its last batches (at most ``world_size - 1`` items served twice)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, {world_size})")
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    per_rank = -(-total // world_size)
    return np.arange(rank * per_rank, (rank + 1) * per_rank, dtype=np.int64) % total


def resolve_ranks(rank: int | None = None, world_size: int | None = None, where: str = "") -> tuple[int, int]:
    """(rank, world size): given explicitly, else from an initialized ``torch.distributed`` process group, else
    from torchrun's ``RANK``/``WORLD_SIZE`` environment variables, else (0, 1)."""
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
