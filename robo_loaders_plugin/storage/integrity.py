"""What a stored byte is checked against when it is read, and the error of a file that fails it.

Why on every read, not only when a file is reused: a store is mapped, so bytes that change while a run reads it
(another process writing to it, a failing disk) reach the run directly. Every frame blob and every block of raw
rows is stored with its :func:`checksum`, and a read checks what it copied or decoded; a mismatch is a
:class:`StoreError` naming the file, the episode, the field and the frame or steps. Shared by the stores that keep
frames in files mapped while a run reads them (an episode store, compressed rows spilled to disk), so that every
one checks the same way.
"""

from __future__ import annotations

import hashlib
import json

import xxhash

from robo_loaders_plugin.core.errors import RoboLoadersError

# of each frame blob and raw block, recorded in the header. Why xxh3 and not CRC32 (the shards' check): it runs on
# every frame served, and xxh3 takes ~0.25 us for a 10 kB blob where CRC32 takes ~2.8 us, half a decode
CHECKSUM = "xxh3_64"


class StoreError(RoboLoadersError):
    """A store file cannot be written, opened or trusted (bad magic, footer, checksum or format; gone; a full disk;
    another process holding its lock); the message says what to do."""


def checksum(data) -> int:
    """The checksum of one frame blob or raw block (:data:`CHECKSUM`), as stored in the tables.

    Args:
        data: Bytes, or any buffer (a slice of the mapped file).

    Returns:
        An unsigned 64-bit integer.
    """
    return xxhash.xxh3_64_intdigest(data)


def json_checksum(doc: dict) -> str:
    """The checksum a JSON document keeps of itself (why: a flipped bit that keeps it valid JSON is otherwise
    trusted): SHA-256 of the canonical JSON of ``doc`` without its ``checksum`` key (sorted keys, no whitespace, ASCII).

    Args:
        doc: A JSON document as a dict (``index.json``, ``dataset.json``, a conversion's ``manifest.json``, the
            SDK's store record, a backend's own manifest).

    Returns:
        The hex digest.
    """
    body = {k: v for k, v in doc.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def with_checksum(doc: dict) -> dict:
    """``doc`` as it reads back from JSON (tuples as lists, keys as strings), plus its ``checksum``.

    Args:
        doc: The document to write.

    Returns:
        A new dict; ``doc`` is not changed.
    """
    doc = json.loads(json.dumps(doc))
    doc["checksum"] = json_checksum(doc)
    return doc
