"""The names of the lossless frame codecs and filters (Blosc2's), in one place: the ``codec`` and ``filter``
options' choices (``backends/<name>``), the command line's (``convert --codec``), the codec table of
``storage.codec`` and the compression rates the footprints estimate build times with (``core.footprint``).

Why here and not in ``storage.codec``: option declarations are read at argument parsing and must not import
Blosc2; the codec table maps these names to Blosc2's values.
"""

from __future__ import annotations

CODECS = ("lz4hc", "lz4", "zstd", "blosclz")  # the first is the default
FILTERS = ("none", "shuffle", "bitshuffle")  # the first is the default
DEFAULT_CODEC, DEFAULT_FILTER = CODECS[0], FILTERS[0]
