"""robo-shards (docs/robo-shards.md): names, constants, checksums and the helpers shared by the writer and the reader.

Why tar: any tool can list, stream or extract it, and WebDataset-style readers group ``<ep>.<field>.<ext>``
members into records. Why an index beside it: training samples episodes at random, so a reader seeks straight to
an episode's members instead of scanning. Frames use the compressed cache's codec so both backends decode the same
way; everything else is JSON or ``.npy`` (never pickle). A converter may store camera frames lossily instead, as
one video segment per episode and camera (``.mp4``, ``storage/video.py``): same record, same checks.

Why checksums at three levels: serving damaged data as if it were good is the worst failure a loader can have.
Each member carries a CRC32, checked on every read (cheap next to decompression); ``index.json`` and
``dataset.json`` carry a SHA-256 of their own canonical JSON, checked when a reader opens them (an edited or
damaged index would otherwise point at another episode's bytes); every shard has a SHA-256, checked by ``verify``.

The writer lives in ``writer.py``, the reader in ``reader.py``; the package exports both.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import shutil

import numpy as np

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.files import atomic_write_json, sha256_file
from robo_loaders_plugin.core.units import format_bytes

FORMAT = "robo-shards"
# 2: CRC32 per member, checksummed index.json / dataset.json; 3: frames members of long episodes in parts; 4: camera
# frames channels first stored channels last, the field's ``layout`` says so (``storage.frame_layout``)
VERSION = 4
READ_VERSIONS = (2, 3, 4)  # what the reader opens (earlier versions have no parts, no layout: frames as served)
LAYOUT_VERSION = 4  # the first version storing channels-first frames channels last
FRAMES_PART_BYTES = 8 << 20  # decoded bytes (every camera) of one part of a long episode's frames members
DEFAULT_SHARD_BYTES = 256 * 2**20
MAX_INT = 2**62  # bound on every size, offset and length in the index: no overflow in int64 arithmetic
EP_RE = re.compile(r"^[A-Za-z0-9_-]+$")
MEMBER_RE = re.compile(r"^([A-Za-z0-9_-]+)\.([A-Za-z0-9_~.%-]+)\.(json|npy|frames|mp4)$")
# field kind -> member extension: raw arrays as .npy, lossless Blosc2 frames, lossy video segments (storage/video.py)
KIND_EXT = {"raw": "npy", "frames": "frames", "video": "mp4"}
SHARD_RE = re.compile(r"^shards/[A-Za-z0-9_-]+\.tar$")
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_~.%-]+$")
_AGAIN = "convert the dataset again"  # what every error about a damaged shard tells the user to do


class ShardError(RoboLoadersError):
    """A robo-shards directory that cannot be written or read as it is: damaged, edited, incomplete or hostile
    input, a full disk, or a conversion state that does not fit. The message says what to do (usually: convert again).
    """


class DiskFullError(ShardError):
    """A conversion's write that found its disk or quota full (:func:`disk_full_error`).

    Attributes:
        what: What happened, with the directory, the free space and what the write needed, without the advice (a
            backend converting into its cache says what to do in its own words: no output directory to choose).
    """

    def __init__(self, what: str, advice: str):
        super().__init__(f"{what}. {advice}")
        self.what = what


@functools.lru_cache(maxsize=4096)  # a dataset has tens of fields; every episode read checks each member's name
def field_token(field: str) -> str:
    """A field name as it appears in member names (``obs/cam`` -> ``obs~cam``): any other character outside
    ``[A-Za-z0-9_.-]`` percent-escaped (its UTF-8 bytes, :func:`urllib.parse.quote`; ``~`` too), as are a leading
    ``.`` and a dot followed by another, so a member name never holds a path step; :func:`token_field` reverses it.

    Why escaped, not refused: LeRobot accepts any feature name without ``/`` (``observation.gripper:pos``,
    ``observation.images.left cam``), and a conversion of such a dataset failed at its first episode where the other
    backends served it (a reviewer's reproduction). Names of the characters kept are their own tokens, as before.

    Args:
        field: The field's name.

    Returns:
        The token.

    Raises:
        ShardError: the name is empty.
    """
    from urllib.parse import quote

    if not field:
        raise ShardError("an empty field name cannot be stored in a shard member name")
    # a literal "~" is escaped: "~" stands for "/" (an obs key "eef~pos" was read back as "eef/pos", a reviewer's);
    # members written before escaping keep their names (ShardReader accepts them: legacy_member_name)
    token = re.sub(r"\.(?=\.)", "%2E", quote(field, safe="/").replace("~", "%7E").replace("/", "~"))
    token = "%2E" + token[1:] if token.startswith(".") else token
    if not _TOKEN_RE.match(token):  # quote keeps only [A-Za-z0-9_.~-]
        raise ShardError(f"field name {field!r} cannot be stored in a shard member name")
    return token


def token_field(token: str) -> str:
    """The field name a member name's token stands for (:func:`field_token` reversed).

    Args:
        token: The token.

    Returns:
        The field's name.
    """
    from urllib.parse import unquote

    return unquote(token.replace("~", "/"))


def legacy_member_name(episode: str, field: str, kind: str) -> str:
    """The member name versions before escaping wrote (``/`` as ``~``, nothing else changed), which a reader still
    accepts: a LeRobot feature named with a ``~`` was converted so, and is reused as it is.

    Args:
        episode: The episode's name.
        field: The field's name.
        kind: ``raw``, ``frames`` or ``video``.

    Returns:
        ``<episode>.<field with / as ~>.<ext>``.
    """
    return f"{episode}.{field.replace('/', '~')}.{KIND_EXT.get(kind, 'npy')}"


def member_name(episode: str, field: str, kind: str) -> str:
    """The member holding one field of one episode: ``<episode>.<field token>.<npy|frames|mp4>``.

    Args:
        episode: The episode's name.
        field: The field's name (:func:`field_token`).
        kind: ``raw``, ``frames`` or ``video`` (:data:`KIND_EXT`; anything else is stored as ``.npy``).

    Returns:
        The member's name.

    Raises:
        ShardError: the field's name cannot be stored (:func:`field_token`).
    """
    return f"{episode}.{field_token(field)}.{KIND_EXT.get(kind, 'npy')}"


def part_member(member: str, part: int) -> str:
    """The member holding part ``part`` of a frames member: ``<episode>.<field token>.part<NNNNN>.frames``.

    Args:
        member: The frames member's name (:func:`member_name`, kind ``frames``).
        part: The part's number, from 0.

    Returns:
        The part's member name.
    """
    return f"{member[: -len('.frames')]}.part{int(part):05d}.frames"


def part_bounds(rows: int, step_bytes: int, part_bytes: int | None = None) -> list[int] | None:
    """Where a long episode's frames members are cut into parts: every ``part_bytes // step_bytes`` rows (at least
    one), so that a reader needing some rows (a part of an episode, ``frames.chunks``) reads and checks about those
    rows, not the whole episode (a 20-s episode of three 480p cameras is 1.7 GB decoded). An episode of up to 1.5
    parts stays whole.

    Args:
        rows: The episode's rows.
        step_bytes: Decoded bytes of one row of every frames field.
        part_bytes: Decoded bytes of one part (``None``: :data:`FRAMES_PART_BYTES`).

    Returns:
        The row boundaries ``[0, ..., rows]`` (each part is rows ``bounds[k]..bounds[k + 1] - 1``), or ``None``
        when the episode stays whole.
    """
    part_bytes = int(part_bytes or FRAMES_PART_BYTES)
    if rows * step_bytes <= 1.5 * part_bytes:
        return None
    per = max(1, int(part_bytes) // max(1, int(step_bytes)))
    return list(range(0, rows, per)) + [rows]


def header_member(episode: str) -> str:
    """The member holding one episode's header: ``<episode>.header.json``.

    Args:
        episode: The episode's name.

    Returns:
        The member's name.
    """
    return f"{episode}.header.json"


def is_int(value, lo: int = 0, hi: int = MAX_INT) -> bool:
    """A JSON integer (not a bool, not a float) in ``[lo, hi]``.

    Args:
        value: Any value read from JSON.
        lo: The smallest allowed.
        hi: The largest allowed (default :data:`MAX_INT`).

    Returns:
        Whether it is one.
    """
    return type(value) is int and lo <= value <= hi


def _short(value) -> str:
    """``value`` for an error message: a hostile header's 4300-digit integer or megabyte string cut short."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else f"<{len(str(abs(value)))}-digit int>"
    return text if len(text) <= 60 else text[:57] + "..."


def _dtype(text, where: str) -> np.dtype:
    """A header's dtype string as a plain numpy dtype (never an object dtype, which could hold pickles)."""
    try:
        dtype = np.dtype(text) if isinstance(text, str) else None
    except (TypeError, ValueError, SyntaxError):
        dtype = None
    if dtype is None or dtype.hasobject:
        raise ShardError(f"{where}: dtype {_short(text)} is not a plain array dtype")
    return dtype


def listed_episodes(metadata) -> list[str] | None:
    """The episode names the framework metadata lists: what index.json must hold, no more, no less.

    Args:
        metadata: ``dataset.json``'s ``metadata``: robomimic's lists ``demos``, LeRobot's ``episodes[].name``.

    Returns:
        The names, or ``None`` when it lists none in a form known here (other frameworks).
    """
    if not isinstance(metadata, dict):
        return None
    demos = metadata.get("demos")
    if isinstance(demos, list) and all(isinstance(d, str) for d in demos):
        return demos
    episodes = metadata.get("episodes")
    if isinstance(episodes, list) and all(isinstance(e, dict) and isinstance(e.get("name"), str) for e in episodes):
        return [e["name"] for e in episodes]
    return None


def listing_problems(names: list[str], listed: list[str] | None, where: str) -> list[str]:
    """Differences between the episodes an index holds and those the metadata lists.

    Args:
        names: The episodes in index.json.
        listed: The episodes the metadata lists (:func:`listed_episodes`); ``None``: nothing to compare.
        where: Names the directory in the lines.

    Returns:
        One line per problem (episodes listed twice, missing from the index, or in the index but not listed).
    """
    if listed is None:
        return []
    problems = []
    if len(set(listed)) != len(listed):
        problems.append(f"{where}: dataset.json metadata lists some episodes twice")
    have, wanted = set(names), set(listed)  # once: per name they made opening 10k episodes quadratic
    missing = [n for n in listed if n not in have]
    extra = sorted(have - wanted)
    if missing:
        problems.append(
            f"{where}: {len(missing)} episode(s) listed in dataset.json are not in index.json (e.g. {missing[:3]})"
        )
    if extra:
        problems.append(
            f"{where}: index.json holds {len(extra)} episode(s) dataset.json does not list (e.g. {extra[:3]})"
        )
    return problems


def disk_full_error(directory: str, exc: OSError, needed: str | None, doing: str) -> DiskFullError | None:
    """A clear error for a full disk or quota.

    Args:
        directory: Where the write failed (its free space is reported).
        exc: The error the write raised.
        needed: How much space the failed write needed, as text, or ``None``.
        doing: What was being written ("writing index.json").

    Returns:
        A :class:`DiskFullError` to raise, or ``None`` for any OSError other than ``ENOSPC``/``EDQUOT``.
    """
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    try:
        free = format_bytes(shutil.disk_usage(directory).free)
    except OSError:
        free = "unknown"
    need = f"; {needed}" if needed else ""
    return DiskFullError(
        f"{directory}: {exc.strerror or 'no space left on device'} while {doing} ({free} free{need})",
        "Free some space or choose another output directory, then run the same command again "
        "(a conversion resumes where it stopped)",
    )


# what a conversion writes in its output directory before its manifest exists (a run killed that early leaves them)
_OWN_NAMES = {"shards", "locks", "datatrove", "manifest.lock"}
# the temporaries of its JSON documents (core.files.atomic_write_json), there while one is written or left by a kill
JSON_TMP_RE = re.compile(r"^(manifest|index|dataset)\.json\.tmp-\d+(-[0-9a-f]+)?$")


def check_output_dir(out_dir: str, source: str | None = None) -> None:
    """``out_dir`` can hold a conversion, or one clear error naming it (not an OSError traceback from deep inside a
    conversion, nor a user's files overwritten): it is created when missing, this process can create files in it,
    it is empty unless it holds a conversion already (``manifest.json``: resumed), and it is neither inside the
    source nor holding it.

    Why empty: a conversion publishes ``index.json`` and ``dataset.json`` there, and a directory of the user's own
    (``convert robomimic data/demo.hdf5 data/``) had its files of those names replaced without a word (a reviewer's
    reproduction). Why not inside the source: the conversion's own files change the source's fingerprint, so it was
    withdrawn at its end as "changed while converted", and refused at every run after.

    Args:
        out_dir: The output directory.
        source: The source file or directory (``None``: not compared).

    Raises:
        ShardError: it is inside the source or holds it, holds files and no conversion, cannot be created, or a
            probe file cannot be created in it.
    """
    import tempfile

    if source is not None:
        out, src = os.path.realpath(out_dir), os.path.realpath(source)
        if out == src or out.startswith(src + os.sep) or src.startswith(out + os.sep):
            raise ShardError(
                f"{out_dir}: the output directory is {'inside' if out.startswith(src) else 'holding'} the source "
                f"{source}; convert into a directory outside it"
            )
    if os.path.isdir(out_dir) and not os.path.exists(os.path.join(out_dir, "manifest.json")):
        # the conversion's own names, and its manifest's temporary: another process converting into it writes
        # manifest.json.tmp-* before manifest.json (two identical conversions started together: one was refused,
        # a reviewer's reproduction in 1 of 40 runs), and a run killed then leaves one
        theirs = sorted(
            n
            for n in os.listdir(out_dir)
            if n not in _OWN_NAMES and not n.startswith(".robo-loaders") and not JSON_TMP_RE.match(n)
        )
        if theirs:
            shown = ", ".join(theirs[:3]) + (f" and {len(theirs) - 3} more" if len(theirs) > 3 else "")
            raise ShardError(
                f"{out_dir}: holds files of its own ({shown}) and no conversion (no manifest.json); convert into an "
                "empty or new directory (a conversion writes index.json, dataset.json and shards/ there)"
            )
    try:
        os.makedirs(out_dir, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".robo-loaders-write-test-", dir=out_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ShardError(
            f"{out_dir}: cannot write the output directory ({exc.strerror or exc}); choose a "
            "directory you can write to, or fix its permissions"
        ) from None


def _atomic_json(path: str, payload) -> None:
    """A robo-shards JSON document (index, dataset, manifest) written atomically (``core.files``): readers see the
    old file or the new one, never a mix; a full disk is a :class:`ShardError` saying how much space is left."""
    try:
        atomic_write_json(path, payload, sort_keys=True)  # no indent: json's C encoder, ~5x faster on a large index
    except OSError as exc:
        if err := disk_full_error(os.path.dirname(path) or ".", exc, None, f"writing {os.path.basename(path)}"):
            raise err from exc
        raise


_sha256 = sha256_file  # the shards' checksum (core.files)
