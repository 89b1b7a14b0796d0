"""robomimic on a weighted mixture (``train.data_mixture``): every served sample is its component's SequenceDataset
sample after the rename (for every backend), ``dataset_index`` names the component, the weights set the shares,
``weights: "size"`` serves every window once, bad mixtures are one line, and robomimic's unmodified training script
trains on a 3-component mixture."""

import json
import math
import os
import shutil
import sys

import h5py
import numpy as np
import pytest
import torch
from mixture_batches import build_steps
from robomimic_helpers import RGB, make_config, obs_keys

from robo_loaders_plugin.core import iteration
from robo_loaders_plugin.mixtures.dataset import DATASET_INDEX
from robo_loaders_plugin.mixtures.spec import MixtureError
from robo_loaders_plugin.robomimic import dataset_factory
from robo_loaders_plugin.robomimic.mixture import RobomimicMixture
from robo_loaders_plugin.robomimic.mixture_meta import INDEX_KIND
from robo_loaders_plugin.testing import assert_same

WHERE = "train.data_mixture"
WRIST = "robot0_eye_in_hand_image"
LOW_DIM = ["robot0_eef_pos", "object"]
BACKENDS = ["native", "compressed_cache", "datapipe", "gpu_resampler", "video_stream"]
LOSSY = {"video_stream": {f"{g}/{k}": 25.0 for g in ("obs", "next_obs") for k in RGB}}


def _write(path, seed, demos, size=16, **kw):
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    return write_robomimic_hdf5(
        path, demos=demos, image_size=size, cameras=2, seed=seed, min_length=12, max_length=20,
        valid_fraction=0.34, progress=False, **kw,
    )  # fmt: skip


def _rename_camera(path, old, new):
    with h5py.File(path, "r+") as f:
        for demo in f["data"]:
            for group in ("obs", "next_obs"):
                f.move(f"data/{demo}/{group}/{old}", f"data/{demo}/{group}/{new}")
    return path


def _set_rate(path, hz):
    with h5py.File(path, "r+") as f:
        env = json.loads(f["data"].attrs["env_args"])
        env["env_kwargs"]["control_freq"] = hz
        f["data"].attrs["env_args"] = json.dumps(env)
    return path


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """Three small files: a (4 demos), b (3 demos), c (3 demos, its wrist camera stored as ``wrist_image``)."""
    d = tmp_path_factory.mktemp("mix")
    a = _write(str(d / "a.hdf5"), 1, 4)
    b = _write(str(d / "b.hdf5"), 2, 3)
    c = _rename_camera(_write(str(d / "c.hdf5"), 3, 3), WRIST, "wrist_image")
    return a, b, c


def _mixture(parts, weights=(1, 1, 2), mode="given"):
    a, b, c = parts
    comps = [{"path": a}, {"path": b}, {"path": c, "rename": {"wrist_image": WRIST}}]
    if mode == "given":
        for comp, w in zip(comps, weights, strict=True):
            comp["weight"] = w
    return {"components": comps, "weights": mode}


def _config(parts, backend=None, mixture=None, **train):
    train = {"seq_length": 3, "hdf5_cache_mode": "low_dim", "hdf5_load_next_obs": True, **train}
    cfg = make_config(parts[0], low_dim=LOW_DIM, backend=backend, **train)
    with cfg.values_unlocked():
        cfg.train.data_mixture = mixture if mixture is not None else _mixture(parts)
    return cfg


def _references(parts):
    """Each component's own SequenceDataset (robomimic's, unpatched: native, no mixture), with its own key names."""
    refs = []
    for path, rgb in zip(parts, (RGB, RGB, [RGB[0], "wrist_image"]), strict=True):
        cfg = make_config(
            path, rgb=rgb, low_dim=LOW_DIM, seq_length=3, hdf5_cache_mode="low_dim", hdf5_load_next_obs=True
        )
        refs.append(dataset_factory(cfg, obs_keys(cfg)))
    return refs


def _renamed(sample, k):
    if k != 2:
        return sample
    out = dict(sample)
    for g in ("obs", "next_obs", "goal_obs"):
        if g not in sample:
            continue
        out[g] = {(WRIST if key == "wrist_image" else key): v for key, v in sample[g].items()}
    return out


@pytest.mark.parametrize("backend", [pytest.param("native", marks=pytest.mark.fast), *BACKENDS[1:]])
def test_every_sample_is_its_components_sequence_dataset_sample(parts, backend):
    cfg = _config(parts, backend if backend != "native" else None)
    mix = dataset_factory(cfg, obs_keys(cfg))
    built = iteration.built_by(mix)
    assert isinstance(mix, RobomimicMixture) and built is not None and built.kind == "batch"
    refs = _references(parts)
    assert mix.sizes == [len(r) for r in refs] and len(mix) == sum(map(len, refs))
    min_psnr = LOSSY.get(backend)
    for i in range(len(mix)):
        k, local = mix.locate(i)
        ours = dict(mix[i])
        assert int(ours.pop(DATASET_INDEX)) == k
        assert_same(ours, _renamed(refs[k][local], k), f"{backend} mixture item {i}", min_psnr)
    # a batch across components, in its order: the components' samples collated
    idx = np.random.default_rng(0).permutation(len(mix))[:24].tolist()
    batch = mix.collate(idx)
    assert batch[DATASET_INDEX].dtype == torch.int64
    want = torch.utils.data.default_collate([_renamed(refs[k][j], k) for k, j in map(mix.locate, idx)])
    got = {key: v for key, v in batch.items() if key != DATASET_INDEX}
    assert_same(
        torch.utils.data.default_collate([mix[i] for i in idx])[DATASET_INDEX], batch[DATASET_INDEX], "dataset_index"
    )
    assert_same({k: _cpu(v) for k, v in got.items()}, want, f"{backend} mixed batch", min_psnr)
    if backend == "video_stream":  # every component's cameras as video, a renamed one too (stored raw: a review's find)
        from robo_loaders_plugin.storage.shards import ShardReader

        for k, d in enumerate(mix.datasets):
            kinds = ShardReader(d.location).stored_fields(0)
            raw = [f for f, kind in kinds.items() if f.endswith("image") and kind != "video"]
            assert not raw and any(kind == "video" for kind in kinds.values()), (k, kinds)


def _cpu(v):
    return {k: _cpu(x) for k, x in v.items()} if isinstance(v, dict) else v.cpu()


def _passes(cfg, mix, passes=1, batch_size=8):
    """What robomimic's run_epoch iterates for the DataLoader its train() builds over ``mix``."""
    loader = torch.utils.data.DataLoader(mix, batch_size=batch_size, shuffle=True, drop_last=False)
    source = iteration.pass_batches(loader, lambda dl, b: __import__(
        "robo_loaders_plugin.robomimic.integration", fromlist=["x"]).sampling_plan(dl, b))  # fmt: skip
    assert source is not loader
    return [list(source) for _ in range(passes)]


@pytest.mark.parametrize(
    "backend, weights",
    [("compressed_cache", (1, 1, 6)), ("native", (2.5e307, 2.5e307, 1.5e308))],
    ids=["compressed_cache", "native-weights-whose-sum-overflows"],
)
def test_component_shares_follow_the_weights(parts, backend, weights):
    """The shares of [1, 1, 6] over three passes, also from weights whose sum overflows float64 (issue 42 item 6:
    the first pass died in numpy's ``choice``; the shared order's own test holds the rest)."""
    cfg = _config(parts, backend, mixture=_mixture(parts, weights=weights))
    mix = dataset_factory(cfg, obs_keys(cfg))
    served = torch.cat([b[DATASET_INDEX] for p in _passes(cfg, mix, passes=3) for b in p]).numpy()
    p = np.array([1, 1, 6]) / 8
    n = len(served)
    counts = np.bincount(served, minlength=3)
    assert all(abs(counts[k] - n * p[k]) <= 4 * math.sqrt(n * p[k] * (1 - p[k])) for k in range(3)), counts
    # control: the components' sizes would put component 2 near 3/10, far outside the bound for 6/8
    sizes = np.array(mix.sizes) / len(mix)
    assert abs(counts[2] - n * sizes[2]) > 4 * math.sqrt(n * sizes[2] * (1 - sizes[2]))


def test_the_builds_garbage_is_collected_before_the_first_batch(parts, monkeypatch):
    """CPython's full collection runs as a mixture's build ends (``garbage_collected_once``), not in its first
    batches. Control: inside a block already open (a start that reads the index first), the build itself does not
    collect."""
    cfg = _config(parts, "compressed_cache", mixture=_mixture(parts))

    def build():
        dataset_factory(cfg, obs_keys(cfg))

    from robo_loaders_plugin.mixtures import dataset

    assert build_steps(monkeypatch, build)[-2:] == ["record", "collect"]
    monkeypatch.setattr(dataset, "_BUILDS_OPEN", [1])
    assert "collect" not in build_steps(monkeypatch, build)


def test_weighted_by_size_serves_every_window_once_per_pass(parts):
    cfg = _config(parts, "compressed_cache", mixture=_mixture(parts, mode="size"))
    mix = dataset_factory(cfg, obs_keys(cfg))
    refs = _references(parts)

    def key(actions, k):
        return (int(k), np.asarray(actions, dtype=np.float32).tobytes())

    want = sorted(key(refs[k][j]["actions"], k) for k in range(3) for j in range(len(refs[k])))
    for one_pass in _passes(cfg, mix, passes=2):
        got = sorted(key(a, k) for b in one_pass for a, k in zip(b["actions"], b[DATASET_INDEX], strict=True))
        assert got == want
    assert len(set(want)) > 0.9 * len(want)  # the check can tell windows apart (actions are distinct per window)


# -- refusals, one line each, before data is read ------------------------------------------------------------------
@pytest.fixture(scope="module")
def odd(tmp_path_factory, parts):
    d = tmp_path_factory.mktemp("odd")
    small = _write(str(d / "small.hdf5"), 4, 2, size=8)
    slow = _set_rate(shutil.copy(parts[1], d / "slow.hdf5"), 10)
    return {"small": small, "slow": str(slow)}


def _without_rate(source, path):
    """A copy of ``source`` whose env_args do not say its rate (no ``control_freq``, as in many real-robot files)."""
    shutil.copy(source, path)
    with h5py.File(path, "r+") as f:
        env = json.loads(f["data"].attrs["env_args"])
        del env["env_kwargs"]["control_freq"]
        f["data"].attrs["env_args"] = json.dumps(env)
    return str(path)


def test_a_component_without_a_rate_beside_one_with_a_rate_is_served_with_one_warning(parts, tmp_path, capsys):
    """Issue 42 item 12: a file with no control_freq mixed with a 20 Hz one (was: silently). Served, as each
    component's own SequenceDataset is (robomimic trains on it without asking its rate), with one warning naming
    both components, the rate and what to do, logged once however many splits are built. Control: two components
    that both say their rate build without it."""
    a, b, _ = parts
    unknown = _without_rate(b, tmp_path / "no_rate.hdf5")
    cfg = _config(parts, mixture=[{"path": a, "weight": 1}, {"path": unknown, "weight": 1}])
    capsys.readouterr()
    for _ in range(2):  # robomimic's train() builds the training and the validation mixture
        assert len(dataset_factory(cfg, obs_keys(cfg))) > 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "control_freq" in line]
    assert lines == [
        f"[robo-loaders] warning: {WHERE}: component 1 ({unknown}) does not say the rate it was recorded at (no "
        f"control_freq above 0 in its env_args) but component 0 ({a}) was recorded at 20 Hz; both are served at "
        "their own rate, so if component 1 was recorded at another rate its windows span another time: add "
        "control_freq to its data.attrs['env_args'] env_kwargs (different rates are then refused, or converted with "
        "target_fps)"
    ], lines
    known = _config(parts, mixture=[{"path": a, "weight": 1}, {"path": b, "weight": 1}])
    dataset_factory(known, obs_keys(known))
    assert "warning" not in capsys.readouterr().out  # control


def _refused(cfg, match, backend=None):
    with pytest.raises(MixtureError) as err:
        dataset_factory(cfg, obs_keys(cfg))
    assert "\n" not in str(err.value) and match in str(err.value), str(err.value)
    assert str(err.value).startswith("train.data_mixture") or "train.data_backend_kwargs" in str(err.value)


def test_refusals_name_the_component_and_key(parts, odd):
    a, b, c = parts
    _refused(_config(parts, mixture=[{"path": a, "weight": 1}, {"path": c, "weight": 1}]),
             f"component 1 ({c}): has no obs/{WRIST}")  # fmt: skip
    _refused(_config(parts, mixture=[{"path": a, "weight": 1}, {"path": odd["small"], "weight": 1}]),
             "obs/agentview_image is (8, 8, 3) uint8 but (16, 16, 3) uint8 in component 0")  # fmt: skip
    onto = [{"path": a, "weight": 1}, {"path": b, "weight": 1, "rename": {"agentview_image": WRIST}}]
    _refused(_config(parts, mixture=onto), f"maps 'agentview_image' onto '{WRIST}', a key it already has")
    _refused(_config(parts, mixture=[{"path": a, "weight": 1}, {"path": b, "weight": 1, "rename": {"nope": "x"}}]),
             "rename names obs key 'nope'")  # fmt: skip
    rates = [{"path": a, "weight": 1}, {"path": odd["slow"], "weight": 1}]
    _refused(
        _config(parts, mixture=rates), "component 1 (" + odd["slow"] + ") was recorded at 10 Hz but component 0 at 20"
    )
    _refused(_config(parts, "compressed_cache", mixture={"components": rates, "target_fps": 10}),
             "target_fps needs a backend that converts rates (gpu_resampler)")  # fmt: skip
    _refused(_config(parts, mixture=[{"path": b, "weight": 1}, {"path": a, "weight": 1}]),
             "must be the mixture's first component")  # fmt: skip
    shards = os.path.dirname(a)  # a directory: the option's own check passes, the mixture's refuses it
    _refused(
        _config(parts, "datapipe", backend_kwargs={"shards": shards}), "train.data_backend_kwargs.shards names one"
    )
    _refused(_config(parts, mixture=[{"path": a, "weight": 1}, {"path": b, "weight": 0}]), "component 1 (")


@pytest.mark.parametrize("backend", [None, "native", "compressed_cache"])
def test_normalize_obs_is_one_line_before_any_component_is_built(parts, backend, monkeypatch):
    """train.hdf5_normalize_obs=true with a mixture: was, with the native backend, robomimic's train() failing later
    on a RuntimeError traceback from the mixture's get_obs_normalization_stats (the other backends' single-dataset
    refusal came from each component's build). Now one line naming train.data_mixture and the option, before any
    component is built (control: without the option the same mixture builds)."""
    import robo_loaders_plugin.robomimic.mixture as mixture_module

    built = []
    monkeypatch.setattr(mixture_module, "check_components", lambda *a, **k: built.append(a) or pytest.fail("read"))
    _refused(_config(parts, backend, hdf5_normalize_obs=True), "train.hdf5_normalize_obs=true is not supported")
    assert built == []
    monkeypatch.undo()
    cfg = _config(parts, backend)
    assert len(dataset_factory(cfg, obs_keys(cfg))) > 0  # control


@pytest.fixture(scope="module")
def unservable(tmp_path_factory, parts):
    """Component files that cannot serve: empty (0 bytes), with no demos, and a directory holding HDF5 files."""
    d = tmp_path_factory.mktemp("unservable")
    empty = d / "empty.hdf5"
    empty.write_bytes(b"")
    no_demos = shutil.copy(parts[1], d / "no_demos.hdf5")
    with h5py.File(no_demos, "r+") as f:
        for demo in list(f["data"]):
            del f["data"][demo]
    folder = d / "folder"
    folder.mkdir()
    shutil.copy(parts[1], folder / "b.hdf5")
    return {"empty": str(empty), "no_demos": str(no_demos), "folder": str(folder)}


def test_a_component_that_cannot_serve_is_one_line_naming_the_component_and_what_to_do(parts, unservable):
    """Issue 42 item 9: each refusal names train.data_mixture, the component (index and path), the real problem and
    what to do (was: "does not exist" for a directory, "filter key None selects no demos", "fix
    train.hdf5_filter_key" for the component's own filter_key, an empty file's line without the component).
    Negative control: the same components with a file that has demos, or a filter key the file has, are served."""
    a, b, _ = parts
    u = unservable

    def mix(second, **train):
        return _config(parts, mixture=[{"path": a, "weight": 1}, {**second, "weight": 1}], **train)

    _refused(mix({"path": u["folder"]}), f"component 1 ({u['folder']}): {u['folder']} is a directory, not an HDF5 "
             "file (it holds b.hdf5); give the path of the HDF5 file itself")  # fmt: skip
    _refused(mix({"path": u["no_demos"]}), f"component 1 ({u['no_demos']}): the file has 0 demos (data/ holds no "
             "demo_<i> group), so it has nothing to serve; give a file with demos or remove the component")  # fmt: skip
    _refused(mix({"path": u["empty"]}), f"component 1 ({u['empty']}): the file is empty (0 bytes), not an HDF5 "
             "file; copy or regenerate it, or remove the component")  # fmt: skip
    _refused(mix({"path": b, "filter_key": "20_percent"}), f"component 1 ({b}): its filter_key '20_percent' is "
             "not in the file's mask/ (it has 'train', 'valid'); set the component's filter_key to a mask/ key it "
             "has")  # fmt: skip
    # robomimic's own filter keys (train() passes them as filter_by_attribute), for components without filter_key
    split = mix({"path": b, "filter_key": "valid"}, hdf5_filter_key="nope", hdf5_validation_filter_key="held_out")
    for key, setting, advice in [
        ("nope", "train.hdf5_filter_key", "give this component a filter_key it has"),
        ("held_out", "train.hdf5_validation_filter_key", "every component's validation split uses it"),
    ]:
        with split.values_unlocked():
            split.experiment.validate = key == "held_out"
        with pytest.raises(MixtureError) as err:
            dataset_factory(split, obs_keys(split), filter_by_attribute=key)
        assert str(err.value).startswith(
            f"{WHERE}: component 0 ({a}): {setting} '{key}' is not in the file's mask/ (it has 'train', 'valid'); "
            + advice
        ), str(err.value)
    # negative control: a file with demos, a filter key the file has
    assert len(dataset_factory(mix({"path": b, "filter_key": "valid"}), obs_keys(mix({"path": b})))) > 0


def _retyped(source, path, key, dtype):
    """A copy of ``source`` with ``data/<demo>/<key>`` stored as ``dtype`` in every demo (the values cast)."""
    shutil.copy(source, path)
    with h5py.File(path, "r+") as f:
        for demo in f["data"]:
            values = f[f"data/{demo}/{key}"][()]
            del f[f"data/{demo}/{key}"]
            f[f"data/{demo}/{key}"] = values.astype(dtype)
    return str(path)


def resized(source, path, widths):
    """A copy of ``source`` with ``data/<demo>/<key>`` (``actions``; an obs key in ``obs`` and ``next_obs``) made
    ``width`` wide in every demo: its values repeated (wider) or cut (narrower)."""
    shutil.copy(source, path)
    with h5py.File(path, "r+") as f:
        for demo in f["data"]:
            for key, width in widths.items():
                names = [key] if key == "actions" else [f"obs/{key}", f"next_obs/{key}"]
                for name in names:
                    values = f[f"data/{demo}/{name}"][()]
                    del f[f"data/{demo}/{name}"]
                    f[f"data/{demo}/{name}"] = np.stack([np.resize(row, width) for row in values])
    return str(path)


@pytest.fixture(scope="module")
def float32(tmp_path_factory, parts):
    """b with its actions, and b with its robot0_eef_pos observations, stored as float32 (a stores float64, as
    robosuite's files do)."""
    d = tmp_path_factory.mktemp("float32")
    return {
        "actions": _retyped(parts[1], d / "b_actions32.hdf5", "actions", np.float32),
        "obs": _retyped(parts[1], d / "b_eef32.hdf5", "obs/robot0_eef_pos", np.float32),
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_actions_mix_with_float64_ones_as_robomimic_casts_them(parts, float32, backend):
    """Issue 42 item 10: under hdf5_cache_mode low_dim robomimic's SequenceDataset casts train.dataset_keys to
    float32 (load_dataset_in_memory's astype), so a component storing float32 actions serves what a float64 one
    does; the mixture accepts it and serves every sample byte-equal to its component's own SequenceDataset (was:
    refused with advice about the observation config). Controls: real disagreements are still refused with a true
    line: the same actions without a cache mode (robomimic then serves them as stored, shown), and float32
    observations beside float64 ones (served as stored under every mode)."""
    a = parts[0]
    narrow = float32["actions"]
    mixture = [{"path": a, "weight": 1}, {"path": narrow, "weight": 1}]
    mix = dataset_factory(cfg := _config(parts, backend if backend != "native" else None, mixture=mixture),
                          obs_keys(cfg))  # fmt: skip
    refs = [
        dataset_factory(c, obs_keys(c))
        for c in (
            make_config(p, low_dim=LOW_DIM, seq_length=3, hdf5_cache_mode="low_dim", hdf5_load_next_obs=True)
            for p in (a, narrow)
        )
    ]
    assert refs[0][0]["actions"].dtype == np.float32  # robomimic's own cast of a's float64 actions, the reference
    assert mix.sizes == [len(r) for r in refs]
    for i in range(len(mix)):
        k, local = mix.locate(i)
        ours = dict(mix[i])
        assert int(ours.pop(DATASET_INDEX)) == k
        assert_same(ours, refs[k][local], f"{backend} item {i}", LOSSY.get(backend))
    idx = np.random.default_rng(1).permutation(len(mix))[:16].tolist()
    batch = {key: v for key, v in mix.collate(idx).items() if key != DATASET_INDEX}
    want = torch.utils.data.default_collate([refs[k][j] for k, j in map(mix.locate, idx)])
    assert_same({key: _cpu(v) for key, v in batch.items()}, want, f"{backend} mixed batch", LOSSY.get(backend))
    if backend != "native":
        return
    uncached = make_config(a, low_dim=LOW_DIM, seq_length=3, hdf5_cache_mode=None, hdf5_load_next_obs=True)
    assert dataset_factory(uncached, obs_keys(uncached))[0]["actions"].dtype == np.float64  # what null serves
    _refused(_config(parts, mixture=mixture, hdf5_cache_mode=None),
             f"component 1 ({narrow}): actions (train.dataset_keys) is (7,) float32 but (7,) float64 in component 0 "
             f"({a}); with train.hdf5_cache_mode null robomimic serves it as stored")  # fmt: skip
    _refused(_config(parts, mixture=[{"path": a, "weight": 1}, {"path": float32["obs"], "weight": 1}]),
             "obs/robot0_eef_pos is (3,) float32 but (3,) float64 in component 0")  # fmt: skip


def test_target_fps_converts_every_component_with_gpu_resampler(parts, odd):
    a = parts[0]
    cfg = _config(parts, "gpu_resampler", mixture={"components": [{"path": a, "weight": 1},
                  {"path": odd["slow"], "weight": 1}], "target_fps": 20})  # fmt: skip
    mix = dataset_factory(cfg, obs_keys(cfg))
    # the slow component (10 Hz) at 20 Hz: twice its windows; the 20 Hz one unchanged
    refs = _references(parts)
    assert mix.sizes[0] == len(refs[0]) and mix.sizes[1] > 1.8 * len(refs[1])


# -- robomimic's own training script ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bimanual(tmp_path_factory, parts):
    """b as a bimanual robot's file: 14-wide actions, two end effectors (``robot0_eef_pos`` 6 wide)."""
    path = tmp_path_factory.mktemp("bimanual") / "b_bimanual14.hdf5"
    return resized(parts[1], path, {"actions": 14, "robot0_eef_pos": 6})


@pytest.fixture(scope="module")
def arm6(tmp_path_factory, parts):
    """b as a 6-dof arm's file without a wrist camera (obs and next_obs): ``{hz: path}`` recorded at 20 Hz (as the
    others) and at 10 Hz."""
    d = tmp_path_factory.mktemp("arm6")
    path = str(d / "b_arm6_one_camera.hdf5")
    resized(parts[1], path, {"actions": 6})
    with h5py.File(path, "r+") as f:
        for demo in f["data"]:
            for group in ("obs", "next_obs"):
                del f[f"data/{demo}/{group}/{WRIST}"]
    return {20: path, 10: _set_rate(shutil.copy(path, str(d / "b_arm6_one_camera_10hz.hdf5")), 10)}


@pytest.mark.parametrize("backend", [None, *BACKENDS[1:]])
def test_unmodified_train_script_trains_on_a_mixture(parts, bimanual, arm6, tmp_path, backend):
    """robomimic's own ``train.py`` on the 3-component mixture plus a bimanual robot's file and a 6-dof arm's (issue
    44: 14-wide actions beside the others' 7 and 6, ``robot0_eef_pos`` 6 beside 3, the arm's missing wrist camera
    served as zeros with its flag), on every backend: two epochs of training and validation, each split served as a
    mixture of 5 by the chosen backend, the model built for the padded shapes (robomimic reads them from train.data,
    a 7-wide file: its BC head would be 7 wide against 14-wide actions). With ``gpu_resampler``, which converts
    rates, the arm is recorded at 10 Hz and served at ``target_fps`` 20 beside the others' 20 Hz (the other backends
    refuse rates that differ: ``test_refusals_name_the_component_and_key``)."""
    from test_robomimic_train_script import assert_trained, run, write_config

    name = f"mix_{backend or 'native'}"
    cfg_path = write_config(tmp_path, parts[0], backend, name)
    cfg = json.loads(open(cfg_path).read())
    cfg["train"]["data_mixture"] = _mixture(parts)
    hz = 10 if backend == "gpu_resampler" else 20
    cfg["train"]["data_mixture"]["components"] += [{"path": bimanual, "weight": 1}, {"path": arm6[hz], "weight": 1}]
    cfg["train"]["data_mixture"]["missing_cameras"] = "zeros"
    if hz != 20:
        cfg["train"]["data_mixture"]["target_fps"] = 20
    cfg["train"]["seq_length"] = 3
    cfg["algo"]["rnn"]["horizon"] = 3
    cfg["train"]["num_epochs"] = 2
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    rc, out = run([sys.executable, "-m", "robomimic.scripts.train", "--config", cfg_path])
    assert rc == 0, out[-3000:]
    line = f"[robo-loaders] robomimic data backend: {backend or 'native'} [train] mixture of 5"
    assert_trained(out, tmp_path, name, line)
    assert f"robomimic data backend: {backend or 'native'} [valid] mixture of 5" in out
    assert "robomimic builds its models for the mixture's padded shapes (actions 14, robot0_eef_pos 6)" in out
    assert "'actions' padded with zeros to 14" in out
    assert os.path.basename(parts[2]) in out
    assert f"{WRIST}_is_missing" in out
    if hz != 20:
        assert "resampled 10 -> 20 Hz" in out  # the arm, converted from its own rate


def _machine(monkeypatch, disk_bytes=None, host_bytes=10**12):
    """``Available.measure`` answering a machine with this disk (and host RAM), no RAM files: what every backend and
    the mixture's check measure."""
    from robo_loaders_plugin.core.footprint import Available

    def measure(cls, disk_dir=None, device=None, shm_dir=None):
        return Available(
            host_bytes=host_bytes, shm_bytes=0, shm_dir="/dev/shm", shm_is_ram=True, disk_dir=disk_dir and
            os.path.abspath(disk_dir), disk_bytes=None if disk_dir is None else disk_bytes, disk_reserve=0,
        )  # fmt: skip

    monkeypatch.setattr(Available, "measure", classmethod(measure))


def _rlc(cache):
    return sorted(str(p) for p in __import__("pathlib").Path(cache).rglob("*.rlc"))


def test_whole_mixture_footprint_is_refused_before_any_component_is_built(parts, tmp_path, monkeypatch):
    """Components whose caches each fit the disk but not together: refused in one line naming the mixture, every
    component's share and the numbers, before any cache is written; each component alone is accepted (negative
    control), and once their caches exist (reused: nothing more to write) the mixture is too."""
    from robo_loaders_plugin.core.footprint import Footprint, ResourceRefused
    from robo_loaders_plugin.core.registry import choose_backend

    cache = str(tmp_path / "cache")
    kwargs = {"cache_dir": cache}
    cfg = _config(parts, "compressed_cache", backend_kwargs=kwargs)
    choice = choose_backend(
        "robomimic",
        "compressed_cache",
        kwargs,
        name_where="train.data_backend",
        options_where="train.data_backend_kwargs",
    )
    names = [os.path.basename(p) for p in parts]
    keys = [obs_keys(cfg), obs_keys(cfg), [k if k != WRIST else "wrist_image" for k in obs_keys(cfg)]]
    disk = [choice.plan(cfg, keys[k], dataset_path=p, committed=Footprint()).footprint.disk_bytes for k, p in
            enumerate(parts)]  # fmt: skip
    assert min(disk) > 0
    usable = int((max(disk) + min(disk)) / 0.9)  # any one (any two smallest) fit, not all three together
    assert sum(disk) > 0.9 * usable
    _machine(monkeypatch, disk_bytes=usable)
    with pytest.raises(ResourceRefused) as refused:
        dataset_factory(cfg, obs_keys(cfg))
    line = str(refused.value)
    assert "\n" not in line and line.startswith("train.data_mixture: backend 'compressed_cache'"), line
    assert f"needs {__import__('robo_loaders_plugin.core.units', fromlist=['x']).format_bytes(sum(disk))}" in line
    for k, name in enumerate(names):
        assert f"[{k}] {name}: " in line, line
    assert "Would fit: the first" in line and "train.data_backend_kwargs" in line, line
    assert _rlc(cache) == [], "a component was built before the refusal"
    # negative control: each component alone fits the same machine
    for k, path in enumerate(parts):
        alone = make_config(path, rgb=[RGB[0], "wrist_image"] if k == 2 else RGB,
                            low_dim=LOW_DIM, backend="compressed_cache", backend_kwargs=kwargs, seq_length=3,
                            hdf5_cache_mode="low_dim", hdf5_load_next_obs=True)  # fmt: skip
        assert len(dataset_factory(alone, obs_keys(alone))) > 0
    assert len(_rlc(cache)) == 3
    # their caches are reused by the mixture: nothing left to write, so it fits
    mix = dataset_factory(cfg, obs_keys(cfg))
    assert isinstance(mix, RobomimicMixture) and mix.sizes == [len(d) for d in mix.datasets]


def test_a_component_whose_source_changed_is_rebuilt_alone(parts, tmp_path):
    """compressed_cache caches each component in the cache directory; editing one component's HDF5 after a first
    build rebuilds that component's cache only (the others reused) and the mixture serves the new data."""
    work = [shutil.copy(p, tmp_path / os.path.basename(p)) for p in parts]
    work = [str(p) for p in work]
    kwargs = {"cache_dir": str(tmp_path / "cache")}

    def built():
        cfg = _config(work, "compressed_cache", mixture=_mixture(work), backend_kwargs=kwargs)
        mix = dataset_factory(cfg, obs_keys(cfg))
        return mix, [iteration.summary_of(d) for d in mix.datasets]

    _, first = built()
    assert not any("reused" in s for s in first), first
    with h5py.File(work[1], "r+") as f:
        demo = sorted(f["data"])[0]
        f[f"data/{demo}/obs/robot0_eef_pos"][0] = [7.0, 8.0, 9.0]
    mix, second = built()
    assert ["reused" in s for s in second] == [True, False, True], second
    first_of_b = int(mix.offsets[1])
    assert mix.locate(first_of_b) == (1, 0)
    assert np.array_equal(mix[first_of_b]["obs"]["robot0_eef_pos"][0], np.float32([7.0, 8.0, 9.0]))


@pytest.mark.parametrize("backend", ["datapipe", "video_stream"])
def test_the_buffer_backends_count_in_the_whole_mixture_footprint(parts, monkeypatch, backend):
    """The episode-buffer backends declare their footprint too: their buffers together, not one by one, are checked
    before any component is built or converted; each buffer alone fits the same machine (negative control)."""
    from robo_loaders_plugin.core.footprint import Footprint, ResourceRefused
    from robo_loaders_plugin.core.registry import choose_backend
    from robo_loaders_plugin.mixtures.footprint import check_mixture_fits

    cfg = _config(parts, backend)
    choice = choose_backend(
        "robomimic", backend, {}, name_where="train.data_backend", options_where="train.data_backend_kwargs"
    )
    keys = [obs_keys(cfg), obs_keys(cfg), [k if k != WRIST else "wrist_image" for k in obs_keys(cfg)]]
    plans = [choice.plan(cfg, keys[k], dataset_path=p, committed=Footprint()) for k, p in enumerate(parts)]
    need = [p.footprint.host_bytes for p in plans]
    assert all(need)
    _machine(monkeypatch, host_bytes=int(max(need) / 0.9) + 1)  # any one buffer fits, not the three
    monkeypatch.setattr(type(choice), "build", lambda self, *a, **k: pytest.fail("a component was built"))
    with pytest.raises(ResourceRefused, match=rf"train.data_mixture: backend '{backend}' cannot serve these 3"):
        dataset_factory(cfg, obs_keys(cfg))
    for k in range(3):  # negative control: each alone fits
        check_mixture_fits("m", ["x"], lambda _, c, k=k: plans[k], backend=backend, option_prefix="o")


# -- recycled batch arrays -------------------------------------------------------------------------------------------
def _clone(batch):
    if isinstance(batch, dict):
        return {k: _clone(v) for k, v in batch.items()}
    return batch.clone() if isinstance(batch, torch.Tensor) else batch


def _kept_pass_intact(parts) -> list[str]:
    """One pass of a mixture's batches, every batch kept, as robomimic's loop would see them: which batches changed
    after they were handed out."""
    from robo_loaders_plugin.robomimic.integration import epoch_loader

    cfg = _config(parts, backend="compressed_cache")
    ds = dataset_factory(cfg, obs_keys(cfg))
    loader = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True, num_workers=2)
    kept = [(batch, _clone(batch)) for batch in epoch_loader(loader)]
    assert len(kept) > 8
    changed = []
    for b, (batch, copy) in enumerate(kept):
        for key in ("actions", "obs"):
            mine, theirs = batch[key], copy[key]
            if isinstance(mine, dict):
                if any(not torch.equal(mine[k], theirs[k]) for k in mine):
                    changed.append(f"batch {b} {key}")
            elif not torch.equal(mine, theirs):
                changed.append(f"batch {b} {key}")
    return changed


def test_a_loop_keeping_every_mixed_batch_sees_them_intact(parts, monkeypatch):
    """The mixed batches are scattered into recycled arrays: a loop that keeps every batch of a pass finds each as
    it was handed out; negative control: the same pass with buffers handed out again while still in use."""
    assert _kept_pass_intact(parts) == []
    from test_batch_buffers import _careless_empty

    from robo_loaders_plugin.storage import buffers

    monkeypatch.setattr(buffers.BufferPool, "empty", _careless_empty)
    assert _kept_pass_intact(parts) != []


def _pooled_after_passes(parts, passes=6, joined=True) -> tuple[int, int, str]:
    """``passes`` passes of a 3-component mixture (train.batch_size 16, num_data_workers 2) through robomimic's
    DataLoader, each batch dropped as the training step drops it: (bytes every recycled-array pool of the mixture and
    its components keeps, the batches in flight its footprint states in bytes, a component's summary). ``joined``:
    batches built once over all components (the default), else part by part."""
    from test_batches_in_flight import robomimic_sample_bytes

    from robo_loaders_plugin.core.in_flight import TrainingLoop, indexed_in_flight
    from robo_loaders_plugin.robomimic.integration import epoch_loader

    cfg = _config(parts, backend="compressed_cache", batch_size=16, num_data_workers=2)
    mix = dataset_factory(cfg, obs_keys(cfg))
    assert mix.joined is not None
    if not joined:
        mix.joined = None
    loader = torch.utils.data.DataLoader(mix, batch_size=16, shuffle=True, num_workers=2)  # as robomimic's train()
    source = epoch_loader(loader)
    for _ in range(passes):
        for batch in source:
            del batch
    pools = {id(p): p for p in [mix.buffer_pool] + [d.buffer_pool for d in mix.datasets]}.values()
    stated = indexed_in_flight(robomimic_sample_bytes(cfg), TrainingLoop(16, 2))
    return sum(p.held()[1] for p in pools), stated.host_bytes, mix.datasets[0].serving.summary


def test_the_recycled_arrays_of_a_mixture_stay_within_its_stated_batches_in_flight(parts, monkeypatch):
    """After six passes the pools of a 3-component mixture keep no more bytes than the 5 batches in flight its
    footprint states (2 ahead per thread (2) + 1 held by training), its batches built joined or part by part; they
    kept 17.5 batches' bytes, each component's pool a buffer for every part size it saw. Control: the same passes
    built part by part with a pool as it was (a buffer per shape, no bound in bytes) keep more than stated."""
    from robo_loaders_plugin.core.units import format_bytes
    from robo_loaders_plugin.storage import buffers

    for joined in (True, False):  # batches built once over all components, and part by part
        held, stated, summary = _pooled_after_passes(parts, joined=joined)
        assert "5 batches in flight (2 ahead per thread or DataLoader worker (2) + 1 held by training; " in summary
        assert f"{format_bytes(stated)})" in summary  # the bound below is the one the footprint states
        assert 0 < held <= stated, (joined, held, stated)
    monkeypatch.setattr(buffers.BufferPool, "bound", lambda self, max_bytes: None)
    monkeypatch.setattr(buffers.BufferPool, "empty", buffers.BufferPool._empty)
    unbounded, _, _ = _pooled_after_passes(parts, joined=False)  # the control, on the path with the most arrays
    assert unbounded > 2 * stated, (unbounded, stated)


def test_close_closes_every_component_and_later_reads_name_the_mixture(parts, tmp_path):
    """close() on a mixture closes each component: their cache entries become prunable (3 of 3) and every recycled
    batch array is released; then [i], collate and a pass are refused in one line naming train.data_mixture and its
    components. Control: while open, pruning leaves the entries alone and the pools keep arrays."""
    from robo_loaders_plugin.core.errors import RoboLoadersError
    from robo_loaders_plugin.storage import cache

    cfg = _config(parts, "compressed_cache", backend_kwargs={"cache_dir": str(tmp_path)})
    mix = dataset_factory(cfg, obs_keys(cfg))
    mix.collate(list(range(0, len(mix), 5)))  # a batch across the three components
    names = sorted(e.path for e in cache.entries(str(tmp_path)))
    assert len(names) == 3
    assert not set(cache.prune(str(tmp_path), 0)) & set(names)  # the control: open, nothing pruned
    pools = {id(p): p for p in [mix.buffer_pool] + [d.buffer_pool for d in mix.datasets]}.values()
    assert all(p.held()[0] > 0 for p in pools)
    mix.close()
    assert set(names) <= set(cache.prune(str(tmp_path), 0)), "a component still held its cache entry"
    assert [p.held() for p in pools] == [(0, 0)] * len(pools)
    said = r"^train\.data_mixture: the mixture of 3 components \(a\.hdf5, b\.hdf5, c\.hdf5\) was closed, [^\n]*$"
    a_pass = mix.batch_source(iteration.SamplingPlan(batch_size=4, num_workers=2))
    for read in (lambda: mix[0], lambda: mix.collate([0, 1]), lambda: next(iter(a_pass))):
        with pytest.raises(RoboLoadersError, match=said):
            read()
    mix.close()  # idempotent


def _checked(cfg, opened, filters=None):
    """``check_components`` of ``cfg``'s mixture (the metadata pass of a start), and the files it opened."""
    from robo_loaders_plugin.robomimic.mixture import check_components, mixture_spec

    spec = mixture_spec(cfg)
    filters = filters or [c.filter_key or cfg.train.hdf5_filter_key for c in spec.components]
    opened.clear()
    return check_components(spec, cfg, obs_keys(cfg), filters), sorted(opened)


def test_a_second_start_opens_no_components_file_for_the_checks_and_an_edited_one_is_read_alone(
    parts, tmp_path, monkeypatch
):
    """Issue 44 item 3: the mixture index keeps what the checks read of each (file, filter key). A second start's
    checks open no component's HDF5 (h5py.File counted); a component's env metadata edited in place with its mtime
    set back (what ``cp -p`` leaves) is read again alone and its new rate used; a file replaced by another at the
    same path with the recorded mtime is read alone and its rate used; the validation split's filter key is a
    record of its own. Negative control: with the fingerprint comparison disabled the stale rate is served."""
    from robo_loaders_plugin.storage.fingerprint import Fingerprint

    work = [str(shutil.copy(p, tmp_path / os.path.basename(p))) for p in parts]
    cache = str(tmp_path / "cache")
    cfg = _config(work, mixture=_mixture(work), backend_kwargs={"cache_dir": cache})
    opened: list[str] = []
    real_file = h5py.File

    def counting(name, *args, **kwargs):
        opened.append(str(name))
        return real_file(name, *args, **kwargs)

    monkeypatch.setattr(h5py, "File", counting)
    first, read = _checked(cfg, opened)
    assert read and set(read) == set(work), read
    second, read = _checked(cfg, opened)
    assert read == [] and second[0] == first[0] and second[2] == first[2]
    assert second[1].sizes == first[1].sizes

    stat = os.stat(work[1])
    _set_rate(work[1], 7)  # env_args rewritten in place
    os.utime(work[1], ns=(stat.st_atime_ns, stat.st_mtime_ns))
    control = cache + "-control"  # the control first, on a copy of the index
    shutil.copytree(cache, control)
    monkeypatch.setattr(Fingerprint, "differences", lambda self, current: [])
    cfg_control = _config(work, mixture=_mixture(work), backend_kwargs={"cache_dir": control})
    (rates, _, _), read = _checked(cfg_control, opened)
    assert rates[1] == first[0][1] != 7 and read == []  # stale: what the comparison keeps out
    monkeypatch.undo()
    monkeypatch.setattr(h5py, "File", counting)

    (rates, _, _), read = _checked(cfg, opened)
    assert rates == [first[0][0], 7.0, first[0][2]] and set(read) == {work[1]}
    assert _checked(cfg, opened)[1] == []  # kept: the next start opens nothing again

    other = str(tmp_path / "other.hdf5")
    _set_rate(shutil.copy(work[0], other), 9)
    os.utime(other, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(other, work[1])  # another file at the same path, with the mtime the index recorded
    (rates, _, _), read = _checked(cfg, opened)
    assert rates[1] == 9.0 and set(read) == {work[1]}

    valid = ["valid"] * 3  # the validation split: a record of its own per file, kept apart from the training one
    assert set(_checked(cfg, opened, valid)[1]) == set(work)
    assert _checked(cfg, opened, valid)[1] == []
    records = os.listdir(os.path.join(cache, ".mixture-index", INDEX_KIND))
    assert len([r for r in records if r.endswith(".json")]) == 6


def test_many_components_log_one_line_and_one_bar(parts, tmp_path, capsys):
    """Past 8 components robomimic's mixture logs each component's line at DEBUG under one bar over the
    components (the stores' own bars quieted) and one line counting the stores built and reused; the second build
    finds all nine (the control for the count: 9 reused)."""
    paths = [parts[0]] + [shutil.copy(parts[0], tmp_path / f"copy{k}.hdf5") for k in range(1, 9)]
    mixture = {"components": [{"path": str(p), "weight": 1} for p in paths]}

    def build():
        cfg = _config(parts, "compressed_cache", mixture=mixture)
        with cfg.values_unlocked():
            cfg.train.data_backend_kwargs = {"cache_dir": str(tmp_path / "cache")}
        built.append(dataset_factory(cfg, obs_keys(cfg)))
        return capsys.readouterr()

    built = []
    first = build()
    assert "compressed_cache (" not in first.err and "compressed_cache mixture: 100%" in first.err, first.err[-2000:]
    assert "robomimic data mixture component" not in first.out, first.out[-2000:]
    (count,) = [line for line in first.out.splitlines() if "components' datasets built by" in line]
    assert "9 components' datasets built by compressed_cache; their stores: 0 reused, 9 built (component 0 " in count
    assert "their stores: 9 reused, none built;" in build().out
    shown = repr(built[0]).splitlines()  # what robomimic's train script prints: 8 components, then a count
    assert len(shown) == 12 and shown[9] == "\t... and 1 more components" and shown[8].startswith("\t[7] copy7.hdf5")


def _big_endian_with_grouped_masks(src, path):
    """A copy of ``src`` with every float and int array big-endian, its masks also in a group (``splits/``), and a
    mask ``overlap``: the training demos and a validation one."""
    import shutil

    shutil.copyfile(src, path)
    with h5py.File(path, "r+") as f:
        names = []
        f["data"].visititems(
            lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and o.dtype.kind in "fi" else 0
        )
        for n in names:
            values = f["data"][n][()]
            del f["data"][n]
            f["data"][n] = values.astype(values.dtype.newbyteorder(">"))
        for key in ("train", "valid"):
            f[f"mask/splits/{key}"] = f[f"mask/{key}"][()]
        f["mask/overlap"] = np.concatenate([f["mask/train"][()], f["mask/valid"][()][:1]])  # a validation demo too
    return path


@pytest.mark.parametrize("backend", ["native", "compressed_cache", "datapipe"])
def test_grouped_masks_and_big_endian_components_are_served_and_shared_validation_demos_refused(
    parts, tmp_path, backend
):
    """Reviewers' reproductions: a component's filter key in a group (``splits/train``, robomimic's
    ``f["mask/" + key]``) was refused as not in mask/ (the group named as a key); a big-endian component beside a
    little-endian one was refused as serving another dtype (both float64, served in this machine's order); and a
    component's filter_key sharing demos with train.hdf5_validation_filter_key validated on training demos, with
    nothing said (robomimic refuses that for train.data alone). Control: the component alone, as robomimic serves it."""
    a = parts[0]
    big = _big_endian_with_grouped_masks(parts[1], str(tmp_path / "big.hdf5"))
    mixture = {"components": [{"path": a, "weight": 1}, {"path": big, "weight": 1, "filter_key": "splits/train"}]}
    cfg = _config(parts, backend if backend != "native" else None, mixture=mixture)
    mix = dataset_factory(cfg, obs_keys(cfg))
    ref = make_config(big, rgb=RGB, low_dim=LOW_DIM, seq_length=3, hdf5_cache_mode="low_dim", hdf5_load_next_obs=True)
    alone = dataset_factory(ref, obs_keys(ref), filter_by_attribute="splits/train")
    assert mix.sizes[1] == len(alone)
    for i in range(len(mix)):
        k, local = mix.locate(i)
        if k == 1:
            ours = dict(mix[i])
            ours.pop(DATASET_INDEX)
            assert_same(ours, alone[local], f"{backend} mixture item {i}")
    mixture["components"][1]["filter_key"] = "overlap"
    cfg = _config(parts, backend if backend != "native" else None, mixture=mixture, hdf5_filter_key="train")
    with cfg.values_unlocked():
        cfg.experiment.validate = True
        cfg.train.hdf5_validation_filter_key = "valid"
    with pytest.raises(MixtureError) as err:  # the training split, as robomimic's train() asks for it
        dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")
    assert f"component 1 ({big}): its training demos (filter_key 'overlap') overlap its validation demos" in str(
        err.value
    ), str(err.value)
    mixture["components"][1]["filter_key"] = "splits/train"  # control: disjoint splits build
    cfg.train.data_mixture = mixture
    dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")


def _first_with_own_masks(src, path, valid=True):
    """A copy of ``src`` whose training demos are under ``mask/mine``; its ``mask/train`` (unused by a mixture that
    gives the component ``filter_key: mine``) overlaps ``mask/valid``, which is left out with ``valid=False``."""
    import shutil

    shutil.copyfile(src, path)
    with h5py.File(path, "r+") as f:
        train, held_out = f["mask/train"][()], f["mask/valid"][()]
        del f["mask/train"]
        f["mask/mine"] = train
        f["mask/train"] = np.concatenate([train, held_out[:1]])
        if not valid:
            del f["mask/valid"]
    return path


def test_robomimics_split_of_a_mixture_reads_each_components_own_filter_key(parts, tmp_path):
    """A reviewer's reproduction through robomimic's ``load_data_for_training`` (what its ``train()`` calls): it read
    ``train.data``'s own ``mask/train`` and ``mask/valid`` before the mixture was built, so a first component
    selecting its training demos with its own ``filter_key`` was refused by robomimic's overlap assertion (its unused
    ``mask/train`` overlapping ``mask/valid``), and a first component without ``mask/valid`` was h5py's ``KeyError``.
    Now both splits are the mixture's: the first component's training demos are its ``filter_key``'s, and a missing
    validation mask is one line naming it. Control: the same file's ``mask/train`` overlaps, and is refused when it is
    the component's training split."""
    import robomimic.utils.train_utils as TrainUtils

    first = _first_with_own_masks(parts[0], str(tmp_path / "first.hdf5"))
    mixture = {"components": [{"path": first, "weight": 1, "filter_key": "mine"}, {"path": parts[1], "weight": 1}]}
    cfg = make_config(first, low_dim=LOW_DIM, seq_length=3, hdf5_cache_mode="low_dim", hdf5_load_next_obs=True)
    with cfg.values_unlocked():
        cfg.train.data_mixture = mixture
        cfg.train.hdf5_filter_key, cfg.train.hdf5_validation_filter_key = "train", "valid"
        cfg.experiment.validate = True
    train, valid = TrainUtils.load_data_for_training(cfg, obs_keys(cfg))
    for split, key in ((train, "mine"), (valid, "valid")):
        ref = make_config(first, low_dim=LOW_DIM, seq_length=3, hdf5_cache_mode="low_dim", hdf5_load_next_obs=True)
        assert split.sizes[0] == len(dataset_factory(ref, obs_keys(ref), filter_by_attribute=key)), key
    mixture["components"][0]["filter_key"] = "train"  # control: this file's mask/train overlaps its validation demos
    with pytest.raises(MixtureError, match=r"component 0 .*its training demos \(filter_key 'train'\) overlap"):
        TrainUtils.load_data_for_training(cfg, obs_keys(cfg))
    without = _first_with_own_masks(parts[0], str(tmp_path / "novalid.hdf5"), valid=False)
    mixture["components"][0] = {"path": without, "weight": 1, "filter_key": "mine"}
    cfg.train.data = without
    with pytest.raises(MixtureError) as err:
        TrainUtils.load_data_for_training(cfg, obs_keys(cfg))
    assert f"component 0 ({without}): train.hdf5_validation_filter_key 'valid' is not in the file's mask/" in str(
        err.value
    ), str(err.value)


def test_a_camera_a_component_lacks_names_the_way_to_serve_it(parts):
    """A reviewer's finding: a component lacking a camera the config names was told only to add a rename, never the
    documented ``"missing_cameras": "zeros"``; and with it, a first component lacking the camera (whose shapes are
    the mixture's) was told the same, not to list a component with every camera first. Control: the rename the
    message offers first serves the mixture."""
    a, _, c = parts  # c stores the wrist camera as wrist_image
    cfg = _config(parts, mixture={"components": [{"path": a, "weight": 1}, {"path": c, "weight": 1}]})
    with pytest.raises(MixtureError) as err:
        dataset_factory(cfg, obs_keys(cfg))
    assert f"component 1 ({c}): has no obs/{WRIST}" in str(err.value), str(err.value)
    assert 'or set "missing_cameras": "zeros" to serve zeros and a flag for it' in str(err.value), str(err.value)
    first = make_config(c, low_dim=LOW_DIM, seq_length=3, hdf5_cache_mode="low_dim", hdf5_load_next_obs=True)
    with first.values_unlocked():
        first.train.data_mixture = {
            "components": [{"path": c, "weight": 1}, {"path": a, "weight": 1}],
            "missing_cameras": "zeros",
        }
    with pytest.raises(MixtureError) as err:
        dataset_factory(first, obs_keys(first))
    assert (
        f"component 0 ({c}): has no obs/{WRIST} for the mixture's obs key '{WRIST}'; with \"missing_cameras\": "
        '"zeros" the first component (train.data) must have every camera' in str(err.value)
    ), str(err.value)
    first.train.data_mixture["components"][0]["rename"] = {"wrist_image": WRIST}  # control
    assert dataset_factory(first, obs_keys(first)).sizes[0] > 0
