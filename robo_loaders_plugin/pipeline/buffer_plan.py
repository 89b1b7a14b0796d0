"""How many episodes (or parts of long ones) the episode buffer of a pipeline-served backend holds, from their
sizes in bytes and the machine's memory, before anything is read: the buffer is bounded in bytes, not in episodes,
because one 480p episode can weigh as much as a thousand 84x84 ones.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from robo_loaders_plugin.core.errors import BackendOptionError
from robo_loaders_plugin.core.footprint import HEADROOM, OWN_LOADER, Available, Footprint, Planned
from robo_loaders_plugin.core.in_flight import BatchesInFlight
from robo_loaders_plugin.core.units import format_bytes

DEFAULT_CACHE_MEMORY = 10**9  # bytes (1GB): the episode buffers' bound when the whole dataset does not fit the share
# cache_memory not given: the buffer holds the whole dataset when that takes at most this share of the available
# memory (each unit then loaded once per run, not once per pass: a 480p set of 1.7 GB decoded served 17.1x LeRobot's
# loader held whole, 3.9x within 1 GB); else DEFAULT_CACHE_MEMORY
WHOLE_DATASET_SHARE = 0.25


# -- the pipeline-served backends' episode buffers --------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class BufferPlan:
    """How many units (episodes, or parts of episodes) a pipeline's episode cache keeps, from a byte budget.

    Attributes:
        capacity: Units kept loaded (the cache's capacity).
        shuffle_buffer: Units open at once (items drawn from them).
        unit_bytes: The largest unit's bytes as held.
        footprint: What it needs (host RAM: ``capacity`` units, plus the batches in flight).
        in_flight: The batches in flight it counts.
        order_capacity: The units the budget the options name holds, whatever memory is free: what a pass's order
            is fitted to (``pipeline.batches.fit_to_cache``), so that it never follows the free memory (``None``:
            ``capacity``).
    """

    capacity: int
    shuffle_buffer: int
    unit_bytes: int
    footprint: Footprint
    in_flight: BatchesInFlight
    order_capacity: int | None = None

    def planned(self, available: Available, alternatives) -> Planned:
        """This plan as ``BackendSpec.footprints`` gives it: what stays held beside other datasets is the buffer,
        not the batches in flight (a mixture's batches are counted once, not once per component).

        Args:
            available: The machine as measured.
            alternatives: What would fit instead.

        Returns:
            A ``core.footprint.Planned``.
        """
        fp = self.footprint
        held = dataclasses.replace(fp, host_bytes=fp.host_bytes - self.in_flight.host_bytes)
        return Planned(fp, available, tuple(alternatives), held)


def buffer_plan(
    unit_bytes: np.ndarray,
    *,
    cache_memory,
    cache_episodes: int | None,
    shuffle_buffer: int,
    shuffle_given: bool,
    batch_bytes: int,
    prefetch: int,
    option_prefix: str,
    unit: str = "units",
    threads: int | None = None,
    available_bytes: int | None = None,
    order_unit_bytes=None,
) -> BufferPlan:
    """Size a pipeline's episode cache: ``cache_episodes`` when given (kept working), else as many of the largest
    units as ``cache_memory`` holds; the shuffle buffer is at most half of what the budget the options name holds
    (``cache_memory``, else :data:`DEFAULT_CACHE_MEMORY`, whatever memory is free: the pass's order must not change
    with it), unless given. Memory: the cache, plus the batches in flight: ``prefetch`` prefetched, one being
    assembled per thread (``pipeline.batches.PipelineBatches`` keeps one per thread) and the one training holds.

    Args:
        unit_bytes: Bytes of each unit as the cache holds it (decoded or compressed).
        cache_memory: The byte budget option in bytes (``None``: :data:`DEFAULT_CACHE_MEMORY`).
        cache_episodes: The option, when given.
        shuffle_buffer: The shuffle buffer option or its default.
        shuffle_given: Whether the user gave ``shuffle_buffer``.
        batch_bytes: Bytes of one batch.
        prefetch: Batches prefetched.
        option_prefix: How the user sets options (for messages).
        unit: What a unit is, plural, for the bound (``episodes``, ``demos``, or ``units`` for parts of episodes).
        threads: Threads assembling batches, when the factory knows them (``None``: the training script sets them,
            e.g. lerobot-train's ``--num_workers``; the bound then names them instead of counting them).
        available_bytes: Host memory available (``core.footprint.Available.host_bytes``), for the default when
            neither ``cache_memory`` nor ``cache_episodes`` is given: the whole dataset when it takes at most
            :data:`WHOLE_DATASET_SHARE` of it, else :data:`DEFAULT_CACHE_MEMORY` (``None``: that bound).
        order_unit_bytes: The units' bytes the pass's order is sized from, where ``unit_bytes`` depends on how
            the data was stored (``None``: ``unit_bytes``). Why: shards' compressed sizes change with the codec,
            its level or the compressor's version, and a shuffle buffer sized from them gave another order to a
            run resumed over shards converted again (frames served twice, others never: a reviewer's reproduction).

    Returns:
        The :class:`BufferPlan`; its capacity is at most the number of units (at least 1).

    Raises:
        BackendOptionError: ``cache_memory``, under the default bound, holds fewer than 2 of the largest units (a
            reviewer's finding: 1 kB was accepted and 1.2 MB held, while the README says what a backend cannot hold
            is refused up front).
    """
    largest = int(np.max(unit_bytes)) if len(unit_bytes) else 0
    order_capacity = None  # the capacity itself, where the options name it
    if cache_episodes is not None:
        capacity = max(int(cache_episodes), 2 * int(shuffle_buffer))
        said = f"cache_episodes={cache_episodes}"
        shuffle = int(shuffle_buffer)
    else:
        # the floor below holds two units whatever the budget: a budget under them is refused, except from the
        # default bound on (a mixture's components are given it: mixtures.footprint.bounded_buffer)
        if cache_memory is not None and int(cache_memory) < min(2 * largest, DEFAULT_CACHE_MEMORY):
            host = available_bytes if available_bytes is not None else Available.measure().host_bytes
            beyond = 2 * largest > HEADROOM * host
            raise BackendOptionError(
                f"{option_prefix}.cache_memory={format_bytes(int(cache_memory))} cannot hold the 2 {unit} a pass "
                f"keeps at least (the largest is {format_bytes(largest)}): "
                + (
                    f"more than this machine's memory ({format_bytes(int(host))} available), so no "
                    f"cache_memory can; train with {OWN_LOADER}"
                    if beyond
                    else f"give at least {format_bytes(2 * largest)}, or leave cache_memory out"
                )
            )
        limit, said = _byte_budget(unit_bytes, cache_memory, available_bytes, unit)
        if limit is None:  # the whole dataset: every unit (and room for the shuffle buffer the option asks)
            limit = max(1, largest) * max(len(unit_bytes), 2 * int(shuffle_buffer))
        fit = max(2, limit // max(1, largest))
        # the pass's order follows the shuffle buffer, so it never follows the free memory (the default budget's
        # choice between the whole dataset and DEFAULT_CACHE_MEMORY): a run resumed with less memory free went on
        # in another order than the pass it stopped in (windows served twice, others never; a reviewer's
        # reproduction). The buffer is sized as under the budget the options name, whatever is free.
        named = DEFAULT_CACHE_MEMORY if cache_memory is None else int(cache_memory)
        ordered = largest if order_unit_bytes is None or not len(order_unit_bytes) else int(np.max(order_unit_bytes))
        order_fit = max(2, named // max(1, ordered))
        shuffle = int(shuffle_buffer) if shuffle_given else max(1, min(int(shuffle_buffer), order_fit // 2))
        capacity = max(fit, 2 * shuffle)
        if cache_memory is None:  # the default budget: the cache may hold more where memory is free, the order not
            order_capacity = min(max(order_fit, 2 * shuffle), max(1, len(unit_bytes)))
    capacity = min(capacity, max(1, len(unit_bytes)))
    held = int(np.sum(np.sort(np.asarray(unit_bytes, np.int64))[::-1][:capacity]))
    if threads is None:  # the training script's num_workers: named, counted as one
        flight = BatchesInFlight(
            2 + int(prefetch),
            int(batch_bytes),
            f"{int(prefetch)} prefetched + 1 per num_workers thread (counted as 1) + 1 held by training",
        )
    else:
        workers = max(1, int(threads))
        flight = BatchesInFlight(
            int(prefetch) + workers + 1,
            int(batch_bytes),
            f"{int(prefetch)} prefetched + 1 per thread ({workers}) + 1 held by training",
        )
    host = held + flight.host_bytes
    bound = (
        f"at most {capacity} {unit} of up to {format_bytes(largest)} held ({said}; {format_bytes(held)}) plus "
        f"{flight.describe()}, whatever the dataset's size"
    )
    return BufferPlan(
        capacity, shuffle, largest, Footprint(host_bytes=host, bound=bound), flight, order_capacity or capacity
    )


def _byte_budget(unit_bytes, cache_memory, available_bytes: int | None, unit: str) -> tuple[int | None, str]:
    """The buffer's byte budget and how the log line says where it came from: ``cache_memory`` when given, else
    ``None`` (every unit) when the whole dataset fits :data:`WHOLE_DATASET_SHARE` of the available memory, else the
    default bound."""
    if cache_memory is not None:
        return int(cache_memory), f"cache_memory={format_bytes(int(cache_memory))}"
    whole = int(np.sum(np.asarray(unit_bytes, np.int64)))
    share = f"{WHOLE_DATASET_SHARE:.0%}"
    if available_bytes is not None and whole <= WHOLE_DATASET_SHARE * int(available_bytes):
        said = (
            f"cache_memory not given: every {unit[:-1] if unit.endswith('s') else unit}, {format_bytes(whole)}, "
            f"within {share} of the {format_bytes(int(available_bytes))} available, each loaded once per run"
        )
        return None, said
    why = (
        f"the whole dataset, {format_bytes(whole)}, is above {share} of the {format_bytes(int(available_bytes))} "
        "available"
        if available_bytes is not None
        else "the available memory not measured"
    )
    return DEFAULT_CACHE_MEMORY, f"cache_memory={format_bytes(DEFAULT_CACHE_MEMORY)}, the default: {why}"


def held_bytes(units, row_bytes: float, margin: int = 0) -> np.ndarray:
    """Bytes the buffer holds for each unit: its rows plus the ``margin`` rows its windows reach outside it, at
    ``row_bytes`` per row as held. The one formula every pipeline-served backend sizes its buffer with (what a row
    weighs as held is the backend's: decoded, compressed at an expected ratio, or as stored).

    Args:
        units: ``(episode, first row, end row)`` of each unit (whole episodes or parts).
        row_bytes: Bytes of one row as the buffer holds it.
        margin: Rows a unit is loaded with beyond its own (0 for whole episodes).

    Returns:
        int64 bytes per unit.
    """
    return np.array([(e - s + margin) * row_bytes for _, s, e in units], dtype=np.int64)
