"""LeRobot mixtures of different robots (``--dataset.mixture``): a 7-dof arm, a 14-dof bimanual robot and a 6-dof arm
(root conftest's ``lerobot_robots``). Every served item is its component's ``LeRobotDataset[i]`` with ``action`` and
``observation.state`` padded with zeros to 14 and ``<key>_dim_mask`` marking the real entries, on every backend;
statistics of padded entries are mean 0, std 1, min -1, max 1 and the real entries count-weighted over the
components that have them; the mapping's refusals come from ``meta/`` before any data is read."""

import os
import re

import numpy as np
import pytest
import torch
from lerobot_helpers import same_item
from mixture_batches import check_items_batch_is_parts_batch
from test_lerobot_mixture import BACKENDS, expected_item, natives, same_batch

from robo_loaders_plugin.core.iteration import SamplingPlan
from robo_loaders_plugin.frames.joined_loads import JoinedLoads
from robo_loaders_plugin.lerobot.integration import choose
from robo_loaders_plugin.lerobot.mixture import build_mixture, parse
from robo_loaders_plugin.lerobot.mixture_meta import check_components, component_metas
from robo_loaders_plugin.mixtures import joined_frames
from robo_loaders_plugin.mixtures.spec import MixtureError

ROBOTS = ("arm7", "bimanual14", "arm6")
VECTORS = ("action", "observation.state")


def robots_spec(ds, names=ROBOTS, **extra):
    comps = [{"repo_id": ds[n][0], "root": ds[n][1], "weight": 1.0 + k} for k, n in enumerate(names)]
    for comp, n in zip(comps, names):
        comp.update(extra.pop(n, {}))
    return parse({"components": comps, **extra})


def robot_natives(ds, names=ROBOTS, preset="diffusion"):
    """Each robot's own ``LeRobotDataset`` (test_lerobot_mixture's ``natives`` over the robots' names)."""
    return natives(ds, names, preset)


def padded_item(native_item, rename, keep, k, sizes, pad_value=0.0, mask_real=None):
    """What the docs say a padded item is, written out here: the component's item (renamed, the mixture's keys), each
    padded key's last dimension filled with zeros up to the mixture's size, ``<key>_dim_mask`` (True: the
    component's own entries) right after it, then ``dataset_index``. ``pad_value``/``mask_real`` build wrong
    expectations for the negative controls."""
    item = expected_item(native_item, rename, keep, k)
    out = {}
    for key, v in item.items():
        out[key] = v
        if key in sizes:
            own, size = v.shape[-1], sizes[key]
            out[key] = torch.cat([v, torch.full((*v.shape[:-1], size - own), pad_value, dtype=v.dtype)], -1)
            out[f"{key}_dim_mask"] = torch.arange(size) < (size if mask_real else own)
    return out


@pytest.mark.parametrize("backend,options", BACKENDS, ids=[b for b, _ in BACKENDS])
def test_every_item_is_its_robots_item_padded_and_masked(lerobot_robots, backend, options):
    """Items and a whole pass of batches, every backend: equal to the component's own item padded as documented.
    Negative controls on the same items: an expectation whose mask marks the padding real, or whose padding is 1,
    fails the same comparison; so does the bimanual robot's second camera served under the arm's camera name."""
    ds = lerobot_robots
    nats = robot_natives(ds)
    mix = build_mixture(robots_spec(ds), nats, choose(backend, **options), seed=3)
    sizes = {"action": 14, "observation.state": 14}
    assert dict(mix.padding.sizes) == sizes
    assert [dict(o) for o in mix.padding.own] == [dict.fromkeys(VECTORS, n) for n in (7, 14, 6)]
    assert mix.meta.features["action"]["shape"] == (14,)
    assert "observation.images.cam1" not in mix.meta.features  # only the bimanual robot has it: left out

    for g in range(len(mix)):
        k, i = mix.locate(g)
        same_item(mix[g], padded_item(nats[k][i], mix.renames[k], mix.keep, k, sizes), f"{backend}[{g}]")

    source = mix.batch_source(SamplingPlan(batch_size=8, seed=5, num_workers=2))
    seen = set()
    for b, batch in enumerate(source.batches(0)):
        which, rows = batch["dataset_index"].tolist(), batch["index"].tolist()
        theirs = torch.utils.data.default_collate(
            [padded_item(nats[k][i], mix.renames[k], mix.keep, k, sizes) for k, i in zip(which, rows)]
        )
        same_batch(batch, theirs, f"{backend} batch {b}")
        seen.update(which)
    assert seen == {0, 1, 2}

    # negative controls: the check catches a mask marking padding as real, a wrong pad value, another camera
    g = mix.offsets[0]  # an item of the 7-dof arm (padded)
    k, i = mix.locate(g)
    for wrong in ({"mask_real": True}, {"pad_value": 1.0}):
        with pytest.raises(AssertionError):
            same_item(mix[g], padded_item(nats[k][i], mix.renames[k], mix.keep, k, sizes, **wrong), "control")
    j = mix.offsets[1]
    swapped = dict(nats[1][0])
    swapped["observation.images.cam0"] = swapped["observation.images.cam1"]
    with pytest.raises(AssertionError):
        same_item(mix[j], padded_item(swapped, mix.renames[1], mix.keep, 1, sizes), "camera control")


@pytest.mark.fast
def test_padded_statistics_and_the_mapping_checked_from_metadata(lerobot_robots):
    """Statistics of a padded vector: entries 0..5 aggregated over all three robots, 6 over the 7- and 14-dof ones,
    7..13 the bimanual robot's own; padded entries of each component never enter them. A declared ``pad`` size;
    the refusals, each one line from ``meta/`` naming the flag, the component and the key."""
    from lerobot.datasets.compute_stats import aggregate_stats

    from robo_loaders_plugin.lerobot.mixture_meta import mixture_stats, renamed_stats
    from robo_loaders_plugin.mixtures.padding import PAD_STATS

    ds = lerobot_robots
    spec = robots_spec(ds)
    metas = component_metas(spec, None)
    layout = check_components(spec, metas, None)
    own = [renamed_stats(m.stats, {}) for m in metas]
    stats = mixture_stats(own, layout.features, False, layout.padding)
    for key in VECTORS:
        got = stats[key]

        def agg(which, lo, hi, stat, key=key):
            part = [{key: {n: v if n == "count" else v[lo:hi] for n, v in own[c][key].items()}} for c in which]
            return aggregate_stats(part)[key][stat]

        for stat in ("mean", "std", "min", "max", "q01", "q99"):
            np.testing.assert_allclose(got[stat][:6], agg([0, 1, 2], 0, 6, stat), rtol=1e-6, err_msg=stat)
            np.testing.assert_allclose(got[stat][6:7], agg([0, 1], 6, 7, stat), rtol=1e-6, err_msg=stat)
            np.testing.assert_allclose(got[stat][7:14], agg([1], 7, 14, stat), rtol=1e-6, err_msg=stat)
        assert int(got["count"][0]) == sum(int(s[key]["count"][0]) for s in own)
        # negative control: aggregating the components padded with zeros (their padding counted as data) differs
        zero = [{key: {n: v if n == "count" else np.pad(v, (0, 14 - len(v))) for n, v in s[key].items()}} for s in own]
        assert not np.allclose(aggregate_stats(zero)[key]["mean"], got["mean"])

    declared = robots_spec(ds, pad={"action": 32})
    layout = check_components(declared, metas, None)
    assert layout.padding.sizes == {"action": 32, "observation.state": 14}
    stats = mixture_stats(own, layout.features, False, layout.padding)["action"]
    for stat, value in PAD_STATS.items():
        assert (stats[stat][14:] == np.asarray(value, dtype=stats[stat].dtype)).all(), stat
    assert layout.features["action"]["shape"] == (32,) and layout.features["action"]["names"][-1] == "pad31"

    flag = r"^--dataset\.mixture: "
    refusals = [
        (robots_spec(ds, pad={"action": 10}), flag + r"pad: 'action' is declared 10 wide but component 1 "
         r"\(robots/bimanual14\)'s is 14; declare at least 14"),
        (robots_spec(ds, pad={"observation.images.cam0": 32}), flag + r"pad: 'observation.images.cam0' is not a 1-d "
         "feature every component serves"),
        (robots_spec(ds, arm6={"drop": ["observation.state.extra"]}), flag + r"component 2 \(robots/arm6\) drops "
         r"'observation.state.extra', which it does not have"),
        (robots_spec(ds, arm6={"rename": {"action": "observation.state"}}), flag + r"component 2 \(robots/arm6\) "
         r"renames 'action' onto 'observation.state', which it already has"),
    ]  # fmt: skip
    # a reviewer's reproduction: a rename onto a name the mixture makes itself was accepted, and a camera renamed
    # onto 'action_dim_mask' was served as the bool mask, its frames dropped without a word
    for made in ("action_dim_mask", "dataset_index", "observation.images.cam0_is_missing", "action_is_pad"):
        refusals.append((
            robots_spec(ds, arm6={"rename": {"action": made}}),
            flag + rf"component 2 \(robots/arm6\) renames 'action' onto '{re.escape(made)}', a name the mixture "
            "makes itself",
        ))  # fmt: skip
    for bad, match in refusals:
        with pytest.raises(MixtureError, match=match):
            check_components(bad, metas, None)
    with pytest.raises(MixtureError, match=flag + r"component 0 \(robots/arm7\): both renames and drops"):
        robots_spec(ds, arm7={"drop": ["action"], "rename": {"action": "x"}})


@pytest.mark.fast
def test_a_dropped_key_leaves_the_item_and_its_name_may_be_reused(lerobot_robots, capsys):
    """``drop`` leaves a component's key out before the mixture's keys are decided: the arm's state dropped and
    its action renamed onto ``observation.state`` serves its action there; the log says which keys its ``drop``
    lists and which no other component has (a dropped key was said to be "not in every component"). Control:
    without the drop, the rename onto a key it has is refused."""
    ds = lerobot_robots
    names = ("arm7", "arm6")
    spec = robots_spec(ds, names, arm6={"drop": ["observation.state"], "rename": {"action": "observation.state"}})
    nats = robot_natives(ds, names, preset="none")
    capsys.readouterr()
    mix = build_mixture(spec, nats, choose("native"), seed=1)
    out = capsys.readouterr().out
    assert "(robots/arm6)'s ['observation.state'] left out (its drop lists them)" in out
    assert "(robots/arm7)'s ['action'] left out (not in every component after the renames)" in out
    assert "observation.state'] left out (not in every" not in out
    assert "action" not in mix.meta.features  # arm6 serves no action any more: not common
    item = mix[mix.offsets[1]]
    assert torch.equal(item["observation.state"][:6], nats[1][0]["action"])
    assert item["observation.state_dim_mask"].tolist() == [True] * 6 + [False]
    with pytest.raises(MixtureError, match="which it already has"):
        check_components(
            robots_spec(ds, names, arm6={"rename": {"action": "observation.state"}}),
            component_metas(spec, None),
            None,
        )


@pytest.mark.fast
def test_a_dropped_keys_window_is_not_compared(lerobot_robots):
    """A reviewer's reproduction: components built in one's own script with windows by their own names, one
    dropping ``observation.state`` and renaming its ``action`` onto it: both window the served
    ``observation.state`` alike, yet the mixture was refused naming the dropped key's window (``None``). A dropped
    key is not served, so its window is not compared. Control: a served key windowed otherwise is still refused."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = lerobot_robots
    names = ("arm7", "arm6")
    spec = robots_spec(ds, names, arm6={"drop": ["observation.state"], "rename": {"action": "observation.state"}})

    def built(name, key, steps):
        repo, root = ds[name]
        fps = LeRobotDataset(repo, root=root).fps
        return LeRobotDataset(repo, root=root, delta_timestamps={key: [s / fps for s in steps]}, return_uint8=True)

    nats = [built("arm7", "observation.state", (-1, 0)), built("arm6", "action", (-1, 0))]
    mix = build_mixture(spec, nats, choose("native"), seed=1)
    assert mix[mix.offsets[1]]["observation.state"].shape[0] == 2
    nats[1] = built("arm6", "action", (-2, 0))
    with pytest.raises(MixtureError, match=r"'action' \(served as 'observation.state'\) has the window \[-2, 0\]"):
        build_mixture(spec, nats, choose("native"), seed=1)  # control


@pytest.mark.parametrize("backend,options", BACKENDS[:2], ids=[b for b, _ in BACKENDS[:2]])
def test_a_key_renamed_onto_a_windowed_name_is_served_with_that_names_window(lerobot_robots, backend, options):
    """LeRobot's factory windows a key by its name: the arm's ``action`` renamed onto ``observation.state`` was
    built with the action window and the other robot's ``observation.state`` with the observation window (a
    reviewer's reproduction: ``native`` crashed in its collate and the joined backends served another component's
    window). Such components are refused naming the key; lerobot-train's build gives each component the windows
    of its keys' mixture names (``windows_by_mixture_names``), and the item is the component's own item with them."""
    from lerobot.datasets.factory import resolve_delta_timestamps
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig

    from robo_loaders_plugin.lerobot.mixture import windows_by_mixture_names

    ds, names, policy = lerobot_robots, ("arm7", "arm6"), DiffusionConfig()
    spec = robots_spec(ds, names, arm6={"drop": ["observation.state"], "rename": {"action": "observation.state"}})
    nats = []
    for name in names:  # as LeRobot's factory builds each alone
        repo, root = ds[name]
        windows = resolve_delta_timestamps(policy, LeRobotDatasetMetadata(repo, root=root))
        nats.append(LeRobotDataset(repo, root=root, delta_timestamps=windows, return_uint8=True))
    assert nats[1][5]["action"].shape == (len(policy.action_delta_indices), 6)  # the action window
    with pytest.raises(
        MixtureError, match=r"component 1 \(.*\)'s 'action' \(served as 'observation.state'\) has the win"
    ):
        build_mixture(spec, nats, choose(backend, **options), seed=1)
    for component, native in zip(spec.components, nats):
        windows_by_mixture_names(native, component, policy)
    assert nats[1][5]["action"].shape == (2, 6)  # LeRobot's own item: the observation window
    mix = build_mixture(spec, nats, choose(backend, **options), seed=1)
    try:
        g = int(mix.offsets[1]) + 5
        item, own = mix[g], nats[1][5]
        assert torch.equal(item["observation.state"], torch.cat([own["action"], torch.zeros(2, 1)], -1))
        assert torch.equal(item["observation.state_is_pad"], own["action_is_pad"])
        batch = mix.collate([0, g])
        assert torch.equal(batch["observation.state"][1], item["observation.state"])
    finally:
        mix.close()


CAM1 = "observation.images.cam1"  # only the bimanual robot has it


def filled_item(item, k, cameras=(CAM1,), lacking=((CAM1,), (), (CAM1,)), like=None):
    """What the docs say an item with ``"missing_cameras": "zeros"`` is: each such camera and its ``_is_pad`` last
    (the component's own, or zeros of ``like``'s shape and an all-True ``_is_pad``), then its ``_is_missing``."""
    out = {key: v for key, v in item.items() if key != "dataset_index"}
    for camera in cameras:
        for key in (camera, f"{camera}_is_pad"):
            v = out.pop(key, None)
            if camera in lacking[k]:
                v = torch.ones_like(like[key]) if like[key].dtype == torch.bool else torch.zeros_like(like[key])
            out[key] = v
        out[f"{camera}_is_missing"] = torch.tensor(camera in lacking[k])
    out["dataset_index"] = item["dataset_index"]
    return out


@pytest.mark.parametrize("backend,options", BACKENDS, ids=[b for b, _ in BACKENDS])
def test_a_camera_a_robot_lacks_is_zeros_with_a_flag(lerobot_robots, backend, options):
    """``"missing_cameras": "zeros"``: the bimanual robot's second camera is served for every robot, zeros (and an
    all-True ``_is_pad``) with ``observation.images.cam1_is_missing`` True for the arms, its own frames and False for
    it; every item and a batch equal the components' items completed so. Controls: the default ("drop") leaves it
    out; an arm's item expected with the bimanual robot's frames, or its flag False, is caught."""
    ds = lerobot_robots
    nats = robot_natives(ds)
    mix = build_mixture(robots_spec(ds, missing_cameras="zeros"), nats, choose(backend, **options), seed=3)
    sizes = {"action": 14, "observation.state": 14}
    assert CAM1 in mix.meta.features and mix.cameras == [CAM1]
    like = nats[1][0]
    for g in range(len(mix)):
        k, i = mix.locate(g)
        want = filled_item(padded_item(nats[k][i], mix.renames[k], mix.keep, k, sizes), k, like=like)
        same_item(mix[g], want, f"{backend}[{g}]")
    idx = np.random.default_rng(1).permutation(len(mix))[:16].tolist()
    batch = mix.collate(idx)
    theirs = torch.utils.data.default_collate(
        [
            filled_item(padded_item(nats[k][i], mix.renames[k], mix.keep, k, sizes), k, like=like)
            for k, i in map(mix.locate, idx)
        ]
    )
    same_batch(batch, theirs, f"{backend} batch")

    arm = padded_item(nats[0][0], mix.renames[0], mix.keep, 0, sizes)
    with pytest.raises(AssertionError, match="values differ"):  # the bimanual robot's frames served for the arm
        same_item(mix[0], filled_item(arm, 0, like=like) | {CAM1: like[CAM1]}, "control")
    with pytest.raises(AssertionError, match="_is_missing: values differ"):  # the arm's camera flagged as real
        wrong = filled_item(arm, 0, like=like)
        wrong[f"{CAM1}_is_missing"] = torch.tensor(False)
        same_item(mix[0], wrong, "control")
    if backend == "native":
        dropped = build_mixture(robots_spec(ds), nats, choose(backend, **options), seed=3)
        assert CAM1 not in dropped.meta.features and CAM1 not in dropped[0]


@pytest.mark.fast
def test_each_checkpoint_saves_the_robots_own_statistics(lerobot_robots, tmp_path):
    """lerobot-train's ``save_checkpoint``, patched (``compat.patch_train_script``), writes the trained mixture's
    ``meta.component_stats`` into ``pretrained_model/component_stats.json``: each robot's own statistics (its sizes),
    equal to its ``meta/stats.json``, and the padded sizes. Control: a run without ``--dataset.mixture`` writes none."""
    import json
    import types
    from types import SimpleNamespace

    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata

    from robo_loaders_plugin.lerobot import compat
    from robo_loaders_plugin.lerobot import mixture as mixture_module

    ds = lerobot_robots
    mix = build_mixture(robots_spec(ds), robot_natives(ds, preset="none"), choose("native"), seed=1)
    script = types.ModuleType("script")
    written = []
    script.save_checkpoint = lambda checkpoint_dir, step, cfg, *rest, **kw: written.append(step)
    compat.patch_train_script(script, lambda d: d, lambda argv: argv, mixture_module.save_component_stats)
    mixture_module.TRAINED[:] = [mix]
    try:
        script.save_checkpoint(tmp_path / "000002", 2, SimpleNamespace(dataset=SimpleNamespace(mixture="mix.json")))
        script.save_checkpoint(tmp_path / "one", 2, cfg=SimpleNamespace(dataset=SimpleNamespace(mixture=None)))
    finally:
        mixture_module.TRAINED[:] = []
    assert written == [2, 2]  # LeRobot's own save ran both times
    saved = json.loads((tmp_path / "000002" / "pretrained_model" / "component_stats.json").read_text())
    assert saved["padding"] == {"observation.state": 14, "action": 14}
    assert saved["pass_order"] == "in the order drawn"  # native: the order a resumed run compares with its own
    for c, name, width in zip(saved["components"], ROBOTS, (7, 14, 6)):
        assert c["repo_id"] == ds[name][0] and c["root"] == ds[name][1]
        own = LeRobotDatasetMetadata(ds[name][0], root=ds[name][1]).stats
        assert set(c["stats"]) == set(own) and len(c["stats"]["action"]["mean"]) == width
        for key, stats in own.items():
            for stat, value in stats.items():
                np.testing.assert_allclose(c["stats"][key][stat], value, err_msg=f"{name} {key} {stat}")
    assert not (tmp_path / "one").exists()  # control: no mixture, no file
    # the sizes the passes are ordered over are saved; a resumed run whose component was rewritten in place under
    # the same root (flags unchanged) is told so (a reviewer's reproduction: resumed on 113 frames where the
    # checkpoint trained on 48, without a word). Control: the same sizes say nothing
    from robo_loaders_plugin.lerobot.mixture_resume import warn_resized

    now = [(c["repo_id"], c["frames"], c["episodes"]) for c in saved["components"]]
    assert [n for _, n, _ in now] == [len(n) for n in mix.natives] and all(e > 0 for _, _, e in now)
    assert warn_resized(tmp_path / "000002", now) == []
    grown = [now[0], (now[1][0], now[1][1] + 65, now[1][2] + 4), now[2]]
    said = warn_resized(tmp_path / "000002", grown)
    assert said == [
        f"component 1 ({now[1][0]}): {now[1][1]} frames in {now[1][2]} episodes at the checkpoint, "
        f"{now[1][1] + 65} in {now[1][2] + 4} now"
    ]


# -- lerobot-train on three robots (issue 44's "done when") -----------------------------------------------------------
@pytest.mark.parametrize("backend", [b for b, _ in BACKENDS])
def test_lerobot_train_on_three_robots_with_every_backend(lerobot_robots, tmp_path, backend):
    """The real console script trains on the 7-dof arm, the 14-dof bimanual robot (two cameras) and the 6-dof arm,
    their vectors padded to 14 and the camera the arms lack served as zeros with its flag, on each backend; each
    checkpoint saves the robots' own statistics. (Different rates: the next test, with the backend that converts.)"""
    import json
    import re

    from test_lerobot_train_cli import lerobot_train

    ds = lerobot_robots
    comps = [{"repo_id": ds[n][0], "root": ds[n][1], "weight": 1.0 + k} for k, n in enumerate(ROBOTS)]
    mixture = json.dumps({"components": comps, "missing_cameras": "zeros"})
    extra = ['--dataset.backend_kwargs={"device": "cpu"}'] if backend == "gpu_resampler" else []
    out = str(tmp_path / "run")
    rc, log = lerobot_train(
        None, out, f"--dataset.mixture={mixture}", f"--dataset.backend={backend}", *extra, repo=None, steps=2
    )
    assert rc == 0, log[-3000:]
    assert f"lerobot data backend: {backend} [mixture(robots/arm7, robots/bimanual14, robots/arm6)]" in log, log[-3000:]
    assert re.search(r"step:2 .*loss:", log), log[-3000:]
    saved = os.path.join(out, "checkpoints", "000002", "pretrained_model", "component_stats.json")
    with open(saved) as f:
        doc = json.load(f)
    assert doc["padding"] == {"observation.state": 14, "action": 14}
    assert doc["pass_order"].startswith("by unit") == (backend in ("datapipe", "video_stream")), doc["pass_order"]


def test_lerobot_train_on_three_robots_at_three_rates_with_gpu_resampler(lerobot_robot_kinds, tmp_path):
    """The three robots recorded at 10, 15 and 30 fps train at ``target_fps`` 15 with the backend that converts
    rates: the log states the rate served. Control: without ``target_fps`` the mixture is refused in one line naming
    the rates, before any data is read."""
    import json
    import re

    from test_lerobot_train_cli import lerobot_train

    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    comps = []
    for (name, kw), fps in zip(lerobot_robot_kinds.items(), (10, 15, 30)):
        kw = dict(kw, episode_lengths=tuple(n * fps // 10 for n in kw["episode_lengths"]))
        root = write_lerobot_dataset(tmp_path / name, repo_id=f"rates/{name}", mode="h264", image_size=(16, 16),
                                     fps=fps, progress=False, **kw)  # fmt: skip
        comps.append({"repo_id": f"rates/{name}", "root": str(root), "weight": 1.0})
    args = ["--dataset.backend=gpu_resampler", '--dataset.backend_kwargs={"device": "cpu"}']
    rc, log = lerobot_train(
        None, str(tmp_path / "refused"), f"--dataset.mixture={json.dumps({'components': comps})}", *args, repo=None
    )
    refusals = [ln for ln in log.splitlines() if ln.startswith("error: --dataset.mixture: component 1")]
    assert rc == 1 and len(refusals) == 1 and "Traceback" not in log, log[-3000:]
    assert "is recorded at 15 fps, component 0 (rates/arm7) at 10 fps; give target_fps" in refusals[0]
    mixture = json.dumps({"components": comps, "missing_cameras": "zeros", "target_fps": 15})
    out = str(tmp_path / "run")
    rc, log = lerobot_train(None, out, f"--dataset.mixture={mixture}", *args, repo=None, steps=2)
    assert rc == 0, log[-3000:]
    assert "lerobot data backend: gpu_resampler [mixture(rates/arm7, rates/bimanual14, rates/arm6)]" in log, log[-3000:]
    for own in (10, 15, 30):  # each robot converted from its own rate
        assert f"windows at 15 Hz on {own} Hz data" in log, log[-3000:]
    assert "9 common features at 15 fps" in log and re.search(r"step:2 .*loss:", log), log[-3000:]


@pytest.mark.parametrize("backend,options", BACKENDS[1:], ids=[b for b, _ in BACKENDS[1:]])
def test_joined_batches_are_the_per_component_batches_and_the_documented_items(
    lerobot_robots, backend, options, monkeypatch
):
    """Every backend builds a mixture's batches once over all components (``lerobot.joined``: one row map, one set
    of windows, the frame sources behind one ``JoinedFrames``): each batch of a pass equals, key for key and in the
    same key order, the batch built per component, and the components' documented items (padded, masked, the
    missing camera zeros with its flags), with the low-dim columns kept in one table and, over its memory budget,
    read per component. Controls: the joined batch with a mask marking the arm's padding real, or
    the bimanual robot's second camera read for its first, is caught; ``native`` components keep the per-component
    path."""
    ds = lerobot_robots
    nats = robot_natives(ds)
    mix = build_mixture(robots_spec(ds, missing_cameras="zeros"), nats, choose(backend, **options), seed=3)
    assert mix.joined is not None
    sizes = {"action": 14, "observation.state": 14}
    like = nats[1][0]
    source = mix.batch_source(SamplingPlan(batch_size=16, seed=5, num_workers=2))
    order, seen = source.indices_of(0).tolist(), set()
    for b, batch in enumerate(source.batches(0)):
        idx, which = order[b * 16 : (b + 1) * 16], batch["dataset_index"].tolist()
        same_batch(batch, mix.collate(idx, joined=False), f"{backend} batch {b} vs per component")
        if b < 3:
            theirs = torch.utils.data.default_collate(
                [
                    filled_item(
                        padded_item(nats[k][mix.locate(g)[1]], mix.renames[k], mix.keep, k, sizes), k, like=like
                    )
                    for g, k in zip(idx, which)
                ]
            )
            same_batch(batch, theirs, f"{backend} batch {b}")
        seen.update(which)
    assert seen == {0, 1, 2}

    # controls, on a batch holding every robot: the joined path's own mask and camera mapping are what is checked
    idx = [int(mix.offsets[k]) + j for k in range(3) for j in range(3)]
    want = mix.collate(idx, joined=False)
    mix.joined.own["action"] = np.full(3, 14)  # the arms' padding marked real
    with pytest.raises(AssertionError, match="action_dim_mask: values differ"):
        same_batch(mix.collate(idx), want, "mask control")
    mix.joined.own["action"] = np.asarray([7, 14, 6])
    names = mix.joined._task_names  # each row's task string: its component's task, by one list of distinct strings
    assert len(names) >= 2, names  # the robots hold two tasks: a row given another task string is caught
    mix.joined._task_names = names[1:] + names[:1]
    with pytest.raises(AssertionError, match="task: "):
        same_batch(mix.collate(idx), want, "task control")
    mix.joined._task_names = names
    count = len(mix.joined.tasks[0])  # a task_index past the component's tasks: not the next component's task
    with pytest.raises(IndexError, match=rf"component 0: task_index {count} outside its {count} tasks"):
        mix.joined._task_strings(np.array([2, 0]), np.array([0, count]))
    with pytest.raises(IndexError, match=r"component 1: task_index -1 outside"):  # nor its last one
        mix.joined._task_strings(np.array([1, 2]), np.array([-1, 0]))
    fields = mix.joined.frames.fields[1]
    fields["observation.images.cam0"], real = fields[CAM1], fields["observation.images.cam0"]
    mix.joined.frames._joined.clear()  # the cameras' joined readers are built from the fields at their first read
    with pytest.raises(AssertionError, match=r"observation\.images\.cam0: values differ"):
        same_batch(mix.collate(idx), want, "camera control")
    fields["observation.images.cam0"] = real
    mix.joined.frames._joined.clear()
    same_batch(mix.collate(idx), want, "restored")
    reader = mix.joined.frames._joined_cameras(("observation.images.cam0",))  # one camera read across components
    assert reader is not None
    if backend in ("datapipe", "video_stream"):  # sources that load episodes or units: frames.joined_loads
        assert isinstance(reader[0], JoinedLoads), type(reader[0])
    tables = mix.joined.frames.tables
    assert {"action", "observation.state", "index", "task_index"} <= set(tables)  # the low-dim columns, in RAM
    wrong = tables["action"].copy()
    wrong[:, 7:] = 1  # control: the kept table's padding of the 7-dof arm not zeros
    tables["action"] = wrong
    with pytest.raises(AssertionError, match="action: values differ"):
        same_batch(mix.collate(idx), want, "table control")

    monkeypatch.setattr(joined_frames, "LOW_DIM_BYTES", 0)  # over the budget: every column read per component
    assert mix.join() and not mix.joined.frames.tables
    same_batch(mix.collate(idx), want, "columns read per component")

    assert build_mixture(robots_spec(ds), nats, choose("native"), seed=3).joined is None


def _count_joined_reads(frames) -> list:
    """Wrap every joined reader ``frames`` has built so that each read appends its cameras to the returned list."""
    reads: list = []
    for cams, got in frames._joined.items():
        if got is not None:
            take = got[0].take
            got[0].take = lambda *a, _c=cams, _t=take, **k: (reads.append(_c), _t(*a, **k))[1]
    return reads


@pytest.mark.parametrize("backend,options", BACKENDS[1:], ids=[b for b, _ in BACKENDS[1:]])
def test_a_batchs_cameras_are_read_together(lerobot_robots, backend, options, monkeypatch):
    """Cameras of one dtype and shape are read in one joined read per batch (``JoinedFrames._read_cameras``: every
    (component, camera) pair one part, each camera's batch a slice of one array, a robot's missing camera zeros),
    and the batch equals the per-component one; where the sources' class declines the pairs of several cameras, each
    camera is read alone and the batch is the same. Control: the reads counted tell the two apart."""
    ds = lerobot_robots
    nats = robot_natives(ds)
    mix = build_mixture(robots_spec(ds, missing_cameras="zeros"), nats, choose(backend, **options), seed=3)
    idx = [int(mix.offsets[k]) + j for k in range(3) for j in (0, 4, 9)]
    want = mix.collate(idx, joined=False)
    frames = mix.joined.frames
    cams = ("observation.images.cam0", CAM1)
    same_batch(mix.collate(idx), want, "cameras read together")
    assert frames._joined.get(cams) is not None, list(frames._joined)
    reads = _count_joined_reads(frames)
    same_batch(mix.collate(idx), want, "cameras read together, again")
    assert reads == [cams]

    cls = type(frames.sources[0])
    alone = cls.join_field  # bound to the class
    declines = classmethod(lambda c, parts: None if len({f for _, f in parts}) > 1 else alone(parts))
    monkeypatch.setattr(cls, "join_field", declines)
    frames._joined.clear()
    same_batch(mix.collate(idx), want, "each camera alone")
    assert frames._joined[cams] is None
    reads = _count_joined_reads(frames)
    same_batch(mix.collate(idx), want, "each camera alone, again")
    assert reads == [(cams[0],), (cams[1],)]
    mix.close()


def test_episode_records_low_dim_rows_are_kept_as_batches_first_reach_them(lerobot_robots):
    """``datapipe``'s sources read whole episode records (``frames.episodes.EpisodeFrames``): a mixture does not read
    every record at its start for the kept low-dim tables (``FrameSource.low_dim_up_front``; 2.5 s at 400 pretraining
    components); each unit's rows are written at the first batch that reaches it, after the batch's reads loaded
    it, and the batches equal the per-component batches. ``compressed_cache``'s stores read theirs at the start.
    Control: units marked filled without their rows written serve zeros, which differ."""
    ds = lerobot_robots
    nats = robot_natives(ds)
    idx = lambda mix: [int(mix.offsets[k]) + j for k in range(3) for j in (0, 5, 9)]  # noqa: E731

    mix = build_mixture(robots_spec(ds, missing_cameras="zeros"), nats, choose("datapipe"), seed=3)
    frames = mix.joined.frames
    assert {"action", "observation.state", "index"} <= set(frames.tables)
    assert frames._filled is not None and not frames._filled.any()  # no unit's rows read at the start
    # nor every episode record read for them (the build's probes read a first episode here and there)
    assert sum(len(s._small) for s in frames.sources) < sum(len(s.lengths) for s in frames.sources)
    frames._filled[:] = True  # control: claimed filled, rows never written
    with pytest.raises(AssertionError, match=r"(action|observation\.state|index): values differ"):
        same_batch(mix.collate(idx(mix)), mix.collate(idx(mix), joined=False), "filled control")

    mix = build_mixture(robots_spec(ds, missing_cameras="zeros"), nats, choose("datapipe"), seed=3)
    frames = mix.joined.frames
    first = [int(mix.offsets[1])]  # one row of the bimanual robot: its one episode
    got = mix.collate(first)
    assert frames._filled.tolist() == [False, False, True, False, False]  # that unit's rows, not the others'
    assert frames.pending_units() == 4
    same_batch(got, mix.collate(first, joined=False), "filled at the first batch")
    same_batch(mix.collate(idx(mix)), mix.collate(idx(mix), joined=False), "every robot")
    source = mix.batch_source(SamplingPlan(batch_size=16, seed=5, num_workers=2))
    order = source.indices_of(0).tolist()
    for b, batch in enumerate(source.batches(0)):
        same_batch(batch, mix.collate(order[b * 16 : (b + 1) * 16], joined=False), f"batch {b}")
    assert frames._filled.all() and frames.pending_units() == 0  # a whole pass reached every unit

    cached = build_mixture(robots_spec(ds, missing_cameras="zeros"), nats, choose("compressed_cache"), seed=3)
    assert cached.joined.frames.tables and cached.joined.frames._filled is None  # read at the start


@pytest.mark.parametrize("order", ["frames first", "control: low-dim first"])
def test_a_batch_reads_each_episode_record_once(lerobot_robots, order, monkeypatch):
    """A joined ``datapipe`` batch reads the cameras' keys before the low-dim ones (``windows.lerobot.frames_first``):
    each episode record a batch first reaches is read once, whole, and the low-dim tables are filled from what that
    load kept. Control: the low-dim keys read first (the groups' own order) read every record twice, once without
    its frames, then its frames; the batch is the same either way."""
    from robo_loaders_plugin.core.lru import LoadOnceLRU
    from robo_loaders_plugin.windows import lerobot as rules

    if order.startswith("control"):
        monkeypatch.setattr(rules, "frames_first", lambda frames, groups: groups)
    ds = lerobot_robots
    mix = build_mixture(robots_spec(ds, missing_cameras="zeros"), robot_natives(ds), choose("datapipe"), seed=3)
    reads = []
    for k, source in enumerate(mix.joined.frames.sources):
        source.cache = LoadOnceLRU(source._load, source.capacity)  # nothing the build's probes loaded
        source._small.clear()

        def counted(ep, fields=None, read=source.read, k=k):
            reads.append((k, int(ep)))
            return read(ep, fields)

        source.read = counted
    rows = [int(mix.offsets[k]) + j for k in range(3) for j in (0, 5, 9)]
    got = mix.collate(rows)
    episodes = len(set(reads))
    assert episodes >= 3
    assert len(reads) == (episodes if order == "frames first" else 2 * episodes)
    same_batch(got, mix.collate(rows, joined=False), order)


def test_native_batches_are_built_item_by_item_as_part_by_part(lerobot_robots):
    """A ``native`` mixture (LeRobot's own ``LeRobotDataset`` per robot) builds a batch from its items
    (``MixtureDataset._by_items``: each item renamed, padded, filled, then one collate, as LeRobot's DataLoader
    does), the same batch, key for key and in the same key order, as built part by part (each robot's part by its
    own collate, then scattered). Control: the part-by-part batch of other indices differs."""
    ds = lerobot_robots
    mix = build_mixture(robots_spec(ds, missing_cameras="zeros"), robot_natives(ds), choose("native"), seed=3)
    check_items_batch_is_parts_batch(mix, same_batch)


def test_joined_fills_survive_pickles_and_forks(lerobot_robots):
    """The lazy low-dim fills of a joined ``datapipe`` mixture (``JoinedFrames._fill``) where its frames go: pickled
    at protocol 5 (cloudpickle's; read-only tables come back on immutable buffers) they fill and serve the
    per-component batch; in a process forked while another thread held the fills' lock, the child's first fill does
    not wait for it. Controls: a table on an immutable buffer refuses the write the fill makes, and the inherited
    lock is held in the child."""
    import multiprocessing as mp
    import pickle

    ds = lerobot_robots
    nats = robot_natives(ds)
    idx = lambda mix: [int(mix.offsets[k]) + j for k in range(3) for j in (0, 5, 9)]  # noqa: E731
    mix = build_mixture(robots_spec(ds, missing_cameras="zeros"), nats, choose("datapipe"), seed=3)
    frames = mix.joined.frames
    assert frames.pending_units() > 0
    table = next(iter(frames.tables.values()))
    copied = pickle.loads(pickle.dumps(table, protocol=5))
    with pytest.raises(ValueError, match="WRITEABLE"):  # control: what a fill met before
        copied.setflags(write=True)
    mix.joined.frames = pickle.loads(pickle.dumps(frames, protocol=5))
    same_batch(mix.collate(idx(mix)), mix.collate(idx(mix), joined=False), "after a protocol-5 pickle")
    assert mix.joined.frames.pending_units() < frames.pending_units()

    mix = build_mixture(robots_spec(ds, missing_cameras="zeros"), nats, choose("datapipe"), seed=3)
    frames = mix.joined.frames
    ctx = mp.get_context("fork")
    for renewed in (True, False):
        frames._fill_lock.acquire()  # another thread filling at the fork
        mine, theirs = ctx.Pipe()
        child = ctx.Process(target=_fill_in_child, args=(mix, idx(mix), renewed, theirs))
        child.start()
        frames._fill_lock.release()
        assert mine.poll(120), "the forked child did not answer"
        assert mine.recv() == ("served" if renewed else "held")  # control: the inherited lock held
        child.join(30)


def _fill_in_child(mix, rows, renewed, out):
    frames = mix.joined.frames
    if not renewed:  # the control only looks: the inherited lock is held
        out.send("held" if frames._fill_lock.locked() else "free")
        return
    same_batch(mix.collate(rows), mix.collate(rows, joined=False), "forked")
    out.send("served")


@pytest.mark.parametrize("mode", ["MEAN_STD", "MIN_MAX", "QUANTILES", "QUANTILE10"])
def test_a_padded_entry_normalises_to_zero_under_every_lerobot_normaliser(mode):
    """The padded statistics through LeRobot's own normaliser, against a literal 0 (the test above compares the padded
    entries with ``PAD_STATS``, the code's own constant: a reviewer's mutations of it, ``min: 0`` making every padded
    0 a -1 under MIN_MAX, passed it)."""
    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.processor.normalize_processor import NormalizerProcessorStep

    from robo_loaders_plugin.lerobot.mixture_meta import padded_stats

    rng = np.random.default_rng(0)

    def comp(width, n):
        x = rng.normal(size=(n, width)).astype(np.float32)
        qs = {f"q{q:02d}": np.quantile(x, q / 100, axis=0) for q in (1, 10, 50, 90, 99)}
        return {"mean": x.mean(0), "std": x.std(0), "min": x.min(0), "max": x.max(0), "count": np.array([n]), **qs}

    stats = padded_stats([comp(7, 50), comp(14, 30), comp(6, 40)], [7, 14, 6], 32)
    step = NormalizerProcessorStep(
        features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(32,))},
        norm_map={FeatureType.ACTION: NormalizationMode[mode]},
        stats={"action": stats},
    )
    padded = torch.zeros(4, 32)
    padded[:, :6] = torch.randn(4, 6)  # the 6-dof arm's real entries; 6..31 are its padding
    out = step._apply_transform(padded, "action", FeatureType.ACTION)
    assert torch.isfinite(out).all()
    assert torch.equal(out[:, 14:], torch.zeros(4, 18)), out[0, 14:]  # entries no robot has: exactly 0
