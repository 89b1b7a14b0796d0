"""gpu_resampler: items and batches equal the native loaders' at the recorded rate; rate conversion equals the
native loaders on data recorded at the target rate (or a numpy reference between recorded frames); the in-process
batches follow the native sampler, so training losses are the native ones. CPU here; the CUDA tests are skipped
without a GPU (pytest -m cuda)."""

import json
import shutil

import h5py
import numpy as np
import pytest
import torch
from lerobot_helpers import REPO, random_indices, same_item, serve
from robomimic_helpers import assert_same_sample, make_config, obs_keys

from robo_loaders_plugin import BackendOptionError, RoboLoadersError
from robo_loaders_plugin.core.iteration import built_by
from robo_loaders_plugin.lerobot.integration import cycle
from robo_loaders_plugin.lerobot.presets import delta_timestamps
from robo_loaders_plugin.robomimic import dataset_factory


def native(root, preset="none", return_uint8=True, **kw):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    meta = LeRobotDatasetMetadata(REPO, root=root)
    delta = kw.pop("delta", None) or delta_timestamps(preset, meta)
    return LeRobotDataset(REPO, root=root, delta_timestamps=delta, return_uint8=return_uint8, **kw)


@pytest.mark.parametrize("name", ["av1_1cam", "h264_3cam_multifile", "png_1cam"])
@pytest.mark.parametrize(
    "preset,return_uint8,episodes",
    [  # fast: a quick parity check of `make test-fast`
        pytest.param("act", True, None, marks=pytest.mark.fast),
        ("diffusion", False, [0, 2, 3]),
        ("none", True, [1, 4]),
    ],
)
def test_items_and_batches_equal_lerobot_dataset(lerobot_datasets, name, preset, return_uint8, episodes):
    nat = native(lerobot_datasets[name], preset, return_uint8, episodes=episodes)
    ours = serve("gpu_resampler", nat)
    assert len(ours) == len(nat) and built_by(ours).kind == "indexed"  # batches built in-process
    for i in random_indices(len(nat), 150, seed=3):
        same_item(ours[i], nat[i], f"{name}/{preset}[{i}]")
    idx = random_indices(len(nat), 24, seed=4)
    same_item(ours.collate(idx), torch.utils.data.default_collate([nat[i] for i in idx]), "batch")


def test_lerobot_half_rate_equals_native_with_doubled_offsets(lerobot_datasets):
    """target_fps = fps / 2: the policy's steps 0..9 are recorded steps 0, 2, .., 18, which LeRobot itself can
    serve; the items must be equal. At 2/3 of the rate the offsets fall between frames: checked against numpy."""
    root = lerobot_datasets["h264_3cam_multifile"]
    fps = 20
    policy = {
        "action": [i / fps for i in range(10)],
        "observation.state": [-1 / fps, 0.0],
        "observation.images.cam0": [-1 / fps, 0.0],
    }
    ours = serve("gpu_resampler", native(root, delta=policy), target_fps=fps / 2)
    doubled = native(root, delta={k: [2 * t for t in v] for k, v in policy.items()})
    for i in random_indices(len(doubled), 150, seed=5):
        same_item(ours[i], doubled[i], f"half rate [{i}]")

    third = serve("gpu_resampler", native(root, delta=policy), target_fps=fps / 1.5)
    plain = native(root)  # no windows: the recorded rows
    eps = {
        int(e["episode_index"]): (int(e["dataset_from_index"]), int(e["dataset_to_index"])) for e in plain.meta.episodes
    }
    for i in random_indices(len(plain), 40, seed=6):
        item = third[i]
        start, end = eps[int(item["episode_index"])]
        for j, d in enumerate(np.arange(10) * 1.5):
            p = float(np.clip(i + d, start, end - 1))
            lo, hi, w = int(np.floor(p)), min(int(np.floor(p)) + 1, end - 1), p - np.floor(p)
            want = plain[lo]["action"] + (plain[hi]["action"] - plain[lo]["action"]) * w
            torch.testing.assert_close(item["action"][j], want, rtol=1e-6, atol=1e-6)
            assert bool(item["action_is_pad"][j]) == (i + d > end - 1)
        cam = item["observation.images.cam0"]  # offsets -1.5, 0 recorded steps: nearest frame, never blended
        back = int(np.floor(max(i - 1.5, start) + 0.5))
        assert torch.equal(cam[0], plain[back]["observation.images.cam0"])
        assert torch.equal(cam[1], plain[i]["observation.images.cam0"])


def test_lerobot_delta_timestamps_between_frames_and_bad_options(lerobot_datasets):
    root = lerobot_datasets["av1_1cam"]
    ours = serve(
        "gpu_resampler", native(root), delta_timestamps={"action": [0.0, 0.025, 0.075]}, modes={"action": "previous"}
    )
    plain = native(root)
    for i in random_indices(len(plain), 30, seed=7):
        got = ours[i]["action"]  # 20 fps: 0.5 and 1.5 steps ahead, zero-order hold
        assert torch.equal(got[0], plain[i]["action"]) and torch.equal(got[1], plain[i]["action"])
    with pytest.raises(BackendOptionError, match="delta_timestamps names \\['no_such_key'\\]"):
        serve("gpu_resampler", native(root), delta_timestamps={"no_such_key": [0.0]})
    # with a policy's windows (a reviewer's reproduction: ACT failed in its forward pass on 10 offsets for its 5)
    act = native(root, "act")
    n, fps = len(delta_timestamps("act", act.meta)["action"]), float(act.meta.fps)
    with pytest.raises(
        BackendOptionError, match=rf"delta_timestamps\['action'\] has 3 offsets, the policy's window has {n}"
    ):
        serve("gpu_resampler", act, delta_timestamps={"action": [0.0, 0.025, 0.075]})
    with pytest.raises(BackendOptionError, match=r"has windows for \['observation.state'\], which the policy takes as"):
        serve("gpu_resampler", act, delta_timestamps={"observation.state": [0.0] * n})
    shifted = serve("gpu_resampler", act, delta_timestamps={"action": [(i + 0.5) / fps for i in range(n)]})  # control
    assert shifted[0]["action"].shape == act[0]["action"].shape
    # a reviewer's reproduction: an option naming some keys replaced the policy's windows of the others, served
    # as single frames without their pad masks (a policy's forward pass failed on them); they keep their windows
    diffusion = native(root, "diffusion")
    m = len(delta_timestamps("diffusion", diffusion.meta)["action"])
    partial = serve("gpu_resampler", diffusion, delta_timestamps={"action": [(i + 0.5) / fps for i in range(m)]})
    for i in random_indices(len(diffusion), 10, seed=3):
        want, got = diffusion[i], partial[i]
        for key in ("observation.state", "observation.images.cam0"):
            assert got[key].shape == want[key].shape and torch.equal(got[key], want[key]), key
            assert torch.equal(got[f"{key}_is_pad"], want[f"{key}_is_pad"]), key
    with pytest.raises(BackendOptionError, match="never blended"):
        serve("gpu_resampler", native(root, "diffusion"), target_fps=10, modes={"observation.images.cam0": "linear"})
    # issue 23 B12: both said "modes names ['action'], which this run does not read; its fields are []"
    with pytest.raises(
        BackendOptionError,
        match=r"modes apply to rate conversion .* give target_fps or "
        r"delta_timestamps too",
    ):
        serve("gpu_resampler", native(root), modes={"action": "previous"})
    with pytest.raises(
        BackendOptionError,
        match=r"modes names \['action'\], but this run reads no field between "
        r"recorded steps",
    ) as e:
        serve("gpu_resampler", native(root), target_fps=10, modes={"action": "previous"})  # no delta keys to convert
    assert "[]" not in str(e.value)
    with pytest.raises(BackendOptionError, match="target_fps must be a rate in frames per second"):
        serve("gpu_resampler", native(root), target_fps=0)
    with pytest.raises(BackendOptionError, match="source_fps: applies to robomimic only"):
        serve("gpu_resampler", native(root), source_fps=20)
    if not torch.cuda.is_available():
        with pytest.raises(BackendOptionError, match="no CUDA GPU"):
            serve("gpu_resampler", native(root), device="cuda")


def test_lerobot_training_batches_follow_the_sampler(lerobot_datasets):
    """lerobot-train's cycle(dataloader): batches built in-process over EpisodeAwareSampler's order, each equal
    to what LeRobot's DataLoader yields, across passes (the sampler's epoch advances)."""
    from lerobot.datasets import EpisodeAwareSampler

    nat = native(lerobot_datasets["av1_1cam"], "act")
    ours = serve("gpu_resampler", nat)

    def loader(ds):
        sampler = EpisodeAwareSampler(
            ds.meta.episodes["dataset_from_index"], ds.meta.episodes["dataset_to_index"], shuffle=True, seed=5
        )
        return torch.utils.data.DataLoader(ds, batch_size=32, sampler=sampler, num_workers=0)

    per_pass = -(-len(nat) // 32)
    ref = iter(cycle_native(loader(nat)))
    got = cycle(loader(ours))
    for b in range(per_pass + 3):
        same_item(next(got), next(ref), f"batch {b}")


def cycle_native(dl):
    while True:
        yield from dl


@pytest.fixture(scope="module")
def half_rate_hdf5(tiny_hdf5, tmp_path_factory):
    """The tiny file with every other step of every demo: what a 10 Hz recording of the 20 Hz one would be. A
    transition there spans two recorded steps, so its ``next_obs``, ``rewards`` and ``dones`` are those of the second
    (``next_obs[k]`` is ``obs[2k + 2]``, the demo's last done kept): a copy of ``[::2]`` of them was not a recording,
    and it hid the served ``next_obs`` one recorded step ahead (a reviewer's reproduction)."""
    out = str(tmp_path_factory.mktemp("half") / "half.hdf5")
    with h5py.File(tiny_hdf5, "r") as src, h5py.File(out, "w") as dst:
        src.copy("mask", dst)
        data = dst.create_group("data")
        for k, v in src["data"].attrs.items():
            data.attrs[k] = v
        for demo in src["data"]:
            g = data.create_group(demo)
            n = src[f"data/{demo}"].attrs["num_samples"]
            g.attrs["num_samples"] = (n + 1) // 2

            ends = np.minimum(np.arange(1, n, 2).tolist() + ([n - 1] if n % 2 else []), n - 1)

            def copy(name, obj):
                if isinstance(obj, h5py.Dataset):
                    at = ends if name.startswith("next_obs/") or name in ("rewards", "dones") else slice(None, None, 2)  # noqa: B023
                    g.create_dataset(name, data=obj[()][at])  # noqa: B023 (visititems runs it at once)

            src[f"data/{demo}"].visititems(copy)
    return out


@pytest.mark.parametrize(
    "combo",
    [
        dict(seq_length=5, frame_stack=1),
        dict(seq_length=3, frame_stack=2, pad_frame_stack=False, hdf5_cache_mode=None),
        # offline RL's transitions: next_obs, rewards and dones of the transition to the next target step, the goal
        dict(
            seq_length=2,
            frame_stack=1,
            hdf5_load_next_obs=True,
            dataset_keys=["actions", "rewards", "dones"],
            goal_mode="last",
            hdf5_cache_mode="low_dim",
        ),
    ],
)
def test_robomimic_half_rate_equals_sequence_dataset_on_a_half_rate_file(tiny_hdf5, half_rate_hdf5, combo):
    with h5py.File(tiny_hdf5, "r") as f:
        fps = json.loads(f["data"].attrs["env_args"])["env_kwargs"]["control_freq"]
    cfg = make_config(half_rate_hdf5, **combo)
    reference = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")
    cfg = make_config(tiny_hdf5, backend="gpu_resampler", backend_kwargs={"target_fps": fps / 2}, **combo)
    ours = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")
    assert len(ours) == len(reference)
    for i in range(0, len(ours), 3):
        assert_same_sample(ours[i], reference[i], f"[{i}]")
    cfg = make_config(
        tiny_hdf5,
        backend="gpu_resampler",
        backend_kwargs={"target_fps": fps / 2, "source_fps": fps, "modes": {"obs/object": "nearest"}},
        **combo,
    )
    assert len(dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")) == len(reference)


def test_robomimic_options_are_checked(tiny_hdf5):
    for kwargs, match in [
        ({"target_fps": -1}, "target_fps must be a rate in frames per second"),
        ({"target_fps": 1e9}, "target_fps must be a rate in frames per second in \\(0, 10000\\]"),
        ({"target_fps": 5000, "source_fps": 20}, "target_fps=5000 is more than 100x the rate"),
        ({"modes": {"obs/nope": "linear"}, "target_fps": 10, "source_fps": 20}, r"modes names \['obs/nope'\]"),
        (
            {"modes": {"obs/agentview_image": "linear"}, "target_fps": 10, "source_fps": 20},
            "never blended|needs a float field",
        ),
        (
            {"modes": {"actions": "previous"}},
            "modes apply to rate conversion .* give target_fps too, or leave modes out",
        ),
        ({"delta_timestamps": {"actions": [0.0]}}, "delta_timestamps: applies to lerobot only"),
        (
            {"modes": {"dones": "previous"}, "target_fps": 10, "source_fps": 20},
            "rewards and dones are read at the last",
        ),
        ({"device": "tpu"}, "device must be"),
    ]:
        cfg = make_config(tiny_hdf5, backend="gpu_resampler", backend_kwargs=kwargs, seq_length=5)
        with pytest.raises(BackendOptionError, match=match):
            dataset_factory(cfg, obs_keys(cfg))
    # the fields an unknown name is told modes may name leave out rewards and dones, which modes may not name (a
    # reviewer's find: listed as valid, then refused); control: the fields that may be named are listed
    kwargs = {"modes": {"obs/nope": "linear"}, "target_fps": 10, "source_fps": 20}
    cfg = make_config(tiny_hdf5, backend="gpu_resampler", backend_kwargs=kwargs, seq_length=5)
    with pytest.raises(BackendOptionError) as e:
        dataset_factory(cfg, obs_keys(cfg))
    assert "'rewards'" not in str(e.value) and "'dones'" not in str(e.value) and "'actions'" in str(e.value)


def test_robomimic_a_demo_holding_a_field_another_way_is_refused_naming_the_file_and_the_demo(tmp_path):
    """A reviewer's reproduction: a demo whose low-dim observation is float32 where the others' is float64 was
    refused with a bare ``ValueError: episode 2: ...``, the position in the filter key's selection (the file's
    ``demo_2`` was fine). Now one line names the file, the demo and the first demo's dtype, as compressed_cache's
    store says it. Control: the selection without that demo is served."""
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    path = write_robomimic_hdf5(str(tmp_path / "mixed.hdf5"), demos=8, image_size=8, cameras=1, seed=3,
                                next_obs=False, progress=False)  # fmt: skip
    with h5py.File(path, "r+") as f:
        eef = f["data/demo_7/obs/robot0_eef_pos"][:].astype(np.float32)
        del f["data/demo_7/obs/robot0_eef_pos"]
        f["data/demo_7/obs/robot0_eef_pos"] = eef
        f["mask/some"] = np.array([b"demo_2", b"demo_7", b"demo_5"])
        f["mask/fine"] = np.array([b"demo_2", b"demo_5"])
    kwargs = {"device": "cpu", "cache_dir": str(tmp_path / "cache")}
    cfg = make_config(path, rgb=["agentview_image"], low_dim=["robot0_eef_pos"], backend="gpu_resampler",
                      backend_kwargs=kwargs, seq_length=3, hdf5_load_next_obs=False)  # fmt: skip
    with pytest.raises(RoboLoadersError, match=r"mixed.hdf5: demo_7/obs/robot0_eef_pos is float32\(3,\), "
                       r"demo_2/obs/robot0_eef_pos is float64\(3,\)"):  # fmt: skip
        dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="some")
    assert len(dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="fine")) > 0


@pytest.mark.parametrize("control_freq", [float("nan"), 0, -20])
def test_robomimic_a_recorded_rate_that_is_no_rate_asks_for_source_fps(tiny_hdf5, tmp_path, control_freq):
    """A reviewer's reproduction: a file whose ``control_freq`` is NaN crashed with numpy's bare 'cannot convert
    float NaN to integer', and 0 or -20 gave a refusal asking for a target_fps <= 0. Each is a file that does not say
    its rate now: one line asking for source_fps, which then converts it (control). And source_fps without
    target_fps (ignored without a word) is refused."""
    path = str(tmp_path / "rate.hdf5")
    shutil.copy(tiny_hdf5, path)
    with h5py.File(path, "a") as f:
        env = json.loads(f["data"].attrs["env_args"])
        env["env_kwargs"]["control_freq"] = control_freq
        f["data"].attrs["env_args"] = json.dumps(env)
    cfg = make_config(path, backend="gpu_resampler", backend_kwargs={"device": "cpu", "target_fps": 10})
    message = r"rate.hdf5 does not say the rate it was recorded at \(no control_freq above 0 in its env_args\)"
    with pytest.raises(BackendOptionError, match=message + r": set train.data_backend_kwargs.source_fps"):
        dataset_factory(cfg, obs_keys(cfg))
    with cfg.values_unlocked():
        cfg.train.data_backend_kwargs = {"device": "cpu", "target_fps": 10, "source_fps": 20}
    assert len(dataset_factory(cfg, obs_keys(cfg))) > 0  # control
    with cfg.values_unlocked():
        cfg.train.data_backend_kwargs = {"device": "cpu", "source_fps": 20}
    with pytest.raises(BackendOptionError, match=r"source_fps=20 is the rate target_fps converts from, and no "):
        dataset_factory(cfg, obs_keys(cfg))


def test_robomimic_rate_modes_follow_the_modality_not_the_bytes_of_a_step(tmp_path):
    """A reviewer's reproduction: whether a field was camera frames was told by the bytes of a step (1 kB), so at
    30 -> 20 Hz a 16x16 camera (768 bytes) was held (``previous``) instead of ``nearest``, and a 128-wide float
    observation was ``nearest`` and refused ``linear``. robomimic's modalities say it now. Control: the stored flag
    still calls the camera not frames (its tiering is unchanged)."""
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    path = write_robomimic_hdf5(
        str(tmp_path / "small.hdf5"), demos=2, image_size=16, cameras=1, seed=1, next_obs=False, progress=False
    )
    with h5py.File(path, "r+") as f:
        for demo in f["data"]:
            n = f[f"data/{demo}/actions"].shape[0]
            f[f"data/{demo}/obs/big"] = np.arange(n, dtype=np.float64)[:, None].repeat(128, 1)
        recorded = f["data/demo_0/obs/agentview_image"][:3]
    kwargs = {"device": "cpu", "target_fps": 20, "source_fps": 30, "cache_dir": str(tmp_path / "cache")}
    cfg = make_config(path, rgb=["agentview_image"], low_dim=["big"], backend="gpu_resampler", backend_kwargs=kwargs,
                      seq_length=3, hdf5_load_next_obs=False)  # fmt: skip
    ds = dataset_factory(cfg, obs_keys(cfg))
    assert not ds.frames.infos["obs/agentview_image"].frames  # control: 768 bytes a step, tiered as low-dim
    item = ds[0]  # target step 1 is recorded position 1.5
    assert np.array_equal(item["obs"]["agentview_image"][1], recorded[2])  # nearest (ties to the later step)
    assert item["obs"]["big"][1][0] == 1.5  # linear
    with cfg.values_unlocked():
        cfg.train.data_backend_kwargs = {**kwargs, "modes": {"obs/big": "previous"}}
    assert dataset_factory(cfg, obs_keys(cfg))[0]["obs"]["big"][1][0] == 1.0
    with cfg.values_unlocked():
        cfg.train.data_backend_kwargs = {**kwargs, "modes": {"obs/agentview_image": "linear"}}
    with pytest.raises(BackendOptionError, match="never blended"):
        dataset_factory(cfg, obs_keys(cfg))


@pytest.mark.cuda
def test_cuda_batches_are_on_the_gpu_and_equal_the_cpu_path(lerobot_datasets):
    nat = native(lerobot_datasets["h264_3cam_multifile"], "diffusion", return_uint8=False)
    cpu, gpu = serve("gpu_resampler", nat, device="cpu"), serve("gpu_resampler", nat, device="cuda")
    idx = random_indices(len(nat), 32, seed=8)
    a, b = cpu.collate(idx), gpu.collate(idx)
    assert b["observation.images.cam0"].is_cuda and b["action"].is_cuda
    same_item({k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in b.items()}, a, "cuda batch")
    small = serve("gpu_resampler", nat, device="cuda", max_device_memory=1000)  # over budget: pinned host memory
    assert small.frames.storage.type == "cpu" and small.frames.pinned
    c = small.collate(idx)
    assert c["action"].is_cuda
    same_item({k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in c.items()}, a, "pinned batch")


@pytest.fixture(scope="module")
def outcome_recordings(tmp_path_factory):
    """A 30 fps recording whose ``next.reward`` after recorded step ``t`` of episode ``e`` is ``100 e + t`` (and
    ``next.done`` on the last step), and the same episodes recorded at 10 fps: frame ``k`` is recorded step ``3k``,
    its outcome the one of the last recorded step the transition to frame ``k + 1`` covers (robomimic's rule,
    ``half_rate_hdf5``), written by LeRobot's own writer."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    base = tmp_path_factory.mktemp("outcomes")
    lengths = [5, 7, 8, 12, 13]  # lengths - 1 of every residue modulo 3: the last done on and off the 10 fps grid
    features = {
        "observation.state": {"dtype": "float32", "shape": (2,), "names": ["t", "e"]},
        "action": {"dtype": "float32", "shape": (2,), "names": ["t", "e"]},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
    }
    roots = {}
    for fps in (30, 10):
        rate = 30 // fps
        roots[fps] = base / f"fps{fps}"
        ds = LeRobotDataset.create(f"local/fps{fps}", fps, features, root=roots[fps], use_videos=False)
        for e, n in enumerate(lengths):
            for t in range(0, n, rate):
                last = min(t + rate - 1, n - 1)
                ds.add_frame(
                    {
                        "observation.state": np.array([t, e], np.float32),
                        "action": np.array([t, -e], np.float32),
                        "next.reward": np.array([100 * e + last], np.float32),
                        "next.done": np.array([last == n - 1]),
                        "task": "reach",
                    }
                )
            ds.save_episode()
        ds.finalize()
    return roots


def test_lerobot_transition_outcomes_at_a_third_of_the_rate_equal_a_recording_at_that_rate(outcome_recordings):
    """``next.reward``/``next.done`` windows at ``target_fps``: what each transition to the next target step ended
    with, as LeRobot serves the same episodes recorded at that rate (a reviewer's reproduction: read at each step's
    own recorded row, the reward was the first recorded step's of the transition, and an episode's last done was
    never served when its length was not a multiple of the rate)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    def windows(fps):  # TDMPC's shape: outcomes over the horizon
        steps = [i / fps for i in range(4)]
        return {"observation.state": steps + [4 / fps], "action": steps, "next.reward": steps, "next.done": steps}

    src = LeRobotDataset("local/fps30", root=outcome_recordings[30], delta_timestamps=windows(30))
    ref = LeRobotDataset("local/fps10", root=outcome_recordings[10], delta_timestamps=windows(10))
    ours = serve("gpu_resampler", src, target_fps=10)
    first = {int(e["episode_index"]): int(e["dataset_from_index"]) for e in ref.meta.episodes}
    compared = dones = 0
    for i in range(len(src)):
        item = ours[i]
        k, ep = int(item["frame_index"]), int(item["episode_index"])
        if k % 3:
            continue
        want = ref[first[ep] + k // 3]
        for key in ("observation.state", "action", "next.reward", "next.done"):
            assert torch.equal(item[f"{key}_is_pad"], want[f"{key}_is_pad"]), (i, key)
            real = ~want[f"{key}_is_pad"]
            assert torch.equal(item[key][real], want[key][real]), (i, key, item[key], want[key])
        compared += 1
        dones += int(want["next.done"][~want["next.done_is_pad"]].any())
    assert compared == sum(len(range(0, n, 3)) for n in (5, 7, 8, 12, 13)) and dones >= 5  # every episode's done
    # between recorded steps (30 -> 20 fps): an outcome is a recorded step's, never a blend of two
    third = serve("gpu_resampler", src, target_fps=20)
    for i in random_indices(len(src), 20, seed=8):
        item, plain = third[i], src.hf_dataset[i]
        t, e = int(plain["frame_index"]), int(plain["episode_index"])
        n = (5, 7, 8, 12, 13)[e]
        for j, reward in enumerate(item["next.reward"].flatten().tolist()):
            assert reward == 100 * e + min(int(np.ceil((j + 1) * 1.5 - 1e-6)) - 1 + t, n - 1), (i, j)
    with pytest.raises(BackendOptionError, match=r"modes names \['next.reward'\]: what a transition ended with"):
        serve("gpu_resampler", src, target_fps=20, modes={"next.reward": "linear"})
    with pytest.raises(BackendOptionError, match=r"delta_timestamps has windows for \['next.done'\], what a transit"):
        serve("gpu_resampler", src, delta_timestamps={"next.done": [0.0, 0.05, 0.1, 0.15]})


def test_lerobot_drop_n_last_frames_counts_the_policys_steps_at_target_fps(outcome_recordings):
    """A policy's ``drop_n_last_frames`` is in its steps: at a third of the rate the sampler leaves out three times
    as many recorded frames, so the frames served on the target grid are LeRobot's on the recording at that rate,
    alone (lerobot-train's sampler, through ``cycle``) and in a mixture (a reviewer's reproduction: 7 recorded frames
    left out for diffusion's 7 steps, and most items served were windows of padding LeRobot never serves)."""
    import types

    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robo_loaders_plugin.bench.lerobot_run import train_loader
    from robo_loaders_plugin.lerobot import compat
    from robo_loaders_plugin.lerobot.mixture import build_mixture, parse, sampler_rows
    from robo_loaders_plugin.lerobot.single import convert

    def windows(fps):  # diffusion's shape
        return {"observation.state": [-1 / fps, 0.0], "action": [i / fps for i in range(-1, 3)]}

    src = LeRobotDataset("local/fps30", root=outcome_recordings[30], delta_timestamps=windows(30))
    ref = LeRobotDataset("local/fps10", root=outcome_recordings[10], delta_timestamps=windows(10))

    def on_grid(native, rows, scale=1):  # (episode, recorded frame) of the rows on the 10 fps grid
        table = native.hf_dataset
        pairs = ((int(table[i]["episode_index"]), scale * int(table[i]["frame_index"])) for i in rows)
        return {(e, f) for e, f in pairs if f % 3 == 0}

    want = on_grid(ref, sampler_rows(ref, 2), scale=3)

    cfg = types.SimpleNamespace(
        dataset=types.SimpleNamespace(
            backend="gpu_resampler", backend_kwargs={"target_fps": 10}, streaming=False, repo_id="local/fps30"
        ),
        seed=0,
        policy=types.SimpleNamespace(drop_n_last_frames=2),
    )
    ours = convert(src, cfg)
    assert ours.sampler_drop == 6
    loader = train_loader(ours, 4, 0)
    sampler = loader.batch_sampler.sampler
    assert on_grid(src, compat.sampler_indices(sampler)) != want  # the policy's 2 as recorded frames: other frames
    cycle(loader)
    assert on_grid(src, compat.sampler_indices(sampler)) == want
    mix = build_mixture(
        parse(
            {
                "components": [{"repo_id": "local/fps30", "root": str(outcome_recordings[30]), "weight": 1}],
                "target_fps": 10,
            }
        ),
        [src],
        choose_gpu_resampler(),
        seed=0,
        drop_n_last_frames=2,
    )
    try:
        assert mix.eligible[0] is not None and on_grid(src, mix.eligible[0]) == want
    finally:
        mix.close()


def choose_gpu_resampler():
    from robo_loaders_plugin.lerobot.integration import choose

    return choose("gpu_resampler", device="cpu")
