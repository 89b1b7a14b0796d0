"""Loss parity for LeRobot's datapipe: a fixed ACT policy scored on the batches each loader serves, over 2 passes.

What is compared, and why these tolerances:
- Per pass, the mean L1 / L2 / cosine between the policy's action chunks and the targets over every sample served.
  datapipe serves each of EpisodeAwareSampler's frames exactly once per pass with byte-identical items, so the
  multiset of per-sample losses is the same as native's and only the float32 summation order differs: relative
  tolerance 1e-5 (a float32 mean over ~550 values is exact to ~1e-6).
- Per pass, the spread of the per-batch mean loss (its standard deviation across batches). This is what a
  different order changes: batches drawn from few episodes have correlated samples and a wider spread, which is
  what makes training noisier. Native runs with different sampler seeds give the expected range; datapipe must
  lie within ``K_SIGMA`` standard deviations of their mean (floor ``REL_FLOOR`` of the mean: three seeds can agree
  by chance). ``K_SIGMA = 4``: for one more draw of the same distribution a miss is a > 4-sigma event.
Negative controls: actions taken from the neighbouring sample fail the first check; an unshuffled pass (what a
loader reading episode by episode without a shuffle buffer would serve) fails the second, so both checks can fail.
The policy is fixed (seeded initialisation, no training), so nothing but the data changes its losses.
Training is compared in an order-independent form (one SGD step per pass, the gradient accumulated over the pass):
ordinary minibatch training of this small ACT is bimodal across seeds on CPU-sized budgets (some seeds learn within
4 epochs, others do not), which would make a tolerance on it either flaky or too loose to fail.
"""

import numpy as np
import pytest
import torch
from lerobot_helpers import REPO, serve

from robo_loaders_plugin.lerobot.integration import cycle

FPS = 20
SEEDS = (11, 12, 13)
PASSES = 2  # a pass and the next (datapipe reshuffles between them): a third pass would check nothing new
BATCH = 16
K_SIGMA = 4.0
REL_FLOOR = 0.05


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    from robo_loaders_plugin.lerobot.convert import convert_lerobot
    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    base = tmp_path_factory.mktemp("parity")
    # 24 episodes (more than the default shuffle buffer of 16), actions a function of the state
    root = write_lerobot_dataset(
        base / "ds",
        episode_lengths=[18 + 3 * (i % 5) for i in range(24)],
        cameras=1,
        mode="av1",
        seed=7,
        progress=False,
        actions_from_state=True,
    )
    shards = str(base / "shards")
    convert_lerobot(root, shards, repo_id=REPO, progress=False)
    torch.manual_seed(0)
    native = open_native(root)
    cfg = ACTConfig(
        device="cpu",
        chunk_size=10,
        n_action_steps=10,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        dropout=0.0,
        n_encoder_layers=1,
        n_decoder_layers=1,
        use_vae=False,
        pretrained_backbone_weights=None,
        push_to_hub=False,
    )
    policy = make_policy(cfg, ds_meta=native.meta).eval()
    pre, _post = make_pre_post_processors(cfg, dataset_stats=native.meta.stats)
    return root, shards, policy, pre


def open_native(root):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset(REPO, root=root, delta_timestamps={"action": [i / FPS for i in range(10)]}, return_uint8=True)


def pipeline_stream(ds, loader):
    """lerobot-train's (patched) cycle(dataloader) for a dataset the datapipe backend built."""
    return cycle(loader)


def score(setup, backend, seed, corrupt=None):
    """Per pass: mean L1, L2, cosine over all samples, and the std of the per-batch mean L1."""
    from lerobot.datasets import EpisodeAwareSampler

    root, shards, policy, pre = setup
    native = open_native(root)
    ds = native if backend == "native" else serve("datapipe", native, shards=shards, seed=seed)
    sampler = EpisodeAwareSampler(
        ds.meta.episodes["dataset_from_index"],
        ds.meta.episodes["dataset_to_index"],
        shuffle=corrupt != "unshuffled",
        seed=seed,
    )
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=0)
    per_pass = -(-len(sampler) // BATCH)
    stream = pipeline_stream(ds, loader) if backend == "datapipe" else (b for _ in range(PASSES) for b in loader)
    out = {}
    with torch.no_grad():
        for p in range(PASSES):
            l1, l2, cos, batch_l1 = [], [], [], []
            for _ in range(per_pass):
                batch = next(stream)
                if corrupt == "wrong_actions":
                    batch["action"] = batch["action"].roll(1, dims=0)
                for k in ds.meta.camera_keys:  # what lerobot-train does before its preprocessor
                    batch[k] = batch[k].to(dtype=torch.float32) / 255.0
                batch = pre(batch)
                pred, target = policy.predict_action_chunk(batch), batch["action"]
                l1.append((pred - target).abs().mean(dim=(1, 2)))
                l2.append(((pred - target) ** 2).mean(dim=(1, 2)))
                cos.append(torch.nn.functional.cosine_similarity(pred.flatten(1), target.flatten(1)))
                batch_l1.append(l1[-1].mean().item())
            out[f"pass{p}"] = {
                "L1": torch.cat(l1).double().mean().item(),
                "L2": torch.cat(l2).double().mean().item(),
                "cosine": torch.cat(cos).double().mean().item(),
                "n": int(torch.cat(l1).numel()),
                "batch_L1_std": float(np.std(batch_l1)),
            }
    return out


@pytest.fixture(scope="module")
def native_runs(setup):
    return [score(setup, "native", s) for s in SEEDS]


def mean_loss_mismatches(reference, run):
    return {
        (p, k): (run[p][k], reference[p][k])
        for p in reference
        for k in ("L1", "L2", "cosine", "n")
        if run[p][k] != pytest.approx(reference[p][k], rel=1e-5, abs=1e-7)
    }


def spread_outside_native(native, run):
    bad = {}
    for p in run:
        vals = np.array([r[p]["batch_L1_std"] for r in native])
        tol = max(K_SIGMA * vals.std(ddof=1), REL_FLOOR * vals.mean())
        if abs(run[p]["batch_L1_std"] - vals.mean()) > tol:
            bad[p] = (run[p]["batch_L1_std"], float(vals.mean()), tol)
    return bad


def test_same_losses_per_pass_and_a_native_like_batch_spread(setup, native_runs):
    assert not mean_loss_mismatches(native_runs[0], native_runs[1])  # sanity: the pass mean ignores the order
    run = score(setup, "datapipe", seed=21)
    assert not mean_loss_mismatches(native_runs[0], run), mean_loss_mismatches(native_runs[0], run)
    assert not spread_outside_native(native_runs, run), (spread_outside_native(native_runs, run), native_runs)


def train_full_pass_steps(setup, backend, seed, corrupt=None, epochs=2):
    """Train a copy of the policy for ``epochs`` passes with one SGD step per pass, its gradient accumulated over
    the loader's minibatches (each weighted by its size): the step is then a function of the pass's multiset of
    samples only, so a correct loader trains the same model as native whatever its order. Returns L1 / L2 /
    cosine over the pass after each step."""
    import copy

    from lerobot.datasets import EpisodeAwareSampler

    root, shards, policy, pre = setup
    policy = copy.deepcopy(policy).train()  # ACT without VAE, dropout 0, frozen batch norm: no RNG, no batch stats
    opt = torch.optim.SGD(policy.parameters(), lr=1e-5)
    native = open_native(root)
    ds = native if backend == "native" else serve("datapipe", native, shards=shards, seed=seed)
    sampler = EpisodeAwareSampler(
        ds.meta.episodes["dataset_from_index"], ds.meta.episodes["dataset_to_index"], shuffle=True, seed=seed
    )
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=0)
    stream = pipeline_stream(ds, loader) if backend == "datapipe" else (b for _ in range(epochs) for b in loader)
    per_pass, n = -(-len(sampler) // BATCH), len(sampler)
    out = []
    for _ in range(epochs):
        opt.zero_grad()
        sums = {"L1": 0.0, "L2": 0.0, "cosine": 0.0}
        for _ in range(per_pass):
            batch = next(stream)
            if corrupt == "wrong_actions":
                batch["action"] = batch["action"].roll(1, dims=0)
            for k in ds.meta.camera_keys:
                batch[k] = batch[k].to(dtype=torch.float32) / 255.0
            batch = pre(batch)
            loss, _ = policy.forward(batch)
            (loss * len(batch["action"]) / n).backward()
            with torch.no_grad():
                pred, target = policy.predict_action_chunk(batch), batch["action"]
                sums["L1"] += (pred - target).abs().mean(dim=(1, 2)).double().sum().item()
                sums["L2"] += ((pred - target) ** 2).mean(dim=(1, 2)).double().sum().item()
                cosine = torch.nn.functional.cosine_similarity(pred.flatten(1), target.flatten(1))
                sums["cosine"] += cosine.double().sum().item()
        opt.step()
        out.append({k: v / n for k, v in sums.items()})
    return out


def test_training_a_few_epochs_gives_the_same_losses(setup):
    """Order-independent training (one SGD step per pass): a correct loader trains the same model as native, up to
    float32 gradients summed in another order. How large that rounding gets is measured, not assumed: two native
    runs with different sampler seeds (same samples, other order) set the scale, and datapipe must stay within 10x
    of it. Two epochs: the second scores the model after a step, which is where another order's rounding shows
    (a third added nothing the check needs). Measured here (largest relative difference over 2 epochs x
    L1/L2/cosine, cosine being the small one): native vs native 1.0e-2 (3 epochs: 6e-3..1e-2), datapipe 1.3e-2
    (tolerance 0.10), wrong data (each sample given its neighbour's actions) 1.5; L1 1.02 -> 0.84 after the step."""
    ref = train_full_pass_steps(setup, "native", seed=11)
    other_order = train_full_pass_steps(setup, "native", seed=12)
    assert ref[0]["L1"] > ref[-1]["L1"]  # the steps do train

    def worst(run):
        return max(abs(g[k] - r[k]) / abs(r[k]) for r, g in zip(ref, run) for k in r)

    tol = 10 * max(worst(other_order), 1e-7)
    assert worst(train_full_pass_steps(setup, "datapipe", seed=21)) <= tol
    assert worst(train_full_pass_steps(setup, "datapipe", seed=21, corrupt="wrong_actions")) > tol


def test_wrong_actions_change_the_losses(setup, native_runs):
    assert mean_loss_mismatches(native_runs[0], score(setup, "datapipe", seed=21, corrupt="wrong_actions"))


def test_an_unshuffled_order_widens_the_batch_spread(setup, native_runs):
    run = score(setup, "datapipe", seed=21, corrupt="unshuffled")
    assert not mean_loss_mismatches(native_runs[0], run)  # same samples...
    assert spread_outside_native(native_runs, run), (run, native_runs)  # ...in an order native would not give
