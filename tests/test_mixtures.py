"""The framework-neutral mixture layer: parsing (one line per refusal), the pass order (shares within a binomial
bound, every window once when weighted by size, rank shares, resume) and the mixed dataset's batches."""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import multiprocessing as mp
import os
import time

import numpy as np
import pytest
import torch

from robo_loaders_plugin.core.iteration import IndexedDataset, SamplingPlan, Serving
from robo_loaders_plugin.mixtures.batches import MixtureBatches
from robo_loaders_plugin.mixtures.dataset import DATASET_INDEX, MixtureDataset, MixtureHooks
from robo_loaders_plugin.mixtures.sampling import MixtureOrder
from robo_loaders_plugin.mixtures.spec import MixtureError, parse_mixture

WHERE = "train.data_mixture"


@pytest.fixture
def files(tmp_path):
    paths = []
    for name in ("a.hdf5", "b.hdf5"):
        p = tmp_path / name
        p.write_bytes(b"")
        paths.append(str(p))
    (tmp_path / "root").mkdir()
    return paths, str(tmp_path / "root")


# -- parsing -------------------------------------------------------------------------------------------------------
def test_parse_file_inline_dict_and_list(files, tmp_path):
    (a, b), root = files
    comps = [{"path": "a.hdf5", "weight": 1, "rename": {"x": "y"}}, {"path": b, "weight": 3.5, "filter_key": "train"}]
    f = tmp_path / "mix.json"
    f.write_text(json.dumps({"components": comps}))
    spec = parse_mixture(str(f), "robomimic", WHERE)  # relative to the file's directory
    assert [c.source for c in spec.components] == [a, b]
    assert spec.weight_vector() == [1.0, 3.5] and spec.components[0].rename == {"x": "y"}
    assert spec.components[1].filter_key == "train" and spec.components[0].name == "a.hdf5"
    inline = parse_mixture(json.dumps([{"path": a, "weight": 1}, {"path": b, "weight": 1}]), "robomimic", WHERE)
    assert inline.weights == "given" and len(inline.components) == 2
    sized = parse_mixture({"components": [{"repo_id": "u/a", "root": root}, {"repo_id": "u/b"}], "weights": "size",
                           "target_fps": 10}, "lerobot", WHERE)  # fmt: skip
    assert sized.weight_vector() is None and sized.target_fps == 10.0 and sized.components[0].root == root
    remote = parse_mixture(
        [{"repo_id": "u/a", "root": "s3://bucket/a", "weight": 1, "episodes": [3, 1]}], "lerobot", WHERE
    )
    assert remote.components[0].root == "s3://bucket/a" and remote.components[0].episodes == (3, 1)


BAD = [
    ("robomimic", [{"path": "{a}", "weight": 1, "colour": 2}], "component 0 ({a}): unknown key(s) ['colour']"),
    ("robomimic", [{"path": "{a}x", "weight": 1}], "does not exist; fix the path"),
    ("lerobot", [{"repo_id": "u/a", "root": "{root}/nope", "weight": 1}], "root {root}/nope does not exist"),
    (
        "robomimic",
        [{"path": "{root}", "weight": 1}],
        "component 0 ({root}): {root} is a directory, not an HDF5 file (it holds no .hdf5 file); give the path",
    ),
    (
        "robomimic",
        [{"path": "{a}", "weight": 1}, {"path": "{a}", "weight": 2}],
        "component 1 ({a}) duplicates component 0",
    ),
    (
        "lerobot",
        [{"repo_id": "u/a", "weight": 1, "episodes": [1]}, {"repo_id": "u/a", "weight": 1, "episodes": [1]}],
        "duplicates component 0",
    ),
    ("robomimic", [{"path": "{a}", "weight": 0}], "weight must be a positive finite number, got 0"),
    ("robomimic", [{"path": "{a}", "weight": -1}], "got -1"),
    ("robomimic", [{"path": "{a}", "weight": float("nan")}], "got nan"),
    ("robomimic", [{"path": "{a}", "weight": float("inf")}], "got inf"),
    ("robomimic", [{"path": "{a}", "weight": "2"}], "got '2'"),
    ("robomimic", [{"path": "{a}", "weight": True}], "got True"),
    ("robomimic", [{"path": "{a}", "weight": 0}, {"path": "{b}", "weight": 0}], "component 0 ({a}): weight"),
    ("robomimic", [{"path": "{a}"}], "has no weight; give every component a weight, or set the mixture's weights"),
    ("robomimic", {"components": [{"path": "{a}", "weight": 1}], "weights": "size"}, "remove it or set weights"),
    ("robomimic", {"components": [{"path": "{a}", "weight": 1}], "weights": "equal"}, "weights must be 'given'"),
    ("robomimic", [{"path": "{a}", "weight": 1, "rename": {"p": "z", "q": "z"}}], "maps both 'p' and 'q' onto 'z'"),
    ("robomimic", [{"path": "{a}", "weight": 1, "rename": {"p": 3}}], "rename must be an object"),
    ("lerobot", [{"repo_id": "u/a", "weight": 1, "episodes": [1, 1]}], "lists an episode twice"),
    ("lerobot", [{"repo_id": "u/a", "weight": 1, "episodes": [-1]}], "episodes must be a non-empty list"),
    ("lerobot", [{"path": "u/a", "weight": 1}], "unknown key(s) ['path']"),
    ("lerobot", [{"weight": 1}], "'repo_id' is missing"),
    # LeRobot's bookkeeping keys: the joined batches looked a row's task up through a renamed or dropped task_index
    ("lerobot", [{"repo_id": "u/a", "weight": 1, "drop": ["task_index"]}], "renames or drops ['task_index'], which"),
    ("lerobot", [{"repo_id": "u/a", "weight": 1, "rename": {"frame_index": "x"}}], "renames or drops ['frame_index']"),
    ("lerobot", [{"repo_id": "u/a", "weight": 1, "rename": {"obs.id": "task_index"}}], "drops ['task_index']"),
    (
        "robomimic",
        {"components": [{"path": "{a}", "weight": 1}], "target_fps": 0},
        "target_fps must be a number of frames per second in",
    ),
    ("robomimic", {"components": [], "weights": "size"}, "'components' must be a non-empty list"),
    ("robomimic", {"parts": []}, "unknown key(s) ['parts']"),
    ("robomimic", "{not json", "not valid JSON"),
    ("robomimic", "/no/such/mix.json", "neither a JSON file that exists nor inline JSON"),
    ("robomimic", 3, "got int"),
]


@pytest.mark.parametrize("framework, value, expected", BAD)
def test_bad_mixtures_are_one_line_naming_the_setting_and_component(files, framework, value, expected):
    (a, b), root = files

    def fill(v):
        if isinstance(v, str):
            return v.replace("{a}", a).replace("{b}", b).replace("{root}", root)
        if isinstance(v, list):
            return [fill(x) for x in v]
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        return v

    with pytest.raises(MixtureError) as err:
        parse_mixture(fill(value), framework, WHERE)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{WHERE}: "), msg
    assert fill(expected) in msg, msg


def test_a_good_component_passes_where_the_bad_one_failed(files):
    """Control: the checks refuse the bad value, not everything (same components, valid values)."""
    (a, b), _ = files
    spec = parse_mixture([{"path": a, "weight": 1, "rename": {"p": "z", "q": "w"}}, {"path": b, "weight": 1e-3}],
                         "robomimic", WHERE)  # fmt: skip
    assert len(spec.components) == 2
    renamed = {"observation.images.c0": "observation.images.top"}
    lerobot = parse_mixture([{"repo_id": "u/a", "weight": 1, "rename": renamed, "drop": ["observation.extra"]}],
                            "lerobot", WHERE)  # fmt: skip
    assert lerobot.components[0].drop == ("observation.extra",)


def test_the_same_file_through_a_symlink_is_a_duplicate(files, tmp_path):
    """A reviewer's finding: the duplicate check compared paths as written, so one file named through a symlink
    was two components, drawn twice as often as its weight. Control: two files are two components."""
    (a, b), root = files
    os.symlink(a, tmp_path / "link.hdf5")
    os.symlink(root, tmp_path / "root_link")
    with pytest.raises(MixtureError, match=r"component 1 \(.*link.hdf5\) duplicates component 0"):
        parse_mixture(
            [{"path": a, "weight": 1}, {"path": str(tmp_path / "link.hdf5"), "weight": 1}], "robomimic", WHERE
        )
    with pytest.raises(MixtureError, match="duplicates component 0"):
        link = str(tmp_path / "root_link")
        parse_mixture([{"repo_id": "u/a", "root": root, "weight": 1}, {"repo_id": "u/b", "root": link, "weight": 1}],
                      "lerobot", WHERE)  # fmt: skip
    assert len(parse_mixture([{"path": a, "weight": 1}, {"path": b, "weight": 1}], "robomimic", WHERE).components) == 2


# -- the pass order ------------------------------------------------------------------------------------------------
def shares_within_bound(order: MixtureOrder, picked: np.ndarray, p: np.ndarray, sigmas: float = 4.0) -> bool:
    """Each component's count among ``picked`` global indices is within ``sigmas`` binomial sigmas of ``n p``."""
    comps, _ = order.split(picked)
    n = len(picked)
    counts = np.bincount(comps, minlength=len(p))
    return bool(all(abs(counts[k] - n * p[k]) <= sigmas * math.sqrt(n * p[k] * (1 - p[k])) for k in range(len(p))))


def test_component_shares_follow_the_weights_within_a_binomial_bound():
    sizes, weights = [400, 1600, 240], [1.0, 1.0, 6.0]
    order = MixtureOrder(sizes, weights, seed=7)
    p = np.asarray(weights) / sum(weights)
    for epoch in range(3):
        assert shares_within_bound(order, order.indices_of(epoch), p)
    # negative control: concatenation (shares by size) is a wrong order for these weights, and the bound says so
    wrong = MixtureOrder(sizes, None, seed=7)
    assert not shares_within_bound(wrong, wrong.indices_of(0), p)


SCALED = {  # [1, 1, 6] as users may write it: huge (the sum overflows float64), subnormal, plainly huge or tiny
    "sum overflows": [2.5e307, 2.5e307, 1.5e308],
    "huge": [1e300, 1e300, 6e300],
    "tiny": [1e-300, 1e-300, 6e-300],
    "subnormal": [1e-310, 1e-310, 6e-310],
}


@pytest.mark.parametrize("weights", list(SCALED.values()), ids=list(SCALED))
def test_any_finite_positive_weights_give_their_shares(weights):
    """Weights whose sum overflows, or too small for float64's normal range, draw a working pass with the shares of
    [1, 1, 6] (issue 42 item 6: [1e308, 1e308] died in numpy's ``choice``). Negative control: the plain ``w /
    w.sum()`` of the overflowing weights is refused by numpy, as the first pass was."""
    sizes, p = [400, 1600, 240], np.array([1.0, 1.0, 6.0]) / 8
    order = MixtureOrder(sizes, weights, seed=7)
    np.testing.assert_allclose(order.probabilities, p, rtol=1e-9)
    for epoch in range(2):
        assert shares_within_bound(order, order.indices_of(epoch), p)
    w = np.asarray(weights)
    with np.errstate(over="ignore"):
        total = w.sum()
    if not np.isfinite(total):
        with pytest.raises(ValueError, match="do not sum to 1"):
            np.random.default_rng(0).choice(3, size=10, p=w / total)


def test_weights_1e308_pairs_and_ratios_beyond_float64():
    """Two 1e308 weights share a pass half and half; a weight 1e-616 times the largest (its share rounds to 0 in
    float64) is never drawn, the pass still works; weights whose sum is finite keep ``w / w.sum()`` bit for bit (the
    orders of earlier versions, so resumed runs, unchanged); the spec's log line shows the shares, not 0.0%."""
    pair = MixtureOrder([300, 300], [1e308, 1e308], seed=1)
    assert pair.probabilities.tolist() == [0.5, 0.5]
    assert shares_within_bound(pair, pair.indices_of(0), np.array([0.5, 0.5]))
    lopsided = MixtureOrder([50, 50], [1e308, 1e-308], seed=1)
    assert lopsided.probabilities.tolist() == [1.0, 0.0]
    assert (lopsided.split(lopsided.indices_of(0))[0] == 0).all()
    for w in ([1.0, 1.0, 6.0], [0.3, 0.7, 1e-3], [1e-5, 2.0]):
        assert np.array_equal(MixtureOrder([5] * len(w), w).probabilities, np.asarray(w) / np.sum(w))


def test_the_spec_describes_shares_of_weights_whose_sum_overflows(files):
    (a, b), _ = files
    spec = parse_mixture([{"path": a, "weight": 1e308}, {"path": b, "weight": 1e308}], "robomimic", WHERE)
    assert spec.describe() == "a.hdf5 (50.0%), b.hdf5 (50.0%)"


def test_a_mixture_of_hundreds_is_described_in_a_line_that_names_a_few():
    """The training log's mixture line names 8 components and counts the rest with their shares' range (400
    components wrote ~10 kB on one line); a mixture of 8 or fewer names every one (control)."""
    from robo_loaders_plugin.mixtures.spec import GIVEN, Component, MixtureSpec

    weights = [1.0] * 399 + [3.0]
    order = MixtureOrder([10] * 400, weights, seed=0)
    line = MixtureBatches(list, order, SamplingPlan(batch_size=8), names=[f"c{k}" for k in range(400)]).describe()
    assert line.startswith("mixture of 400 (weighted: c0 0.2%, c1 0.2%,") and "c7 0.2%, ... and 392 more" in line
    assert "(0.2%-0.7% each)" in line and "c8 " not in line and len(line) < 300, line
    spec = MixtureSpec(tuple(Component(f"c{k}", weight=w) for k, w in enumerate(weights)), GIVEN)
    assert spec.describe().endswith("c7 (0.2%), ... and 392 more (0.2%-0.7% each)"), spec.describe()
    few = MixtureBatches(list, MixtureOrder([10] * 8, [1] * 8), SamplingPlan(batch_size=8), names=list("abcdefgh"))
    assert "h 12.5%);" in few.describe() and "more" not in few.describe()
    # the repo_id LeRobot logs and writes into a checkpoint: 8 names, the count, a digest of every name in order
    from robo_loaders_plugin.lerobot.mixture_meta import mixture_repo_id

    names = [f"c{k}" for k in range(400)]
    rid = mixture_repo_id(names)
    assert rid.startswith("mixture(c0, c1,") and "c7, ... and 392 more; names " in rid and len(rid) < 120, rid
    assert mixture_repo_id(names[:8] + names[9:] + names[8:9]) != rid  # the same first 8, another mixture
    assert mixture_repo_id(list("abc")) == "mixture(a, b, c)"


def test_weighted_order_is_pure_and_never_repeats_a_window_within_a_cycle():
    sizes = [5, 300, 40]
    order = MixtureOrder(sizes, [1, 1, 1], seed=3)
    g = order.indices_of(0)
    assert np.array_equal(g, MixtureOrder(sizes, [1, 1, 1], seed=3).indices_of(0))
    assert not np.array_equal(g, order.indices_of(1)) and not np.array_equal(
        g, MixtureOrder(sizes, [1, 1, 1], 4).indices_of(0)
    )
    comps, local = order.split(g)
    for k, size in enumerate(sizes):
        mine = local[comps == k]
        for start in range(0, len(mine), size):  # each cycle through the component: distinct windows
            cycle = mine[start : start + size]
            assert len(np.unique(cycle)) == len(cycle)
        assert mine.max() < size
    assert len(local[comps == 0]) > sizes[0]  # the small component was cycled (so the check above had cycles)


@pytest.mark.parametrize("eligible", [False, True])
def test_a_weighted_pass_is_the_order_the_per_component_scan_drew(eligible):
    """The weighted pass groups each component's draws by one stable sort (a scan of the pass per component took
    16-26 s at 500 components and 10M windows): the same order as the scan, which this test keeps as the reference;
    the control: another seed's order differs."""
    sizes = [int(n) for n in np.random.default_rng(0).integers(1, 60, size=300)]
    weights = list(np.logspace(-3, 3, len(sizes)))
    chosen = [np.arange(0, n, 2) if eligible and n > 1 else None for n in sizes]
    order = MixtureOrder(sizes, weights, seed=9, eligible=chosen if eligible else None)
    epoch = 2
    comps = np.random.default_rng([9, epoch, 1]).choice(len(sizes), size=order.total, p=order.probabilities)
    want = np.empty(order.total, dtype=np.int64)
    for c in range(len(sizes)):  # the reference: the scan per component
        where = np.flatnonzero(comps == c)
        local = order._local(epoch, c, len(where))
        e = order.eligible[c]
        want[where] = order.offsets[c] + (local if e is None else e[local])
    assert np.array_equal(order.drawn(epoch), want)
    assert not np.array_equal(order.drawn(epoch + 1), want)


@pytest.mark.parametrize("shuffle", [True, False])
def test_weighted_by_size_serves_every_window_exactly_once(shuffle):
    order = MixtureOrder([7, 30, 13], None, seed=1, shuffle=shuffle)
    g = order.indices_of(2)
    assert np.array_equal(np.sort(g), np.arange(50))
    assert shuffle != np.array_equal(g, np.arange(50))


@pytest.mark.parametrize("weights", [None, [1.0, 3.0]])
@pytest.mark.parametrize("total, world", [(120, 4), (121, 3)])
def test_rank_shares_are_disjoint_pieces_covering_the_pass(weights, total, world):
    order = MixtureOrder([total - 40, 40], weights, seed=5)
    full = order.indices_of(0)
    pieces = [order.rank_indices(0, r, world) for r in range(world)]
    assert len({len(p) for p in pieces}) == 1  # the same batch count on every rank
    joined = np.concatenate(pieces)
    assert np.array_equal(joined[:total], full)  # disjoint positions covering the pass, in order
    assert np.array_equal(joined[total:], full[: len(joined) - total])  # the completion wraps (< world items)


def eligible_only(order: MixtureOrder, g: np.ndarray, eligible) -> bool:
    """Every served global index is among its component's eligible windows."""
    comps, local = order.split(g)
    return all(np.isin(local[comps == k], e).all() for k, e in enumerate(eligible))


@pytest.mark.parametrize("weights", [None, [1.0, 1.0, 4.0]])
def test_eligible_windows_only_are_drawn_and_by_size_each_exactly_once(weights):
    """A pass draws only the eligible windows (e.g. LeRobot's sampler's rows), indices still over every window; by
    size each eligible window exactly once. Negative control: the same check fails on the pass without them."""
    sizes = [12, 30, 9]
    eligible = [np.array([0, 1, 2, 5, 6]), np.arange(3, 30), np.array([8])]
    order = MixtureOrder(sizes, weights, seed=4, eligible=eligible)
    assert len(order) == 5 + 27 + 1 and order.rows == sum(sizes)
    for epoch in (0, 1):
        g = order.indices_of(epoch)
        assert len(g) == len(order) and eligible_only(order, g, eligible)
        if weights is None:
            served = np.sort(np.concatenate([o + e for o, e in zip(order.offsets, eligible)]))
            assert np.array_equal(np.sort(g), served)
    assert np.array_equal(order.split([sizes[0] + 1])[1], [1])  # an index of a left-out window still splits
    plain = MixtureOrder(sizes, weights, seed=4)
    assert not eligible_only(plain, plain.indices_of(0), eligible)  # negative control
    every = MixtureOrder(sizes, weights, seed=4, eligible=[np.arange(s) for s in sizes])
    assert np.array_equal(every.indices_of(0), plain.indices_of(0))  # all eligible: the same order as none given
    for bad, words in [([np.array([])] * 3, "component 0 has no eligible window"),
                       ([None, np.array([30]), None], "component 1's eligible windows must be distinct"),
                       ([None, np.array([1, 1]), None], "component 1's eligible windows must be distinct"),
                       ([None], "for 3 components")]:  # fmt: skip
        with pytest.raises(ValueError, match=words):
            MixtureOrder(sizes, weights, eligible=bad)


# -- batches and resume --------------------------------------------------------------------------------------------
def test_resume_mid_pass_gives_the_same_remaining_batches():
    order = MixtureOrder([30, 50, 17], [2, 1, 1], seed=9)
    plan = SamplingPlan(batch_size=8, drop_last=True)
    first = MixtureBatches(list, order, plan, names=["a", "b", "c"])
    passes = [list(first), list(first)]
    assert len(passes[0]) == len(first) == 97 // 8 and passes[0] != passes[1]
    assert "mixture of 3" in first.describe() and "a 50.0%" in first.describe()
    resumed = MixtureBatches(list, order, SamplingPlan(batch_size=8, drop_last=True, start_epoch=1, start_batch=5))
    assert list(resumed) == passes[1][5:]
    stopped = MixtureBatches(list, order, plan, num_threads=2)
    it = iter(stopped)
    head = [next(it) for _ in range(3)]
    state = stopped.state_dict()
    again = MixtureBatches(list, order, plan)
    again.load_state_dict(state)
    assert head + list(again) == passes[0]


# -- the mixed dataset ---------------------------------------------------------------------------------------------
class Plain(torch.utils.data.Dataset):
    def __init__(self, n, base, key="x"):
        self.n, self.base, self.key = n, base, key

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {self.key: torch.tensor([self.base + i, 0]), "extra": torch.tensor(i), "task": f"t{self.base}"}


class Indexed(IndexedDataset):
    def __init__(self, n, base):
        super().__init__(serving=Serving("indexed"))
        self.plain = Plain(n, base)

    def __len__(self):
        return self.plain.n

    def __getitem__(self, i):
        return self.plain[i]

    def collate(self, indices):
        return torch.utils.data.default_collate([self.plain[i] for i in indices])


def test_mixture_dataset_batches_follow_the_global_order_renamed_with_dataset_index():
    datasets = [Plain(10, 100), Indexed(5, 200), Plain(7, 300, key="z")]
    mix = MixtureDataset(
        datasets, ["a", "b", "c"], [{}, {}, {"z": "x"}], {"x", "task"}, MixtureHooks(), [1, 1, 1], 0, Serving("m")
    )
    assert len(mix) == 22 and mix.offsets.tolist() == [0, 10, 15]
    idx = [21, 0, 12, 3, 15, 11]
    batch = mix.collate(idx)
    assert set(batch) == {"x", "task", DATASET_INDEX}
    assert batch["x"][:, 0].tolist() == [306, 100, 202, 103, 300, 201]
    assert batch["task"] == ["t300", "t100", "t200", "t100", "t300", "t200"]
    assert batch[DATASET_INDEX].dtype == torch.int64 and batch[DATASET_INDEX].tolist() == [2, 0, 1, 0, 2, 1]
    for j, i in enumerate(idx):  # every item equals its component's item after the rename
        item = mix[i]
        assert torch.equal(item["x"], batch["x"][j]) and int(item[DATASET_INDEX]) == batch[DATASET_INDEX][j]
    source = mix.batch_source(SamplingPlan(batch_size=4, drop_last=False, seed=3))
    served = torch.cat([b["x"][:, 0] for b in source])
    assert sorted(served.tolist()) != list(range(len(served)))  # mixed values
    assert len(served) == 22
    with pytest.raises(IndexError):
        mix.collate([22])


class Pid(Plain):
    """Plain, each item saying which process built it."""

    def __getitem__(self, i):
        return {**super().__getitem__(i), "pid": torch.tensor(os.getpid())}


class BeforeWorkers(MixtureHooks):
    """Counts the calls made in this process before the workers start."""

    def __init__(self):
        self.calls = 0

    def before_workers(self, datasets):
        self.calls += 1


def passes(source, epochs):
    return [list(source.batches(e)) for e in epochs]


@pytest.mark.parametrize("context", [None, "spawn"])
def test_a_native_mixture_builds_its_batches_in_worker_processes_the_same_batches_as_threads(context):
    """Components that are the frameworks' own datasets (no ServedDataset): the plan's workers are processes started
    as the framework's DataLoader starts them (forked, or spawned as lerobot-train's), every batch the one threads
    build, in order, pass after pass (persistent workers), resumable mid-pass; a mixture with a backend's dataset
    keeps threads (the control: built in this process)."""

    def mixture(datasets):
        return MixtureDataset(datasets, ["a", "b"], [{}, {}], {"x", "pid"}, BeforeWorkers(), [1, 3], 0, Serving("m"))

    plan = SamplingPlan(batch_size=4, drop_last=False, seed=3, num_workers=2, worker_context=context)
    native = mixture([Pid(10, 100), Pid(9, 200)])
    source = native.batch_source(plan)
    assert source.processes is not None and "2 worker processes" in source.describe()
    assert source.processes._loader.multiprocessing_context is (None if context is None else mp.get_context(context))
    got = passes(source, [0, 1, 2])
    threads = MixtureBatches(native.collate, native.order(3), dataclasses.replace(plan, num_workers=0), 0)
    want = passes(threads, [0, 1, 2])
    for g, w in zip(got, want, strict=True):
        assert [b["x"].tolist() for b in g] == [b["x"].tolist() for b in w]
        assert [b[DATASET_INDEX].tolist() for b in g] == [b[DATASET_INDEX].tolist() for b in w]
    assert native.hooks.calls == 1  # before the workers started, once for the run
    pids = {int(p) for one in got for b in one for p in b["pid"]}
    assert os.getpid() not in pids and len(pids) == 2, pids  # two workers, kept from pass to pass
    resumed = native.batch_source(dataclasses.replace(plan, start_epoch=1, start_batch=2))
    assert [b["x"].tolist() for b in resumed.batches(1, 2)] == [b["x"].tolist() for b in want[1][2:]]
    first = source.batches(0)  # two passes at once: the second is built here, both whole
    a = [next(first)]
    b = list(source.batches(0))
    a += list(first)
    assert [x["x"].tolist() for x in a] == [x["x"].tolist() for x in b] == [x["x"].tolist() for x in want[0]]
    assert {int(p) for x in b for p in x["pid"]} == {os.getpid()}
    native.close()
    assert native._processes is None
    served = mixture([Pid(10, 100), Indexed(9, 200)]).batch_source(plan)  # control: a backend's dataset
    assert served.processes is None and "2 threads" in served.describe()
    # LeRobot's --num_workers=0 (its plan keeps a thread, asks for no process): built in this process
    alone = mixture([Pid(10, 100), Pid(9, 200)])
    one = alone.batch_source(dataclasses.replace(plan, num_workers=1, worker_processes=0))
    assert one.processes is None and alone._processes is None
    assert {int(p) for b in one.batches(0) for p in b["pid"]} == {os.getpid()}


@pytest.mark.parametrize("context", [None, "spawn"])
def test_a_native_mixture_dropped_without_close_lets_its_worker_processes_go(context):
    """A reviewer's reproduction: the mixture's worker DataLoader held its bound collate, a cycle, so a mixture let
    go without close() kept its worker processes until the cycle collector ran (never, here: collection is off).
    Now they stop when the mixture goes; the control: while it is kept, they run."""
    plan = SamplingPlan(batch_size=4, drop_last=False, seed=3, num_workers=2, worker_context=context)
    native = MixtureDataset(
        [Pid(10, 100), Pid(9, 200)], ["a", "b"], [{}, {}], {"x", "pid"}, BeforeWorkers(), [1, 3], 0, Serving("m")
    )
    gc.collect()
    gc.disable()
    try:
        source = native.batch_source(plan)
        pids = {int(p) for b in source.batches(0) for p in b["pid"]}
        assert os.getpid() not in pids and len(pids) == 2
        alive = {c.pid for c in mp.active_children()}
        assert pids <= alive  # control: kept, the workers run (persistent)
        del source, native
        deadline = time.monotonic() + 30
        while pids & {c.pid for c in mp.active_children()} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pids & {c.pid for c in mp.active_children()}
    finally:
        gc.enable()


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.bool, torch.bfloat16])
@pytest.mark.parametrize("pooled", [False, True])
def test_component_batches_are_scattered_into_the_batch_order_for_every_dtype(dtype, pooled):
    """Joining writes each component's rows straight to their places (numpy's assignment where it can, torch's
    indexing otherwise: bfloat16, which numpy lacks), into a recycled array or a new one: the same batch."""
    from robo_loaders_plugin.storage.buffers import BufferPool

    rows = torch.tensor([[(r >> b) & 1 for b in range(6)] for r in range(1, 10)]).reshape(9, 3, 2).to(dtype)
    parts = list(rows.split([3, 2, 4]))  # every row distinct, in every dtype
    order = np.array([4, 0, 7, 2, 8, 1, 5, 3, 6])  # result[j] = joined[order[j]]
    inverse = np.argsort(order)  # where each joined row goes
    assert not np.array_equal(inverse, order)  # so placing by the wrong one of the two would be caught
    positions = np.split(inverse, [3, 5])
    want = torch.cat(parts)[torch.as_tensor(order)]
    arrays = [p.float().numpy() for p in parts]  # the numpy arrays a component may serve
    hooks, pool = MixtureHooks(), BufferPool() if pooled else None
    got = hooks.concat([{"x": p, "n": a} for p, a in zip(parts, arrays)], positions, 9, pool)
    assert got["x"].dtype == dtype and torch.equal(got["x"], want)
    assert got["n"].dtype == np.float32 and np.array_equal(got["n"], np.concatenate(arrays)[order])
    in_order = np.split(np.arange(9), [3, 5])
    assert torch.equal(hooks.concat(parts, in_order, 9, pool), torch.cat(parts))  # as joined
    # control: the batch placed by the other permutation is another batch
    wrong = hooks.concat(parts, np.split(order, [3, 5]), 9, pool)
    assert not torch.equal(wrong, want)


@pytest.mark.parametrize("framework", ["lerobot", "robomimic"])
def test_missing_camera_zeros_and_flags_are_made_on_the_batch_s_device(framework):
    """``"missing_cameras": "zeros"``: a component's zeros, ``_is_pad`` and ``_is_missing`` are made where its own
    batch is (a ``gpu_resampler`` batch on CUDA), not on the CPU, whatever device the template (another component's
    item) is on. The ``meta`` device stands for the GPU here (a CPU run cannot see the difference otherwise).
    Control: the template's and the CPU's device differ from the batch's, so made as before (the flag from numpy,
    the mask on the CPU) they would be on the CPU."""
    from robo_loaders_plugin.mixtures.missing import fill_flat, missing_key
    from robo_loaders_plugin.robomimic.mixture import RobomimicHooks

    meta, rows = torch.device("meta"), 4
    own = torch.zeros((rows, 3), device=meta)
    if framework == "lerobot":
        templates = {"cam": torch.zeros((2, 8, 8), dtype=torch.uint8), "cam_is_pad": torch.zeros(2, dtype=torch.bool)}
        out = fill_flat({"state": own}, ["cam"], templates, rows)
        made = [out["cam"], out["cam_is_pad"], out[missing_key("cam")]]
    else:
        templates = {("obs", "cam"): np.zeros((2, 8, 8), dtype=np.uint8)}
        out = RobomimicHooks.fill(object.__new__(RobomimicHooks), {"obs": {"state": own}}, ["cam"], templates, rows)
        made = [out["obs"]["cam"], out[missing_key("cam")]]
    assert [t.device.type for t in made] == ["meta"] * len(made)
    assert made[-1].dtype == torch.bool and made[-1].shape == (rows,)
    cpu = fill_flat({"state": torch.zeros((rows, 3))}, ["cam"], {"cam": torch.zeros((2,), device=meta)}, rows)
    assert cpu["cam"].device.type == "cpu" and cpu[missing_key("cam")].device.type == "cpu"  # the control


def test_a_padded_key_s_mask_is_made_on_the_batch_s_device():
    """A padded key's ``_dim_mask`` is made where the padded batch is (``meta`` standing for the GPU), with the same
    values as on the CPU. Control: the CPU batch's mask is on the CPU (made from numpy as before, it always was)."""
    from robo_loaders_plugin.mixtures.padding import mask_key, pad_flat

    on_meta = pad_flat({"action": torch.zeros((4, 2), device=torch.device("meta"))}, {"action": (2, 5)}, 4)
    on_cpu = pad_flat({"action": torch.zeros((4, 2))}, {"action": (2, 5)}, 4)
    assert on_meta[mask_key("action")].device.type == "meta" and on_meta[mask_key("action")].shape == (4, 5)
    assert on_cpu[mask_key("action")].device.type == "cpu"
    assert on_cpu[mask_key("action")].tolist() == [[True, True, False, False, False]] * 4
    assert pad_flat({"a": torch.zeros(2)}, {"a": (2, 3)}, None)[mask_key("a")].tolist() == [True, True, False]


@pytest.mark.parametrize("components", [400, 3])
def test_a_mixture_refused_for_its_footprint_says_so_in_a_bounded_line(components):
    """``mixtures.footprint.check_mixture_fits``' refusal named every component's share and every component that
    would fit (~100 characters each: a line of tens of kB at 400 components). Past 8 components it names the 8
    largest shares (largest first) and counts the rest, and the components that would fit by their first 8 names;
    a mixture of a few names every share in order (the control: nothing left out)."""
    from robo_loaders_plugin.core.footprint import Available, Footprint, Planned, ResourceRefused
    from robo_loaders_plugin.core.units import format_bytes
    from robo_loaders_plugin.mixtures.footprint import check_mixture_fits

    sizes = [(1 + (k * 7919) % 13) << 20 for k in range(components)]
    available = Available(host_bytes=int(sum(sizes[: components - 1]) / 0.9) + 1, shm_bytes=0, shm_dir="/dev/shm")
    names = [f"lab/robot_{k:03d}" for k in range(components)]
    with pytest.raises(ResourceRefused) as refused:
        check_mixture_fits(
            "--dataset.mixture",
            names,
            lambda k, committed: Planned(Footprint(host_bytes=sizes[k]), available),
            backend="compressed_cache",
            option_prefix="--dataset.backend_kwargs",
        )
    line = str(refused.value)
    assert "\n" not in line and line.startswith("--dataset.mixture: backend 'compressed_cache' cannot serve")
    assert f"Would fit: the first {components - 1} components" in line
    if components <= 8:
        shares = "Each component's share: " + "; ".join(
            f"[{k}] {n}: host RAM {format_bytes(s)}" for k, (n, s) in enumerate(zip(names, sizes))
        )
        assert shares in line and ", ".join(names[:-1]) in line
        return
    assert len(line) < 2000, len(line)
    largest = sorted(range(components), key=lambda k: -sizes[k])[:8]
    named = "The largest components' shares: " + "; ".join(
        f"[{k}] {names[k]}: host RAM {format_bytes(sizes[k])}" for k in largest
    )
    assert named + f"; ... and {components - 8} more." in line, line
    assert f"({', '.join(names[:8])}, ... and {components - 9} more)" in line


@pytest.mark.parametrize("components", [400, 3])
def test_the_padding_log_line_stays_short_with_hundreds_of_components(components, caplog):
    """``mixtures.padding.plan_padding`` logs one line per padded key with each component's size: past 8
    components, each size with how many components have it and the first three of them (400 components made a
    ~10 kB line per key); a few components are each named with their size (the control)."""
    import logging

    from robo_loaders_plugin.mixtures.padding import plan_padding

    names = [f"component {k} (lab/robot_{k:03d})" for k in range(components)]
    widths = [(7, 14, 6)[k % 3] for k in range(components)]
    with caplog.at_level(logging.INFO, logger="robo_loaders_plugin"):
        padding = plan_padding("--dataset.mixture", names, [{"action": w} for w in widths], {})
    assert padding.sizes == {"action": 14}
    (line,) = [r.getMessage() for r in caplog.records if "padded with zeros" in r.getMessage()]
    assert line.endswith("action_dim_mask marks the real entries"), line
    if components <= 8:
        assert "(sizes: " + ", ".join(f"{n} {w}" for n, w in zip(names, widths)) + ")" in line
        return
    assert len(line) < 600, line
    assert f"7 for 134 components ({', '.join(names[0:9:3])}, ... and 131 more)" in line, line
    assert f"14 for 133 components ({', '.join(names[1:10:3])}, ... and 130 more)" in line, line
    assert "6 for 133 components" in line


def test_a_refusal_names_the_components_largest_in_what_is_short():
    """Past 8 components the refusal ranks the shares by the resource that does not fit: with the disk short and
    RAM plenty, the components writing the most are named, not those holding the most RAM (control: with RAM
    short, the RAM's largest)."""
    from robo_loaders_plugin.core.footprint import Available, Footprint, Planned, ResourceRefused
    from robo_loaders_plugin.mixtures.footprint import check_mixture_fits

    n = 20
    shares = [Footprint(host_bytes=(n - k) << 20, disk_bytes=(k + 1) << 30, disk_dir="/c") for k in range(n)]
    names = [f"c{k:02d}" for k in range(n)]

    def refusal(available):
        with pytest.raises(ResourceRefused) as refused:
            check_mixture_fits("m", names, lambda k, c: Planned(shares[k], available), backend="b", option_prefix="o")
        return str(refused.value)

    disk_short = Available(host_bytes=100 << 30, shm_bytes=0, shm_dir="/s", disk_bytes=20 << 30, disk_dir="/c")
    line = refusal(disk_short)
    assert "shares: [19] c19: " in line and "[0] c00" not in line.split("Would fit")[0], line
    ram_short = Available(host_bytes=50 << 20, shm_bytes=0, shm_dir="/s", disk_bytes=1 << 50, disk_dir="/c")
    line = refusal(ram_short)
    assert "shares: [0] c00: " in line and "[19] c19" not in line, line


def test_the_missing_camera_lines_group_the_components_lacking_the_same_cameras(caplog):
    """``mixtures.missing.missing_lines``: one line per set of cameras lacked, naming three of its components and
    counting the rest (400 components of three robots printed 267 lines); a component alone in its set keeps its
    own line (the control: the line of one component is as before)."""
    from robo_loaders_plugin.mixtures.missing import missing_lines

    cams = ["observation.images.cam0", "observation.images.cam1", "observation.images.cam2"]
    names = [f"component {k} (lab/robot_{k:03d})" for k in range(400)]
    missing = [cams[1 + k % 3 :] if k % 3 < 2 else [] for k in range(400)]
    lines = missing_lines(names, missing)
    assert lines == [
        f"134 components have no {cams[1]}, {cams[2]} ({', '.join(names[0:7:3])}, ... and 131 more): served as "
        f"zeros, flagged by {cams[1]}_is_missing, {cams[2]}_is_missing",
        f"133 components have no {cams[2]} ({', '.join(names[1:8:3])}, ... and 130 more): served as zeros, "
        f"flagged by {cams[2]}_is_missing",
    ], lines
    assert missing_lines(names[:3], [[], [cams[2]], []]) == [
        f"{names[1]} has no {cams[2]}: served as zeros, flagged by {cams[2]}_is_missing"
    ]
    assert missing_lines(names[:2], [[], []]) == []


class _Built:
    def __init__(self, reused):
        from robo_loaders_plugin.core.iteration import Serving

        self.serving = Serving("served", reused=reused)


@pytest.mark.parametrize("components", [9, 8])
def test_component_lines_past_eight_components_log_at_debug_under_one_bar_and_count(components, caplog, capsys):
    """``mixtures.component_lines.ComponentLines``: past 8 components each line at DEBUG, the backends' bars
    quieted (``core.progress.inner_bars_quiet``), and one INFO line counting the stores reused and those built; at
    8 (the control) each line at INFO, the bars shown, no count."""
    import logging

    from robo_loaders_plugin.core.progress import inner_bars_quiet
    from robo_loaders_plugin.mixtures.component_lines import ComponentLines

    logger = logging.getLogger("robo_loaders_plugin.test_component_lines")
    quiet = []
    with (
        caplog.at_level(logging.DEBUG, logger="robo_loaders_plugin"),
        ComponentLines(components, "compressed_cache", logger, "--dataset.mixture") as lines,
    ):
        for k in range(components):
            quiet.append(inner_bars_quiet())
            lines.built(f"component {k} (lab/r{k})", _Built(k % 4 != 1), f"component {k}'s line")
    assert not inner_bars_quiet()
    levels = {r.getMessage(): r.levelno for r in caplog.records}
    own = [levels[f"component {k}'s line"] for k in range(components)]
    if components <= 8:
        assert own == [logging.INFO] * components and not any(quiet)
        assert not any("datasets built by" in m for m in levels)
        return
    assert own == [logging.DEBUG] * components and all(quiet)
    assert "compressed_cache mixture: 100%" in capsys.readouterr().err
    (count,) = [m for m in levels if "datasets built by" in m]
    assert count == (
        "--dataset.mixture: 9 components' datasets built by compressed_cache; their stores: 7 reused, 2 built "
        "(component 1 (lab/r1), component 5 (lab/r5)); each component's line is logged at DEBUG "
        "(ROBO_LOADERS_LOG_LEVEL=DEBUG prints them)"
    ), count


def test_component_lines_count_nothing_of_datasets_that_keep_no_store_and_nothing_after_an_error(caplog):
    """A backend that keeps no store between runs (``Serving.reused`` is ``None``) is counted without the stores'
    clause; a build that fails logs no count (what failed is the error's line)."""
    import logging

    from robo_loaders_plugin.mixtures.component_lines import ComponentLines

    logger = logging.getLogger("robo_loaders_plugin.test_component_lines")
    with caplog.at_level(logging.INFO, logger="robo_loaders_plugin"):
        with ComponentLines(12, "video_stream", logger) as lines:
            for k in range(12):
                lines.built(f"component {k}", _Built(None), "its line")
        with pytest.raises(RuntimeError), ComponentLines(12, "compressed_cache", logger) as lines:
            lines.built("component 0", _Built(False), "its line")
            raise RuntimeError("refused")
    counts = [r.getMessage() for r in caplog.records if "datasets built by" in r.getMessage()]
    assert counts == [
        "mixture: 12 components' datasets built by video_stream; each component's line is logged at DEBUG "
        "(ROBO_LOADERS_LOG_LEVEL=DEBUG prints them)"
    ], counts


def _open_at_most(units: np.ndarray) -> int:
    """The most units open at once along ``units`` (a unit is open from its first to its last position)."""
    _, first = np.unique(units, return_index=True)
    _, last_rev = np.unique(units[::-1], return_index=True)
    last = len(units) - 1 - last_rev
    change = np.zeros(len(units) + 1, dtype=np.int64)
    np.add.at(change, first, 1)
    np.add.at(change, last + 1, -1)
    return int(np.cumsum(change).max())


@pytest.mark.parametrize("weights", [None, [1.0, 1.0, 6.0]])
def test_a_pass_served_by_unit_keeps_its_windows_and_shares_and_opens_few_units(weights):
    """``MixtureOrder(units=...)``: each pass serves the windows it drew (the same multiset, so the same shares),
    at most ``unit_buffer`` units open at once, each component's share the same in every tenth of the pass and in
    every rank's piece (the third component, 2,400 windows weighted 6, is drawn ~7 times over: its units are served
    in visits spread over the pass, so only the others' units are counted open), a function of (seed, pass).
    Controls: the drawn order keeps most units open; the units served one component after another keep few open but
    fail the shares per tenth."""
    sizes = [4000, 16000, 2400]
    units = np.arange(sum(sizes)) // 10  # 10 windows per unit, none shared by two components (sizes are multiples)
    plain = MixtureOrder(sizes, weights, seed=7)
    by_unit = MixtureOrder(sizes, weights, seed=7, units=units, unit_buffer=8)
    p = np.asarray(sizes if weights is None else weights, dtype=np.float64)
    p = p / p.sum()

    def steady(order, served) -> bool:  # every tenth of the pass within 0.12 of each component's share (~4 sd)
        comps, _ = order.split(served)
        return all(
            np.abs(np.bincount(part, minlength=3) / len(part) - p).max() < 0.12 for part in np.array_split(comps, 10)
        )

    def most_open(served) -> int:  # units of the components drawn at most once per window
        once = served[served < sizes[0] + sizes[1]] if weights else served
        return _open_at_most(units[once])

    for epoch in range(2):
        drawn, served = plain.indices_of(epoch), by_unit.indices_of(epoch)
        assert np.array_equal(by_unit.drawn(epoch), drawn) and np.array_equal(np.sort(served), np.sort(drawn))
        assert shares_within_bound(by_unit, served, p)
        assert most_open(served) <= 8 < most_open(drawn)
        assert steady(by_unit, served) and steady(plain, drawn)
        grouped = drawn[np.argsort(units[drawn], kind="stable")]  # control: one unit, one component, after another
        assert most_open(grouped) <= 8 and not steady(plain, grouped)
        assert np.array_equal(served, MixtureOrder(sizes, weights, 7, units=units, unit_buffer=8).indices_of(epoch))
    assert not np.array_equal(by_unit.indices_of(0), by_unit.indices_of(1))
    pieces = [by_unit.rank_indices(0, r, 3) for r in range(3)]
    assert np.array_equal(np.concatenate(pieces)[: len(by_unit)], by_unit.indices_of(0))
    for piece in pieces:
        comps, _ = by_unit.split(piece)
        assert np.abs(np.bincount(comps, minlength=3) / len(comps) - p).max() < 0.05
    ordered = MixtureOrder(sizes, weights, 7, shuffle=False, units=units, unit_buffer=8)
    assert np.array_equal(ordered.indices_of(0), ordered.drawn(0))  # an ordered pass stays in order
    with pytest.raises(ValueError, match="units must be 22400 non-negative integers"):
        MixtureOrder(sizes, weights, 7, units=units[:-1])
