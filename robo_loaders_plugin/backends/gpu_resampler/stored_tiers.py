"""``gpu_resampler``'s tiers kept in the cache directory between runs: built once per source and options, mapped on
every later start instead of read again from the source.

Why: the tiers are every field of every episode, decoded; building them reads the whole source (a million
robomimic low-dim steps: 36.6 s on the first run, and 22.5 s again on the second), while mapping what the first run
wrote costs a checksum pass over it. The entry follows the cache's rules (``storage.cached_dir.build_or_reuse``:
one entry per source fingerprint and options, written in a temporary directory renamed into place, build and use
locks, ``robo-loaders cache list/prune/clear``).

Layout of an entry (``MANIFEST`` says which files hold what)::

    tiers.json                 format, lengths, every field's dtype/shape, the raw/compressed boundary, checksums
                               (its own among them: ``checksum``, over the rest of it)
    raw/<i>.bin                field i's rows end to end, uncompressed (camera frames: the rows before the boundary)
    compressed/<i>.blobs       field i's camera frames after the boundary, one Blosc2 blob per frame
    compressed/<i>.index.bin   their offsets (n+1, int64) then their checksums (n, uint64), native byte order

How it is checked: the manifest must match its own checksum and describe what this run expects (the lengths, the
fields' names, native dtypes, the boundary) and every file must have its recorded size; the raw files and the
indexes are hashed whole when the entry is reused (``storage.integrity.checksum``, xxh3: one pass at several GB/s,
paid once per start, where a check per read would tax every batch's gather, the hot path); the blobs are checked per
frame as the spilled tier always was, when read (served from the file: ``spill_reads``) or when loaded into host
memory. A CPU run leaves the raw files' checksums to the copies that read each file whole into host memory and
check it there (:meth:`OpenedTiers.copy_raw`; any other copy of mapped rows checks its whole file first,
:meth:`OpenedTiers.check_raw`), so each is read once, not checked by the start and read again; a copy refused
discards the entry, which ``tiers_at_start`` builds again at once. An entry that fails is built again (one log
line); a frame damaged after the check is a ``StoreError``
naming the file, the episode and the field. What a run reads of a checked entry is opened at once under its build
lock (:class:`OpenedTiers`), so another run building it again meanwhile changes nothing it serves.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import warnings
from collections.abc import Callable, Iterator

import numpy as np

from robo_loaders_plugin.backends.gpu_resampler.tensors import check_episode_field
from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.units import format_bytes
from robo_loaders_plugin.frames.base import FieldInfo
from robo_loaders_plugin.storage.cache import CacheError
from robo_loaders_plugin.storage.integrity import checksum, json_checksum, with_checksum

logger = get_logger(__name__)

# the layout below; a change bumps it, and the entries of earlier formats are rebuilt, then retired (2: the manifest
# holds its own checksum; 3: the compressed frames' index is one raw file, read once, checked and parsed from the same
# bytes: as an .npz it was read twice per check and its headers parsed, ~2 ms a component of a mixture at each start)
FORMAT = 3
KIND = f"gpu_resampler-tiers-{FORMAT}"  # storage.cached_dir's convention: a trailing -<version> retires older ones
MANIFEST = "tiers.json"
CODEC = ("lz4hc", 5)  # the compressed tier's codec (part of the entry's key)
_HASH_BLOCK = 64 << 20  # bytes hashed per step of a whole-file checksum (a bounded buffer)


def file_checksum(path: str) -> int:
    """A whole file's checksum (``storage.integrity.checksum``'s xxh3, streamed), to check an entry on reuse.

    Args:
        path: The file.

    Returns:
        An unsigned 64-bit integer.

    Raises:
        OSError: the file cannot be read.
    """
    import xxhash

    h = xxhash.xxh3_64()
    # into one buffer of the file's size, at most a block: ``read(_HASH_BLOCK)`` allocated 64 MB per call, ~0.2 ms
    # for a file of a few kB (an entry's raw files, nine per component of a mixture, at every start) against ~0.05
    with open(path, "rb", buffering=0) as f:
        buf = memoryview(bytearray(max(1, min(os.fstat(f.fileno()).st_size, _HASH_BLOCK))))
        while n := f.readinto(buf):
            h.update(buf[:n])
    return h.intdigest()


def _fsync_close(f) -> None:
    f.flush()
    os.fsync(f.fileno())
    f.close()


def write_tiers(
    directory: str,
    lengths,
    raw_episodes: int,
    episodes: Iterator[dict],
    infos_of: Callable[[dict], dict[str, FieldInfo]],
    guard=None,
) -> dict:
    """Write the tiers of every episode into ``directory`` (a new, empty one), episode by episode as ``episodes``
    yields them, and the manifest last.

    Args:
        directory: Where the files go (``build_or_reuse``'s temporary directory).
        lengths: Steps per episode, in row order.
        raw_episodes: Episodes ``[0, raw_episodes)`` keep their camera frames uncompressed; the others' frames are
            compressed (``TierPlan.raw``).
        episodes: Every episode's ``{field: array}``, in row order.
        infos_of: The fields' ``FieldInfo`` from the first episode's arrays (which fields are camera frames).
        guard: A ``core.footprint.DiskGuard`` checked before every episode is written (``None``: no check).

    Returns:
        The manifest written.

    Raises:
        EpisodeFieldMismatch: an episode's field has another shape or dtype than the first episode's.
        ResourceRefused: the guard's disk would fall below its reserve.
    """
    from robo_loaders_plugin.storage.codec import FrameCodec

    lengths = np.asarray(lengths, dtype=np.int64)
    codec = FrameCodec(*CODEC)
    os.makedirs(os.path.join(directory, "raw"))
    os.makedirs(os.path.join(directory, "compressed"))
    infos: dict[str, FieldInfo] | None = None
    raw_files: dict[str, object] = {}
    blob_files: dict[str, object] = {}
    offsets: dict[str, list] = {}
    sums: dict[str, list] = {}
    written = 0
    try:
        for ep, arrays in enumerate(episodes):
            if infos is None:
                infos = dict(infos_of(arrays))
                for i, (k, info) in enumerate(infos.items()):
                    raw_files[k] = open(os.path.join(directory, "raw", f"{i}.bin"), "wb")  # noqa: SIM115 - closed below/on errors
                    if info.frames:
                        blob_files[k] = open(os.path.join(directory, "compressed", f"{i}.blobs"), "wb")  # noqa: SIM115
                        offsets[k], sums[k] = [np.zeros(1, np.int64)], []
            n = int(lengths[ep])
            size = sum(n * int(np.prod(v.shape, dtype=np.int64)) * np.dtype(v.dtype).itemsize for v in infos.values())
            if guard is not None:
                guard.check(size, written)  # an upper bound: compressed frames take less
            for k, info in infos.items():
                a = np.ascontiguousarray(arrays[k])
                check_episode_field(ep, k, a, n, info)
                if info.frames and ep >= raw_episodes:
                    blobs = [codec.compress(f) for f in a]
                    lens = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs))
                    offsets[k].append(offsets[k][-1][-1] + np.cumsum(lens))
                    sums[k].append(np.fromiter(map(checksum, blobs), dtype=np.uint64, count=len(blobs)))
                    blob_files[k].write(b"".join(blobs))  # type: ignore[attr-defined]
                    written += int(lens.sum())
                else:
                    raw_files[k].write(a.reshape(-1).view(np.uint8))  # type: ignore[attr-defined]  # (N, 0) too
                    written += a.nbytes
        if infos is None:
            raise ValueError("no episode to write")
        fields = []
        for i, (k, info) in enumerate(infos.items()):
            _fsync_close(raw_files[k])
            raw_path = os.path.join(directory, "raw", f"{i}.bin")
            entry = {
                "name": k,
                "dtype": np.dtype(info.dtype).str,
                "shape": list(info.shape),
                "frames": bool(info.frames),
                "raw_bytes": os.path.getsize(raw_path),
                "raw_sum": file_checksum(raw_path),
            }
            if info.frames:
                _fsync_close(blob_files[k])
                index_path = os.path.join(directory, "compressed", f"{i}.index.bin")
                index = (
                    np.concatenate(offsets[k]).astype(np.int64).tobytes()
                    + (np.concatenate(sums[k]).astype(np.uint64) if sums[k] else np.zeros(0, np.uint64)).tobytes()
                )
                with open(index_path, "wb") as f:
                    f.write(index)
                    f.flush()
                    os.fsync(f.fileno())
                entry["blob_bytes"] = os.path.getsize(os.path.join(directory, "compressed", f"{i}.blobs"))
                entry["index_sum"] = checksum(index)
            fields.append(entry)
    except BaseException:  # a failed write (a full disk, a quota): no file left open in the removed directory
        for opened in (*raw_files.values(), *blob_files.values()):
            with contextlib.suppress(OSError):
                opened.close()  # type: ignore[attr-defined]
        raise
    manifest = {
        "format": FORMAT,
        "lengths": lengths.tolist(),
        "raw_episodes": int(raw_episodes),
        "codec": list(CODEC),
        "fields": fields,
    }
    with open(os.path.join(directory, MANIFEST), "w") as out:
        json.dump(with_checksum(manifest), out)
        out.flush()
        os.fsync(out.fileno())
    return manifest


def read_manifest(directory: str) -> dict | None:
    """An entry's manifest, or ``None`` when it is missing, unreadable, of another format or does not match its own
    checksum.

    Args:
        directory: The entry.

    Returns:
        The manifest's dict (without its checksum).
    """
    try:
        with open(os.path.join(directory, MANIFEST)) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return None
    # its own checksum: the raw files and indexes are checked against the checksums it holds, but it was checked by
    # its size only, so a flipped bit keeping it valid JSON (<f8 read as >f8; two camera names or a frame's shape
    # exchanged) was mapped and served, or crashed every start (a reviewer's reproductions)
    if manifest.get("checksum") != json_checksum(manifest):
        return None
    manifest.pop("checksum")
    return manifest


def problem(directory: str, lengths, blobs_checked: bool, names=None, raw_checked_when_copied: bool = False) -> str:
    """What is wrong with an entry, or ``""``: the manifest must match its own checksum and describe these lengths
    (and fields of these names, in native dtypes), every file must have its recorded size, and the raw files and
    indexes their recorded checksums (and the blobs, when ``blobs_checked``, every frame its own). The raw/compressed
    boundary is the entry's own (``raw_episodes``: it followed the free memory of the run that built it, so it is no
    part of the key; :func:`stored_tiers` decides whether it fits).

    Args:
        directory: The entry.
        lengths: Steps per episode this run expects.
        blobs_checked: Check every compressed frame now (the blobs will be loaded into host memory, where nothing
            checks them again); otherwise they are checked when read.
        names: The fields this run serves (``None``: not compared).
        raw_checked_when_copied: Leave the raw files' checksums to the copy that takes their rows (every raw file
            is then read whole and checked where it lands, :meth:`OpenedTiers.copy_raw`, or checked whole before
            its rows are copied from the map, :meth:`OpenedTiers.check_raw`): their sizes are still compared.

    Returns:
        The problem in words (``""``: none).
    """
    manifest = read_manifest(directory)
    if manifest is None:
        return f"{MANIFEST} is missing, unreadable, of another format or damaged (it does not match its checksum)"
    try:
        if manifest["lengths"] != [int(n) for n in lengths]:
            return "it holds other episode lengths than the source's"
        held = sorted(f["name"] for f in manifest["fields"])
        # a field robomimic's config names twice (an obs key in dataset_keys too) is held once: compared as a set,
        # or such an entry was never reused (rebuilt at every start)
        if names is not None and held != sorted(set(names)):
            return f"it holds the fields {held}, this run serves {sorted(set(names))}"
        foreign = [f["name"] for f in manifest["fields"] if not np.dtype(f["dtype"]).isnative]
        if foreign:
            return f"its fields {foreign} are not in this machine's byte order"
        if manifest["codec"] != list(CODEC):
            return "it was written with another codec"
        raw_episodes = int(manifest["raw_episodes"])
        if not 0 <= raw_episodes <= len(lengths):
            return f"its raw/compressed boundary ({raw_episodes}) is outside its {len(lengths)} episodes"
        total = int(np.sum(lengths, dtype=np.int64))
        raw_rows = int(np.sum(np.asarray(lengths, dtype=np.int64)[:raw_episodes]))
        for i, f in enumerate(manifest["fields"]):
            step = int(np.prod(f["shape"], dtype=np.int64)) * np.dtype(f["dtype"]).itemsize
            rows = raw_rows if f["frames"] else total
            raw_path = os.path.join(directory, "raw", f"{i}.bin")
            if os.path.getsize(raw_path) != rows * step or f["raw_bytes"] != rows * step:
                return f"raw/{i}.bin ({f['name']}) has another size than {rows} rows of {step} bytes"
            if not raw_checked_when_copied and file_checksum(raw_path) != f["raw_sum"]:
                return f"raw/{i}.bin ({f['name']}) does not match its checksum"
            if not f["frames"]:
                continue
            index = read_index(directory, i, f, total - raw_rows)
            if isinstance(index, str):
                return index
            blobs_path = os.path.join(directory, "compressed", f"{i}.blobs")
            if os.path.getsize(blobs_path) != f["blob_bytes"]:
                return f"compressed/{i}.blobs ({f['name']}) has another size than written"
            if blobs_checked:
                bad = _bad_blob(blobs_path, *index)
                if bad is not None:
                    return f"compressed/{i}.blobs ({f['name']}): frame {bad} does not match its checksum"
    except (OSError, KeyError, TypeError, ValueError) as exc:
        return f"it cannot be read ({exc})"
    return ""


def _bad_blob(blobs_path: str, offsets: np.ndarray, sums: np.ndarray) -> int | None:
    """The first compressed frame of a file that does not match its checksum (``None``: all do)."""
    data = np.fromfile(blobs_path, dtype=np.uint8)
    for j in range(len(sums)):
        if checksum(data[offsets[j] : offsets[j + 1]]) != int(sums[j]):
            return j
    return None


def read_index(directory: str, i: int, field: dict, frames: int) -> tuple[np.ndarray, np.ndarray] | str:
    """A camera field's compressed-frame index, read once and checked from the bytes it is parsed from (so no
    other copy of the file than the one checked is served).

    Args:
        directory: The entry.
        i: The field's position in the manifest.
        field: Its manifest record (``index_sum``: the checksum the writer recorded).
        frames: The compressed frames the manifest says the field holds.

    Returns:
        ``(offsets, sums)`` (``frames + 1`` int64 offsets and ``frames`` uint64 checksums, read-only), or what is
        wrong, in words naming the file.
    """
    name = f"compressed/{i}.index.bin ({field['name']})"
    try:
        with open(os.path.join(directory, "compressed", f"{i}.index.bin"), "rb") as f:
            data = f.read()
    except OSError as exc:
        return f"{name} cannot be read ({exc.strerror or exc})"
    if len(data) != 16 * frames + 8:
        return f"{name} has another size than {frames} frames' offsets and checksums"
    if checksum(data) != field["index_sum"]:
        return f"{name} does not match its checksum"
    offsets = np.frombuffer(data, dtype=np.int64, count=frames + 1)
    return offsets, np.frombuffer(data, dtype=np.uint64, count=frames, offset=8 * (frames + 1))


def discard(directory: str) -> None:
    """Mark an entry found damaged while serving for rebuilding: its manifest goes, so the next start's check fails
    and builds it again (the run reading it keeps its open files).

    Args:
        directory: The entry.
    """
    with contextlib.suppress(OSError):  # gone already, or not ours to remove: the next check reads the damage again
        os.unlink(os.path.join(directory, MANIFEST))


class RawCopyRefused(CacheError):
    """A kept raw file refused when its rows were copied (:meth:`OpenedTiers.copy_raw`, :meth:`OpenedTiers.check_raw`):
    it does not match its checksum or is shorter than its rows; the entry is discarded, so it is built again.

    Args:
        path: The raw file.
        field: Its field.
        what: What is wrong, in words.
    """

    def __init__(self, path: str, field: str, what: str):
        super().__init__(f"{path} ({field}) {what}; run again (it is built again)")
        self.path, self.field, self.what = path, field, what


class OpenedTiers:
    """A checked entry's tiers opened at once, under the entry's build lock (``build_or_reuse(opened=...)``): its
    manifest read once, its raw files mapped, every camera's index loaded and its blobs' file open.

    Why at once and under the lock: read by path, field by field, after the lock, a run read part of another run's
    rebuild of the same entry (a run with a smaller memory budget builds it again with another raw/compressed
    boundary): the old raw rows beside the new index served other rows' frames, each matching its own checksum (a
    reviewer's reproduction). What is open here stays the checked entry's whatever becomes of its directory.

    Args:
        directory: The entry, just checked by :func:`problem` or built.

    Attributes:
        directory: The entry (for messages, and :func:`discard`).
        manifest: Its manifest.
        infos: Every field's ``FieldInfo``, in the entry's order.
        raw: ``{field: rows}``, mapped read-only (``np.memmap``: pages come from the page cache as the gathers
            touch them; camera frames: the rows before the boundary).
        raw_files: ``{field: (path, file, checksum)}``: each raw file open for reading (the one mapped) and the
            checksum its manifest records, for :meth:`copy_raw`.
        index: ``{camera field: (offsets, sums)}``: ``n + 1`` int64 offsets and ``n`` uint64 checksums
            (``storage.integrity.checksum``) of its compressed frames.
        blobs: ``{camera field: (path, file)}``: the compressed frames' file, open for reading.

    Raises:
        CacheError: the manifest is gone or damaged (another process found a frame damaged meanwhile: run again).
    """

    def __init__(self, directory: str):
        manifest = read_manifest(directory)
        if manifest is None:
            raise CacheError(f"{directory}: {MANIFEST} went or changed while the entry was opened; run again")
        self.directory, self.manifest = directory, manifest
        self.infos: dict[str, FieldInfo] = {}
        self.raw: dict[str, np.ndarray] = {}
        self.index: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.blobs: dict[str, tuple[str, object]] = {}
        self.raw_files: dict[str, tuple[str, object, int]] = {}
        # the raw files' checksums left to the copies (problem(raw_checked_when_copied=True)): a field's rows taken
        # from the map are then checked whole first (check_raw), once per field
        self.raw_unchecked: set[str] = set()
        lengths = np.asarray(manifest["lengths"], dtype=np.int64)
        compressed = int(lengths.sum()) - int(lengths[: int(manifest["raw_episodes"])].sum())
        for i, f in enumerate(manifest["fields"]):
            name, dtype, shape = f["name"], np.dtype(f["dtype"]), tuple(f["shape"])
            self.infos[name] = FieldInfo(dtype, shape, bool(f["frames"]))
            step = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            # a field of no values per step (an (N, 0) observation) holds no bytes: its rows are the episodes' rows
            rows = f["raw_bytes"] // step if step else (0 if f["frames"] else int(sum(manifest["lengths"])))
            path = os.path.join(directory, "raw", f"{i}.bin")
            if rows and step:
                raw_file = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by close()
                self.raw_files[name] = (path, raw_file, int(f["raw_sum"]))
                self.raw[name] = np.memmap(raw_file, dtype=dtype, mode="r", shape=(rows,) + shape)
            else:
                self.raw[name] = np.zeros((rows,) + shape, dtype)
            if f["frames"]:
                index = read_index(directory, i, f, compressed)
                if isinstance(index, str):  # checked moments ago, under this lock: damaged since
                    self.close()
                    raise CacheError(f"{directory}: {index} since it was checked; run again (it is built again)")
                self.index[name] = index
                blobs = os.path.join(directory, "compressed", f"{i}.blobs")
                self.blobs[name] = (blobs, open(blobs, "rb"))  # noqa: SIM115 - taken by the tier, or closed

    @property
    def raw_episodes(self) -> int:
        """The entry's raw/compressed boundary (episodes, or units, before it keep their frames uncompressed)."""
        return int(self.manifest["raw_episodes"])

    @property
    def blob_bytes(self) -> int:
        """Bytes of the entry's compressed frames, every camera field."""
        return sum(int(f.get("blob_bytes", 0)) for f in self.manifest["fields"])

    def take_blobs(self, field: str):
        """The open file of a camera field's compressed frames, handed over (the caller closes it).

        Args:
            field: The camera field.

        Returns:
            ``(path, file)``.
        """
        return self.blobs.pop(field)

    def copy_raw(self, field: str, out: np.ndarray) -> None:
        """A field's whole raw file read into ``out`` and checked there against the checksum its manifest records.

        Why read, not copied from the map: the bytes checked are then the bytes served, so a file written in place
        after the start's check (another process) is refused, not served; and copying the mapped rows takes a page
        fault per 4 kB page: for the 770 MB of a 400-component mixture's entries 0.33-0.55 s against ~0.25 s read
        and hashed on a quiet machine, 2.6-3.8 s against ~0.35 s while another job ran.

        Args:
            field: The field (a key of :attr:`raw` held in a file).
            out: Where its rows go: C-contiguous, the file's size (``raw[field]``'s shape and dtype).

        Raises:
            RawCopyRefused: the file is shorter than its rows, or the copy does not match its checksum (the entry
                is discarded: built again, by ``tiers_at_start`` at once or by the next start).
        """
        from robo_loaders_plugin.backends.gpu_resampler.spill_reads import pread, read_range

        path, raw_file, expected = self.raw_files[field]
        view = out.reshape(-1).view(np.uint8)
        done = read_range(pread, raw_file.fileno(), view, 0)  # type: ignore[attr-defined]
        if done != len(view) or checksum(view) != expected:
            discard(self.directory)
            what = "is shorter than its rows" if done != len(view) else "does not match its checksum"
            checked = field not in self.raw_unchecked  # else the start left its check to this copy
            raise RawCopyRefused(path, field, what + (" since it was checked (written meanwhile)" if checked else ""))
        self.raw_unchecked.discard(field)

    def check_raw(self, field: str) -> None:
        """A field's whole raw file checked against its manifest's checksum before its rows are copied from the map,
        when the start left it to the copy (:attr:`raw_unchecked`); once per field.

        Why: the start leaves the raw checksums to the copies only where every raw file is read whole into host
        memory (:meth:`copy_raw`, a CPU run); any other copy of mapped rows (a GPU tier, part of a file) checks
        the whole file here first, as the start would have, so no row is served from a file never checked.

        Args:
            field: The field (a key of :attr:`raw_files`; another field has no file and nothing to check).

        Raises:
            RawCopyRefused: the file does not match its checksum (the entry is discarded: built again).
        """
        if field not in self.raw_unchecked or field not in self.raw_files:
            return
        path, _, expected = self.raw_files[field]
        if file_checksum(path) != expected:
            discard(self.directory)
            raise RawCopyRefused(path, field, "does not match its checksum")
        self.raw_unchecked.discard(field)

    def close(self) -> None:
        """Close the blobs' files not handed over (:meth:`take_blobs`) and the raw files (their maps stay valid)."""
        for _, f in self.blobs.values():
            f.close()  # type: ignore[attr-defined]
        self.blobs.clear()
        for _, raw_file, _ in self.raw_files.values():
            raw_file.close()  # type: ignore[attr-defined]
        self.raw_files.clear()


def stored_tiers(
    *,
    key: dict,
    source,
    size,
    plan,
    episodes: Callable[[], Iterator[dict]],
    infos_of: Callable[[dict], dict[str, FieldInfo]],
    options,
    where: str,
    host_limit: int | None = None,
    raw_checked_when_copied: bool = False,
):
    """The entry holding the tiers of ``source`` with ``key``'s options: reused when it is intact, made from the
    source as it is now and its tiers fit this run's host budget, else built from ``episodes()`` under ``plan``
    (checked against the disk first).

    The raw/compressed boundary is no part of the key: it follows the free memory of the run that builds the entry,
    and a key holding it made a new entry of every dataset's size at each run (or rank) that read another free
    memory. A reused entry keeps its own boundary; when it differs from ``plan``'s it is mapped as it is if its raw
    rows fit ``host_limit`` (one INFO line says so), else it is built again under ``plan`` (one WARNING line).

    Args:
        key: The source's path and every option the fields' values depend on.
        source: The source (``fingerprint(recorded=None)``: ``RobomimicHdf5``, ``LeRobotV3``).
        size: The dataset's ``core.data_size.DataSize`` in row order (its lengths; the disk estimate).
        plan: This run's ``footprint.TierPlan`` (the boundary a build uses).
        episodes: Yields every episode's ``{field: array}`` in row order (called only to build).
        infos_of: The fields' ``FieldInfo`` from the first episode's arrays.
        options: The backend's options (``cache_dir``).
        where: How the user sets options, for messages (``train.data_backend_kwargs``).
        host_limit: Host bytes the tiers may take (``plan_tiers_checked``'s; ``None``: unlimited).
        raw_checked_when_copied: The start leaves a reused entry's raw checksums to the copies of its rows
            (:func:`problem`; the entry's :attr:`OpenedTiers.raw_unchecked` says which): a CPU run reads every raw
            file whole and checks it there anyway, so the start's check read each file twice.

    Returns:
        ``(entry, hold, reused, plan)``: the entry's :class:`OpenedTiers` (opened under its build lock), its hold and
        whether it was reused (as ``build_or_reuse`` returns them), and the plan of the entry's tiers (``plan`` with
        the entry's boundary and compressed size).

    Raises:
        ResourceRefused: the disk cannot hold the tiers (before anything is written) or fills while writing.
        CacheError: the cache root cannot be created, or another process's build did not finish in time.
    """
    from robo_loaders_plugin.core.footprint import DiskGuard, ResourceRefused, disk_reserve
    from robo_loaders_plugin.storage.cached_dir import build_or_reuse

    lengths = np.asarray(size.lengths, dtype=np.int64)
    full_key = {**key, "codec": list(CODEC)}  # the format is the kind's version (KIND), never the key's
    blobs_checked = plan.spill_dir is None

    def build(directory: str) -> None:
        import shutil

        estimate = estimate_bytes(size, plan)
        free = shutil.disk_usage(directory).free
        reserve = disk_reserve(directory)
        if free - estimate < reserve:
            raise ResourceRefused(
                f"backend 'gpu_resampler' keeps its tiers in {where}.cache_dir ({directory}): they need about "
                f"{format_bytes(estimate)}, the disk has {format_bytes(free)} free and robo-loaders leaves "
                f"{format_bytes(reserve)} free for the rest of the machine; free space or set {where}.cache_dir to "
                "a directory on a larger disk (nothing was written)",
                [("disk", estimate, max(0, free - reserve))],
            )
        guard = DiskGuard(directory, f"gpu_resampler's tiers in {directory} ({where}.cache_dir)", estimate)
        try:
            write_tiers(directory, lengths, plan.raw, episodes(), infos_of, guard)
        except OSError as exc:
            # the guard sees the disk's free space, not a quota or another writer filling it: a write failing for
            # space is the same shortfall (held in memory instead, ``tiers_at_start``), not a bare errno 28
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise ResourceRefused(
                f"backend 'gpu_resampler' could not keep its tiers in {where}.cache_dir ({directory}): "
                f"{exc.strerror or os.strerror(exc.errno or 0)} while writing them; free space (or raise the quota) "
                f"or set {where}.cache_dir to a directory on a larger disk (the partial tiers were removed)",
                [("disk", estimate, 0)],
            ) from exc

    def check(directory: str) -> bool:
        why = problem(directory, lengths, blobs_checked, key.get("fields"), raw_checked_when_copied) or _too_large(
            directory, plan, host_limit, where
        )
        if why:  # said by the cache's line as the reason (returning False read as a failed integrity check)
            raise RoboLoadersError(f"gpu_resampler's kept tiers are not used: {why}")
        return True

    opened: list[OpenedTiers] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        directory, hold, reused = build_or_reuse(
            kind=KIND,
            source=source,
            key=full_key,
            build=build,
            cache_dir=getattr(options, "cache_dir", None),
            check=check,
            description="gpu_resampler tiers",
            option_prefix=where,
            recheck=True,  # raw rows are served from the map unchecked: the start's checksums are their only check
            opened=lambda path: opened.append(OpenedTiers(path)),
            # formats 1 and 2 also hashed their format into the key: their entries are found and retired by it
            former_keys=[{**full_key, "format": old} for old in range(1, FORMAT)],
        )
    entry = opened[-1]
    if raw_checked_when_copied:  # the check (after a build too) left the raw files' checksums to the copies
        entry.raw_unchecked = set(entry.raw_files)
    for other in opened[:-1]:  # a reused entry opened, then refused by the cache's own checks and built again
        other.close()
    kept = entry_plan(entry, plan)
    if kept.raw != plan.raw:
        logger.info(
            f"gpu_resampler: the tiers kept in {directory} hold {_first(kept.raw, plan.unit)} uncompressed (built "
            f"under another run's memory budget; this run's would hold {_first(plan.raw, plan.unit)}): mapped as "
            "they are, the same samples within this run's budget"
        )
    return entry, hold, reused, kept


def _first(count: int, unit: str) -> str:
    """``demos 0-4``, ``demo 0``, or ``no demos`` (a reviewer saw ``demos 0--1``)."""
    if count <= 0:
        return f"no {unit}s"
    return f"{unit} 0" if count == 1 else f"{unit}s 0-{count - 1}"


def entry_plan(entry: OpenedTiers, plan):
    """``plan`` with an opened entry's raw/compressed boundary and compressed size (the GPU tier no larger than the
    entry's raw rows, which it is copied from).

    Args:
        entry: The entry (:class:`OpenedTiers`).
        plan: This run's ``footprint.TierPlan``.

    Returns:
        The ``TierPlan`` of the entry's tiers.
    """
    import dataclasses

    raw = entry.raw_episodes
    if raw == plan.raw:
        return plan
    kept = dataclasses.replace(
        plan,
        raw=raw,
        device=min(plan.device, raw),
        compressed_bytes=entry.blob_bytes,
        spill_dir=plan.spill_dir if raw < plan.episodes else None,
    )
    # the bound says how the entry's frames are held, not how this run's plan would have held them (the log line
    # said "every demo held uncompressed" beside the compressed tiers it served: a reviewer's reproduction)
    bound = plan.footprint.bound.replace(plan.frames_clause(), kept.frames_clause(), 1)
    return dataclasses.replace(kept, footprint=dataclasses.replace(plan.footprint, bound=bound))


def _too_large(directory: str, plan, host_limit: int | None, where: str) -> str:
    """Why an entry built with another boundary than ``plan``'s does not fit this run (``""``: it fits): its raw
    rows must fit ``host_limit`` (an entry with this run's own boundary fits by the plan)."""
    manifest = read_manifest(directory)
    if manifest is None or host_limit is None or int(manifest["raw_episodes"]) == plan.raw:
        return ""
    raw = sum(int(f["raw_bytes"]) for f in manifest["fields"])
    if raw <= host_limit:
        return ""
    return (
        f"its {_first(int(manifest['raw_episodes']), plan.unit)} uncompressed ({format_bytes(raw)}, built under "
        f"another run's memory budget) exceed this run's host memory for the tiers ({format_bytes(host_limit)}, "
        f"{where}.max_memory or the free memory)"
    )


def estimate_bytes(size, plan) -> int:
    """Bytes an entry will take, from metadata: the fields that are not frames and the frames of the raw episodes
    uncompressed, the compressed tier as the plan estimates it.

    Args:
        size: The dataset's ``core.data_size.DataSize`` (in row order).
        plan: The ``footprint.TierPlan``.

    Returns:
        Bytes.
    """
    raw_frames = int(np.sum(size.episode_frame_bytes()[: plan.raw]))
    return int(size.other_bytes) + raw_frames + int(plan.compressed_bytes)
