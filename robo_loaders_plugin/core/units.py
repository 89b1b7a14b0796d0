"""Human-readable byte sizes for options like ``max_memory`` and for log lines."""
from __future__ import annotations

import re

_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
          "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}


def parse_bytes(value, option: str = "size") -> int:
    """``1500000``, ``"1.5GB"``, ``"512MiB"`` -> bytes."""
    if isinstance(value, bool):
        raise ValueError(f"{option}: expected a size like 2GB or 512MiB, got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"{option}: must be >= 0, got {value!r}")
        return int(value)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{option}: expected a size like 2GB or 512MiB, got {value!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
