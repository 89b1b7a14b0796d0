"""robomimic mixtures of different robots (``train.data_mixture``): a 7-dof arm, a 14-dof bimanual robot (two
end effectors: ``robot0_eef_pos`` 6 wide) and a 6-dof arm. Every served sample is its file's own
``SequenceDataset`` sample with ``actions`` and the low-dim observations padded with zeros to the mixture's size and
``<key>_dim_mask`` at the top level marking the real entries, on every backend; the mapping's refusals come from the
files' metadata before any data is read."""

import shutil

import h5py
import numpy as np
import pytest
import torch
from mixture_batches import check_items_batch_is_parts_batch
from robomimic_helpers import RGB, make_config, obs_keys
from test_robomimic_mixture import BACKENDS, LOSSY, LOW_DIM, WHERE, _write, resized

from robo_loaders_plugin import RoboLoadersError
from robo_loaders_plugin.mixtures.dataset import DATASET_INDEX
from robo_loaders_plugin.mixtures.spec import MixtureError
from robo_loaders_plugin.robomimic import dataset_factory
from robo_loaders_plugin.testing import assert_same

SIZES = {"actions": 14, "robot0_eef_pos": 6}  # the mixture's: the bimanual robot's
OWN = [{"actions": 7, "robot0_eef_pos": 3}, {"actions": 14, "robot0_eef_pos": 6}, {"actions": 6, "robot0_eef_pos": 3}]


@pytest.fixture(scope="module")
def robots(tmp_path_factory):
    """arm7 (the writer's 7-wide actions, 3 demos), bimanual14 (2 demos), arm6 (2 demos)."""
    d = tmp_path_factory.mktemp("robots")
    arm7 = _write(str(d / "arm7.hdf5"), 41, 3)
    bimanual = resized(_write(str(d / "bi.hdf5"), 42, 2), d / "bimanual14.hdf5", {"actions": 14, "robot0_eef_pos": 6})
    arm6 = resized(_write(str(d / "a6.hdf5"), 43, 2), d / "arm6.hdf5", {"actions": 6})
    return arm7, bimanual, arm6


def robots_config(robots, backend=None, **mixture):
    cfg = make_config(robots[0], low_dim=LOW_DIM, backend=backend, seq_length=3, hdf5_cache_mode="low_dim",
                      hdf5_load_next_obs=True)  # fmt: skip
    with cfg.values_unlocked():
        cfg.train.data_mixture = {"components": [{"path": p, "weight": 1.0} for p in robots], **mixture}
        cfg.experiment.rollout.enabled = False  # train.data's environment takes 7-wide actions (test below)
    return cfg


def padded(sample, k, sizes=SIZES, pad_value=0.0, mask_real=False):
    """What the docs say a padded sample is, written out here: the component's ``SequenceDataset`` sample with
    ``actions`` and each padded obs key (``obs``, ``next_obs``) filled with zeros up to the mixture's size, then
    ``<key>_dim_mask`` at the top level (True: the component's own entries), then ``dataset_index``.
    ``pad_value``/``mask_real`` build wrong expectations for the negative controls."""

    def pad(v, size):
        return np.concatenate([v, np.full((*v.shape[:-1], size - v.shape[-1]), pad_value, v.dtype)], -1)

    out = dict(sample)
    out["actions"] = pad(sample["actions"], sizes["actions"])
    for group in ("obs", "next_obs"):
        out[group] = {key: pad(v, sizes[key]) if key in sizes else v for key, v in sample[group].items()}
    for key, size in sizes.items():
        out[f"{key}_dim_mask"] = np.arange(size) < (size if mask_real else OWN[k][key])
    out[DATASET_INDEX] = np.int64(k)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_sample_is_its_robots_sample_padded_and_masked(robots, backend):
    """Every sample and a batch across the three robots equal the files' own ``SequenceDataset`` samples padded as
    documented. Negative controls on the same samples: a mask marking padding real, padding of 1, and the
    bimanual robot's wrist camera served as its agentview are each caught by the same comparison."""
    cfg = robots_config(robots, backend if backend != "native" else None)
    mix = dataset_factory(cfg, obs_keys(cfg))
    assert dict(mix.padding.sizes) == SIZES and [dict(o) for o in mix.padding.own] == OWN
    refs = []
    for path in robots:
        one = make_config(path, low_dim=LOW_DIM, seq_length=3, hdf5_cache_mode="low_dim", hdf5_load_next_obs=True)
        refs.append(dataset_factory(one, obs_keys(one)))
    min_psnr = LOSSY.get(backend)
    for i in range(len(mix)):
        k, local = mix.locate(i)
        assert_same(mix[i], padded(refs[k][local], k), f"{backend} mixture sample {i}", min_psnr)
    idx = np.random.default_rng(0).permutation(len(mix))[:24].tolist()
    batch = mix.collate(idx)
    want = torch.utils.data.default_collate([padded(refs[k][j], k) for k, j in map(mix.locate, idx)])
    assert_same({key: _cpu(v) for key, v in batch.items()}, want, f"{backend} mixed batch", min_psnr)
    assert batch["actions_dim_mask"].dtype == torch.bool and batch["actions_dim_mask"].shape == (24, 14)

    k, local = mix.locate(0)  # the 7-dof arm: padded
    for wrong in ({"mask_real": True}, {"pad_value": 1.0}):
        with pytest.raises(AssertionError):
            assert_same(mix[0], padded(refs[k][local], k, **wrong), "control")
    g = mix.offsets[1]
    swapped = dict(refs[1][0])
    swapped["obs"] = {**swapped["obs"], "agentview_image": swapped["obs"]["robot0_eye_in_hand_image"]}
    with pytest.raises(AssertionError):
        assert_same(mix[g], padded(swapped, 1), "camera control", min_psnr)


def _cpu(v):
    return {k: _cpu(x) for k, x in v.items()} if isinstance(v, dict) else v.cpu()


@pytest.mark.fast
def test_a_declared_size_and_the_refusals_from_metadata(robots, tmp_path):
    """``"pad": {"actions": 32}`` pads every component's actions to 32 (the observations still to the largest);
    refusals name the setting, the component and the key, before any data is read."""
    cfg = robots_config(robots, pad={"actions": 32})
    mix = dataset_factory(cfg, obs_keys(cfg))
    assert dict(mix.padding.sizes) == {"actions": 32, "robot0_eef_pos": 6}
    item = mix[mix.offsets[1]]
    assert item["actions"].shape == (3, 32) and not item["actions"][:, 14:].any()
    assert item["actions_dim_mask"].tolist() == [True] * 14 + [False] * 18

    def refused(match, **mixture):
        cfg = robots_config(robots, **mixture)
        with pytest.raises(MixtureError, match=match):
            dataset_factory(cfg, obs_keys(cfg))

    refused(rf"^{WHERE}: pad: 'actions' is declared 10 wide but component 1 \(.*bimanual14.hdf5\)'s is 14; declare "
            "at least 14", pad={"actions": 10})  # fmt: skip
    refused(rf"^{WHERE}: pad: 'agentview_image' is not a 1-d key every component serves", pad={"agentview_image": 9})
    # another dtype is still refused, vectors or not
    f32 = tmp_path / "arm6_f32.hdf5"
    shutil.copy(robots[2], f32)
    with h5py.File(f32, "r+") as f:
        for demo in f["data"]:
            values = f[f"data/{demo}/obs/robot0_eef_pos"][()]
            del f[f"data/{demo}/obs/robot0_eef_pos"]
            f[f"data/{demo}/obs/robot0_eef_pos"] = values.astype(np.float32)
    cfg = robots_config(robots)
    with cfg.values_unlocked():
        cfg.train.data_mixture = {"components": [{"path": robots[0], "weight": 1}, {"path": str(f32), "weight": 1}]}
    with pytest.raises(MixtureError, match=rf"^{WHERE}: component 1 .*obs/robot0_eef_pos is \(3,\) float32 but"):
        dataset_factory(cfg, obs_keys(cfg))
    # vectors of other sizes and other dtypes: the dtype is named, never the size, which is padded (the size was
    # blamed, telling the user to drop actions from train.dataset_keys)
    retyped = {}
    for name in ("obs/robot0_eef_pos", "actions"):
        retyped[name] = tmp_path / f"bimanual14_{name.replace('/', '_')}_f32.hdf5"
        shutil.copy(robots[1], retyped[name])
        with h5py.File(retyped[name], "r+") as f:
            for demo in f["data"]:
                values = f[f"data/{demo}/{name}"][()]
                del f[f"data/{demo}/{name}"]
                f[f"data/{demo}/{name}"] = values.astype(np.float32)
    for mode, key, why in (
        ("low_dim", "obs/robot0_eef_pos", "different dtypes (robomimic serves observations as stored)"),
        (None, "actions", "with train.hdf5_cache_mode null robomimic serves it as stored"),
    ):
        cfg = robots_config(robots)
        with cfg.values_unlocked():
            cfg.train.hdf5_cache_mode = mode
            cfg.train.data_mixture = {
                "components": [{"path": robots[0], "weight": 1}, {"path": str(retyped[key]), "weight": 1}]
            }
        with pytest.raises(MixtureError) as refusal:
            dataset_factory(cfg, obs_keys(cfg))
        assert f"{key}" in str(refusal.value) and why in str(refusal.value), str(refusal.value)
        assert "same action space" not in str(refusal.value) and "different shapes" not in str(refusal.value)
    # robomimic reads only the obs keys its config names: a component has nothing to drop
    refused(rf"^{WHERE}: component 0 \(.*\): unknown key\(s\) \['drop'\]",
            components=[{"path": robots[0], "weight": 1, "drop": ["object"]}])  # fmt: skip


WRIST = "robot0_eye_in_hand_image"


@pytest.fixture(scope="module")
def one_camera(robots, tmp_path_factory):
    """arm6 without its wrist camera (obs and next_obs)."""
    path = str(tmp_path_factory.mktemp("one_camera") / "arm6_agentview_only.hdf5")
    shutil.copy(robots[2], path)
    with h5py.File(path, "r+") as f:
        for demo in f["data"]:
            for group in ("obs", "next_obs"):
                del f[f"data/{demo}/{group}/{WRIST}"]
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_camera_a_robot_lacks_is_zeros_with_a_flag(robots, one_camera, backend):
    """``"missing_cameras": "zeros"``: the arm without a wrist camera serves zeros of the others' wrist frames'
    shape and dtype under ``obs``/``next_obs`` with ``robot0_eye_in_hand_image_is_missing`` True (the others: their
    own frames, False), every sample and a batch equal to the file's own ``SequenceDataset`` sample completed so.
    Controls: without it the mixture is refused naming the component and the key; the bimanual robot's wrist frames
    expected for the arm, or its flag False, are caught."""
    parts = (robots[0], robots[1], one_camera)
    cfg = robots_config(parts, backend if backend != "native" else None, missing_cameras="zeros")
    mix = dataset_factory(cfg, obs_keys(cfg))
    assert mix.cameras == [WRIST] and mix.templates[0] == {} and mix.templates[1] == {}
    refs = []
    for path, rgb in zip(parts, (RGB, RGB, RGB[:1])):
        one = make_config(path, rgb=rgb, low_dim=LOW_DIM, seq_length=3, hdf5_cache_mode="low_dim",
                          hdf5_load_next_obs=True)  # fmt: skip
        refs.append(dataset_factory(one, obs_keys(one)))
    like = refs[1][0]

    def expected(sample, k, frames=None, missing=None):
        out = padded(sample, k)
        index = out.pop(DATASET_INDEX)
        lacking = k == 2
        for group in ("obs", "next_obs"):
            if lacking:
                out[group] = {**out[group], WRIST: np.zeros_like(like[group][WRIST]) if frames is None else frames}
        out[f"{WRIST}_is_missing"] = np.bool_(lacking if missing is None else missing)
        out[DATASET_INDEX] = index
        return out

    min_psnr = LOSSY.get(backend)
    for i in range(len(mix)):
        k, local = mix.locate(i)
        assert_same(mix[i], expected(refs[k][local], k), f"{backend} mixture sample {i}", min_psnr)
    idx = np.random.default_rng(0).permutation(len(mix))[:24].tolist()
    batch = mix.collate(idx)
    want = torch.utils.data.default_collate([expected(refs[k][j], k) for k, j in map(mix.locate, idx)])
    assert_same({key: _cpu(v) for key, v in batch.items()}, want, f"{backend} mixed batch", min_psnr)

    g = mix.offsets[2]
    with pytest.raises(AssertionError):
        assert_same(mix[g], expected(refs[2][0], 2, frames=like["obs"][WRIST]), "control")
    with pytest.raises(AssertionError):
        assert_same(mix[g], expected(refs[2][0], 2, missing=False), "control")
    if backend == "native":
        cfg = robots_config(parts)
        with pytest.raises(MixtureError, match=rf"^{WHERE}: component 2 \(.*\): has no obs/{WRIST}"):
            dataset_factory(cfg, obs_keys(cfg))


@pytest.mark.parametrize("backend", ["native", "compressed_cache", "gpu_resampler"])
def test_a_camera_renamed_away_is_not_served_under_its_old_name(robots, one_camera, backend):
    """A reviewer's reproduction: the arm whose one camera is really a wrist camera renames it
    (``{"agentview_image": "robot0_eye_in_hand_image"}``) in a mixture that serves both cameras. The mixture's
    ``agentview_image`` was resolved to the renamed-away key, so the arm's batches lacked it: joined they served it as
    zeros without a flag, per component they raised ``KeyError``. Now the arm has no key for it: refused in one line
    naming the component and the key, or, with ``"missing_cameras": "zeros"``, zeros with
    ``agentview_image_is_missing`` True while its wrist is its own camera's frames. Controls: those frames are not
    zeros; the flag False is caught."""
    parts = (robots[0], robots[1], one_camera)
    cfg = robots_config(parts, backend if backend != "native" else None)
    with cfg.values_unlocked():
        cfg.train.data_mixture["components"][2]["rename"] = {"agentview_image": WRIST}
    with pytest.raises(
        MixtureError,
        match=rf"^{WHERE}: component 2 \(.*\): renames 'agentview_image' to '{WRIST}', "
        r"and the mixture also serves 'agentview_image'.*\(or set \"missing_cameras\": \"zeros\"\)$",
    ):
        dataset_factory(cfg, obs_keys(cfg))
    with cfg.values_unlocked():
        cfg.train.data_mixture["missing_cameras"] = "zeros"
    mix = dataset_factory(cfg, obs_keys(cfg))
    assert mix.cameras == ["agentview_image"] and mix.missing[2] == ["agentview_image"]
    one = make_config(one_camera, rgb=RGB[:1], low_dim=LOW_DIM, seq_length=3, hdf5_cache_mode="low_dim",
                      hdf5_load_next_obs=True)  # fmt: skip
    own = dataset_factory(one, obs_keys(one))
    g, rows = int(mix.offsets[2]), [0, 1, int(mix.offsets[1])]
    batch = mix.collate([g + j for j in range(3)] + rows)
    for j in range(3):
        for group in ("obs", "next_obs"):
            wrist = batch[group][WRIST][j].cpu().numpy()
            assert_same(wrist, own[j][group]["agentview_image"], f"{backend} {group} wrist {j}", LOSSY.get(backend))
            assert wrist.any() and not batch[group]["agentview_image"][j].any()
    assert batch["agentview_image_is_missing"].tolist() == [True] * 3 + [False] * 3
    if backend != "native":
        _same_batch(batch, mix.collate([g + j for j in range(3)] + rows, joined=False), "joined vs per component")
    with pytest.raises(AssertionError):
        assert batch["agentview_image_is_missing"].tolist() == [False] * 6, "control"


@pytest.mark.fast
def test_robomimics_shape_metadata_is_the_mixtures_padded_one(robots):
    """What robomimic's ``train()`` reads from ``train.data`` to build its models (``get_shape_metadata_from_dataset``,
    after ``get_exp_dir(config)``): the mixture's padded ``ac_dim`` and low-dim shapes. Controls: robomimic's own
    function reads the first file's 7 and 3 (a model 7 wide against 14-wide actions); without a mixture, or for
    another file, the shapes are robomimic's."""
    import robomimic.utils.file_utils as FileUtils

    from robo_loaders_plugin.robomimic import compat, integration, patches

    patches.patch_file_utils(FileUtils)  # idempotent: the start-up hook has usually patched it
    cfg = robots_config(robots)
    keys = obs_keys(cfg)
    integration._RUN_CONFIG[:] = [cfg]
    try:
        shape = FileUtils.get_shape_metadata_from_dataset(cfg.train.data, all_obs_keys=keys)
        assert shape["ac_dim"] == 14 and list(shape["all_shapes"]["robot0_eef_pos"]) == [6]
        assert list(shape["all_shapes"]["agentview_image"]) == list(
            compat.ORIGINALS["get_shape_metadata_from_dataset"](cfg.train.data, all_obs_keys=keys)["all_shapes"][
                "agentview_image"
            ]
        )
        own = compat.ORIGINALS["get_shape_metadata_from_dataset"](cfg.train.data, all_obs_keys=keys)
        assert own["ac_dim"] == 7 and list(own["all_shapes"]["robot0_eef_pos"]) == [3]  # control: robomimic's own
        other = FileUtils.get_shape_metadata_from_dataset(robots[1], all_obs_keys=keys)
        assert other["ac_dim"] == 14 and list(other["all_shapes"]["robot0_eef_pos"]) == [6]  # its own sizes
        alone = make_config(robots[0], low_dim=LOW_DIM)
        integration._RUN_CONFIG[:] = [alone]
        assert FileUtils.get_shape_metadata_from_dataset(alone.train.data, all_obs_keys=keys)["ac_dim"] == 7
    finally:
        integration._RUN_CONFIG[:] = []


@pytest.mark.fast
def test_rollouts_in_a_narrower_robots_environment_are_refused_before_training(robots):
    """A reviewer's reproduction: robomimic's script runs rollouts (``experiment.rollout.enabled``, its default) in
    ``train.data``'s environment, which gives that robot's own observations and takes its own actions; the models
    built for the mixture's padded shapes failed at the first rollout, ``rollout.rate`` epochs into training. Refused
    when the shapes are read, naming the option and the sizes; control: with the widest robot as ``train.data``
    padding leaves its shapes as they are and rollouts stay on."""
    import robomimic.utils.file_utils as FileUtils

    from robo_loaders_plugin.robomimic import integration, patches

    patches.patch_file_utils(FileUtils)
    cfg = robots_config(robots)
    with cfg.values_unlocked():
        cfg.experiment.rollout.enabled = True
    integration._RUN_CONFIG[:] = [cfg]
    try:
        with pytest.raises(MixtureError, match=rf"^{WHERE}: experiment.rollout.enabled runs the policy in train.data's "
                           r"environment.*\(actions 7 -> 14, robot0_eef_pos 3 -> 6\): set experiment.rollout.enabled "
                           "to false"):  # fmt: skip
            FileUtils.get_shape_metadata_from_dataset(cfg.train.data, all_obs_keys=obs_keys(cfg))
        widest = robots_config([robots[1], robots[0], robots[2]])
        with widest.values_unlocked():
            widest.train.data = robots[1]
            widest.experiment.rollout.enabled = True
        integration._RUN_CONFIG[:] = [widest]
        shape = FileUtils.get_shape_metadata_from_dataset(widest.train.data, all_obs_keys=obs_keys(widest))
        assert shape["ac_dim"] == 14 and list(shape["all_shapes"]["robot0_eef_pos"]) == [6]
    finally:
        integration._RUN_CONFIG[:] = []


@pytest.mark.fast
def test_a_demo_storing_a_key_at_another_width_is_one_line_naming_the_component(robots, tmp_path):
    """A reviewer's reproduction: a file whose last demo stores ``actions`` 6 wide where its first stores 7 was
    served by ``native`` until that demo's first sample, which raised a bare ``ValueError`` naming no component,
    file or key. One line now, naming the setting, the component's file and the key. Control: the intact file's
    last sample is served, padded."""
    ragged = str(tmp_path / "arm7_ragged.hdf5")
    shutil.copy(robots[0], ragged)
    with h5py.File(ragged, "r+") as f:
        last = sorted(f["data"], key=lambda d: int(d.split("_")[1]))[-1]
        actions = f[f"data/{last}/actions"][()]
        del f[f"data/{last}/actions"]
        f[f"data/{last}/actions"] = actions[:, :6]
    for path, bad in ((robots[0], False), (ragged, True)):
        cfg = robots_config([robots[1], path], backend="native")
        mixture = dataset_factory(cfg, obs_keys(cfg))
        if not bad:
            assert mixture[len(mixture) - 1]["actions"].shape[-1] == 14  # control
            continue
        with pytest.raises(RoboLoadersError, match=rf"^{WHERE}: component 1 \(.*arm7_ragged.hdf5.*\): actions is 6 "
                           r"wide in this sample but 7 wide in the component's metadata"):  # fmt: skip
            mixture[len(mixture) - 1]


def test_a_first_component_that_renames_a_key_gives_robomimic_its_shapes(robots, tmp_path):
    """A reviewer's reproduction: robomimic reads the shapes its models are built for from ``train.data`` (the first
    component) under the config's names, so a first component holding a key under its own name (renamed onto the
    mixture's) failed robomimic's script (h5py's ``KeyError``; with a backend, a line blaming the intact file). Its
    shapes are now read under its own names. Control: robomimic's own read of that file fails on the key."""
    import robomimic.utils.file_utils as FileUtils

    from robo_loaders_plugin.robomimic import compat, integration, patches

    patches.patch_file_utils(FileUtils)
    own = str(tmp_path / "arm7_own_names.hdf5")
    shutil.copy(robots[0], own)
    with h5py.File(own, "r+") as f:
        for demo in f["data"]:
            for group in ("obs", "next_obs"):
                f.move(f"data/{demo}/{group}/robot0_eef_pos", f"data/{demo}/{group}/eef")
    for backend in (None, "compressed_cache"):
        cfg = robots_config((own, *robots[1:]), backend=backend)
        with cfg.values_unlocked():
            cfg.train.data_mixture["components"][0]["rename"] = {"eef": "robot0_eef_pos"}
        keys = obs_keys(cfg)
        integration._RUN_CONFIG[:] = [cfg]
        try:
            shape = FileUtils.get_shape_metadata_from_dataset(own, all_obs_keys=keys)
            assert shape["ac_dim"] == 14 and list(shape["all_shapes"]["robot0_eef_pos"]) == [6]
            assert list(shape["all_shapes"]) == sorted(keys) and shape["all_obs_keys"] == keys
            with pytest.raises(KeyError):
                compat.ORIGINALS["get_shape_metadata_from_dataset"](own, all_obs_keys=keys)
        finally:
            integration._RUN_CONFIG[:] = []
    assert compat.obs_modality("eef") is None  # the read's modality for the file's name is not left registered


def _same_batch(ours, theirs, where):
    """Equal nesting, key order, dtypes, shapes and values (exact: both read the same frame sources)."""
    assert list(ours) == list(theirs), f"{where}: keys {list(ours)} != {list(theirs)}"
    for key, v in theirs.items():
        if isinstance(v, dict):
            _same_batch(ours[key], v, f"{where}/{key}")
            continue
        o = ours[key]
        assert o.dtype == v.dtype and o.shape == v.shape, f"{where}/{key}: {o.dtype}{tuple(o.shape)} != {v.shape}"
        assert torch.equal(o.cpu(), v.cpu()), f"{where}/{key}: values differ"


@pytest.mark.parametrize("backend", BACKENDS[1:])
def test_joined_batches_are_the_per_component_batches(robots, one_camera, backend, monkeypatch):
    """Every backend builds a robomimic mixture's batches once over all components (``robomimic.joined``: one
    ``SequenceWindows`` over every file's demos, the frame sources behind one ``JoinedFrames``): batches across the
    three robots, one without its wrist camera, equal the batches built per component in nesting, key order, dtypes
    and values, with the low-dim fields kept in one table and, over its memory budget, read per component. Controls:
    a mask marking the arm's padding real, the bimanual robot's wrist camera read for its agentview, a table whose
    padding is not zeros; ``native`` keeps the per-component path."""
    from robo_loaders_plugin.mixtures import joined_frames

    parts = (robots[0], robots[1], one_camera)
    cfg = robots_config(parts, backend, missing_cameras="zeros")
    mix = dataset_factory(cfg, obs_keys(cfg))
    assert mix.joined is not None
    rng = np.random.default_rng(0)
    for b in range(6):
        idx = rng.permutation(len(mix))[:16].tolist()
        _same_batch(mix.collate(idx), mix.collate(idx, joined=False), f"{backend} batch {b}")
    idx = [int(mix.offsets[k]) + j for k in range(3) for j in range(3)]
    want = mix.collate(idx, joined=False)
    _same_batch(mix.collate(idx), want, "every robot")

    mix.joined.own["actions"] = np.full(3, 14)  # control: the arms' padding marked real
    with pytest.raises(AssertionError, match="actions_dim_mask: values differ"):
        _same_batch(mix.collate(idx), want, "mask control")
    mix.joined.own["actions"] = np.asarray([7, 14, 6])
    tables = mix.joined.frames.tables
    assert "actions" in tables and "obs/robot0_eef_pos" in tables  # the low-dim fields, in RAM
    real = tables["actions"]
    tables["actions"] = real.copy()
    tables["actions"][:, 7:] = 1  # control: the kept table's padding of the 7-dof arm not zeros
    with pytest.raises(AssertionError, match="actions: values differ"):
        _same_batch(mix.collate(idx), want, "table control")
    tables["actions"] = real

    monkeypatch.setattr(joined_frames, "LOW_DIM_BYTES", 0)  # over the budget: every field read per component
    assert mix.join() and not mix.joined.frames.tables
    _same_batch(mix.collate(idx), want, "fields read per component")
    fields = mix.joined.frames.fields[1]
    fields["obs/agentview_image"] = fields[f"obs/{WRIST}"]  # control: another camera's frames
    mix.joined.frames._joined.clear()  # a camera's joined reader (built at its first read) sees the remapped field
    with pytest.raises(AssertionError, match="agentview_image: values differ"):
        _same_batch(mix.collate(idx), want, "camera control")

    native = robots_config(parts, None, missing_cameras="zeros")
    assert dataset_factory(native, obs_keys(native)).joined is None


def test_native_batches_are_built_item_by_item_as_part_by_part(robots, one_camera):
    """A ``native`` robomimic mixture (robomimic's own ``SequenceDataset`` per robot) builds a batch from its items
    (``MixtureDataset._by_items``: each item renamed, padded, filled, then one collate, as robomimic's DataLoader
    does), the same batch, in nesting, key order, dtypes and values, as built part by part (each robot's part by
    its own collate, then scattered). Control: the part-by-part batch of other indices differs."""
    parts = (robots[0], robots[1], one_camera)
    cfg = robots_config(parts, None, missing_cameras="zeros")
    mix = dataset_factory(cfg, obs_keys(cfg))
    check_items_batch_is_parts_batch(mix, _same_batch, match="values differ")
