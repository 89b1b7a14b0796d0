"""Options of the pipeline-served backends, and where the shards they read come from; the same for every
framework."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable

import numpy as np

from robo_loaders_plugin.core.errors import RoboLoadersError, StaleSourceError
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.storage import cache
from robo_loaders_plugin.storage.fingerprint import Fingerprint, check_same_source
from robo_loaders_plugin.storage.shards import ShardError, ShardReader

logger = get_logger(__name__)


@dataclasses.dataclass(frozen=True)
class PassOptions:
    """How the pipeline orders and feeds a pass: the options every pipeline-served backend declares the same way
    (``backends.pass_options``) and the pipeline reads (:class:`~robo_loaders_plugin.pipeline.batches.PipelineDataset`).

    Attributes:
        shuffle_buffer: Episodes open at once; items are drawn at random from them.
        seed: The backend's own order seed (``None``: the framework's).
        prefetch: Batches prefetched ahead of training.
        cache_episodes: Episodes kept loaded (at least ``2 * shuffle_buffer`` are, see :attr:`episode_capacity`);
            ``None``: as many as ``cache_memory`` holds (``buffer_plan.buffer_plan``, which the factory resolves
            into this field before building).
        replacement: Draw each pass's items with replacement instead of each exactly once.
        warm_up: The run's first pass draws its first batches from a buffer that grows from two episodes
            (``pipeline.plan.plan_windows``), so the first batch does not wait for a whole buffer to load.
        cache_memory: The buffer's byte budget in bytes (``None``: the default, 1GB).
        shuffle_given: Whether the user set ``shuffle_buffer``, to any value (else the buffer sizing and the pipeline
            may make it smaller to fit the episode cache: ``buffer_plan.buffer_plan``,
            ``pipeline.batches.fit_to_cache``); from the options object's record of what was given (:meth:`of`).
        option_prefix: How the user sets these options, for messages; set by :meth:`sized`.
        order_capacity: The units the budget the options name holds, whatever memory is free, which a pass's order
            is fitted to (``buffer_plan.BufferPlan.order_capacity``); set by :meth:`sized` (``None``: the cache's).
    """

    shuffle_buffer: int
    seed: int | None = None
    prefetch: int = 2
    cache_episodes: int | None = 64
    replacement: bool = False
    warm_up: bool = True
    cache_memory: object = None
    shuffle_given: bool = False
    option_prefix: str = "backend_kwargs"
    order_capacity: int | None = None

    @classmethod
    def of(cls, options) -> PassOptions:
        """The pass options of a backend's resolved options object (``core.options``).

        Args:
            options: The resolved options; fields it does not declare keep this class's defaults.

        Returns:
            The :class:`PassOptions`.
        """
        values = {f.name: getattr(options, f.name) for f in dataclasses.fields(cls) if hasattr(options, f.name)}
        values["shuffle_given"] = "shuffle_buffer" in getattr(options, "given_names", ())
        return cls(**values)

    @property
    def episode_capacity(self) -> int:
        """Episodes the cache keeps: ``cache_episodes``, and never fewer than two shuffle buffers (the open ones
        and the ones loaded ahead)."""
        return max(self.cache_episodes or 0, 2 * self.shuffle_buffer)

    def sized(
        self,
        unit_bytes,
        batch_bytes: int,
        option_prefix: str,
        unit: str = "units",
        threads: int | None = None,
        committed_bytes: int = 0,
        order_unit_bytes=None,
    ):
        """These options with the buffer sized for units of ``unit_bytes`` (``buffer_plan.buffer_plan``): returns
        ``(options, plan)``; the plan's footprint says what the buffer holds and how it is bounded.

        Args:
            unit_bytes: Bytes of each unit (episode or part of one) as the cache holds it.
            batch_bytes: Bytes of one batch.
            option_prefix: How the user sets options (for messages).
            unit: What a unit is, plural, for the bound's wording (``episodes``, ``demos``, ``units``).
            threads: Threads assembling batches, when known (``None``: the training script's; named in the bound).
            committed_bytes: Host memory other datasets of the run hold (a mixture's other components), taken off
                the available memory the default budget is a share of.
            order_unit_bytes: The units' bytes the pass's order is sized from, where ``unit_bytes`` depends on how
                the data was stored (``buffer_plan.buffer_plan``; ``None``: ``unit_bytes``).
        """
        from robo_loaders_plugin.core.footprint import Available
        from robo_loaders_plugin.pipeline.buffer_plan import buffer_plan

        available = None
        if self.cache_memory is None and self.cache_episodes is None:  # the default budget: a share of the machine
            available = max(0, Available.measure().host_bytes - int(committed_bytes))

        plan = buffer_plan(
            unit_bytes,
            cache_memory=self.cache_memory,
            cache_episodes=self.cache_episodes,
            shuffle_buffer=self.shuffle_buffer,
            shuffle_given=self.shuffle_given,
            batch_bytes=batch_bytes,
            prefetch=self.prefetch,
            option_prefix=option_prefix,
            unit=unit,
            threads=threads,
            available_bytes=available,
            order_unit_bytes=order_unit_bytes,
        )
        return dataclasses.replace(
            self,
            cache_episodes=plan.capacity,
            shuffle_buffer=plan.shuffle_buffer,
            option_prefix=option_prefix,
            order_capacity=plan.order_capacity,
        ), plan

    def fit(
        self,
        unit_bytes,
        batch_bytes: int,
        option_prefix: str,
        *,
        backend: str,
        alternatives=(),
        unit: str = "units",
        threads: int | None = None,
        order_unit_bytes=None,
    ):
        """:meth:`sized`, then checked against what the machine has (``core.footprint.check_fits``) before any data
        is read: the one way a pipeline-served backend sizes its buffer.

        Args:
            unit_bytes: Bytes of each unit as the cache holds it (``pipeline.buffer_plan.held_bytes``).
            batch_bytes: Bytes of one batch.
            option_prefix: How the user sets options (for messages).
            backend: The backend's name, for the refusal.
            alternatives: What would fit instead, for the refusal.
            unit: What a unit is, plural (``episodes``, ``demos``, ``units``).
            threads: Threads assembling batches, when known.
            order_unit_bytes: The units' bytes the pass's order is sized from (:meth:`sized`).

        Returns:
            ``(options, plan)`` as :meth:`sized` gives them.

        Raises:
            core.footprint.ResourceRefused: the buffer does not fit host memory.
        """
        from robo_loaders_plugin.core.footprint import HEADROOM, OWN_LOADER, Available, check_fits
        from robo_loaders_plugin.core.units import format_bytes

        passes, plan = self.sized(
            unit_bytes, batch_bytes, option_prefix, unit=unit, threads=threads, order_unit_bytes=order_unit_bytes
        )
        available = Available.measure()
        held = np.asarray(unit_bytes, dtype=np.int64)
        least = 2 * int(held.max()) if held.size else 0  # what a pass keeps at least: two units
        if least and least > HEADROOM * available.host_bytes:
            # no buffer option makes room: the refusal's own advice (a smaller cache_memory, cache_episodes unset)
            # led from one refusal to the other (a reviewer's reproduction: a demo of 85 GB)
            alternatives = [
                f"none of the buffer options (a pass holds at least 2 {unit}, the largest {format_bytes(least // 2)}"
                f", more than this machine's memory); {OWN_LOADER}"
            ]
        check_fits(
            plan.footprint,
            available,
            backend=backend,
            option_prefix=option_prefix,
            alternatives=list(alternatives),
        )
        return passes, plan

    def describe_shuffle(self, n_episodes: int, episodes: str = "episodes") -> str:
        """``shuffle buffer N <episodes>`` as it acts on a dataset of ``n_episodes``, for the summary line: never
        more than there are (a buffer of 64 on 20 episodes holds all 20; the option is named then).

        Args:
            n_episodes: Units the dataset has (episodes, or parts of them).
            episodes: What a unit is, plural, for the wording.

        Returns:
            The phrase.
        """
        effective = min(self.shuffle_buffer, n_episodes)
        if effective < self.shuffle_buffer:
            return f"shuffle buffer {effective} {episodes} (all of them; shuffle_buffer={self.shuffle_buffer})"
        return f"shuffle buffer {effective} {episodes}"


def recorded_source(reader_or_dir) -> Fingerprint | None:
    """The source fingerprint a converted dataset recorded, to check it against the source it is used with.

    Args:
        reader_or_dir: An open :class:`ShardReader`, or a robo-shards directory (its ``dataset.json`` is read).

    Returns:
        The :class:`Fingerprint`, or ``None`` when it has none, its ``dataset.json`` cannot be read (an incomplete
        conversion) or the record is not a fingerprint.
    """
    try:
        if isinstance(reader_or_dir, ShardReader):
            doc = reader_or_dir.dataset
        else:
            with open(os.path.join(reader_or_dir, "dataset.json")) as f:
                doc = json.load(f)
        d = (doc.get("source") or {}).get("fingerprint")
        return Fingerprint.from_dict(d) if isinstance(d, dict) else None
    except (OSError, ValueError, StaleSourceError):
        return None


def open_shards(
    *,
    framework: str,
    source,
    shards: str | None,
    cache_dir: str | None,
    check_source: bool,
    key_desc: dict,
    convert: Callable[[str, Fingerprint], None],
    option_prefix: str,
    convert_hint: str,
    backend: str,
    size=None,
    video: bool = False,
    alternatives=(),
    frame_ratio: Callable[[], float | None] | None = None,
    check_source_option: bool = True,
    must_record: dict | None = None,
):
    """(reader, hold) of the shards a run reads: ``shards``, checked against ``source`` (unless
    ``check_source`` is false), or an entry of the cache directory converted on first use and reused while
    ``source`` is unchanged. ``hold`` keeps a cache entry in use while it lives.

    Args:
        framework: ``robomimic`` or ``lerobot``: the framework the shards must have been converted from, and part of
            the cache entry's name.
        source: The source (``sources.*``): its ``path`` and ``fingerprint()``.
        shards: The ``shards`` option: a robo-shards directory to read (``None``: the cache directory's entry).
        cache_dir: The ``cache_dir`` option (``None``: the default cache root).
        check_source: Refuse given ``shards`` whose recorded source differs from ``source``.
        key_desc: What else the entry depends on (settings of the conversion), hashed into its name.
        convert: ``convert(out_dir, fingerprint)`` writes the shards of ``source`` into ``out_dir``.
        option_prefix: How the user sets options, for messages.
        convert_hint: The command that converts the source, for messages.
        size: The source's ``core.data_size.DataSize``: a conversion on first use is refused before any data is read
            when its estimated output does not fit the cache directory's disk; an entry whose recorded source still
            has the same file stats is reused without the check (``None``: no check).
        video: The conversion writes video members (for the estimate).
        backend: The backend converting, for messages.
        alternatives: What would fit instead, for a refusal.
        frame_ratio: Measures the ratio the source's frames pack at (a few sampled and compressed,
            ``storage.frame_layout.sampled_ratio``), called only when a conversion's disk is checked, after the disk
            was found to hold what no ratio makes smaller (``disk_estimate.check_conversion_disk``; ``None``: the
            assumed ratio).
        check_source_option: The backend has a ``check_source`` option, which a refusal may suggest (one without it
            was told to set it, then refused it as an unknown option: a reviewer's reproduction).
        must_record: ``{metadata key: value}`` given ``shards`` must record as this run would (with ``check_source``),
            e.g. the video decoder that decoded their frames; shards recording no such key (converted before it was
            recorded) are read with a warning. Put in ``key_desc`` too, so a cache entry follows it.

    Returns:
        ``(reader, hold)``: the :class:`ShardReader`, and the cache entry's hold (``None`` for given ``shards``).

    Raises:
        RoboLoadersError: given ``shards`` were converted from another framework's dataset.
        StaleSourceError: given ``shards`` record no fingerprint, another source, or another value of a
            ``must_record`` key (with ``check_source``).
        ShardError: given ``shards`` cannot be read.
        core.footprint.ResourceRefused: a conversion on first use does not fit the disk.
    """
    if shards:
        reader = ShardReader(os.path.expanduser(shards))
        meta = reader.dataset.get("metadata", {})
        if meta.get("framework") != framework:
            raise RoboLoadersError(  # named with the option and what to do (a reviewer's find)
                f"{option_prefix}: {reader.dir} was converted from a {meta.get('framework')!r} dataset, not a "
                f"{framework} one; give shards converted from this dataset ({convert_hint}), or leave the option out "
                "to convert on first use"
            )
        if check_source:
            recorded = recorded_source(reader)
            skip = f", or set {option_prefix}.check_source to false" if check_source_option else ""
            if recorded is None:
                raise StaleSourceError(
                    f"{reader.dir} records no source fingerprint, so it cannot be checked against "
                    f"{source.path}; {convert_hint}{skip}"
                )
            check_same_source(
                recorded,
                source.fingerprint(recorded),
                f"shards {reader.dir}",
                f"Convert it again ({convert_hint}){skip}{' if you know the data is the same' if skip else ''}",
            )
            for name, want in (must_record or {}).items():
                have = meta.get(name)
                if have == want:
                    continue
                if have is None:  # converted before the key was recorded
                    logger.warning(f"{reader.dir} records no {name} version, so its frames cannot be checked against "
                                   f"{want}'s; convert it again ({convert_hint}) to have them checked")  # fmt: skip
                    continue
                raise StaleSourceError(
                    f"shards {reader.dir} were converted with {name} {have}, this run's is {want}: their frames may "
                    f"differ from the source's as decoded now. Convert it again ({convert_hint}){skip}"
                    f"{' if you know the frames are the same' if skip else ''}"
                )
        return reader, None

    opened = {}

    def usable(path: str) -> bool:
        try:
            opened[path] = ShardReader(path)
            return True
        except ShardError as exc:
            if os.path.exists(os.path.join(path, "index.json")):
                logger.warning(f"ignoring unusable shards {path} ({exc}); converting again")
            return False

    root = cache.cache_root(cache_dir, f"{option_prefix}.cache_dir")
    if size is not None and not cache.holds_current(
        root, f"{framework}-shards", key_desc, source.path, recorded_source
    ):
        from robo_loaders_plugin.storage.shards.disk_estimate import check_conversion_disk

        check_conversion_disk(
            size,
            root,
            video=video,
            ratio=frame_ratio,
            command=f"backend {backend!r} (converting on first use)",
            alternatives=alternatives,
            option_prefix=option_prefix,
        )

    def converting(*args):
        from robo_loaders_plugin.storage.shards.format import DiskFullError

        try:
            return convert(*args)
        except DiskFullError as exc:  # the CLI's advice (another output directory) is no option of a training run
            raise DiskFullError(
                exc.what,
                f"Free some space there, or set {option_prefix}.cache_dir to a disk with room; the next run converts "
                "again",
            ) from exc

    entry, hold, _, _ = cache.obtain(
        root,
        f"{framework}-shards",
        key_desc,
        source.fingerprint,
        recorded_source,
        usable,
        converting,
        f"conversion into robo-shards for {framework}",
    )
    reader = opened.get(entry.path) or ShardReader(entry.path)
    reader.withdraw_on_damage = True  # the cache's own conversion: a damaged member makes the next run convert again
    return reader, hold
