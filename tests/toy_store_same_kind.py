"""A store that inherits ``toy_store.EveryFieldStore``'s ``kind`` (so it would name its entries alike), for
tests/test_sdk.py: float fields stored doubled, standing for another encoding."""

from __future__ import annotations

import numpy as np
from toy_store import EveryFieldStore, array_file


class SameKindStore(EveryFieldStore):
    """Another store that inherits its parent's ``kind`` (so it would name its entries alike): float fields stored
    doubled, standing for another encoding."""

    def build(self, directory, episodes, options):
        for name, arrays in episodes:
            for field, a in arrays.items():
                a = a * 2 if a.dtype.kind == "f" else a
                np.save(array_file(directory, name, field), np.ascontiguousarray(a))
