"""Reading robo-shards: :class:`ShardReader` (random access to episodes; frames members kept encoded come back as
:mod:`robo_loaders_plugin.storage.encoded_frames` objects), ``verify``.

What is checked when (the rule: damaged or hostile input is an error naming the file, episode and member, never
data and never a stray TypeError):

- opening (once per process): ``index.json`` and ``dataset.json`` parse, are format version 2, 3 or 4 and match their
  checksum; every value of the index has the right type and range (offsets and sizes inside their shard); the
  episodes are those the metadata lists; every shard exists with its recorded size (a ``stat`` each).
- every read (once per episode per pass, so only cheap checks): the shard's size, the tar header before each
  member (read with it: a valid header naming that member, of its size), each member's CRC32, the header against
  the index, ``.npy`` headers parsed here (never ``np.load``, never pickle) and their claimed size
  checked against the member before anything is allocated, every array's length against the episode's.
- ``verify`` (slow, on demand): each shard's SHA-256, every tar header (names, types, no links or paths that
  would escape on extraction, each at the offset the index records), no overlapping members, every episode
  decoded in full.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import functools
import io
import itertools
import json
import math
import os
import re
import tarfile
import zlib
from collections.abc import Mapping

import numpy as np
from numpy.lib import format as npy_format

from robo_loaders_plugin.core.byte_order import in_native_order
from robo_loaders_plugin.storage import encoded_frames  # the module, not its names: it imports this package
from robo_loaders_plugin.storage.integrity import json_checksum
from robo_loaders_plugin.storage.shards.format import (
    _AGAIN,
    EP_RE,
    FORMAT,
    KIND_EXT,
    MEMBER_RE,
    READ_VERSIONS,
    SHARD_RE,
    ShardError,
    _dtype,
    _sha256,
    _short,
    header_member,
    is_int,
    legacy_member_name,
    listed_episodes,
    listing_problems,
    member_name,
    part_member,
    token_field,
)

_NPY_HEADER_BYTES = 16384  # magic, length and a header of at most numpy's 10000-character limit
_NPY_HEADER_READERS = {(1, 0): npy_format.read_array_header_1_0, (2, 0): npy_format.read_array_header_2_0}
_MAX_PROBLEMS = 50
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_PART_RE = re.compile(r"\.part[0-9]{5}\.frames$")  # format.part_member
_EXT_KIND = {ext: kind for kind, ext in KIND_EXT.items()}
_TAR_KINDS = {
    tarfile.SYMTYPE: "symbolic link",
    tarfile.LNKTYPE: "hard link",
    tarfile.DIRTYPE: "directory",
    tarfile.CHRTYPE: "character device",
    tarfile.BLKTYPE: "block device",
    tarfile.FIFOTYPE: "FIFO",
}


def _load_document(out_dir: str, name: str) -> dict:
    path = os.path.join(out_dir, name)
    if not os.path.exists(path):
        from robo_loaders_plugin.core.paths import SHARDS_INDEX, existing_dir_problem, missing_index_reason

        if name == SHARDS_INDEX:  # a conversion not finished, or not robo-shards at all (not blamed on a conversion)
            why = existing_dir_problem(out_dir) or f"{out_dir!r} {missing_index_reason(out_dir)}"
            raise ShardError(f"{out_dir}: {name} is missing; {why}")
        raise ShardError(f"{out_dir}: {name} is missing; not a complete robo-shards dataset, {_AGAIN}")
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError) as exc:  # ValueError: bad JSON, bad UTF-8, integers of more than 4300 digits
        raise ShardError(f"{path}: cannot be read as JSON ({exc}); damaged, {_AGAIN}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ShardError(f"{path}: not a {FORMAT} document")
    version = doc.get("version")
    if version == 1:
        raise ShardError(
            f"{out_dir}: converted by an earlier robo-loaders ({FORMAT} version 1, without per-member "
            f"checksums); {_AGAIN} (the same convert command, or delete it if it is a cache entry)"
        )
    if version not in READ_VERSIONS:
        raise ShardError(
            f"{path}: {FORMAT} version {_short(version)}, this robo-loaders reads versions "
            f"{', '.join(map(str, READ_VERSIONS))}; "
            f"{_AGAIN} with this robo-loaders, or install the one that wrote it"
        )
    if doc.get("checksum") != json_checksum(doc):
        raise ShardError(f"{path}: checksum mismatch: the file was edited or damaged after it was written; {_AGAIN}")
    return doc


def _index_problems(index: dict) -> list[str]:
    """Every type or range error in index.json (stops after a few dozen): what the reader may rely on after."""
    problems: list[str] = []

    def bad(text):
        problems.append(f"index.json: {text}")
        return len(problems) >= _MAX_PROBLEMS

    shards, episodes = index.get("shards"), index.get("episodes")
    if not isinstance(shards, list) or not isinstance(episodes, list):
        bad("'shards' and 'episodes' must be lists")
        return problems
    sizes, declared, counted = {}, {}, {}  # per valid shard: bytes, members it declares, members its episodes have
    for j, s in enumerate(shards):
        name = s.get("name") if isinstance(s, dict) else None
        if not isinstance(name, str) or not SHARD_RE.match(name):
            if bad(
                f"shard {j}: refusing shard path {_short(name)} (outside the dataset directory, or not "
                "shards/<name>.tar)"
            ):
                return problems
            continue
        for key, ok in (
            ("bytes", is_int(s.get("bytes"))),
            ("members", is_int(s.get("members"))),
            ("sha256", isinstance(s.get("sha256"), str) and _SHA256_RE.match(s["sha256"])),
        ):
            if not ok and bad(f"shard {name}: {key} {_short(s.get(key))} is not valid"):
                return problems
        if name in sizes and bad(f"shard {name} is listed twice"):
            return problems
        sizes[name] = s["bytes"] if is_int(s.get("bytes")) else -1
        declared[name], counted[name] = s.get("members"), 0
    names = set()
    for i, e in enumerate(episodes):
        name = e.get("name") if isinstance(e, dict) else None
        if not isinstance(name, str) or not EP_RE.match(name):
            if bad(f"episode {i}: name {_short(name)} is not [A-Za-z0-9_-]+"):
                return problems
            continue
        if name in names and bad(f"episode {name} is listed twice"):
            return problems
        names.add(name)
        shard = e.get("shard")
        if not isinstance(shard, str) or sizes.get(shard, -1) < 0:
            if bad(f"episode {name}: shard {_short(shard)} is not a valid shard of the index"):
                return problems
            continue
        if not is_int(e.get("length")) and bad(
            f"episode {name}: length {_short(e.get('length'))} is not an integer in [0, 2**62]"
        ):
            return problems
        members = e.get("members")
        if not isinstance(members, dict) or header_member(name) not in members:
            if bad(f"episode {name}: 'members' must map member names to locations, with {header_member(name)}"):
                return problems
            continue
        for member, loc in members.items():
            problem = _member_problem(name, member, loc, shard, sizes[shard])
            if problem and bad(problem):
                return problems
        counted[shard] += len(members)
    for name, count in counted.items():
        if count != declared[name] and bad(
            f"shard {name}: lists {_short(declared[name])} members, its episodes have {count}"
        ):
            return problems
    return problems


def _member_problem(episode: str, member: str, loc, shard: str, shard_bytes: int) -> str | None:
    """What is wrong with one member's entry in index.json, if anything."""
    if type(loc) is dict:  # the common case first: this runs for every member of a dataset when it is opened
        offset, size, crc = loc.get("offset"), loc.get("size"), loc.get("crc32")
        if (
            type(offset) is int
            and type(size) is int
            and type(crc) is int
            and offset >= tarfile.BLOCKSIZE
            and not offset % tarfile.BLOCKSIZE
            and size >= 0
            and offset + size <= shard_bytes
            and 0 <= crc < 2**32
            and member.startswith(episode + ".")
            and MEMBER_RE.match(member)
        ):
            return None
    m = MEMBER_RE.match(member)
    if not m or m.group(1) != episode:
        return f"episode {episode} has a bad member name {_short(member)}"
    where = f"member {member!r} of episode {episode!r}"
    if not isinstance(loc, dict):
        return f"{where}: location {_short(loc)} is not an object"
    offset, size, crc = loc.get("offset"), loc.get("size"), loc.get("crc32")
    if not is_int(offset) or not is_int(size):
        return f"{where}: offset {_short(offset)} and size {_short(size)} must be integers in [0, 2**62]"
    if offset + size > shard_bytes:
        return f"{where} lies outside {shard} ({shard_bytes} bytes; truncated shard or corrupt index)"
    if offset < tarfile.BLOCKSIZE or offset % tarfile.BLOCKSIZE:
        return f"{where}: offset {offset} is not where tar data can start (after a tar header, a multiple of 512)"
    return f"{where}: crc32 {_short(crc)} is not a 32-bit unsigned integer"


def _problem_summary(out_dir: str, problems: list[str], what: str) -> str:
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return f"{out_dir}: {what}: {'; '.join(problems[:5])}{more}; {_AGAIN}"


_TAR_SIZE_LIMIT = 8**11  # sizes from here on are in the PAX extended header, the ustar field cannot hold them


def _tar_octal(field: bytes) -> int | None:
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else None
    except ValueError:
        return None


def _tar_header_problem(block: np.ndarray, member: str, size: int) -> str | None:
    """What is wrong with the 512-byte tar header just before a member's data, if anything: it must be a valid
    header (checksum) naming ``member`` (its first 100 characters: the ustar name field; a longer name is in the PAX
    header before it) with ``size`` bytes. Why on every read: index.json's checksum proves the index is the one
    written, not that its offsets point at the members it names; this costs one more block in the same read."""
    head = block.tobytes()
    recorded = _tar_octal(head[148:156])
    # the checksum field counts as 8 spaces (256); the unsigned sum first (what tarfile and every current tar write),
    # the signed one (old tars) only when it differs: one numpy call a member instead of four (~6 of 12 us, paid for
    # every member a pass reads)
    unsigned = 256 + int(block.sum(dtype=np.int64)) - sum(head[148:156])
    if recorded is None or (recorded != unsigned and recorded != unsigned - 256 * _high_bytes(block)):
        return f"the {tarfile.BLOCKSIZE} bytes before its data are not a valid tar header (checksum)"
    name = head[:100].split(b"\0", 1)[0]
    if name != member.encode()[:100]:
        return f"the tar header before its data names {_short(name.decode('utf-8', 'replace'))}"
    stored = _tar_octal(head[124:136])
    if size < _TAR_SIZE_LIMIT and stored != size:
        return f"the tar header before its data gives {_short(stored)} bytes, index.json {size}"
    return None


def _high_bytes(block: np.ndarray) -> int:
    """How many bytes of a tar header, its checksum field aside, are >= 128: each counts 256 less in the signed sum
    than in the unsigned one."""
    return int(np.count_nonzero(block[:148] >= 128)) + int(np.count_nonzero(block[156:] >= 128))


def _read_exactly(f, offset: int, size: int) -> np.ndarray | None:
    """``size`` bytes at ``offset`` into a fresh writable buffer (uint8, not zero-filled first), or None at end of
    file."""
    buf = np.empty(size, dtype=np.uint8)
    view = memoryview(buf)
    f.seek(offset)
    got = 0
    while got < size:  # read(2) returns at most ~2 GiB at a time
        n = f.readinto(view[got:])
        if not n:
            return None
        got += n
    return buf


def _check_header(header, ep: dict, where: str) -> dict:
    """The header member's ``fields``, checked against the index entry (cheap: a few fields per episode)."""
    if (
        not isinstance(header, dict)
        or header.get("name") != ep["name"]
        or header.get("length") != ep["length"]
        or not isinstance(header.get("fields"), dict)
    ):
        raise ShardError(
            f"{where}: header does not describe episode {ep['name']!r} of length {ep['length']} "
            "(index.json and the shard disagree)"
        )
    members = {header_member(ep["name"])}
    for field, desc in header["fields"].items():
        try:
            ok = (
                isinstance(desc, dict)
                and desc.get("kind") in ("raw", "frames", "video")
                and desc.get("member")
                in (member_name(ep["name"], field, desc["kind"]), legacy_member_name(ep["name"], field, desc["kind"]))
            )
        except ShardError:  # a field name that cannot be a member name
            ok = False
        if not ok:
            raise ShardError(f"{where}: header entry of field {_short(field)} is malformed")
        shape = desc.get("shape")
        if not isinstance(shape, list) or not shape or not all(is_int(n) for n in shape) or shape[0] != ep["length"]:
            raise ShardError(
                f"{where}: field {field!r} has shape {_short(shape)}, the episode has {ep['length']} steps"
            )
        parts = desc.get("parts")
        if parts is None:
            members.add(desc["member"])
            continue
        if (
            desc["kind"] != "frames"
            or not isinstance(parts, list)
            or len(parts) < 2
            or not all(is_int(n) for n in parts)
            or parts[0] != 0
            or parts[-1] != shape[0]
            or any(b <= a for a, b in itertools.pairwise(parts))
        ):
            raise ShardError(
                f"{where}: field {field!r}: parts {_short(parts)} are not increasing row boundaries "
                f"from 0 to {shape[0]}"
            )
        members.update(part_member(desc["member"], k) for k in range(len(parts) - 1))
    if members != set(ep["members"]):
        raise ShardError(
            f"{where}: the header's members {sorted(members)} differ from index.json's {sorted(ep['members'])}"
        )
    for field, desc in header["fields"].items():  # each part holds exactly its rows' frames, by the frame table
        parts = desc.get("parts")
        if parts is None:
            continue
        offsets = desc.get("offsets")
        if not isinstance(offsets, list) or len(offsets) != ep["length"] + 1 or not all(is_int(o) for o in offsets):
            raise ShardError(f"{where}: field {field!r}: frame table does not match its parts")
        for k, (a, b) in enumerate(itertools.pairwise(parts)):
            if ep["members"][part_member(desc["member"], k)]["size"] != offsets[b] - offsets[a]:
                raise ShardError(
                    f"{where}: field {field!r}: part {k} (rows {a}..{b - 1}) does not hold those rows' "
                    f"frames by the frame table (edited or damaged); {_AGAIN}"
                )
    return header["fields"]


class _BadNpyHeader(ValueError):
    """A ``.npy`` header numpy does not parse, or of a version this reader does not read."""


def _npy_header_bytes(data: np.ndarray) -> bytes:
    """The bytes of a ``.npy`` member's magic, version, length and header (at most :data:`_NPY_HEADER_BYTES`): all
    that its parse depends on."""
    head = bytes(memoryview(data)[:12])
    if head[6:8] == b"\x01\x00":
        end = 10 + int.from_bytes(head[8:10], "little")
    elif head[6:8] in (b"\x02\x00", b"\x03\x00"):
        end = 12 + int.from_bytes(head[8:12], "little")
    else:
        end = 8
    return bytes(memoryview(data)[: min(end, _NPY_HEADER_BYTES)])


@functools.lru_cache(maxsize=4096)
def _npy_header(head: bytes) -> tuple[tuple, bool, np.dtype, int]:
    """``(shape, fortran order, dtype, data offset)`` of a ``.npy`` header, parsed by numpy.

    Why kept by its bytes: numpy parses a header with ``ast.literal_eval`` (~50 us), and an episode's fields repeat
    the headers of the episodes of the same length: a mixture's start read every low-dim member of every episode
    (10,000 episodes of 7 fields at 400 components) and parsed each header again. The parse is a function of the
    bytes alone; a header that does not parse raises each time (errors are not kept).

    Raises:
        _BadNpyHeader: what is wrong with it.
    """
    f = io.BytesIO(head)
    try:
        version = npy_format.read_magic(f)
        if version not in _NPY_HEADER_READERS:
            raise _BadNpyHeader(f".npy format version {version} is not supported")
        shape, fortran_order, dtype = _NPY_HEADER_READERS[version](f)
    except _BadNpyHeader:
        raise
    except Exception as exc:  # noqa: BLE001 - numpy parses the header with ast.literal_eval: many kinds of error
        raise _BadNpyHeader(f"not a valid .npy header ({type(exc).__name__}: {exc})") from None
    return shape, fortran_order, dtype, f.tell()


def _npy_array(data: np.ndarray, desc: dict, where: str) -> np.ndarray:
    """The array of a ``.npy`` member, viewing ``data`` (no copy). The header is parsed here and its claimed size
    compared with the member's before anything is allocated (``np.load`` would trust it)."""
    try:
        shape, fortran_order, dtype, start = _npy_header(_npy_header_bytes(data))
    except _BadNpyHeader as exc:
        raise ShardError(f"{where}: {exc}") from None
    if dtype.hasobject:
        raise ShardError(f"{where}: .npy of dtype {dtype} would need pickle; refused")
    if not all(is_int(n) for n in shape):
        raise ShardError(f"{where}: .npy shape {_short(shape)} is invalid")
    count = math.prod(shape)
    if count * dtype.itemsize != len(data) - start:
        raise ShardError(
            f"{where}: .npy header claims shape {_short(shape)} of {dtype} "
            f"({count * dtype.itemsize} bytes), the member holds {len(data) - start}"
        )
    if not shape or shape[0] != desc["shape"][0]:  # the header's length was checked against the index
        raise ShardError(
            f"{where}: .npy holds {shape[0] if shape else 'no'} rows, the episode has "
            f"{desc['shape'][0]} steps (index.json points at another episode's data?)"
        )
    if dtype != _dtype(desc.get("dtype"), where) or list(shape) != desc["shape"]:
        raise ShardError(f"{where}: .npy holds {shape} {dtype}, the header says {desc['shape']} {desc['dtype']}")
    try:
        arr = np.frombuffer(data, dtype=dtype, count=count, offset=start)
        arr = arr.reshape(shape[::-1]).T if fortran_order else arr.reshape(shape)
        # shards converted by an earlier version kept a file's big-endian arrays so: served in this machine's byte
        # order, as the source is read now (torch refused to batch them; a reviewer's reproduction)
        return in_native_order(arr)
    except ValueError as exc:
        raise ShardError(f"{where}: cannot view the .npy data ({exc})") from None


class MemberTable(Mapping):
    """One episode's ``members`` of index.json (``{member name: {"offset", "size", "crc32"}}``), held compactly.

    Why: index.json's members are a dict of three-key dicts per member, ~5 kB of Python objects per episode of a
    dozen fields: 55 bytes per frame of a million-frame robomimic dataset kept by every reader for its life (issue
    22's goal is 64 bytes per frame in all). Here an episode keeps its name prefix, a tuple of member-name suffixes
    shared by every episode with the same fields, and a row of one numpy table per member (offset, size, CRC32);
    a lookup builds the small dict the reader uses, so every caller reads it as before.

    Args:
        prefix: The episode's member-name prefix (``<episode name>.``).
        layout: ``(suffixes, {suffix: row})`` shared by episodes with the same members.
        locs: ``(len(suffixes), 3)`` int64 rows: offset, size, CRC32.
    """

    __slots__ = ("_layout", "_locs", "_prefix")

    def __init__(self, prefix: str, layout: tuple, locs: np.ndarray):
        self._prefix, self._layout, self._locs = prefix, layout, locs

    def __getitem__(self, member: str) -> dict:
        row = self._layout[1].get(member[len(self._prefix) :]) if member.startswith(self._prefix) else None
        if row is None:
            raise KeyError(member)
        offset, size, crc = self._locs[row].tolist()
        return {"offset": offset, "size": size, "crc32": crc}

    def __iter__(self):
        return (self._prefix + suffix for suffix in self._layout[0])

    def total_size(self) -> int:
        """Bytes of all the episode's members (without tar headers)."""
        return int(self._locs[:, 1].sum())

    def __len__(self) -> int:
        return len(self._layout[0])


def compact_members(episodes: list[dict]) -> list[dict]:
    """``episodes`` of a validated index.json with each ``members`` dict replaced by a :class:`MemberTable` (the
    same lookups, a fraction of the memory); an episode whose member names do not all start with its name keeps
    its dict (not what the writer makes; such an index is refused elsewhere, or read as it is).

    Args:
        episodes: index.json's ``episodes`` (checked by ``_index_problems``); changed in place.

    Returns:
        ``episodes``.
    """
    total = sum(len(e["members"]) for e in episodes)
    table = np.empty((total, 3), dtype=np.int64)
    layouts: dict[tuple, tuple] = {}
    row = 0
    for e in episodes:
        members = e["members"]
        prefix = f"{e['name']}."
        if not all(m.startswith(prefix) for m in members):
            continue
        suffixes = tuple(m[len(prefix) :] for m in members)
        layout = layouts.get(suffixes)
        if layout is None:
            layout = layouts[suffixes] = (suffixes, {x: i for i, x in enumerate(suffixes)})
        k = len(suffixes)
        table[row : row + k] = [(loc["offset"], loc["size"], loc["crc32"]) for loc in members.values()]
        e["members"] = MemberTable(prefix, layout, table[row : row + k])
        row += k
    return episodes


class ShardReader:
    """Random access to a robo-shards directory; validates names and offsets against hostile or damaged input.

    Attributes:
        withdraw_on_damage: A member found damaged (its CRC32 or tar header, or cut short) removes ``index.json``
            as it is refused: set for a conversion kept in the cache (``pipeline.options.open_shards``), so that the
            next run converts it again instead of opening the same damaged shard (its size unchanged, nothing at
            the start reads its bytes). Never set for shards a user gave.
    """

    withdraw_on_damage = False

    def __init__(self, out_dir: str):
        self.dir = out_dir
        self.index = _load_document(out_dir, "index.json")
        self.dataset = _load_document(out_dir, "dataset.json")
        problems = _index_problems(self.index)
        if problems:
            raise ShardError(_problem_summary(out_dir, problems, "index.json is invalid"))
        for key in ("codec", "metadata", "source"):
            if not isinstance(self.dataset.get(key), dict):
                raise ShardError(f"{out_dir}: dataset.json: {key!r} is not an object; {_AGAIN}")
        self.shards = {s["name"]: s for s in self.index["shards"]}
        self.episodes = compact_members(self.index["episodes"])
        self.by_name = {e["name"]: i for i, e in enumerate(self.episodes)}
        self._paths = {name: os.path.join(out_dir, name) for name in self.shards}
        problems = listing_problems(list(self.by_name), listed_episodes(self.dataset["metadata"]), out_dir)
        if problems:
            raise ShardError(f"{'; '.join(problems)}; {_AGAIN}")
        problems = self._shard_file_problems()
        if problems:
            raise ShardError(_problem_summary(out_dir, problems, "shards changed after conversion"))

    @property
    def version(self) -> int:
        """The robo-shards version the directory was written in (``dataset.json``): before
        ``format.LAYOUT_VERSION``, camera frames are stored as served (a LeRobot dataset's channels first), which
        this reader reads as they are."""
        return int(self.dataset["version"])

    def _shard_file_problems(self) -> list[str]:
        problems = []
        for name, s in self.shards.items():
            path = self._paths[name]
            try:
                size = os.stat(path).st_size
            except FileNotFoundError:
                problems.append(f"{path}: missing (deleted or moved after conversion)")
                continue
            except OSError as exc:
                problems.append(f"{path}: cannot be read ({exc.strerror})")
                continue
            if size != s["bytes"]:
                problems.append(f"{path}: {size} bytes, index says {s['bytes']} (truncated or replaced)")
        return problems

    def episode_bytes(self, i: int) -> int:
        """Bytes of episode ``i``'s members as stored (frames still compressed), from index.json: what a buffer of
        episodes read with ``decode_frames=False`` holds, known without reading the shard.

        Args:
            i: The episode's position in index.json.

        Returns:
            The sum of its members' sizes.
        """
        members = self.episodes[i]["members"]
        if isinstance(members, MemberTable):
            return members.total_size()
        return int(sum(loc["size"] for loc in members.values()))

    def _member(self, f, path: str, ep: dict, member: str) -> np.ndarray:
        """A member's bytes, checked against the tar header before them (read in the same call: is this the member
        the index says?) and against its CRC32."""
        loc = ep["members"].get(member)
        if loc is None:
            raise ShardError(f"{path}: episode {ep['name']!r}: member {member!r} is not in index.json")
        raw = _read_exactly(f, loc["offset"] - tarfile.BLOCKSIZE, loc["size"] + tarfile.BLOCKSIZE)
        if raw is None:
            raise self._damaged(f"{path} is truncated (member {member!r} of episode {ep['name']!r}); {_AGAIN}")
        problem = _tar_header_problem(raw[: tarfile.BLOCKSIZE], member, loc["size"])
        if problem:
            raise self._damaged(
                f"{path}: member {member!r} of episode {ep['name']!r}: {problem}, so index.json points at "
                f"bytes that are not this member's (edited or damaged); {_AGAIN} ('robo-loaders verify' "
                "lists every misplaced member)"
            )
        data = raw[tarfile.BLOCKSIZE :]
        if zlib.crc32(data) != loc["crc32"]:
            raise self._damaged(
                f"{path}: member {member!r} of episode {ep['name']!r} is damaged (CRC32 mismatch: the "
                f"shard changed after conversion); {_AGAIN} ('robo-loaders verify' lists every "
                "damaged member)"
            )
        return data

    def _damaged(self, message: str) -> ShardError:
        """The error refusing a damaged member; a conversion kept in the cache is withdrawn first
        (:attr:`withdraw_on_damage`), and the message says the next run converts it again."""
        if self.withdraw_on_damage:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.dir, "index.json"))
            message += "; this conversion kept in the cache is withdrawn: the next run converts it again"
        return ShardError(message)

    @contextlib.contextmanager
    def _episode_file(self, ep: dict):
        """The shard holding ``ep``, open, its size checked against the index, and the episode's header read and
        checked: yields ``(file, path, where, header, field descriptions)``; what every episode read starts with."""
        path = self._paths[ep["shard"]]
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115 - unbuffered: members are read straight into their arrays
        except FileNotFoundError:
            raise ShardError(f"{path}: missing (deleted after the dataset was opened); {_AGAIN}") from None
        with f:
            size, expected = os.fstat(f.fileno()).st_size, self.shards[ep["shard"]]["bytes"]
            if size != expected:
                raise ShardError(
                    f"{path}: size {size} differs from the index ({expected}); truncated or replaced; {_AGAIN}"
                )
            where = f"{path}: episode {ep['name']!r}"
            try:
                header = json.loads(self._member(f, path, ep, header_member(ep["name"])).tobytes())
            except ValueError as exc:
                raise ShardError(f"{where}: header is not valid JSON ({exc})") from None
            yield f, path, where, header, _check_header(header, ep, where)

    def read_episode(self, i: int, decode_frames: bool = True, fields=None) -> tuple[dict, dict]:
        """One episode's header and fields.

        Every member read is checked against its tar header and its CRC32 first.

        Args:
            i: The episode's position in index.json.
            decode_frames: Whether frames and video fields are decompressed into one (N, ...) array each; ``False``
                keeps them compressed as :class:`~robo_loaders_plugin.storage.encoded_frames.EncodedFrames` /
                :class:`~robo_loaders_plugin.storage.encoded_frames.VideoSegmentFrames` (checked, decoded on demand).
            fields: Read only these (those the episode has), so a loader skips members no sample uses; ``None``: all.

        Returns:
            ``(header, {field: array or encoded frames})``.

        Raises:
            ShardError: the shard is missing, resized or damaged, or a member is not what index.json says.
        """
        ep = self.episodes[i]
        with self._episode_file(ep) as (f, path, where, header, descs):
            out = {}
            for field in descs if fields is None else [k for k in fields if k in descs]:
                desc = descs[field]
                member_where = f"{where}, member {desc['member']!r}"
                if desc.get("parts") is not None:  # every part, checked, back to back
                    data = np.concatenate(
                        [
                            self._member(f, path, ep, part_member(desc["member"], k))
                            for k in range(len(desc["parts"]) - 1)
                        ]
                    )
                else:
                    data = self._member(f, path, ep, desc["member"])
                if desc["kind"] == "raw":
                    out[field] = _npy_array(data, desc, member_where)
                elif desc["kind"] == "video":
                    frames = encoded_frames.VideoSegmentFrames.from_member(data, desc, member_where)
                    out[field] = frames.decode_all() if decode_frames else frames
                else:
                    frames = encoded_frames.EncodedFrames.from_member(data, desc, member_where)
                    out[field] = frames.decode_all() if decode_frames else frames
        return header, out

    def stored_fields(self, i: int) -> dict[str, str]:
        """The fields episode ``i`` stores and their kinds, from index.json's member names (nothing is read): a
        field in parts is named once, as its parts' field (why: its members are ``<field>.part<NNNNN>.frames``, and
        whether ``obs/cam`` is stored must not depend on how long the episode is).

        Args:
            i: The episode's position in index.json.

        Returns:
            ``{field name ('/' restored): kind ('raw', 'frames' or 'video')}``, without the header.
        """
        ep = self.episodes[i]
        prefix, header = f"{ep['name']}.", header_member(ep["name"])
        members = [m for m in ep["members"] if m != header and m.startswith(prefix)]
        parted = {
            m[: -len(".part00001.frames")] for m in members if m.endswith(".part00001.frames") and _PART_RE.search(m)
        }
        out = {}
        for m in members:
            base, ext = m[: m.rindex(".")], m[m.rindex(".") + 1 :]
            if _PART_RE.search(m) and base[: -len(".part00000")] in parted:
                base = base[: -len(".part00000")]
            out[token_field(base[len(prefix) :])] = _EXT_KIND.get(ext, ext)
        return out

    def has_parts(self, i: int) -> bool:
        """Whether episode ``i``'s frames members are stored in parts (``format.part_bounds``; index.json says,
        nothing is read): :meth:`read_frame_rows` then reads about the rows asked for, else whole members.

        Args:
            i: The episode's position in index.json.

        Returns:
            Whether any of its members is a part.
        """
        names = [m for m in self.episodes[i]["members"] if _PART_RE.search(m)]
        # a field named like a part ("cam.part00000") has one such member; a field in parts has at least two
        return any(m.replace(".part00000.", ".part00001.") in names for m in names if ".part00000." in m)

    def read_frame_rows(self, i: int, lo: int, hi: int, fields) -> dict:
        """Rows ``lo..hi-1`` of some frames fields of episode ``i``, still compressed: only the parts holding them
        are read (each checked against its tar header and CRC32, as every member is); a field stored whole is read
        whole and cut. The rows are copied out, so nothing else of the episode stays in memory.

        Args:
            i: The episode's position in index.json.
            lo: The first row (episode-relative).
            hi: The end row (exclusive).
            fields: The frames fields to read (``kind`` ``frames``).

        Returns:
            ``{field: EncodedFrames of rows lo..hi-1}``.

        Raises:
            ShardError: the shard is missing, resized or damaged, a member is not what index.json says, a field is
                not a frames field of the episode, or the rows are outside it.
        """
        ep = self.episodes[i]
        if not 0 <= lo < hi <= ep["length"]:
            raise ShardError(
                f"{self._paths[ep['shard']]}: episode {ep['name']!r}: rows {lo}..{hi - 1} are outside "
                f"its {ep['length']} rows"
            )
        with self._episode_file(ep) as (f, path, where, _, descs):
            out = {}
            for field in fields:
                desc = descs.get(field)
                if desc is None or desc["kind"] != "frames":
                    raise ShardError(f"{where}: no frames field {field!r}")
                parts = desc.get("parts") or [0, ep["length"]]
                first = bisect.bisect_right(parts, lo) - 1
                last = bisect.bisect_left(parts, hi)  # parts first..last-1 hold rows lo..hi-1
                if desc.get("parts") is None:
                    data = self._member(f, path, ep, desc["member"])
                else:
                    data = np.concatenate(
                        [self._member(f, path, ep, part_member(desc["member"], k)) for k in range(first, last)]
                    )
                base, end = parts[first], parts[last]
                span = dict(desc, shape=[end - base] + list(desc["shape"][1:]))
                offsets = desc.get("offsets")
                if (
                    not isinstance(offsets, list)
                    or len(offsets) != ep["length"] + 1
                    or not all(is_int(o) for o in (offsets[base], offsets[end]))
                ):
                    raise ShardError(f"{where}, member {desc['member']!r}: frame table does not match its data")
                span["offsets"] = [o - offsets[base] if is_int(o) else o for o in offsets[base : end + 1]]
                frames = encoded_frames.EncodedFrames.from_member(data, span, f"{where}, member {desc['member']!r}")
                out[field] = frames.rows(lo - base, hi - base)
        return out

    def verify(self, progress: bool = True) -> list[str]:
        """Everything the reader checks, plus each shard's SHA-256, every tar header, overlaps and a full decode
        of every episode; returns the problems found (never raises on bad data).

        Args:
            progress: Show progress bars (shards by bytes hashed, then episodes decoded): every byte is read, so
                a large output took minutes without a word (a reviewer's find).

        Returns:
            One line per problem.
        """
        from tqdm.auto import tqdm

        problems = []
        by_shard = collections.defaultdict(list)
        for e in self.episodes:
            by_shard[e["shard"]].append(e)
        unreadable = set()
        hashed = tqdm(
            total=sum(int(s.get("bytes", 0)) for s in self.shards.values()), desc="verify shards", unit="B",
            unit_scale=True, mininterval=0.5, disable=not progress,
        )  # fmt: skip
        for name, s in self.shards.items():
            hashed.update(int(s.get("bytes", 0)))
            path = self._paths[name]
            try:
                size = os.path.getsize(path)
            except OSError:
                problems.append(f"{path}: missing")
                unreadable.add(name)
                continue
            if size != s["bytes"]:
                problems.append(f"{path}: {size} bytes, index says {s['bytes']}")
                unreadable.add(name)
                continue
            if _sha256(path) != s["sha256"]:
                problems.append(f"{path}: SHA-256 mismatch (changed after conversion)")
            problems += _tar_problems(path, by_shard[name])
            problems += _overlap_problems(path, by_shard[name])
        hashed.close()
        for i, e in enumerate(tqdm(self.episodes, desc="verify episodes", unit="episode", mininterval=0.5,
                                   disable=not progress)):  # fmt: skip
            if e["shard"] in unreadable:
                continue
            try:
                self.read_episode(i)
            except ShardError as exc:
                problems.append(str(exc))
            except Exception as exc:  # noqa: BLE001 - verify lists problems, it does not crash
                problems.append(f"{self._paths[e['shard']]}: episode {e['name']!r}: {type(exc).__name__}: {exc}")
        return problems


def _tar_problems(path: str, episodes: list[dict]) -> list[str]:
    """Every tar header of a shard: a regular file named as the index says, at the offset it says. The reader
    never looks at headers, but anyone extracting a verified shard gets what they say."""
    expected = {m: loc for e in episodes for m, loc in e["members"].items()}
    problems, seen = [], set()
    try:
        with tarfile.open(path, "r:") as tar:
            for info in tar:
                what = f"{path}: tar member {_short(info.name)}"
                parts = info.name.split("/")
                if info.name.startswith("/") or ".." in parts or "\\" in info.name:
                    problems.append(f"{what}: absolute or '..' path (extraction would write outside its directory)")
                if info.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
                    problems.append(
                        f"{what}: a {_TAR_KINDS.get(info.type, f'member of type {info.type!r}')}, not a regular file"
                    )
                loc = expected.get(info.name)
                if loc is None:
                    named = "" if MEMBER_RE.match(info.name) else " and not named <episode>.<field>.<ext>"
                    problems.append(f"{what}: not listed in index.json{named}")
                elif info.name in seen:
                    problems.append(f"{what}: appears twice")
                elif (info.offset_data, info.size) != (loc["offset"], loc["size"]):
                    problems.append(
                        f"{what}: data at offset {info.offset_data} ({info.size} bytes), index.json "
                        f"says offset {loc['offset']} ({loc['size']} bytes)"
                    )
                seen.add(info.name)
    except (tarfile.TarError, OSError) as exc:
        problems.append(f"{path}: cannot be read as a tar file ({exc})")
    missing = [m for m in expected if m not in seen]
    if missing:
        problems.append(f"{path}: {len(missing)} member(s) of index.json have no tar header in it (e.g. {missing[:3]})")
    return problems


def _overlap_problems(path: str, episodes: list[dict]) -> list[str]:
    spans = sorted((loc["offset"], loc["offset"] + loc["size"], m) for e in episodes for m, loc in e["members"].items())
    return [
        f"{path}: members {a[2]!r} and {b[2]!r} overlap in index.json"
        for a, b in itertools.pairwise(spans)
        if b[0] < a[1]
    ]


def verify_dir(out_dir: str) -> list[str]:
    """:meth:`ShardReader.verify` of ``out_dir``, with what stops a reader from opening it as a problem line.

    Args:
        out_dir: A robo-shards directory.

    Returns:
        The problems found; empty when the directory is intact. Never raises on bad data.
    """
    try:
        reader = ShardReader(out_dir)
    except ShardError as exc:
        return [str(exc)]
    return reader.verify()
