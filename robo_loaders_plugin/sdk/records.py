"""What the SDK records beside a frame store when it is built, and checks: the episodes' names and lengths, and each
field's dtype, step shape and whether it is camera frames.

Why the SDK and not each store: every store must serve each field exactly as the framework's dataset does, the same
in every episode, and a store that wrote one episode's field differently served it differently (or failed deep in
a batch). The SDK sees every episode as the store reads it (:class:`Recorder`), refuses an episode that holds
other fields, another dtype or step shape, or another number of rows than the metadata said, naming it, and
writes what it saw (``robo-loaders-fields.json``). A store's frame source may take its ``lengths`` and ``info()``
from there (:meth:`StoreRecord.read`) instead of writing its own, and the SDK checks what the store opens against
it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterator

import numpy as np

from robo_loaders_plugin.core.errors import SourceError
from robo_loaders_plugin.frames.base import FieldInfo
from robo_loaders_plugin.storage.integrity import json_checksum, with_checksum

RECORD_FILE = "robo-loaders-fields.json"
# 2: the record names the store that built it and holds a checksum of itself (storage.integrity.json_checksum; 1,
# read as before: no store, no checksum)
FORMAT = 2


def records_bytes(names: int, fields: int) -> int:
    """An upper bound of what the SDK writes beside a store (this record and the entry's manifest, whose lines a
    store's own files count in their footprint): a name and a length per episode, a line per field.

    Args:
        names: Episodes.
        fields: Fields.

    Returns:
        Bytes.
    """
    return 4096 + 64 * names + 256 * fields


@dataclasses.dataclass(frozen=True)
class StoreRecord:
    """What a store holds, as the SDK recorded it when the store was built.

    Attributes:
        directory: The store.
        names: The episodes' names, in serving order.
        lengths: Steps per episode (int64), in the same order.
        fields: ``{field: FieldInfo}`` (``frames``: a camera field).
        store: The store that built it (``"module:Class"``; ``None`` in a record of format 1).
    """

    directory: str
    names: tuple[str, ...]
    lengths: np.ndarray
    fields: dict[str, FieldInfo]
    store: str | None = None

    @classmethod
    def read(cls, directory: str) -> StoreRecord:
        """The record of a built store.

        Args:
            directory: The store.

        Returns:
            The :class:`StoreRecord`.

        Raises:
            SourceError: the record is missing, unreadable, of another format or does not match its own checksum
                (edited or damaged: a store taking its fields' dtypes from it served float64 values as int64),
                naming the directory.
        """
        path = os.path.join(directory, RECORD_FILE)
        try:
            with open(path) as f:
                doc = json.load(f)
            if doc.get("format") not in (1, FORMAT):
                raise ValueError(f"format {doc.get('format')!r}, this robo-loaders reads 1 and {FORMAT}")
            if doc["format"] == FORMAT and doc.get("checksum") != json_checksum(doc):
                raise ValueError("it does not match its checksum: edited or damaged")
            fields = {
                k: FieldInfo(np.dtype(v["dtype"]), tuple(v["shape"]), bool(v["camera"]))
                for k, v in doc["fields"].items()
            }
            lengths = np.asarray(doc["lengths"], dtype=np.int64)
            return cls(directory, tuple(doc["names"]), lengths, fields, doc.get("store"))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SourceError(
                f"{path} cannot be read ({type(exc).__name__}: {exc}); delete {directory} to rebuild the store"
            ) from None

    def info(self, field: str) -> FieldInfo:
        """How ``field`` is served.

        Args:
            field: The field's name.

        Returns:
            Its ``FieldInfo``.

        Raises:
            KeyError: the store holds no such field (naming the directory and the fields it holds).
        """
        try:
            return self.fields[field]
        except KeyError:
            raise KeyError(f"field {field!r} is not in {self.directory} (it has {sorted(self.fields)})") from None


class Recorder:
    """Checks the episodes a store is built from as the store reads them, and records what it saw.

    Args:
        names: The episodes' names, in serving order.
        lengths: Each one's steps, from metadata.
        cameras: The camera fields.
        read: Yields ``(name, {field: array})`` per episode, in order.
        where: What is read, for the messages (the source).
    """

    def __init__(self, names, lengths, cameras, read: Callable[[], Iterator], where: str):
        self.names, self.lengths, self.cameras = tuple(names), np.asarray(lengths, dtype=np.int64), frozenset(cameras)
        self._read, self.where = read, where
        self.fields: dict[str, dict] = {}
        self.complete = False

    def read(self) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        """The episodes, each checked before the store gets it.

        Yields:
            ``(name, {field: array})``.

        Raises:
            SourceError: an episode out of order, holding other fields than the first, a field of another dtype or
                step shape than in the first episode, or of another number of rows than its steps.
        """
        seen = 0
        for i, (name, arrays) in enumerate(self._read()):
            self._check(i, name, arrays)
            seen = i + 1
            yield name, arrays
        if seen == len(self.names):
            self.complete = True

    def _check(self, i: int, name: str, arrays: dict) -> None:
        if i >= len(self.names) or name != self.names[i]:
            expected = self.names[i] if i < len(self.names) else "none"
            raise SourceError(f"{self.where}: episode {i} read is {name!r}, expected {expected!r}")
        if self.fields and set(arrays) != set(self.fields):
            raise SourceError(
                f"{self.where}: {name} holds the fields {sorted(arrays)}, {self.names[0]} holds {sorted(self.fields)}; "
                "every episode must hold the same fields"
            )
        for key, a in arrays.items():
            a = np.asarray(a)
            if a.ndim == 0 or a.shape[0] != self.lengths[i]:
                rows = "a scalar" if a.ndim == 0 else f"{a.shape[0]} rows"
                raise SourceError(
                    f"{self.where}: {name}/{key} has {rows}, the metadata says {int(self.lengths[i])} steps"
                )
            desc = {"dtype": a.dtype.str, "shape": list(a.shape[1:]), "camera": key in self.cameras}
            first = self.fields.setdefault(key, desc)
            if first != desc:
                raise SourceError(
                    f"{self.where}: {name}/{key} is {a.dtype}{tuple(a.shape[1:])}, {self.names[0]}/{key} is "
                    f"{np.dtype(first['dtype'])}{tuple(first['shape'])}; every episode must hold a field the same way"
                )

    def write(self, directory: str, store: str | None = None) -> None:
        """Record what was read into the store's directory.

        Args:
            directory: The store being built.
            store: The store building it (``"module:Class"``), recorded so that another store naming its entries
                alike is refused rather than served this one's files.

        Raises:
            SourceError: the store's build returned before reading every episode, or wrote a file named as this
                record (``robo-loaders-fields.json``), which would be overwritten.
        """
        if not self.complete:
            raise SourceError(
                f"{self.where}: the store's build() returned before reading every episode; it must store all "
                f"{len(self.names)} of them, in order"
            )
        if os.path.exists(os.path.join(directory, RECORD_FILE)):  # ours would replace it: the store would lose a file
            raise SourceError(
                f"{self.where}: the store's build() wrote {RECORD_FILE}, the name of the SDK's record of the store; "
                "give that file another name"
            )
        doc = {
            "format": FORMAT,
            "store": store,
            "names": list(self.names),
            "lengths": self.lengths.tolist(),
            "fields": self.fields,
        }
        with open(os.path.join(directory, RECORD_FILE), "w") as f:
            json.dump(with_checksum(doc), f)
