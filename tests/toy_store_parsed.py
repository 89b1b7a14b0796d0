"""A store whose ``verify`` parses a file of its own, for tests/test_sdk.py (a damaged one raises the parser's
error), and whose ``build`` fails on demand (a store's own bug)."""

from __future__ import annotations

import os

from toy_store import EveryFieldStore


class ParsedMetaStore(EveryFieldStore):
    """The same store with a ``meta.json`` its ``verify`` parses (the documented pattern: a store checking its own
    index), so a damaged one raises the parser's own error; ``build`` raises ``ValueError`` while ``FAIL_BUILD``
    is set, ``key`` while ``FAIL_KEY`` is (a store's own bug); while ``BAD_META`` is set its build writes a
    ``meta.json`` its own ``verify`` rejects (a store's files damaged after they were written)."""

    kind = "parsed-meta-1"
    FAIL_BUILD = False
    FAIL_KEY = False
    BAD_META = False

    def key(self, options):
        if ParsedMetaStore.FAIL_KEY:
            raise ValueError("injected failure in key")
        return super().key(options)

    def build(self, directory, episodes, options):
        if ParsedMetaStore.FAIL_BUILD:
            raise ValueError("injected failure in build")
        super().build(directory, episodes, options)
        with open(os.path.join(directory, "meta.json"), "w") as f:
            f.write('{"format": 2}' if ParsedMetaStore.BAD_META else '{"format": 1}')

    def verify(self, directory):
        import json

        with open(os.path.join(directory, "meta.json")) as f:
            return json.load(f)["format"] == 1
