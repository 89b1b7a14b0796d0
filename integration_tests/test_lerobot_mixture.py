"""LeRobot mixtures (``--dataset.mixture``): every item served equals its component's ``LeRobotDataset[i]`` after the
rename map, on every backend; the shares follow the weights; statistics are LeRobot's ``aggregate_stats``; the
metadata refusals; ``lerobot-train`` on a mixture, resumed. Datasets written with LeRobot's own writer (root
conftest's ``lerobot_mixture_datasets``: three of 60, 48 and 50 frames, "c" records its camera as cam1)."""

import json
import math
import os
import re

import numpy as np
import pytest
import torch
from lerobot_helpers import same_item

from robo_loaders_plugin.core.iteration import SamplingPlan, built_by
from robo_loaders_plugin.lerobot.integration import choose
from robo_loaders_plugin.lerobot.mixture import (
    build_mixture,
    check_components,
    check_flags,
    component_metas,
    parse,
    resume_position,
)
from robo_loaders_plugin.lerobot.presets import delta_timestamps
from robo_loaders_plugin.mixtures.spec import MixtureError

CAM = "observation.images.cam0"
# "c" records the camera the others call cam0 as cam1: renamed onto cam0, its own cam0 kept apart as "wrist"
RENAME_C = {CAM: "observation.images.wrist", "observation.images.cam1": CAM}
WEIGHTS = (1.0, 2.0, 3.0)


def spec_of(ds, names=("a", "b", "c"), weights=WEIGHTS, mode="given", **extra):
    components = []
    for i, name in enumerate(names):
        repo, root = ds[name]
        comp = {"repo_id": repo, "root": root, **({"weight": weights[i]} if mode == "given" else {})}
        if name == "c":
            comp["rename"] = RENAME_C
        components.append(comp)
    return parse({"components": components, "weights": mode, **extra})


def natives(ds, names=("a", "b", "c"), preset="diffusion"):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    out = []
    for name in names:
        repo, root = ds[name]
        meta = LeRobotDatasetMetadata(repo, root=root)
        out.append(LeRobotDataset(repo, root=root, delta_timestamps=delta_timestamps(preset, meta), return_uint8=True))
    return out


def expected_item(native_item, rename, keep, k):
    """``LeRobotDataset[i]`` after the rename map, the mixture's keys only, with ``dataset_index``."""
    out = {rename.get(key, key): v for key, v in native_item.items()}
    out = {key: v for key, v in out.items() if key in keep}
    out["dataset_index"] = torch.tensor(k)
    return out


def same_batch(ours, theirs, where):
    assert list(ours) == list(theirs), f"{where}: keys {list(ours)} != {list(theirs)}"
    for key, v in theirs.items():
        o = ours[key]
        if isinstance(v, torch.Tensor):
            assert o.dtype == v.dtype and o.shape == v.shape, f"{where}/{key}: {o.dtype}{tuple(o.shape)} != {v.shape}"
            assert torch.equal(o.cpu(), v), f"{where}/{key}: values differ"
        else:
            assert list(o) == list(v), f"{where}/{key}: {o} != {v}"


BACKENDS = [
    ("native", {}),
    ("compressed_cache", {}),
    ("datapipe", {}),
    ("gpu_resampler", {"device": "cpu"}),
    ("video_stream", {}),
]


@pytest.mark.parametrize("backend,options", BACKENDS, ids=[b for b, _ in BACKENDS])
def test_every_item_equals_its_component_item_and_shares_follow_the_weights(lerobot_mixture_datasets, backend, options):
    """A whole pass, batch by batch: every row equals ``LeRobotDataset[i]`` of its component after the rename map
    (byte for byte), with ``dataset_index``; each component's share within 4 sigma of its weight's."""
    ds = lerobot_mixture_datasets
    spec = spec_of(ds)
    nats = natives(ds)
    mix = build_mixture(spec, nats, choose(backend, **options), seed=7)
    assert built_by(mix).kind == "batch"  # driven by the adapter whatever the backend's kind
    sizes = [len(n) for n in nats]
    assert len(mix) == mix.num_frames == sum(sizes) and mix.num_episodes == 8
    assert CAM in mix.meta.features and "observation.images.wrist" not in mix.meta.features
    renames = mix.renames

    # single items, through __getitem__
    rng = np.random.default_rng(3)
    for g in rng.choice(len(mix), 12, replace=False).tolist():
        k, i = mix.locate(g)
        same_item(mix[g], expected_item(nats[k][i], renames[k], mix.keep, k), f"{backend}[{g}]")

    # a whole pass as lerobot-train is served it
    source = mix.batch_source(SamplingPlan(batch_size=8, seed=5, num_workers=2))
    counts = np.zeros(3, dtype=np.int64)
    for b, batch in enumerate(source.batches(0)):
        which, rows = batch["dataset_index"].tolist(), batch["index"].tolist()  # no episode filter: row == index
        theirs = torch.utils.data.default_collate(
            [expected_item(nats[k][i], renames[k], mix.keep, k) for k, i in zip(which, rows)]
        )
        same_batch(batch, theirs, f"{backend} batch {b}")
        counts += np.bincount(which, minlength=3)
    n = counts.sum()
    assert n == len(mix)
    for k, w in enumerate(WEIGHTS):
        p = w / sum(WEIGHTS)
        assert abs(counts[k] - n * p) <= 4 * math.sqrt(n * p * (1 - p)), (backend, counts.tolist())


def test_weights_size_serves_every_window_once_per_pass(lerobot_mixture_datasets):
    ds = lerobot_mixture_datasets
    nats = natives(ds, preset="none")
    mix = build_mixture(spec_of(ds, mode="size"), nats, choose("compressed_cache"), seed=1)
    for epoch in (0, 1):
        seen = [
            (k, i)
            for batch in mix.batch_source(SamplingPlan(batch_size=16, seed=2)).batches(epoch)
            for k, i in zip(batch["dataset_index"].tolist(), batch["index"].tolist())
        ]
        assert sorted(seen) == [(k, i) for k, n in enumerate(nats) for i in range(len(n))]
    # negative control: given weights draw with replacement, so some window is served twice or left out
    weighted = build_mixture(spec_of(ds), nats, choose("compressed_cache"), seed=1)
    seen = [
        (k, i)
        for batch in weighted.batch_source(SamplingPlan(batch_size=16, seed=2)).batches(0)
        for k, i in zip(batch["dataset_index"].tolist(), batch["index"].tolist())
    ]
    assert len(seen) == len(weighted) and len(set(seen)) < len(seen)


def served_rows(mix, plan):
    """Every ``(component, index)`` a pass serves, and whether each is among its episode's last frames (by
    ``frame_index`` and the episode's length in its component's ``meta``)."""
    lengths = [np.asarray(n.meta.episodes["length"]) for n in mix.natives]
    out = []
    for batch in mix.batch_source(plan).batches(0):
        for k, i, e, f in zip(*(batch[c].tolist() for c in ("dataset_index", "index", "episode_index", "frame_index"))):
            out.append((k, i, int(lengths[k][e]) - f))  # frames left in the episode, this one included
    return out


def test_drop_n_last_frames_leaves_each_episodes_last_frames_out(lerobot_mixture_datasets):
    """As LeRobot's sampler for one dataset (diffusion's ``drop_n_last_frames``): no served item is among the last
    ``n`` frames of its episode, "size" serves every other row once (b with an episode filter: its rows only), the
    pass has the length of lerobot-train's sampler over the mixture (its resume position is then its own).
    Negative control: the check fails on the pass that does not leave them out."""
    from lerobot.datasets import EpisodeAwareSampler, LeRobotDataset

    ds, n = lerobot_mixture_datasets, 7
    nats = natives(ds, preset="none")
    nats[1] = LeRobotDataset(ds["b"][0], root=ds["b"][1], episodes=[1], return_uint8=True)  # rows 18..47 only
    choice = choose("compressed_cache")
    mix = build_mixture(spec_of(ds, mode="size"), nats, choice, seed=1, drop_n_last_frames=n)
    assert len(mix) == sum(map(len, nats)) and mix.pass_length == len(mix) - n * 7  # 7 episodes served
    lerobot_sampler = EpisodeAwareSampler(
        mix.meta.episodes["dataset_from_index"], mix.meta.episodes["dataset_to_index"], drop_n_last_frames=n
    )
    assert len(lerobot_sampler) == mix.pass_length
    plan = SamplingPlan(batch_size=16, seed=2)
    seen = served_rows(mix, plan)
    assert min(left for *_, left in seen) > n
    expected = sorted(
        (k, int(i))
        for k, nat in enumerate(nats)
        for i, e, f in zip(nat.hf_dataset["index"], nat.hf_dataset["episode_index"], nat.hf_dataset["frame_index"])
        if int(nat.meta.episodes["length"][int(e)]) - int(f) > n
    )
    assert sorted((k, i) for k, i, _ in seen) == expected
    weighted = build_mixture(spec_of(ds), nats, choice, seed=1, drop_n_last_frames=n)
    assert min(left for *_, left in served_rows(weighted, plan)) > n  # drawn by weight: eligible rows only
    # negative control: without it, the pass serves episode ends, and the check says so
    assert min(left for *_, left in served_rows(build_mixture(spec_of(ds, mode="size"), nats, choice), plan)) <= n
    with pytest.raises(MixtureError, match=r"^--dataset.mixture: component 0 \(mix/a\): LeRobot's sampler serves none"):
        build_mixture(spec_of(ds), nats, choice, drop_n_last_frames=40)


@pytest.mark.fast
def test_stats_checks_and_refusals_from_metadata(lerobot_mixture_datasets):
    """Statistics are LeRobot's ``aggregate_stats`` of the components' (renamed), ImageNet's on the cameras; every
    refusal is one line naming the component and the key, from ``meta/`` alone; each has its good control."""
    from lerobot.datasets.compute_stats import aggregate_stats
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata
    from lerobot.utils.constants import IMAGENET_STATS

    from robo_loaders_plugin.lerobot.mixture import mixture_stats, renamed_stats

    ds = lerobot_mixture_datasets
    spec = spec_of(ds)
    metas = component_metas(spec, None)
    layout = check_components(spec, metas, None)  # the good mixture passes
    assert CAM in layout.features and "observation.images.wrist" not in layout.features
    assert layout.dropped == [[], [], ["observation.images.cam0"]] and layout.fps == 20
    assert f"{CAM}_is_pad" in layout.keep and layout.renames[2]["observation.images.cam1_is_pad"] == f"{CAM}_is_pad"

    # statistics: LeRobot's own aggregation of the components' on-disk stats under the rename map
    raw = [LeRobotDatasetMetadata(*ds[n][:1], root=ds[n][1]).stats for n in "abc"]
    theirs = aggregate_stats(
        [{RENAME_C.get(k, k) if n == "c" else k: v for k, v in s.items()} for n, s in zip("abc", raw)]
    )
    per = [renamed_stats(m.stats, dict(c.rename)) for m, c in zip(metas, spec.components)]
    ours = mixture_stats(per, layout.features, use_imagenet_stats=False)
    assert set(ours) == set(layout.features)
    for key in ours:
        for stat, value in ours[key].items():
            assert np.array_equal(value, theirs[key][stat]), (key, stat)
    assert not np.array_equal(ours["action"]["mean"], raw[0]["action"]["mean"])  # control: really aggregated
    np.testing.assert_array_equal(ours[CAM]["mean"], theirs[CAM]["mean"])  # c's cam1 pooled as cam0
    with_imagenet = mixture_stats(per, layout.features, use_imagenet_stats=True)
    assert torch.equal(with_imagenet[CAM]["std"], torch.tensor(IMAGENET_STATS["std"], dtype=torch.float32))
    assert np.array_equal(with_imagenet["action"]["std"], ours["action"]["std"])

    def refused(spec, fps=None):
        with pytest.raises(MixtureError) as info:
            check_components(spec, component_metas(spec, None), fps)
        line = str(info.value)
        assert "\n" not in line and line.startswith("--dataset.mixture: component "), line
        return line

    bad = refused(spec_of(ds, names=("a", "small_cam")))
    assert "component 1 (mix/small_cam)'s 'observation.images.cam0' is video of shape (16, 16, 3)" in bad, bad
    assert "component 0 (mix/a)'s is video of shape (24, 32, 3)" in bad and '"rename"' in bad
    bad = refused(spec_of(ds, names=("a", "slow")))
    assert "component 1 (mix/slow) is recorded at 10 fps, component 0 (mix/a) at 20 fps; give target_fps" in bad
    check_components(spec_of(ds, names=("a", "slow")), component_metas(spec_of(ds, names=("a", "slow")), None), 20.0)
    onto = parse([{"repo_id": ds["c"][0], "root": ds["c"][1], "weight": 1, "rename": {"observation.state": CAM}}])
    assert "component 0 (mix/c) renames 'observation.state' onto 'observation.images.cam0', which it already has" in (
        refused(onto)
    )
    typo = parse([{"repo_id": ds["a"][0], "root": ds["a"][1], "weight": 1, "rename": {"observation.stat": "x"}}])
    assert "component 0 (mix/a) renames 'observation.stat', which it does not have" in refused(typo)

    # with the other flags (at argument parsing)
    def flags(**kw):
        from types import SimpleNamespace

        return SimpleNamespace(**{"repo_id": "", "root": None, "episodes": None, "streaming": False, **kw})

    check_flags(flags(backend="native", backend_kwargs={}), spec)  # control
    for cfg, words in [
        (flags(repo_id="x/y", backend="native", backend_kwargs={}), "leave --dataset.repo_id out"),
        (flags(streaming=True, backend="native", backend_kwargs={}), "--dataset.streaming=true"),
        (flags(backend="video_stream", backend_kwargs={"source": "https://h/x"}), "backend_kwargs.source names one"),
    ]:
        with pytest.raises(Exception, match=re.escape(words)):
            check_flags(cfg, spec)
    remote = parse([{"repo_id": "x/y", "root": "https://h/x/y", "weight": 1}])
    with pytest.raises(MixtureError) as info:
        check_flags(flags(backend="native", backend_kwargs={}), remote)
    line = str(info.value)
    assert "\n" not in line and line.startswith(
        "--dataset.mixture: component 0 (x/y): root https://h/x/y is remote and"
    ), line
    assert "--dataset.backend=native reads local roots only" in line and "'video_stream'" in line, line
    check_flags(flags(backend="video_stream", backend_kwargs={}), remote)  # control: a backend that streams
    with pytest.raises(MixtureError, match=r"target_fps=10 needs a backend that converts frame rates .*gpu_resampler"):
        check_flags(flags(backend="compressed_cache", backend_kwargs={}), spec_of(ds, target_fps=10))
    check_flags(flags(backend="gpu_resampler", backend_kwargs={}), spec_of(ds, target_fps=10))  # control


def test_a_component_served_over_http_is_streamed_by_video_stream(lerobot_mixture_datasets, tmp_path):
    """A component whose ``root`` is an HTTP URL (a real server with byte ranges), with ``video_stream``, as
    lerobot-train builds it (``make_mixture_datasets``: the flag checked at parsing, diffusion's delta timestamps and
    ``drop_n_last_frames``): its tables mirrored into ``cache_dir``, its frames streamed from the URL; every item of
    a pass equals its component's ``LeRobotDataset`` item (built from the local copy) after the rename map, and no
    pass serves an episode's last 7 frames. The refusal with ``native``: test_stats_checks_and_refusals_from_metadata.
    """
    from types import SimpleNamespace

    from lerobot.datasets.factory import resolve_delta_timestamps
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from remote_servers import HttpServer
    from torch.utils.data import default_collate

    from robo_loaders_plugin.lerobot.config import BackendDatasetConfig
    from robo_loaders_plugin.lerobot.mixture import make_mixture_datasets

    ds, policy = lerobot_mixture_datasets, DiffusionConfig()
    refs = []
    for name in "abc":
        meta = LeRobotDatasetMetadata(ds[name][0], root=ds[name][1])
        dt = resolve_delta_timestamps(policy, meta)
        refs.append(LeRobotDataset(ds[name][0], root=ds[name][1], delta_timestamps=dt, return_uint8=True))
    with HttpServer(ds["b"][1]) as server:
        comps = [{"repo_id": ds[n][0], "root": ds[n][1], "weight": w} for n, w in zip("abc", WEIGHTS)]
        comps[1]["root"], comps[2]["rename"] = server.url, RENAME_C
        dataset = BackendDatasetConfig(
            mixture=json.dumps(comps), backend="video_stream", backend_kwargs={"cache_dir": str(tmp_path)}
        )
        cfg = SimpleNamespace(dataset=dataset, policy=policy, trainable_config=policy, tolerance_s=1e-4, num_workers=0)
        mix, _ = make_mixture_datasets(cfg, split=False)
        assert json.loads(dataset.mixture)["components"][1]["root"] == server.url  # saved as given
        assert str(mix.natives[1].root).startswith(str(tmp_path)) and mix.pass_length == len(mix) - 7 * 8
        seen, b_rows, left = 0, [], []
        lengths = [np.asarray(r.meta.episodes["length"]) for r in refs]
        for batch in mix.batch_source(SamplingPlan(batch_size=16, seed=5)).batches(0):
            which, rows = batch["dataset_index"].tolist(), batch["index"].tolist()
            theirs = default_collate(
                [expected_item(refs[k][i], mix.renames[k], mix.keep, k) for k, i in zip(which, rows)]
            )
            same_batch(batch, theirs, f"http mixture batch {seen}")
            seen += len(rows)
            b_rows += [i for k, i in zip(which, rows) if k == 1]
            ends = zip(which, batch["episode_index"].tolist(), batch["frame_index"].tolist())
            left += [int(lengths[k][e]) - f for k, e, f in ends]
        streamed = sum(v for k, v in server.served.items() if k.endswith(".mp4"))
        assert seen == mix.pass_length and min(left) > 7 and len(b_rows) > 20  # b (over HTTP) was served
        shifted = [expected_item(refs[1][i + 1], mix.renames[1], mix.keep, 1) for i in b_rows[:8]]
        ours = mix.collate([int(mix.offsets[1]) + i for i in b_rows[:8]])
        with pytest.raises(AssertionError, match="values differ"):  # negative control: b's frames are told apart
            same_batch(ours, default_collate(shifted), "control")
    assert streamed > 0 and not os.path.exists(os.path.join(str(mix.natives[1].root), "videos"))


def test_resume_position_recovers_the_step_from_lerobots_sampler_state():
    """``--resume`` positions LeRobot's sampler from the step with its own length; the mixture's pass is cut from
    the same step (identical when both have every row; exact when the sampler left episode ends out)."""
    from lerobot.datasets import compute_sampler_state

    for n, bs, world in [(158, 8, 1), (158, 4, 2), (31, 8, 3)]:
        per_pass = -(-n // (bs * world))
        for step in range(3 * per_pass):
            state = compute_sampler_state(step, n, bs, world)
            assert resume_position(state, n, n, bs, world) == (state["epoch"], state["start_index"] // (bs * world))
            shorter = compute_sampler_state(step, n - 7, bs, world)
            assert resume_position(shorter, n - 7, n, bs, world) == divmod(step, per_pass)


def test_config_flag_is_checked_at_parsing_and_saved_resolved(lerobot_mixture_datasets, tmp_path):
    from draccus.utils import DecodingError

    from robo_loaders_plugin.lerobot.config import BackendDatasetConfig

    ds = lerobot_mixture_datasets
    text = json.dumps([{"repo_id": ds["a"][0], "root": ds["a"][1], "weight": 1}, {"repo_id": ds["b"][0], "weight": 1}])
    path = tmp_path / "mix.json"
    path.write_text(text)
    cfg = BackendDatasetConfig(mixture=str(path))
    saved = json.loads(cfg.mixture)  # inline, resolved: --resume reads it without the file
    assert saved["components"][0] == {"repo_id": "mix/a", "root": ds["a"][1], "weight": 1.0}
    assert BackendDatasetConfig(mixture=cfg.mixture).mixture == cfg.mixture
    for kw, words in [
        ({}, "--dataset.repo_id is required (or --dataset.mixture="),
        ({"repo_id": "x/y", "mixture": text}, "leave --dataset.repo_id out"),
        ({"mixture": text.replace(ds["a"][1], ds["a"][1] + "_gone")}, "does not exist"),
        ({"mixture": "[{"}, "--dataset.mixture"),
    ]:
        with pytest.raises(DecodingError, match=re.escape(words)):
            BackendDatasetConfig(**kw)


# -- lerobot-train ---------------------------------------------------------------------------------------------------
def test_lerobot_train_on_a_mixture_native_then_resumed_on_a_backend(lerobot_mixture_datasets, tmp_path):
    """The real console script: 3 steps on the native mixture, then ``--resume=true`` from the saved config (the
    mixture file moved away: the config holds it) with ``--dataset.backend=compressed_cache``, continuing at the
    batch after the checkpoint's of the same mixture order."""
    from test_lerobot_train_cli import lerobot_train, saved_dataset_config

    ds = lerobot_mixture_datasets
    mix = tmp_path / "mix.json"
    comps = [{"repo_id": ds[n][0], "root": ds[n][1], "weight": w} for n, w in zip("abc", WEIGHTS)]
    comps[2]["rename"] = RENAME_C
    mix.write_text(json.dumps({"components": comps}))
    out = str(tmp_path / "run")

    rc, log = lerobot_train(None, out, f"--dataset.mixture={mix}", repo=None)
    assert rc == 0, log[-3000:]
    assert "lerobot data backend: native [mixture(mix/a, mix/b, mix/c)] mixture of 3 (weighted)" in log, log[-3000:]
    assert "lerobot-train's batches come from mixture of 3 (weighted: mix/a 16.7%, mix/b 33.3%, mix/c 50.0%)" in log
    saved = saved_dataset_config(out, 3)
    assert saved["backend"] == "native" and json.loads(saved["mixture"])["components"][2]["rename"] == RENAME_C

    os.rename(mix, tmp_path / "moved.json")  # the saved config holds the mixture itself
    cfg = os.path.join(out, "checkpoints", "000003", "pretrained_model", "train_config.json")
    args = (f"--config_path={cfg}", "--resume=true", "--dataset.backend=compressed_cache")
    rc, log = lerobot_train(None, out, *args, repo=None, steps=5)
    assert rc == 0, log[-3000:]
    assert "lerobot data backend: compressed_cache [mixture(mix/a, mix/b, mix/c)]" in log, log[-3000:]
    assert "starting at epoch 0 batch 3" in log, log[-3000:]
    assert saved_dataset_config(out, 5)["mixture"] == saved["mixture"]


@pytest.mark.parametrize("backend", ["datapipe", "gpu_resampler", "video_stream"])
def test_lerobot_train_on_a_mixture_with_every_other_backend(lerobot_mixture_datasets, tmp_path, backend):
    """The real console script on the 3-component mixture with each backend the test above does not run (``native``
    and ``compressed_cache`` are there): it trains, from the mixture's batches."""
    from test_lerobot_train_cli import lerobot_train

    ds = lerobot_mixture_datasets
    comps = [{"repo_id": ds[n][0], "root": ds[n][1], "weight": w} for n, w in zip("abc", WEIGHTS)]
    comps[2]["rename"] = RENAME_C
    extra = ['--dataset.backend_kwargs={"device": "cpu"}'] if backend == "gpu_resampler" else []
    out = str(tmp_path / "run")
    rc, log = lerobot_train(
        None, out, f"--dataset.mixture={json.dumps({'components': comps})}", f"--dataset.backend={backend}", *extra,
        repo=None, steps=2,
    )  # fmt: skip
    assert rc == 0, log[-3000:]
    assert f"lerobot data backend: {backend} [mixture(mix/a, mix/b, mix/c)] mixture of 3 (weighted)" in log, log[-3000:]
    assert "lerobot-train's batches come from mixture of 3" in log, log[-3000:]
    assert re.search(r"step:2 .*loss:", log), log[-3000:]


def test_command_line_refuses_a_bad_mixture_in_one_line_before_lerobots_parser(lerobot_mixture_datasets, capsys):
    """What lerobot-train's patched ``train`` runs first (``check_command_line``): a bad mixture is ``error: ...``
    on one line and exit status 1, before LeRobot's parser reads the flag as YAML; a good one passes untouched."""
    from robo_loaders_plugin.lerobot.integration import check_command_line

    ds = lerobot_mixture_datasets
    good = [{"repo_id": ds["a"][0], "root": ds["a"][1], "weight": 1}, {"repo_id": ds["b"][0], "root": ds["b"][1]}]
    for bad, words in [
        (good, "error: --dataset.mixture: component 1 (mix/b): has no weight"),
        ('[{"repo_id": "x", "weight": 1}', "error: --dataset.mixture: the inline mixture is not valid JSON"),
    ]:
        with pytest.raises(SystemExit) as info:
            check_command_line(["--steps=3", "--dataset.mixture", bad if isinstance(bad, str) else json.dumps(bad)])
        err = capsys.readouterr().err
        assert info.value.code == 1 and err.startswith(words) and err.count("\n") == 1, err
    good[1]["weight"] = 2
    argv = [f"--dataset.mixture={json.dumps(good)}"]
    assert check_command_line(argv) == argv  # control


def test_whole_mixture_footprint_is_refused_before_any_component_is_built(lerobot_mixture_datasets, monkeypatch):
    """gpu_resampler with ``max_memory``: each component's tiers fit host RAM alone, not together; refused in one
    line naming the mixture, each component's share and the numbers before any component is built; each component
    alone is accepted on the same machine (negative control)."""
    from robo_loaders_plugin.core.footprint import Available, Footprint, ResourceRefused
    from robo_loaders_plugin.core.units import format_bytes
    from robo_loaders_plugin.lerobot.integration import build_dataset

    ds = lerobot_mixture_datasets
    spec, nats = spec_of(ds), natives(ds)
    probe = choose("gpu_resampler", device="cpu")
    plans = [probe.plan(n, committed=Footprint()) for n in nats]
    need = [p.footprint.host_bytes for p in plans]
    choice = choose("gpu_resampler", device="cpu", max_memory=max(need))
    host = int(max(need) / 0.9) + 1  # any one component fits
    held = [p.kept.host_bytes for p in plans]
    assert held[0] + held[1] + need[2] > 0.9 * host  # not all three
    monkeypatch.setattr(Available, "measure", classmethod(lambda cls, disk_dir=None, device=None, shm_dir=None: (
        Available(host_bytes=host, shm_bytes=0, shm_dir="/dev/shm", disk_dir=disk_dir))))  # fmt: skip
    built = []
    monkeypatch.setattr(type(choice), "build", lambda self, *a, **k: built.append(a) or pytest.fail("built"))
    with pytest.raises(ResourceRefused) as refused:
        build_mixture(spec, nats, choice, seed=0)
    line = str(refused.value)
    assert "\n" not in line and line.startswith("--dataset.mixture: backend 'gpu_resampler'"), line
    assert f"host RAM: needs {format_bytes(held[0] + held[1] + need[2])}, {format_bytes(host)} available" in line
    for k, c in enumerate(spec.components):
        assert f"[{k}] {c.source}: host RAM {format_bytes(need[k])}" in line, line
    assert "Would fit: the first 2 components" in line and "--dataset.backend_kwargs" in line, line
    assert built == []
    monkeypatch.undo()  # negative control: each component alone fits the same machine
    monkeypatch.setattr(Available, "measure", classmethod(lambda cls, disk_dir=None, device=None, shm_dir=None: (
        Available(host_bytes=host, shm_bytes=0, shm_dir="/dev/shm", disk_dir=disk_dir))))  # fmt: skip
    for n, c in zip(nats, spec.components):
        assert len(build_dataset(n, choice, repo_id=c.source)) == len(n)


@pytest.mark.parametrize("backend", ["datapipe", "video_stream"])
def test_the_buffer_backends_count_in_the_whole_mixture_footprint(lerobot_mixture_datasets, monkeypatch, backend):
    """The episode-buffer backends declare their footprint too: their buffers together, not one by one, are
    checked before any component is built (or converted); each buffer alone fits the same machine (control)."""
    from robo_loaders_plugin.core.footprint import Available, Footprint, ResourceRefused
    from robo_loaders_plugin.mixtures.footprint import check_mixture_fits

    ds = lerobot_mixture_datasets
    spec, nats = spec_of(ds), natives(ds)
    choice = choose(backend)
    need = [choice.plan(n, committed=Footprint()).footprint.host_bytes for n in nats]
    assert all(need)
    host = int(max(need) / 0.9) + 1  # any one buffer fits, not the three together
    monkeypatch.setattr(Available, "measure", classmethod(lambda cls, disk_dir=None, device=None, shm_dir=None: (
        Available(host_bytes=host, shm_bytes=0, shm_dir="/dev/shm", disk_dir=disk_dir))))  # fmt: skip
    monkeypatch.setattr(type(choice), "build", lambda self, *a, **k: pytest.fail("a component was built"))
    with pytest.raises(ResourceRefused, match=rf"--dataset.mixture: backend '{backend}' cannot serve these 3"):
        build_mixture(spec, nats, choice, seed=0)
    for k in range(3):  # negative control: each alone fits
        check_mixture_fits("m", ["x"], lambda _, c, k=k: choice.plan(nats[k], committed=c), backend=backend,
                           option_prefix="o")  # fmt: skip
