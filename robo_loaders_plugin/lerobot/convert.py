"""``robo-loaders convert lerobot ROOT OUT_DIR``: a LeRobot v3 dataset as robo-shards.

Why decode at conversion: video decoding is what LeRobot training waits on. Every camera frame is decoded once,
with the same torchcodec calls and tolerance check as ``LeRobotDataset`` (``sources.lerobot_v3``), and stored
losslessly, so an item built from the shards is byte-identical to ``LeRobotDataset[i]``. One record per episode:
its tabular columns (in the dtypes LeRobot serves them) as ``.npy`` members and each camera as a frames member;
``dataset.json`` carries ``meta/info.json``, ``meta/stats.json``, the task strings, the episode table and the
source's fingerprint.
"""

from __future__ import annotations

from collections.abc import Mapping

from tqdm.auto import tqdm

from robo_loaders_plugin.core.registry import streaming_backends
from robo_loaders_plugin.sources.lerobot_v3 import LeRobotEpisodes, LeRobotV3, decoder_identity
from robo_loaders_plugin.storage.codec import FrameCodec, use_single_thread
from robo_loaders_plugin.storage.fingerprint import Fingerprint
from robo_loaders_plugin.storage.frame_layout import sampled_ratio
from robo_loaders_plugin.storage.shards import DEFAULT_SHARD_BYTES, ShardReader, executors, manifest, verify_dir
from robo_loaders_plugin.storage.shards.disk_estimate import check_conversion_disk
from robo_loaders_plugin.storage.shards.format import check_output_dir

DEFAULT_TOLERANCE_S = 1e-4  # TrainPipelineConfig.tolerance_s


def _record_reader(episodes: LeRobotEpisodes):
    return lambda name: episodes.read(int(name.rsplit("_", 1)[1]))


def _metadata(episodes: LeRobotEpisodes, repo_id: str | None) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    src = episodes.source
    try:
        lerobot_version = version("lerobot")
    except PackageNotFoundError:
        lerobot_version = None
    return {
        "framework": "lerobot",
        "lerobot_version": lerobot_version,
        "repo_id": repo_id or f"local/{src.root.name}",
        "info": src.info,
        "stats": src.stats(),
        "tasks": src.tasks,
        "columns": episodes.columns,
        "video_keys": src.video_keys,
        "image_keys": src.image_keys,
        "episodes": [
            {
                "episode_index": ep,
                "name": f"episode_{ep}",
                "length": e - s,
                "dataset_from_index": int(src.episodes[ep]["dataset_from_index"]),
            }
            for ep, s, e in episodes.runs
        ],
        "tolerance_s": episodes.tolerance_s,
        # the camera windows every frame was checked against (sources.lerobot_v3.gaps_at_risk): a run with windows
        # whose tolerance lets a frame lie half a step from its row serves these shards only if they were
        "window_gaps": dict(episodes.videos.window_gaps),
        "decoder": "torchcodec",
        # what decoded the frames: given shards are checked against it (PNG images need no decoder)
        "decoder_version": decoder_identity() if src.video_keys else None,
    }


def _episodes(source: LeRobotV3, tolerance_s: float, window_gaps: Mapping[str, int] | None) -> LeRobotEpisodes:
    """The episodes to convert, their frames checked against ``window_gaps`` as they are decoded."""
    episodes = LeRobotEpisodes(source, tolerance_s)
    episodes.videos.window_gaps = dict(window_gaps or {})
    return episodes


def _worker(args):
    root, tolerance_s, out_dir, codec_dict, lease_s, gaps = args
    use_single_thread()
    since = manifest.source_stat_digest(out_dir)  # before the tables every unit is served from are read
    episodes = _episodes(LeRobotV3(root), tolerance_s, gaps)
    return manifest.work(out_dir, FrameCodec(**codec_dict), _record_reader(episodes), lease_s, since)


def convert_lerobot(
    root,
    out_dir: str,
    *,
    repo_id: str | None = None,
    num_workers: int = 1,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    codec: FrameCodec | None = None,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    lease_s: float = 3600.0,
    progress: bool = True,
    fingerprint: Fingerprint | None = None,
    executor: str = "local",
    executor_options: Mapping | None = None,
    window_gaps: Mapping[str, int] | None = None,
) -> dict:
    """Convert a LeRobot v3 dataset into robo-shards in ``out_dir``: every camera frame decoded once (as
    ``LeRobotDataset`` decodes it) and stored losslessly (channels last: ``storage.frame_layout``), one record per
    episode. The disk is checked against the estimated output (frames at the ratio a few sampled frames pack at)
    before the conversion starts; re-running with the same source and settings resumes an
    interrupted conversion (``storage.shards.manifest``).

    Args:
        root: The LeRobot v3 dataset root.
        out_dir: The robo-shards directory written.
        repo_id: The repo id recorded in the metadata (``None``: ``local/<root's name>``).
        num_workers: Processes (or executor tasks) converting at once; 1 with the local executor converts in this
            process.
        shard_bytes: The target shard size in bytes.
        codec: The lossless frame codec (``None``: ``FrameCodec()``'s default).
        tolerance_s: The timestamp tolerance in seconds checked on every decoded frame, as lerobot-train's.
        lease_s: Seconds a worker's claim on a work unit lasts before another may take it over.
        progress: Show a progress bar.
        fingerprint: The source's fingerprint when the caller has it (``None``: computed here).
        executor: Where the work units run (``storage/shards/executors.py``): ``local`` or a datatrove executor.
        executor_options: That executor's options (``None``: none).
        window_gaps: Cameras to check as served in ``delta_timestamps`` windows, with their windows' smallest step
            (``sources.lerobot_v3.window_gaps``): a frame half a step or more from its row is refused, and the
            shards record what was checked (``None``: none; what a conversion on first use asks for when
            ``tolerance_s`` lets such frames through, ``gaps_at_risk``).

    Returns:
        ``episodes``, ``shards``, ``source_bytes`` and ``frame_bytes`` (decoded camera bytes); for
        ``datatrove-slurm``, the submitted job's description (``executors.Submitted.as_dict``) with
        ``source_bytes`` and ``frame_bytes`` instead of the published shards.

    Raises:
        ExecutorError: an unknown executor or options it does not take.
        SourceError: ``root`` is not a readable LeRobot v3 dataset (metadata or tables).
        ShardError: ``out_dir`` cannot be written, or a worker failed.
        core.footprint.ResourceRefused: the estimated output does not fit the disk.
        StaleSourceError: the source changed while it was converted (the conversion is withdrawn).
    """
    executors.check_options(executor, executor_options or {}, out_dir, source=str(root))
    codec = codec or FrameCodec()
    source = LeRobotV3(root)
    check_output_dir(out_dir, str(root))
    # the output must fit the disk: estimated from meta/info.json, the episode lengths and a few frames compressed
    # as the shards store them (sampled once the disk holds what no ratio makes smaller), before converting
    check_conversion_disk(
        source.data_size(),
        out_dir,
        video=False,
        ratio=lambda: sampled_ratio(source.sample_frames(), codec),
        command="robo-loaders convert lerobot",
        alternatives=[
            "--codec zstd (smaller, slower to decode)",
            f"backend {streaming_backends('lerobot')} (trains from the videos, writes nothing)",
        ],
        workers=num_workers,
    )
    fp = fingerprint or source.fingerprint()
    # the stat the tables below are read under, or an earlier one (what this process converts units from): a change
    # since makes the units recorded under it convert again, from tables read again (run_here)
    read = {"since": manifest.stat_digest(fp.files), "episodes": _episodes(source, tolerance_s, window_gaps)}
    episodes = read["episodes"]
    meta = _metadata(episodes, repo_id)
    names = [e["name"] for e in meta["episodes"]]
    sizes = {f"episode_{ep}": episodes.frame_bytes(ep) for ep, _, _ in episodes.runs}
    # decoded frames compress 3-10x; plan units on 4x the target shard size of raw frame bytes
    per_unit = manifest.unit_bytes(sum(sizes.values()), 4 * shard_bytes, num_workers)
    manifest.plan(
        out_dir,
        # what the frames are checked against decides what is written: a conversion resumed with other windows'
        # check would mix units checked and not (left out when there is none: plans of earlier versions resume)
        {
            "content": fp.content,
            "tolerance_s": tolerance_s,
            **({"window_gaps": dict(window_gaps)} if window_gaps else {}),
        },
        manifest.units_by_size(names, sizes, per_unit),
        {"codec": codec.as_dict(), "shard_bytes": shard_bytes},
        source_files={"path": fp.path, "names": [f[0] for f in fp.files]},
    )
    args = (str(source.root), tolerance_s, out_dir, codec.as_dict(), lease_s, dict(window_gaps or {}))
    # in this process, convert with the episodes already read above instead of reading the tables again (datatrove
    # runs its tasks in other processes, or pickles them for Slurm: they need the module-level worker)
    in_process = num_workers <= 1 and executor == "local"

    def run_here(_):  # in this process, from the tables read above while the source's stat is the one they were read
        now = manifest.source_stat_digest(out_dir)
        if now is not None and now != read["since"]:  # changed since: read again (taken before the read)
            read.update(since=now, episodes=_episodes(source, tolerance_s, window_gaps))
        return manifest.work(out_dir, codec, _record_reader(read["episodes"]), lease_s, read["since"])

    worker = _worker if not in_process else run_here
    res = executors.execute(
        executor,
        out_dir,
        worker,
        args,
        num_workers,
        codec,
        meta,
        {"path": fp.path, "fingerprint": fp.as_dict()},
        f"convert {source.root.name}",
        progress,
        **dict(executor_options or {}),
    )
    if isinstance(res, executors.Submitted):
        return {**res.as_dict(), "source_bytes": sum(f[1] for f in fp.files), "frame_bytes": sum(sizes.values())}
    manifest.withdraw_if_source_changed(out_dir, fp, source.fingerprint(fp), str(source.root))
    return {
        "episodes": res.episodes,
        "shards": res.shards,
        "source_bytes": sum(f[1] for f in fp.files),
        "frame_bytes": sum(sizes.values()),
    }


def verify_lerobot(out_dir: str, root, tolerance_s: float | None = None) -> list[str]:
    """Checksums and decoding (``verify_dir``), then every episode's columns and frames against a fresh decode of
    the source dataset: what ``robo-loaders verify --source`` runs on a LeRobot conversion.

    Args:
        out_dir: The robo-shards directory.
        root: The LeRobot v3 dataset it was converted from.
        tolerance_s: The timestamp tolerance of the fresh decode (``None``: the one the conversion recorded, else
            :data:`DEFAULT_TOLERANCE_S`).

    Returns:
        One line per problem (empty: the shards match the source). The comparison stops at the first check that
        fails: shard problems, then different episode lists.
    """
    problems = verify_dir(out_dir)
    if problems:
        return problems
    reader = ShardReader(out_dir)
    meta = reader.dataset.get("metadata", {})
    tolerance = meta.get("tolerance_s", DEFAULT_TOLERANCE_S) if tolerance_s is None else tolerance_s
    episodes = LeRobotEpisodes(LeRobotV3(root), tolerance)
    expected = [f"episode_{ep}" for ep, _, _ in episodes.runs]
    if [e["name"] for e in reader.episodes] != expected:
        return [
            f"{out_dir}: holds episodes {[e['name'] for e in reader.episodes][:5]}..., {root} has "
            f"{expected[:5]}... ({len(reader.episodes)} vs {len(expected)})"
        ]
    read = _record_reader(episodes)
    for i, name in enumerate(tqdm(expected, desc="verify", unit="episode", mininterval=0.5)):
        _, fields = reader.read_episode(i)
        want, _ = read(name)
        if set(fields) != set(want):
            problems.append(f"{name}: fields {sorted(fields)} != source {sorted(want)}")
            continue
        for k, a in want.items():
            # bytes, dtype and shape: a NaN equals itself (np.array_equal says not)
            if fields[k].dtype != a.dtype or fields[k].shape != a.shape or fields[k].tobytes() != a.tobytes():
                problems.append(f"{name}/{k}: differs from the source")
    return problems
