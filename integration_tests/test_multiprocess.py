"""Every backend under 2 processes (torchrun, gloo on CPU): each rank gets a disjoint share of every pass (together
the whole pass, up to the wrap padding that keeps batch counts equal), the same number of batches per rank, seeds
that agree across ranks, and for the backends that keep the sampler's order exactly native's share per rank.

integration_tests/ranks_script.py runs inside torchrun: LeRobot through a real accelerate.Accelerator and the
plugin's cycle() as lerobot-train uses them; robomimic through the patched dataset_factory (rank from torchrun's
environment) and the pass robomimic's run_epoch iterates; integration_tests/ranks_late_group_script.py is a robomimic
loop that initialises the process group only after building its datasets (checked at the first pass). Then the real
lerobot-train under torchrun."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import warnings
from collections import Counter

import pytest
from lerobot_helpers import REPO
from process_dump import run_tree

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
BATCH, WORLD = 8, 2  # ranks_script.py's batch size; processes
LEROBOT_BACKENDS = ("native", "compressed_cache", "datapipe", "gpu_resampler", "video_stream")
SAMPLER_ORDER = ("native", "compressed_cache", "gpu_resampler")  # indexed backends: the sampler's order


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env():
    e = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
        PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
    )
    e.pop("ROBO_LOADERS_DISABLE", None)
    return e


def torchrun(*args, timeout=600, env_extra=None, finished=None, before_retry=None):
    """Run ``args`` under torchrun with 2 processes; its output.

    A run that printed ``finished`` (its work done, e.g. lerobot-train's "End of training") and then did not exit is
    run once more, with the stopped tree's threads and stacks given as a warning. Why: torch 2.11's gloo teardown
    can deadlock (its native stacks, recorded by process_dump): at the end of lerobot-train's ``train()``, dropping
    DDP's ``Reducer`` destroys the last reference to the ``ProcessGroupGloo`` with the GIL held, and its destructor
    waits for the work mutex, while a gloo work thread holds that mutex and waits for the GIL to release the Python
    tensors of the finished barrier's work (pytorch/pytorch#56297; the no-GIL destructor covers the Python handle
    of a process group, not the Reducer's). Nothing of the plugin is on either stack, and a native run can hang the
    same way. What the run is checked for is its output and files; a second hang after finishing, or any hang
    before, fails the test.
    """
    cmd = [
        os.path.join(BIN, "torchrun"),
        "--nproc_per_node",
        str(WORLD),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        *args,
    ]
    ran = run_tree(cmd, {**env(), **(env_extra or {})}, timeout, cwd=HERE, finished=finished)
    if ran.hung_after_finish and before_retry is not None:
        warnings.warn(
            f"torchrun {args[0]} hung after finishing; ran again. Its end:\n{ran.stderr[-8000:]}", stacklevel=2
        )
        before_retry()
        cmd[cmd.index("--master_port") + 1] = str(free_port())
        ran = run_tree(cmd, {**env(), **(env_extra or {})}, timeout, cwd=HERE, finished=finished)
    if ran.returncode is None:  # where the ranks waited: their threads and stacks (process_dump)
        said = (ran.stdout + ran.stderr)[-16000:]
        pytest.fail(f"torchrun {' '.join(map(str, args[:1]))} was stopped; its output's end:\n{said}")
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-6000:]
    return ran.stdout + ran.stderr


def load(out, framework, ranks):
    return [json.load(open(os.path.join(out, f"{framework}-rank{r}.json"))) for r in range(ranks)]


@pytest.fixture(scope="module")
def lerobot_ranks(lerobot_datasets, tmp_path_factory):
    root = lerobot_datasets["av1_1cam"]
    out = str(tmp_path_factory.mktemp("ranks"))
    torchrun(os.path.join(HERE, "ranks_script.py"), "lerobot", str(root), out, *LEROBOT_BACKENDS)
    from lerobot.datasets import LeRobotDataset

    return load(out, "lerobot", WORLD), LeRobotDataset(REPO, root=root).num_frames


@pytest.mark.parametrize("backend", LEROBOT_BACKENDS)
def test_lerobot_ranks_split_every_pass(lerobot_ranks, backend):
    ranks, frames = lerobot_ranks
    for p in range(2):
        shares = [r[backend][p] for r in ranks]
        assert len(shares[0]) == len(shares[1]), f"pass {p}: batch counts per rank differ"  # nobody waits at the end
        served = Counter(i for share in shares for batch in share for i in batch)
        assert set(served) == set(range(frames)), f"pass {p}: the ranks together miss frames"
        assert sum(served.values()) - frames < BATCH * WORLD, "more repeats than the padding of the last batches"
    assert ranks[0][backend][0] != ranks[0][backend][1], "two passes in the same order: the epoch seeds are unused"
    if backend in SAMPLER_ORDER:  # the sampler's order: exactly the native share of each rank
        for r in ranks:
            assert r[backend] == r["native"]


@pytest.fixture(scope="module")
def robomimic_ranks(tiny_hdf5, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("rm_ranks"))
    backends = ("compressed_cache", "datapipe", "gpu_resampler")
    torchrun(os.path.join(HERE, "ranks_script.py"), "robomimic", tiny_hdf5, out, *backends)
    one = str(tmp_path_factory.mktemp("rm_one"))
    p = subprocess.run(
        [sys.executable, os.path.join(HERE, "ranks_script.py"), "robomimic", tiny_hdf5, one, *backends],
        capture_output=True,
        text=True,
        env=env(),
        timeout=600,
        cwd=HERE,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    return load(out, "robomimic", WORLD), load(one, "robomimic", 1)[0], backends


def test_robomimic_custom_loop_ranks_split_every_pass(robomimic_ranks):
    """robomimic has no multi-process training of its own: dataset_factory reads the rank from torchrun's
    environment, and the two ranks' windows are the single-process pass's, split."""
    ranks, single, backends = robomimic_ranks
    for backend in backends:
        every = Counter(w for p in single[backend] for batch in p for w in batch)
        for p in range(2):
            shares = [r[backend][p] for r in ranks]
            assert len(shares[0]) == len(shares[1]) > 0, (backend, p)
            served = Counter(w for share in shares for batch in share for w in batch)
            assert set(served) <= set(every), f"{backend}: windows no single-process pass serves"
            repeats = sum(served.values()) - len(served)
            assert repeats < BATCH * WORLD, (backend, repeats)
            # drop_last may leave out less than a batch per rank; nothing else is missing
            assert len(set(every)) - len(served) < BATCH * WORLD, (backend, len(set(every)), len(served))


LATE_GROUP_BACKENDS = ("compressed_cache", "gpu_resampler", "datapipe")


@pytest.fixture(scope="module")
def late_group(tiny_hdf5, tmp_path_factory):
    """ranks_late_group_script.py under torchrun: datasets built from RANK/WORLD_SIZE before the process group
    exists; per rank, per backend, per case: the refusal or the windows served in each of two passes."""
    out = tmp_path_factory.mktemp("late_group")
    torchrun(os.path.join(HERE, "ranks_late_group_script.py"), tiny_hdf5, str(out), *LATE_GROUP_BACKENDS)
    return [json.load(open(out / f"rank{r}.json")) for r in range(WORLD)]


@pytest.fixture(scope="module")
def native_windows(tiny_hdf5):
    """The digests of every window robomimic's own SequenceDataset serves (as the script's datasets are set up)."""
    import hashlib

    import numpy as np
    import robomimic.utils.train_utils as TrainUtils
    from robomimic_helpers import make_config, obs_keys

    config = make_config(tiny_hdf5, rgb=[], low_dim=["robot0_eef_pos"], backend=None, seq_length=3, seed=11)
    dataset = TrainUtils.dataset_factory(config, obs_keys(config))
    windows = [
        hashlib.sha1(np.ascontiguousarray(dataset[i]["actions"]).tobytes()).hexdigest()[:16]
        for i in range(len(dataset))
    ]
    assert len(set(windows)) == len(windows), "windows that share a digest: counting them would prove nothing"
    return windows


@pytest.mark.parametrize("backend", LATE_GROUP_BACKENDS)
def test_robomimic_ranks_built_before_the_group_are_checked_at_the_first_pass(late_group, backend):
    """A custom loop that builds its dataset from RANK/WORLD_SIZE and then initialises the process group: the
    ranks are checked at the first pass (a per-rank seed, a per-rank batch size), on every rank, naming the value;
    with no process group at all by the first pass, every rank refuses and says how to make the ranks checkable.
    Datasets built for shares that do not make up the pass (rank=0 given on both ranks) are refused."""
    for r in range(WORLD):
        got = late_group[r][backend]
        for case in ("no process group", "seed + rank", "per-rank batch size"):
            assert isinstance(got[case], str), f"rank {r}, {case}: served {len(got[case][0])} windows, not refused"
        assert got["no process group"].startswith(
            f"REFUSED robomimic data backend {backend}: this dataset was built "
            f"as rank {r} of 2, but no torch.distributed process group is "
            "initialised at its first pass"
        ), got["no process group"]
        assert "call torch.distributed.init_process_group() before the first pass" in got["no process group"]
        assert got["seed + rank"].startswith("REFUSED "), got["seed + rank"]
        assert "the 2 ranks disagree on train.seed (rank 0: 11; rank 1: 12)" in got["seed + rank"]
        assert "disagree on the DataLoader's batch_size (rank 0: 8; rank 1: 9)" in got["per-rank batch size"]
        assert (
            "the 2 processes of the torch.distributed group built their datasets as rank 0 of 2, rank 0 of 2"
            in got["both rank 0"]
        ), got["both rank 0"]


def served_per_pass(late_group, backend, case):
    """Per pass: how many windows each rank served, and how often each window was served by the ranks together."""
    shares = [late_group[r][backend][case] for r in range(WORLD)]
    assert not any(isinstance(s, str) for s in shares), shares
    return [([len(s[p]) for s in shares], Counter(w for s in shares for w in s[p])) for p in range(len(shares[0]))]


@pytest.mark.parametrize("backend", LATE_GROUP_BACKENDS)
def test_robomimic_ranks_built_before_the_group_serve_every_window_once(late_group, native_windows, backend):
    """Ranks that agree, built before the group: every pass, the two ranks together serve each of the native
    SequenceDataset's windows exactly once (up to the wrap padding that keeps both ranks' counts equal); the
    negative control (the same loop with a seed + rank and the first-pass check disabled, the behaviour before it)
    serves some windows twice and others never."""
    total = len(native_windows)
    per_rank = -(-total // WORLD)
    for counts, served in served_per_pass(late_group, backend, "same setup"):
        assert counts == [per_rank] * WORLD, counts
        assert set(served) == set(native_windows), f"{len(set(native_windows) - set(served))} windows never served"
        twice = sorted(w for w, n in served.items() if n > 1)
        assert len(twice) == per_rank * WORLD - total and max(served.values()) <= 2, f"served twice: {twice}"
    for _, served in served_per_pass(late_group, backend, "seed + rank, check disabled"):
        assert sum(c > 1 for c in served.values()) > total // 10, "the control served no window twice"
        assert len(set(native_windows) - set(served)) > total // 10, "the control missed no window"


def lerobot_train_2proc(root, out, backend, *extra, env_extra=None):
    return lerobot_train_torchrun(
        out,
        f"--dataset.repo_id={REPO}",
        f"--dataset.root={root}",
        "--policy.type=act",
        "--policy.pretrained_backbone_weights=null",
        "--policy.device=cpu",
        "--policy.push_to_hub=false",
        "--policy.dim_model=32",
        "--policy.n_heads=2",
        "--policy.dim_feedforward=64",
        "--policy.chunk_size=10",
        "--policy.n_action_steps=10",
        "--steps=4",
        "--batch_size=4",
        "--num_workers=1",
        "--save_freq=4",
        "--log_freq=1",
        "--seed=7",
        "--wandb.enable=false",
        f"--output_dir={out}",
        f"--dataset.backend={backend}",
        *extra,
        env_extra=env_extra,
    )


def lerobot_train_torchrun(out, *args, env_extra=None):
    """lerobot-train under torchrun writing to ``out``: a run that hangs after "End of training" runs once more
    (``torchrun``), from an empty ``out`` when it started one, and from an empty cache root when it started one
    (``ROBO_LOADERS_CACHE`` in ``env_extra``): the retry then builds what the first try built, as a test of who
    built a store expects."""
    fresh = [p for p in (out, (env_extra or {}).get("ROBO_LOADERS_CACHE")) if p and not os.path.exists(p)]

    def start_again():
        for path in fresh:
            shutil.rmtree(path, ignore_errors=True)

    return torchrun(
        os.path.join(BIN, "lerobot-train"),
        *args,
        env_extra=env_extra,
        finished="End of training",
        before_retry=start_again,
    )


def logged_losses(log: str) -> list[str]:
    """The loss lerobot-train logs at every step (rank 0, gathered over the ranks by accelerate)."""
    return re.findall(r"step:\S+ .*?loss:(\S+)", log)


@pytest.mark.parametrize("backend", ["datapipe", "video_stream"])
def test_lerobot_train_two_processes_then_resume(lerobot_datasets, tmp_path, backend):
    """The real lerobot-train under torchrun on the batch backends, which split each pass themselves: both ranks
    train, and --resume from the step-2 checkpoint continues both ranks at batch 2 of the pass."""
    root, out = lerobot_datasets["av1_1cam"], tmp_path / "out"
    log = lerobot_train_2proc(root, out, backend, "--save_freq=2")
    assert f"lerobot data backend: {backend}" in log, log[-3000:]
    assert sorted(re.findall(r"rank (\d) of 2, starting at epoch 0 batch 0", log)) == ["0", "1"], log[-3000:]
    assert len(logged_losses(log)) == 4, log[-3000:]
    cfg = out / "checkpoints" / "000002" / "pretrained_model" / "train_config.json"
    log = lerobot_train_torchrun(out, f"--config_path={cfg}", "--resume=true", "--steps=4")
    assert f"lerobot data backend: {backend}" in log, log[-3000:]
    starts = sorted(re.findall(r"rank (\d) of 2, starting at epoch (\d+) batch (\d+)", log))
    assert starts == [("0", "0", "2"), ("1", "0", "2")], log[-3000:]  # every rank where it stopped


@pytest.fixture(scope="module")
def native_2proc_losses(lerobot_datasets, tmp_path_factory):
    log = lerobot_train_2proc(lerobot_datasets["av1_1cam"], tmp_path_factory.mktemp("native2") / "out", "native")
    losses = logged_losses(log)
    assert len(losses) == 4 and len(set(losses)) > 1, log[-3000:]  # the parity below compares something that moves
    return losses


@pytest.mark.parametrize("backend", ["compressed_cache", "gpu_resampler"])
def test_lerobot_train_two_processes_loss_parity_with_native(lerobot_datasets, native_2proc_losses, tmp_path, backend):
    """Backends that keep the sampler's order give each rank native's batches: the real lerobot-train under
    torchrun logs the same loss at every step as native 2-process training with the same seed. compressed_cache's
    store (kept in the cache root, by default) is built once for the host: one rank builds it, the other maps it."""
    # a cache root of its own: compressed_cache's store kept by an earlier test of this source would be reused by both
    log = lerobot_train_2proc(
        lerobot_datasets["av1_1cam"], tmp_path / "out", backend, env_extra={"ROBO_LOADERS_CACHE": str(tmp_path / "c")}
    )
    assert f"lerobot data backend: {backend}" in log, log[-3000:]
    assert logged_losses(log) == native_2proc_losses, log[-3000:]
    if backend == "compressed_cache":
        summary = r"lerobot data backend: compressed_cache .* at (reused )?(\S*compressed-cache-\S+) \("  # its entry
        summaries = re.findall(summary, log)
        assert len(summaries) == WORLD and len({path for _, path in summaries}) == 1, log[-3000:]
        assert sorted(r for r, _ in summaries) == ["", "reused "], log[-3000:]  # built once, then shared


@pytest.mark.parametrize("backend", ["compressed_cache", "native"])
def test_robomimic_ddp_example_keeps_the_ranks_in_sync(tiny_hdf5, tmp_path, backend):
    """examples/robomimic_ddp.py under torchrun: robomimic's own algorithm and run_epoch, each rank on its share
    (the plugin's split, or a DistributedSampler for native), gradients averaged over the ranks: after training,
    both ranks hold the same weights, and they are not the weights they started from."""
    from robomimic_helpers import make_config

    config = make_config(
        tiny_hdf5,
        rgb=[],
        backend=None if backend == "native" else backend,
        batch_size=8,
        num_epochs=2,
        num_data_workers=0,
        cuda=False,
        seed=5,
    )
    with config.values_unlocked():
        config.experiment.epoch_every_n_steps = 3
    cfg = tmp_path / "bc.json"
    cfg.write_text(config.dump())
    example = os.path.join(os.path.dirname(HERE), "examples", "robomimic_ddp.py")
    log = torchrun(example, "--config", str(cfg), "--report", str(tmp_path / "report"))
    assert f"[robomimic_ddp] 2 processes, bc, backend {backend}" in log and "epoch 2: loss" in log, log[-3000:]
    ranks = [json.load(open(tmp_path / "report" / f"rank{r}.json")) for r in range(WORLD)]
    assert ranks[0]["weights"] == ranks[1]["weights"], "the ranks' weights diverged: gradients not averaged"
    assert ranks[0]["initial_weights"] != ranks[0]["weights"], "training did not move the weights"
    assert ranks[0]["losses"] != ranks[1]["losses"], "both ranks trained on the same batches"


def test_ranks_set_up_differently_are_refused(tiny_hdf5, lerobot_datasets, tmp_path):
    """A per-rank seed (the seed + rank idiom) or per-rank options would make the ranks cut different pass orders
    and serve some samples twice and others never: refused on every rank (robomimic: when the dataset is built;
    LeRobot: at cycle(), since lerobot-train builds it on rank 0 first and on the others after a barrier), naming
    the value and the ranks. The same setup (per-host cache directories allowed) builds."""
    stdout = torchrun(
        os.path.join(HERE, "rank_agreement_script.py"), tiny_hdf5, str(lerobot_datasets["av1_1cam"]), str(tmp_path)
    )
    lines = [line for r in range(WORLD) for line in (tmp_path / f"rank{r}.txt").read_text().splitlines()]
    log = "\n".join(lines)
    cases = Counter(line.split(": ", 1)[0] + ": " + line.split(": ", 2)[1].split(" ")[0] for line in lines)
    refused = ("robomimic seed + rank", "robomimic per-rank option", "lerobot seed + rank")
    # a reviewer's reproduction: another seq_length (the same sample count here would not tell them apart)
    refused += ("robomimic per-rank seq_length",)
    for name in refused:
        assert cases[f"CASE {name}: REFUSED"] == WORLD, (name, lines)
    # rank=0, world_size=1 given explicitly: a dataset for one process, whichever ranks build one (said in a line);
    # built on rank 0 alone it gathers nothing (a reviewer's reproduction: it waited for the other ranks forever)
    built = ("robomimic same setup, per-host cache_dir", "lerobot same setup", "robomimic explicit ranks")
    for name in built + ("robomimic one process on every rank",):
        assert cases[f"CASE {name}: BUILT"] == WORLD, (name, lines)
    assert cases["CASE robomimic one process on rank 0 alone: BUILT"] == 1, lines
    assert "this process serves every sample, and the other ranks are not consulted" in stdout
    assert "disagree on train.seed (rank 0: 11; rank 1: 12)" in log
    assert "disagree on train.data_backend_kwargs" in log and "'shuffle_buffer': 2" in log
    assert "disagree on --seed (the sampler's) (rank 0: 1000; rank 1: 1001)" in log
