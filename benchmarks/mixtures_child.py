"""One measured run of ``benchmarks/mixtures.py``: a LeRobot mixture built and served one way, timed from the first
metadata read to the first batch, then its steady batches.

``python -m benchmarks.mixtures_child '<json args>' OUT.json`` (started by ``robo_loaders_plugin.bench.runner.
run_child``, one process per run, so no run inherits another's decoders, caches or imports), or :func:`run` in
the calling process (the quick test). Two ways of serving the same components:

- ``reference``: what a user writes by hand today, LeRobot having no mixture: one ``LeRobotDataset`` per component
  (``delta_timestamps`` of the preset at the component's own rate, ``return_uint8=True``, as ``make_dataset``
  builds one), each wrapped to rename its keys, keep the keys every component has and add ``dataset_index``
  (:class:`Renamed`), a ``ConcatDataset`` of them and a ``WeightedRandomSampler`` giving component *k* the share
  ``w_k / sum(w)``, in the DataLoader ``lerobot-train`` builds (spawned, persistent workers, prefetch 4).
- any plugin backend (``native`` included): ``lerobot.mixture.build_mixture`` over the same ``LeRobotDataset``\\ s
  (built as ``lerobot-train --dataset.mixture`` builds them: the mixture index read and checked first, their
  tables read by pyarrow, ``compat.tables_read_directly``, from the parquet files' kept Arrow copies on a later
  start, those the index served one after another),
  served through the DataLoader ``lerobot-train`` builds and the patched ``cycle`` (the mixture's own order,
  batches built in threads of the training process), as ``lerobot-train --dataset.mixture`` serves it.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time


class Renamed:
    """A component of the hand-written reference: its items renamed, only the mixture's keys, plus
    ``dataset_index`` (a module-level class, so spawned DataLoader workers can unpickle it); for components of
    different robots, as a user pads them by hand: vectors zero-padded to the mixture's size with a ``_dim_mask``,
    cameras it lacks as zeros with an ``_is_missing`` flag (the plugin's names, so both serve the same keys).

    Args:
        dataset: The component's ``LeRobotDataset``.
        rename: ``{its key: mixture key}``.
        keep: The mixture's keys.
        index: The component's position.
        pad: ``{key: size}`` of the padded vectors (``None``: none).
        fill: ``{camera: (C, H, W)}`` of the cameras this component lacks (``None``: none).
        cameras: The cameras some component lacks (each gets its ``_is_missing`` flag, as the plugin's mixture).
    """

    def __init__(self, dataset, rename: dict, keep: frozenset, index: int, pad=None, fill=None, cameras=()):
        self.dataset, self.rename, self.keep, self.index = dataset, dict(rename), frozenset(keep), int(index)
        self.pad, self.fill, self.cameras = dict(pad or {}), dict(fill or {}), tuple(cameras)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        import torch

        item = self.dataset[i]
        out = {self.rename.get(k, k): v for k, v in item.items()}
        out = {k: v for k, v in out.items() if k in self.keep}
        for key, size in self.pad.items():
            v = out[key]
            own = v.shape[-1]
            out[key] = torch.nn.functional.pad(v, (0, size - own)) if own < size else v
            out[f"{key}_dim_mask"] = torch.arange(size) < own
        if self.fill or self.pad:
            for cam in self.cameras:
                if cam in self.fill:
                    out[cam] = torch.zeros(self.fill[cam], dtype=torch.uint8)
                out[f"{cam}_is_missing"] = torch.tensor(cam in self.fill)
        out["dataset_index"] = torch.tensor(self.index)
        return out


def item_keys(meta, delta: dict | None) -> set[str]:
    """The keys a ``LeRobotDataset`` item has: its features, ``<key>_is_pad`` for each key with delta timestamps,
    and ``task`` (known from ``meta/``, so the reference reads no item to choose its keys).

    Args:
        meta: The component's ``LeRobotDatasetMetadata``.
        delta: Its ``delta_timestamps``, or ``None``.
    """
    return set(meta.features) | {f"{k}_is_pad" for k in (delta or {})} | {"task"}


def reference_loader(natives, components, deltas, batch_size: int, num_workers: int, seed: int, robots=False):
    """The hand-written mixture (module docstring) and its DataLoader.

    Args:
        natives: Each component's ``LeRobotDataset``.
        components: Each component's ``{"weight", "rename"}``.
        deltas: Each component's ``delta_timestamps``.
        batch_size: Samples per batch.
        num_workers: DataLoader workers (spawned, persistent, prefetch 4, as lerobot-train's).
        seed: The sampler's seed.
        robots: The components are different robots (``Renamed``'s padding and zero cameras, every key kept).

    Returns:
        The ``torch.utils.data.DataLoader``.
    """
    import torch

    renamed_keys = []
    for n, c, d in zip(natives, components, deltas):
        rename = c.get("rename") or {}
        renamed_keys.append({rename.get(k, k) for k in item_keys(n.meta, d)})
    if not robots:
        keep = frozenset(set.intersection(*renamed_keys))
        parts = [Renamed(n, c.get("rename") or {}, keep, k) for k, (n, c) in enumerate(zip(natives, components))]
    else:  # different robots: every key any component has, vectors padded to the largest, missing cameras zeros
        keep = frozenset(set.union(*renamed_keys))
        sizes: dict = {}
        for n in natives:
            for key in ("action", "observation.state"):
                sizes.setdefault(key, set()).add(int(n.meta.features[key]["shape"][0]))
        pad = {k: max(v) for k, v in sizes.items() if len(v) > 1}
        shapes = {k: f["shape"] for n in natives for k, f in n.meta.features.items() if f["dtype"] == "video"}
        lacked = sorted(cam for cam in shapes if any(cam not in n.meta.video_keys for n in natives))  # flagged
        parts = []
        for k, (n, c) in enumerate(zip(natives, components)):
            fill = {cam: (shapes[cam][2], *shapes[cam][:2]) for cam in lacked if cam not in n.meta.video_keys}
            parts.append(Renamed(n, c.get("rename") or {}, keep, k, pad, fill, lacked))
    concat = torch.utils.data.ConcatDataset(parts)
    weights = [float(c.get("weight", 1.0)) for c in components]
    per_sample = torch.cat([torch.full((len(p),), w / len(p), dtype=torch.float64) for p, w in zip(parts, weights)])
    sampler = torch.utils.data.WeightedRandomSampler(
        per_sample, num_samples=len(concat), replacement=True, generator=torch.Generator().manual_seed(seed)
    )
    extra = dict(prefetch_factor=4, persistent_workers=True, multiprocessing_context="spawn") if num_workers else {}
    return torch.utils.data.DataLoader(
        concat, batch_size=batch_size, sampler=sampler, num_workers=num_workers, drop_last=False, **extra
    )


def run(a: dict) -> dict:
    """Build the mixture one way and time it (module docstring).

    Args:
        a: ``backend`` (``reference`` or a plugin backend), ``kwargs`` (its options), ``components`` (the mixture's
            components: ``repo_id``, ``root``, ``weight``, ``rename``), ``target_fps``, ``preset``, ``batch_size``,
            ``num_workers``, ``batches``, ``seed``, optionally ``rounds``, ``min_round_s`` and ``warmup_s``
            (``time_loader``'s); ``spec``: the mixture's other keys (``pad``,
            ``missing_cameras``: components of different robots; the reference pads them by hand).

    Returns:
        The row: ``build_s`` (metadata, datasets, mixture and DataLoader built; ``natives_s`` of it the
        components' ``LeRobotDataset``\\ s, which every loader builds, after the plugin's mixture index),
        ``first_batch_s``, ``startup_s`` (their sum: the first metadata read to the first batch),
        ``samples_per_s`` over ``batches`` timed batches after the first, ``batch_latency_ms``, ``num_samples``,
        ``share`` (each component's share of the samples served), ``summary`` and ``baseline_pss_bytes``.
    """
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    from robo_loaders_plugin.bench.lerobot_run import train_loader
    from robo_loaders_plugin.bench.runner import baseline_pss
    from robo_loaders_plugin.lerobot.compat import tables_read_directly
    from robo_loaders_plugin.lerobot.presets import delta_timestamps
    from robo_loaders_plugin.lerobot.single import natives_built
    from robo_loaders_plugin.mixtures.dataset import garbage_collected_once
    from robo_loaders_plugin.mixtures.kept_tables import kept_tables

    torch.manual_seed(0)
    baseline = baseline_pss()
    components = a["components"]
    t = time.perf_counter()
    # the reference builds them as LeRobot does; the plugin's loaders as lerobot-train --dataset.mixture does
    # (their tables read directly, and the backends' sources reading the same tables: lerobot.mixture's
    # make_mixture_datasets)
    # (and the parquet files' checked Arrow copies of an earlier start, beside the mixture index)
    kept = None if a["backend"] == "reference" else kept_tables((a.get("kwargs") or {}).get("cache_dir"))
    building = contextlib.nullcontext() if a["backend"] == "reference" else tables_read_directly(kept)
    # and, as make_mixture_datasets, the objects from before frozen while it builds, its garbage collected once after
    collected = contextlib.nullcontext() if a["backend"] == "reference" else garbage_collected_once()

    def native(k: int):  # as make_dataset builds one dataset: its metadata, the policy's deltas, the dataset
        c = components[k]
        delta = delta_timestamps(a["preset"], LeRobotDatasetMetadata(c["repo_id"], root=c["root"]))
        return LeRobotDataset(c["repo_id"], root=c["root"], delta_timestamps=delta, return_uint8=True), delta

    reference = a["backend"] == "reference"
    extra = a.get("spec") or {}  # the mixture's other keys (pad, missing_cameras): different robots
    with building, collected:
        if reference:  # one after another, as a hand-written loop does
            t_natives = time.perf_counter()
            built = [native(k) for k in range(len(components))]
        else:  # as make_mixture_datasets does: the mixture index read and checked first
            from robo_loaders_plugin.lerobot.integration import choose
            from robo_loaders_plugin.lerobot.mixture import build_mixture, parse
            from robo_loaders_plugin.lerobot.mixture_flag import target_fps_of
            from robo_loaders_plugin.lerobot.mixture_meta import check_components, indexed_metas

            given = {"components": components, **extra}
            if a.get("target_fps") is not None:
                given["target_fps"] = a["target_fps"]
            spec = parse(given)
            choice = choose(a["backend"], **(a.get("kwargs") or {}))
            reread: list[int] = []
            metas = indexed_metas(spec, None, (a.get("kwargs") or {}).get("cache_dir"), reread=reread)
            layout = check_components(spec, metas, target_fps_of(spec, choice))
            t_natives = time.perf_counter()
            built = natives_built(native, len(components), serial=sorted(set(range(len(components))) - set(reread)))
        natives, deltas = map(list, zip(*built))
        natives_s = time.perf_counter() - t_natives
        if reference:
            loader = reference_loader(
                natives, components, deltas, a["batch_size"], a["num_workers"], a["seed"], robots=bool(extra)
            )
            batches = loader
            summary = f"ConcatDataset of {len(natives)} LeRobotDataset + WeightedRandomSampler"
        else:
            from robo_loaders_plugin.core.iteration import summary_of
            from robo_loaders_plugin.lerobot.integration import cycle

            mix = build_mixture(spec, natives, choice, layout=layout, seed=a["seed"])
            loader = train_loader(mix, a["batch_size"], a["num_workers"])
            batches = cycle(loader)
            summary = summary_of(mix)
    build_s = time.perf_counter() - t
    return dict(
        timed_shares(
            batches,
            a["batches"],
            len(components),
            build_s,
            a.get("rounds", 1),
            a.get("min_round_s", 0.0),
            a.get("warmup_s", 0.0),
        ),
        num_samples=sum(len(n) for n in natives),
        frames=sum(n.num_frames for n in natives),
        natives_s=natives_s,
        summary=summary,
        baseline_pss_bytes=baseline,
    )


def timed_shares(
    batches,
    timed: int,
    components: int,
    build_s: float,
    rounds: int = 1,
    min_round_s: float = 0.0,
    warmup_s: float = 0.0,
) -> dict:
    """``time_loader``'s timing of ``batches``, with the start-up and each component's share of what was served:
    the part of a row both frameworks' mixture children measure the same way.

    Args:
        batches: The batches, each with a ``dataset_index`` (a tensor or an array).
        timed: Batches timed after the first.
        components: How many components the mixture has.
        build_s: Seconds from the first metadata read to the loader built.
        rounds: Timed rounds, the median rate reported (``time_loader``).
        min_round_s: Seconds each round lasts at least.
        warmup_s: Seconds served untimed after the first batch (``time_loader``'s).

    Returns:
        ``time_loader``'s keys, ``build_s``, ``startup_s`` (``build_s`` plus the first batch), ``share``,
        ``batch_keys`` (the first batch's keys and their shapes) and ``components_per_batch`` (the mean number of
        components a batch draws from).
    """
    import numpy as np

    from robo_loaders_plugin.bench.runner import time_loader

    served = np.zeros(components, dtype=np.int64)
    keys: dict = {}
    touched: list[int] = []  # components each batch draws from: the per-component calls a batch makes

    def count(batch):
        if not keys:  # what a batch holds (each key's shape), so that two loaders are seen to serve the same
            keys.update((k, list(getattr(v, "shape", (len(v),)))) for k, v in batch.items())
        index = np.asarray(batch["dataset_index"])
        touched.append(len(np.unique(index)))
        served[:] += np.bincount(index, minlength=components)
        return len(index)

    timing = time_loader(batches, timed, count, rounds=rounds, min_round_s=min_round_s, warmup_s=warmup_s)
    return dict(
        timing,
        build_s=build_s,
        startup_s=build_s + timing["first_batch_s"],
        share=(served / max(1, served.sum())).round(4).tolist(),
        batch_keys=dict(sorted(keys.items())),
        components_per_batch=round(float(np.mean(touched)), 2) if touched else 0.0,
    )


def main():
    """``python -m benchmarks.mixtures_child '<json args>' OUT.json``.

    Why through the imported module: the reference's :class:`Renamed` is pickled for spawned DataLoader workers by
    its module's name, which must not be ``__main__``.
    """
    from benchmarks import mixtures_child

    out = mixtures_child.run(json.loads(sys.argv[1]))
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
