"""One footprint for a whole mixture, checked before any component is built.

Why: each backend checks its own footprint when it builds a dataset, so a mixture whose components fit one by one
but not together was refused only after the earlier components were built (minutes of conversion, a RAM file in
``/dev/shm``), or not at all when each component's host RAM fit what the machine had before the others took theirs.
Here every component is planned first, from its metadata, by its backend's own rule
(``BackendSpec.footprints``: a store that RAM cannot hold goes to disk, tiers fill what memory is left), with the
earlier components' share taken off the machine (``Available.less``), and the whole is checked once: one refusal
naming the mixture, every component's share and what would fit instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from robo_loaders_plugin.core.footprint import (
    HEADROOM,
    Available,
    Footprint,
    Planned,
    ResourceRefused,
    peak,
    shortfalls,
)
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.units import NAMED_IN_A_LINE, format_bytes, some_of

logger = get_logger(__name__)


def check_mixture_fits(
    mixture: str,
    names: Sequence[str],
    plan: Callable[[int, Footprint], Planned | None],
    *,
    backend: str,
    option_prefix: str,
) -> Footprint | None:
    """Plan every component, then check the mixture's footprint once against the machine, before building any.

    The need is, resource by resource, the most held at once while the components are built one after the other:
    what the earlier ones keep (``Planned.kept``) plus what the one being built needs.

    Args:
        mixture: How the user gave the mixture (``train.data_mixture``, ``--dataset.mixture``), for the message.
        names: Each component's name, for the message.
        plan: ``plan(k, committed)``: component ``k``'s ``Planned`` with ``committed`` held by the earlier ones
            (``BackendChoice.plan``), or ``None`` when its backend declares no footprint.
        backend: The backend's name, for the message.
        option_prefix: How the user sets the backend's options, for the message.

    Returns:
        The mixture's footprint, or ``None`` when a component's backend declares none (each component is then
        checked by its factory only, when it is built).

    Raises:
        ResourceRefused: one line: the mixture, every resource that does not fit (needed vs available), each
            component's share (past ``core.units.NAMED_IN_A_LINE`` components the largest, the rest counted), what
            would fit instead; or a component's own refusal (``max_memory`` below the
            least its backend holds), prefixed with the component.
    """
    committed, need = Footprint(), Footprint()
    shares: list[Footprint] = []
    needs: list[Footprint] = []
    available: Available | None = None
    alternatives: tuple[str, ...] = ()
    for k, name in enumerate(names):
        try:
            planned = plan(k, committed)
        except ResourceRefused as e:
            raise ResourceRefused(f"{mixture}: component {k} ({name}): {e}", e.shortfalls) from e
        if planned is None:
            logger.info(f"{mixture}: backend {backend!r} states no footprint; each component is checked when built")
            return None
        if available is None or (planned.footprint.disk_bytes and available.disk_dir is None):
            available = planned.available  # the one measured where the disk is written, when any is
        alternatives = planned.alternatives
        need = peak(need, committed + planned.footprint)
        needs.append(need)
        committed = committed + planned.kept
        shares.append(planned.footprint)
    assert available is not None  # a mixture has components
    missing = shortfalls(need, available)
    if not missing:
        logger.info(f"{mixture}: {len(names)} components on backend {backend!r} need {need.describe()} together")
        return need
    said = "; ".join(
        f"{what}: needs {format_bytes(n)}, {format_bytes(have)} available (at most {HEADROOM:.0%} = "
        f"{format_bytes(HEADROOM * have)} may be used)"
        for what, n, have in missing
    )
    # every share named for a few components; for hundreds (one line), the largest in what is short, the rest
    # counted
    order = list(range(len(names)))
    heading = "Each component's share"
    if len(names) > NAMED_IN_A_LINE:
        order.sort(key=lambda k: -_short_bytes(shares[k], [what for what, _, _ in missing]))
        heading = "The largest components' shares"
    each = some_of((f"[{k}] {names[k]}: {shares[k].describe()}" for k in order), sep="; ")
    fits = [k for k, n in enumerate(needs) if not shortfalls(n, available)]
    would = []
    if fits and fits[-1] + 1 < len(names):
        first = fits[-1] + 1
        would.append(f"the first {first} component{'s' * (first != 1)} ({some_of(names[:first])})")
    would += list(alternatives)
    would_say = f" Would fit: {'; '.join(would)}." if would else ""
    raise ResourceRefused(
        f"{mixture}: backend {backend!r} cannot serve these {len(names)} components together on this "
        f"machine: {said}. {heading}: {each}.{would_say} "
        f"Estimated from the components' metadata before building any (options: {option_prefix}).",
        missing,
    )


def _short_bytes(share: Footprint, short: list[str]) -> int:
    """``share``'s bytes of the resources named short (``core.footprint.shortfalls``' names: ``host RAM``, ``RAM
    files (...)``, ``GPU memory (...)``, ``disk (...)``), what ranks the components a refusal names."""
    kinds = {what.split(" ", 1)[0] for what in short}
    return (
        (share.host_bytes + share.shm_bytes if "host" in kinds else 0)
        + (share.shm_bytes if "RAM" in kinds else 0)
        + (share.device_bytes if "GPU" in kinds else 0)
        + (share.disk_bytes if "disk" in kinds else 0)
    )


def bounded_buffer(choice, rechoose):
    """A component's backend choice with its episode buffer at the default byte bound when the user set neither
    ``cache_memory`` nor ``cache_episodes``.

    Why: alone, a pipeline-served backend's buffer defaults to the whole dataset when that takes a small share of
    the available memory (``pipeline.buffer_plan.WHOLE_DATASET_SHARE``), measured as the dataset is built; a
    mixture's components are built one after the other before any buffer fills, so each would measure the same
    free memory and together take several shares. The bound keeps what :func:`check_mixture_fits` checked equal to
    what is built.

    Args:
        choice: The component's ``core.registry.BackendChoice``.
        rechoose: ``rechoose(options)``: the same backend chosen with these options (as the user would give them).

    Returns:
        ``choice``, or the choice with ``cache_memory`` at the bound.
    """
    from robo_loaders_plugin.pipeline.buffer_plan import DEFAULT_CACHE_MEMORY

    opt = choice.spec.options.get("cache_memory")
    given = choice.options.given()
    if opt is None or not opt.applies_to(choice.framework) or "cache_memory" in given or "cache_episodes" in given:
        return choice
    return rechoose({**given, "cache_memory": DEFAULT_CACHE_MEMORY})
