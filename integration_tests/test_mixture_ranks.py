"""Mixtures under 2 processes (torchrun, gloo on CPU), robomimic and LeRobot: each rank serves its own piece of
every pass of the mixture's order, and the pieces together are the one-process pass, each component's windows cycled
without a window served twice before every other window of its component was served once (weights "size": every
window of every component exactly once, the ranks' windows disjoint).

integration_tests/ranks_mixture_script.py runs inside torchrun (and alone, as the one-process reference). robomimic:
datasets from robomimic's patched ``dataset_factory`` with the rank from torchrun's environment, a pass as
``run_epoch`` iterates it; windows identified by their component and a digest of their action window, mapped to the
windows of each component's own ``SequenceDataset``. LeRobot: lerobot-train's sampler, a real ``accelerate``
Accelerator and the plugin's ``cycle``; frames identified by their component and ``index``. Negative control
(robomimic): the same mixture built with the ``seed + rank`` idiom and its first-pass check disabled fails these
checks.
"""

import json
import math
import os
import subprocess
import sys
from collections import Counter

import pytest
from test_multiprocess import WORLD, env, torchrun
from test_robomimic_mixture import _write

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ranks_mixture_script.py")
WEIGHTS = (1.0, 2.0, 3.0)  # component 2 is drawn more often than it has windows: it cycles within a pass
CASES = {"size": "native:size", "given": "compressed_cache:" + ",".join(map(str, WEIGHTS))}
LEROBOT_CASES = {"size": "compressed_cache:size", "given": "native:" + ",".join(map(str, WEIGHTS))}


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """61, 45 and 51 windows: 157 in all, odd, so rank 1's piece is completed from the pass's start."""
    d = tmp_path_factory.mktemp("mixranks")
    return [_write(str(d / f"{n}.hdf5"), seed, demos) for n, seed, demos in (("a", 31, 4), ("b", 32, 3), ("c", 38, 3))]


@pytest.fixture(scope="module")
def windows(parts):
    """Each component's windows (digests of their action windows) as its own SequenceDataset serves them."""
    import hashlib

    import numpy as np
    import robomimic.utils.train_utils as TrainUtils
    from robomimic_helpers import make_config, obs_keys

    out = []
    for path in parts:
        config = make_config(path, rgb=[], low_dim=["robot0_eef_pos"], backend=None, seq_length=3)
        ds = TrainUtils.dataset_factory(config, obs_keys(config))
        out.append(
            [hashlib.sha1(np.ascontiguousarray(ds[i]["actions"]).tobytes()).hexdigest()[:16] for i in range(len(ds))]
        )
        assert len(set(out[-1])) == len(out[-1]), "windows that share a digest: counting them would prove nothing"
    return out


def run_script(framework, data, tmp_path_factory, cases):
    """``(ranks, single)``: per rank and the one-process run, ``{case: [pass: [(component, id), ...]]}``."""
    cases = [f"{name}={spec}" for name, spec in cases.items()]
    out, one = str(tmp_path_factory.mktemp("mix_ranks")), str(tmp_path_factory.mktemp("mix_one"))
    torchrun(SCRIPT, framework, out, data, *cases)
    p = subprocess.run(
        [sys.executable, SCRIPT, framework, one, data, *cases],
        capture_output=True,
        text=True,
        env=env(),
        timeout=600,
        cwd=HERE,
    )
    assert p.returncode == 0, p.stderr[-4000:]

    def load(path):
        data = json.load(open(path))
        return {case: [[tuple(w) for w in one_pass] for one_pass in passes] for case, passes in data.items()}

    return [load(os.path.join(out, f"rank{r}.json")) for r in range(WORLD)], load(os.path.join(one, "rank0.json"))


@pytest.fixture(scope="module")
def served(parts, tmp_path_factory):
    return run_script("robomimic", ",".join(parts), tmp_path_factory, CASES)


@pytest.fixture(scope="module")
def lerobot_served(lerobot_mixture_datasets, tmp_path_factory):
    """The LeRobot runs and each component's frames (``index`` 0..n-1: no episode filter)."""
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata

    ds = [lerobot_mixture_datasets[n] for n in "abc"]
    runs = run_script("lerobot", ",".join(f"{repo}={root}" for repo, root in ds), tmp_path_factory, LEROBOT_CASES)
    frames = [list(range(LeRobotDatasetMetadata(repo, root=root).total_frames)) for repo, root in ds]
    return runs, frames


def problems(shares, single, windows, weighted):
    """What is wrong with the ranks' ``shares`` of one pass, against the one-process pass ``single`` and each
    component's ``windows``: ``order: ...`` (the shares are not the pass cut in pieces) or ``served: ...`` (a
    component's windows not served in cycles: one twice before another once, or not at all by weights "size")."""
    total = len(single)
    per_rank = -(-total // WORLD)
    found = []
    if [len(s) for s in shares] != [per_rank] * WORLD:
        found.append(f"order: ranks serve {[len(s) for s in shares]} windows, not {per_rank} each")
    joined = [w for s in shares for w in s]
    if joined != single + single[: per_rank * WORLD - total]:  # the last piece completed from the pass's start
        found.append("order: the ranks' shares, in rank order, are not the one-process pass")
    counts = Counter(joined[:total])  # without the completion (served twice by design, as accelerate's)
    for k, own in enumerate(windows):
        n = sum(c for (comp, _), c in counts.items() if comp == k)
        unknown = {d for (comp, d) in counts if comp == k} - set(own)
        if unknown:
            found.append(f"served: component {k} served {len(unknown)} windows it does not have")
        allowed = {1} if not weighted else {n // len(own), math.ceil(n / len(own))}
        bad = Counter(counts[(k, d)] for d in own if counts[(k, d)] not in allowed)
        if bad:
            found.append(
                f"served: component {k} ({n} draws, {len(own)} windows): windows served (times, how many) "
                f"{sorted(bad.items())}, not {sorted(allowed)} times"
            )
    return found


def check_split(ranks, single, windows, case):
    """Every pass of ``case`` passes :func:`problems`; by size the ranks' windows are disjoint; passes differ; a
    weighted case draws one component more often than it has windows (so its cycles are checked) and another less."""
    weighted = case != "size"
    for p in range(len(single[case])):
        shares = [r[case][p] for r in ranks]
        found = problems(shares, single[case][p], windows, weighted)
        assert not found, (case, p, found)
        if not weighted:  # by size the ranks' windows are disjoint (but for the completion)
            total = len(single[case][p])
            first, second = set(shares[0]), set(shares[1][: total - len(shares[0])])
            assert not first & second and len(first | second) == sum(map(len, windows)), (case, p)
    assert single[case][0] != single[case][1], "two passes in the same order: the pass number is unused"
    if weighted:  # the cycling is exercised: a component drawn more often than it has windows
        draws = Counter(k for k, _ in single[case][0])
        assert any(draws[k] > len(w) for k, w in enumerate(windows)), draws
        assert any(draws[k] < len(w) for k, w in enumerate(windows)), draws


@pytest.mark.parametrize("case", list(CASES))
def test_robomimic_ranks_split_every_pass_of_the_mixture(served, windows, case):
    ranks, single = served
    assert len(single[case][0]) % WORLD == 1  # the completion of the last piece is exercised
    check_split(ranks, single, windows, case)


@pytest.mark.parametrize("case", list(LEROBOT_CASES))
def test_lerobot_ranks_split_every_pass_of_the_mixture(lerobot_served, case):
    (ranks, single), frames = lerobot_served
    check_split(ranks, single, frames, case)


def test_checks_fail_on_ranks_that_cut_different_orders(served, windows):
    """Negative control: ranks built with seed + rank (first-pass check disabled) each cut their piece of another
    order: the checks above find windows served twice and others never, not only a different order."""
    ranks, single = served
    for p in range(len(single["size"])):
        found = problems([r["control"][p] for r in ranks], single["size"][p], windows, weighted=False)
        assert any(f.startswith("served:") for f in found), found
