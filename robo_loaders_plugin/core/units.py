"""Human-readable byte sizes and counts for options like ``max_memory`` and for log lines.

One convention everywhere the program prints a size: decimal SI units (``kB``, ``MB``, ``GB``, ``TB``; 1 MB =
1,000,000 bytes), the units users type (``max_memory: "2GB"``, ``ROBO_LOADERS_CACHE_SIZE=50GB``), so a limit is
printed as it was given. Binary units (``512MiB``) are still accepted as input.
"""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1e3,
    "kb": 1e3,
    "m": 1e6,
    "mb": 1e6,
    "g": 1e9,
    "gb": 1e9,
    "t": 1e12,
    "tb": 1e12,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_DECIMAL = (("B", 1), ("kB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12))


def parse_bytes(value, option: str = "size") -> int:
    """A size as a number of bytes: ``1500000``, ``"1.5GB"``, ``"512MiB"`` -> bytes.

    Args:
        value: A non-negative number of bytes, or text: a number and an optional unit (``B``, ``k``/``kB``,
            ``M``/``MB``, ``G``/``GB``, ``T``/``TB``, decimal; ``KiB``, ``MiB``, ``GiB``, ``TiB``, binary; any case).
        option: The option's name, for the error.

    Returns:
        The bytes, rounded down to an integer.

    Raises:
        ValueError: ``value`` is a bool, negative, not finite, or text that is not a size.
    """
    if isinstance(value, bool):
        raise ValueError(f"{option}: expected a size like 2GB or 512MiB, got {value!r}")
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):  # NaN, JSON's Infinity
            raise ValueError(f"{option}: expected a finite size like 2GB or 512MiB, got {value!r}")
        if value < 0:
            raise ValueError(f"{option}: must be >= 0, got {value!r}")
        return int(value)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{option}: expected a size like 2GB or 512MiB, got {value!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 kB"``, ``50e9`` -> ``"50.0 GB"``: decimal SI units, one decimal (bytes: none).

    Args:
        n: The bytes.

    Returns:
        The size as text, in the smallest unit that keeps it below 1000 (``TB`` at most).
    """
    for unit, size in _DECIMAL:
        if unit == "B" and abs(n) < 1000:
            return f"{n:.0f} B"
        if unit != "B" and (round(abs(n) / size, 1) < 1000 or unit == "TB"):
            return f"{n / size:.1f} {unit}"
    raise AssertionError("unreachable")


def format_size_text(text: str) -> str:
    """A size written as text in this module's convention.

    Why: older result files record the machine's RAM as text (``"23.5 GiB"``); tables print it like every other size.

    Args:
        text: A size as text (or anything :func:`parse_bytes` takes).

    Returns:
        The size formatted by :func:`format_bytes`, or ``text`` unchanged when it is not a size.
    """
    try:
        return format_bytes(parse_bytes(text))
    except (TypeError, ValueError):
        return text


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``plural(1, "worker")`` -> ``"1 worker"``, ``plural(2, "worker")`` -> ``"2 workers"``.

    Args:
        n: The count.
        noun: The singular.
        nouns: The plural, when it is not ``noun + "s"``.

    Returns:
        The count and the noun.
    """
    return f"{n} {noun if n == 1 else (nouns or noun + 's')}"


NAMED_IN_A_LINE = 8  # items a log line names before it counts the rest


def some_of(items, limit: int = NAMED_IN_A_LINE, rest: str = "", sep: str = ", ") -> str:
    """``items`` joined by commas, the first ``limit`` of them when there are more, then how many are left.

    Why: a log line names a mixture's components and their shares; with hundreds of components (a pretraining
    mixture) the line ran to thousands of characters and hid what followed it.

    Args:
        items: The phrases, in order.
        limit: Phrases named before the rest are counted.
        rest: Said of the phrases left out (``"0.0%-1.1% each"``), after their count.
        sep: What joins the phrases (``"; "`` for phrases holding commas).

    Returns:
        ``"a, b, c"`` or ``"a, b, ... and 392 more (rest)"``.
    """
    items = list(items)
    if len(items) <= limit:
        return sep.join(items)
    return sep.join(items[:limit]) + f"{sep}... and {len(items) - limit} more" + (f" ({rest})" if rest else "")
