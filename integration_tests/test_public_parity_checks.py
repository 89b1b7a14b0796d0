"""Every built-in backend through the public parity checks (``robo_loaders_plugin.testing``), the ones a third
party runs: so the checks are known to hold every kind (sample, indexed, batch; lossless and lossy) to the native
loader, and their negative controls show they fail on wrong data."""

import numpy as np
import pytest
from robomimic_helpers import make_config, obs_keys
from test_robomimic_video_shards import PSNR_FLOOR

from robo_loaders_plugin.extend import FrameSource
from robo_loaders_plugin.testing import (
    assert_same,
    assert_same_batches,
    assert_same_pass,
    assert_same_samples,
    episode_aware_sampler,
    lerobot_case,
    robomimic_case,
)


def rm_case(path, **train):
    cfg = make_config(path, seq_length=5, frame_stack=2, **train)
    return robomimic_case(cfg, obs_keys(cfg), filter_by_attribute="train")


@pytest.mark.parametrize(
    "backend, options",
    [
        ("compressed_cache", {}),
        ("datapipe", {"shuffle_buffer": 3}),
        ("gpu_resampler", {}),
        ("video_stream", {}),
    ],
)
def test_robomimic_backends_pass_the_public_checks(tiny_hdf5, tmp_path, backend, options):
    case = rm_case(tiny_hdf5, hdf5_cache_mode="low_dim")
    if backend == "datapipe":
        options = dict(options, cache_dir=str(tmp_path))
    psnr = (
        {"agentview_image": PSNR_FLOOR, "robot0_eye_in_hand_image": PSNR_FLOOR} if backend == "video_stream" else None
    )
    assert_same_samples(case, backend, options, count=80, min_psnr=psnr)
    assert_same_batches(case, backend, options, batch_size=8, batches=2, min_psnr=psnr)
    assert assert_same_pass(case, backend, options, batch_size=16, num_workers=2, min_psnr=psnr) > 3


@pytest.mark.parametrize("backend", ["compressed_cache", "datapipe", "gpu_resampler", "video_stream"])
def test_lerobot_backends_pass_the_public_checks(lerobot_datasets, tmp_path, backend):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    native = LeRobotDataset(
        "local/sample",
        root=lerobot_datasets["av1_1cam"],
        return_uint8=True,
        delta_timestamps={"action": [0.0, 0.05, 0.1]},
        episodes=[0, 2, 4],
    )
    case = lerobot_case(native)
    options = {"cache_dir": str(tmp_path)} if backend == "datapipe" else {}
    assert_same_samples(case, backend, options, count=60)
    assert assert_same_pass(case, backend, options, batch_size=16) > 3


def test_the_checks_fail_on_a_wrong_window_and_a_missing_sample(tiny_hdf5, tmp_path, monkeypatch):
    """Negative controls: a sample one step off, and a pass that serves one sample twice, are both refused."""
    case = rm_case(tiny_hdf5, hdf5_cache_mode="low_dim")
    native = case.native()
    with pytest.raises(AssertionError, match="values differ"):
        assert_same(native[5], native[6], "off by one")
    ds = case.build("datapipe", {"cache_dir": str(tmp_path), "shuffle_buffer": 3})
    original = ds.collate

    def one_sample_twice(indices):
        indices = list(indices)
        indices[-1] = indices[0]
        return original(indices)

    ds.collate = one_sample_twice  # every batch serves its first window again instead of its last
    import robo_loaders_plugin.testing as testing

    monkeypatch.setattr(testing.RobomimicCase, "build", lambda self, backend, options: ds)
    with pytest.raises(AssertionError, match="served more often than the native pass serves it"):
        assert_same_pass(case, "datapipe", {}, batch_size=16)


# -- a one-pixel error: every check must catch it, in both frameworks ---------------------------------------------
class OnePixelOff(FrameSource):
    """``inner``'s frames with one byte flipped in one camera's frame at one (unit, step): a backend serving one
    wrong pixel of one frame of one camera of one episode, everything else byte-identical."""

    def __init__(self, inner: FrameSource, field: str, unit: int, step: int):
        self.inner, self.field, self.unit, self.step = inner, field, unit, step
        self.lengths = inner.lengths

    def info(self, field):
        return self.inner.info(field)

    def take(self, field, episodes, steps, out):
        self.inner.take(field, episodes, steps, out)
        if field != self.field:
            return
        steps = np.asarray(steps)
        units = np.asarray(episodes).reshape((-1,) + (1,) * (steps.ndim - 1))
        for at in zip(*np.nonzero((units == self.unit) & (steps == self.step))):
            frame = out[at]  # a view of the frame in the output
            frame.flat[0] = frame.flat[0] ^ 1

    def __getattr__(self, name):
        return getattr(self.inner, name)


def one_pixel_off(ds, camera: str, target: int):
    """``ds`` (a built dataset with ``frames`` and ``episode_of()``) serves from now on one byte of ``camera`` wrong:
    the first of the frame at sample ``target``'s own step (one window per step: padded windows), in every sample
    holding that frame; planted again elsewhere, the earlier byte is served right again."""
    inner = ds.frames.inner if isinstance(ds.frames, OnePixelOff) else ds.frames
    unit_of = ds.episode_of()
    unit = int(unit_of[target])
    step = target - int(np.flatnonzero(unit_of == unit)[0])
    ds.frames = OnePixelOff(inner, camera, unit, step)
    return ds


def plant_one_pixel(monkeypatch, case, camera: str, where: str) -> int:
    """Every dataset ``case`` builds from now on serves one byte of ``camera`` wrong, in one frame of the middle
    episode: its first (``"edge"``) or a middle (``"inside"``) one.

    Returns:
        The native index whose sample holds that frame (the frame at its window's own step).
    """
    native = case.native()
    episode = case.episode_indices(native)[len(case.episode_indices(native)) // 2]
    target = int(episode[0] if where == "edge" else episode[len(episode) // 2])
    real_build = type(case).build

    def build(self, backend, options):
        return one_pixel_off(real_build(self, backend, options), camera, target)

    monkeypatch.setattr(type(case), "build", build)
    with pytest.raises(AssertionError, match=r"values differ at element .*; max abs diff 1\.0\)"):  # planted, one byte
        assert_same(case.build("compressed_cache", {})[target], native[target], "planted")
    return target


@pytest.fixture(params=["robomimic", "lerobot"])
def one_pixel_case(request):
    """A case and the camera to plant the error in: one of two (robomimic), the second of three (LeRobot, in a
    dataset whose episodes share video files)."""
    if request.param == "robomimic":
        case = rm_case(request.getfixturevalue("tiny_hdf5"), hdf5_cache_mode="low_dim")
        return case, "obs/robot0_eye_in_hand_image"
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    native = LeRobotDataset(
        "local/sample",
        root=request.getfixturevalue("lerobot_datasets")["h264_3cam_multifile"],
        return_uint8=True,
        delta_timestamps={"action": [0.0, 0.05, 0.1]},
        episodes=[0, 2, 4],
    )
    return lerobot_case(native), "observation.images.cam1"


def test_every_check_catches_one_wrong_pixel_at_an_episode_edge(one_pixel_case, monkeypatch):
    """One byte of one camera's first frame of the middle episode. The defaults compare every episode's first and
    last index whatever the random draw (``count=0``: those only). Measured over seeds 0-9 with the old random
    indices: ``assert_same_samples`` caught it 4 (robomimic, count 80) and 3 (LeRobot, count 60) times of 10,
    ``assert_same_batches`` 1 of 10 in each; now 10 of 10."""
    case, camera = one_pixel_case
    target = plant_one_pixel(monkeypatch, case, camera, "edge")
    with pytest.raises(AssertionError, match=f"compressed_cache\\[{target}\\]:{camera}: values differ"):
        assert_same_samples(case, "compressed_cache", {}, count=0)
    with pytest.raises(AssertionError, match=f"batch .*{camera}: values differ"):
        assert_same_batches(case, "compressed_cache", {}, batch_size=8, batches=1)
    with pytest.raises(AssertionError, match=f"pass batch .*{camera}: values differ"):
        assert_same_pass(case, "compressed_cache", {}, batch_size=16)


def test_every_check_catches_one_wrong_pixel_inside_an_episode_when_exhaustive(one_pixel_case, monkeypatch):
    """One byte of a frame in the middle of the middle episode: ``exhaustive=True`` compares every index, and a
    pass serves every sample. The edges alone miss it (by default the random indices may find it: measured 10 of 10
    seeds on robomimic, where a frame is in six windows, 4 of 10 on LeRobot)."""
    case, camera = one_pixel_case
    plant_one_pixel(monkeypatch, case, camera, "inside")
    assert_same_samples(case, "compressed_cache", {}, count=0)  # the edges alone do not hold that frame
    with pytest.raises(AssertionError, match=f"\\]:{camera}: values differ"):
        assert_same_samples(case, "compressed_cache", {}, count=0, exhaustive=True)
    with pytest.raises(ValueError, match="give indices or exhaustive=True, not both"):
        assert_same_samples(case, "compressed_cache", {}, indices=[0], exhaustive=True)
    with pytest.raises(AssertionError, match=f"batch .*{camera}: values differ"):
        assert_same_batches(case, "compressed_cache", {}, batch_size=8, batches=1, exhaustive=True)
    with pytest.raises(AssertionError, match=f"pass batch .*{camera}: values differ"):
        assert_same_pass(case, "compressed_cache", {}, batch_size=16)


# -- one wrong byte in the frame of one sample only: the pass finds it whatever the seed -----------------------------
BATCH = 8  # 139 robomimic windows, 12 LeRobot frames: a last, partial batch in both


@pytest.fixture(params=["robomimic", "lerobot"])
def one_window_case(request):
    """A case in which every camera frame is in one sample only, small enough for 40 passes in seconds, and the camera
    to plant the error in: robomimic's own defaults (``seq_length`` 1, ``frame_stack`` 1, no next_obs) over the 3
    "valid" demos (139 windows, held in memory), the second of two cameras; LeRobot the second camera of one episode
    (12 frames, H.264) of the mixtures' 2-camera dataset."""
    if request.param == "robomimic":
        cfg = make_config(request.getfixturevalue("tiny_hdf5"), hdf5_cache_mode="all")
        return robomimic_case(cfg, obs_keys(cfg), filter_by_attribute="valid"), "obs/robot0_eye_in_hand_image"
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    repo_id, root = request.getfixturevalue("lerobot_mixture_datasets")["c"]
    native = LeRobotDataset(
        repo_id, root=root, return_uint8=True, delta_timestamps={"action": [0.0, 0.05, 0.1]}, episodes=[2]
    )
    return lerobot_case(native), "observation.images.cam1"


def pass_order(case, native, seed: int, drop_last: bool = False) -> list[int]:
    """The dataset indices in the order the framework's own sampler serves them in a pass of ``seed``: robomimic's
    shuffled DataLoader from torch's global RNG (``drop_last=True`` as its ``train()`` builds it), LeRobot's
    ``EpisodeAwareSampler``."""
    import torch.utils.data

    if case.framework == "robomimic":
        torch.manual_seed(seed)
        loader = torch.utils.data.DataLoader(range(len(native)), batch_size=BATCH, shuffle=True, drop_last=drop_last)
        return [int(i) for batch in loader for i in batch]
    return [int(i) for i in episode_aware_sampler(native, seed)]


def field(sample, path: str) -> np.ndarray:
    for name in path.split("/"):
        sample = sample[name]
    return np.asarray(sample)


def test_the_pass_finds_one_wrong_byte_in_any_sample_whatever_the_seed(one_window_case, monkeypatch):
    """For 40 seeds, one byte of one camera's frame in the one sample the pass serves last (a real backend,
    ``compressed_cache``, serving it wrong): ``assert_same_pass`` raises naming the batch, the row, the dataset
    index, the camera, the element and both values. Before, robomimic's pass copied ``drop_last=True``, which drops
    exactly that sample (139 windows, 3 in the last batch of 8): missed in 40 of 40 seeds (the control below shows
    robomimic's own DataLoader never serves it); LeRobot's pass caught it but named neither the index nor the
    element. Controls: the unplanted data passes; on robomimic (samples in memory: cheap), ``assert_same_samples``
    with ``count=20``, a spot check, misses it in 30 of the 40 seeds, as its docstring says, and where it catches
    it its message names the index and element too."""
    case, camera = one_window_case
    native, ours = case.native(), case.build("compressed_cache", {})
    monkeypatch.setattr(type(case), "native", lambda self: native)  # built once: 40 passes in seconds
    monkeypatch.setattr(type(case), "build", lambda self, backend, options: ours)
    n = len(native)
    assert n % BATCH and assert_same_pass(case, "compressed_cache", {}, batch_size=BATCH) == -(-n // BATCH)
    shape = field(native[0], camera).shape
    element = (0,) * len(shape)  # the frame's first byte, planted
    spot_missed = 0
    for seed in range(40):
        order = pass_order(case, native, seed)
        target = order[-1]
        one_pixel_off(ours, camera, target)
        value = int(field(native[target], camera).flat[0])
        with pytest.raises(AssertionError) as failed:
            assert_same_pass(case, "compressed_cache", {}, batch_size=BATCH, seed=seed)
        last = n % BATCH
        assert str(failed.value) == (
            f"compressed_cache pass batch {n // BATCH}:{camera}: values differ at row {last - 1} (index {target}), "
            f"element {element}: ours {value ^ 1}, native {value} (1 of {last * int(np.prod(shape))} elements differ; "
            "max abs diff 1.0)"
        ), seed
        if case.framework != "robomimic":
            continue
        assert target not in pass_order(case, native, seed, drop_last=True)  # what robomimic's train() serves
        try:
            assert_same_samples(case, "compressed_cache", {}, count=20, seed=seed)
            spot_missed += 1
        except AssertionError as e:
            assert str(e).startswith(
                f"compressed_cache[{target}]:{camera}: values differ at element {element}: ours {value ^ 1}, native "
                f"{value} (1 of {int(np.prod(shape))} elements differ"
            ), seed
    assert spot_missed == (30 if case.framework == "robomimic" else 0)


def test_a_batch_backend_serving_one_wrong_byte_is_named_by_the_nearest_native_sample(tiny_hdf5, tmp_path, monkeypatch):
    """A ``batch`` backend (``datapipe``, its own order) serving one wrong byte: the served sample is in no native
    sample, so the multiset comparison names the nearest native sample not served yet (every exact field but the
    camera equal), its index and the element, not only 'not a sample of the native pass'. Control: unplanted, the
    same pass is served."""
    cfg = make_config(tiny_hdf5, hdf5_cache_mode="all")
    case = robomimic_case(cfg, obs_keys(cfg), filter_by_attribute="valid")
    ds = case.build("datapipe", {"cache_dir": str(tmp_path), "shuffle_buffer": 3})
    monkeypatch.setattr(type(case), "build", lambda self, backend, options: ds)
    assert assert_same_pass(case, "datapipe", {}, batch_size=BATCH) == -(-len(ds) // BATCH)
    original, camera, target = ds.collate, "robot0_eye_in_hand_image", 77

    def one_byte_off(indices):
        batch = original(indices)
        for r, i in enumerate(indices):
            if int(i) == target:
                np.asarray(batch["obs"][camera][r]).reshape(-1)[0] ^= 1
        return batch

    ds.collate = one_byte_off
    value = int(field(case.native()[target], f"obs/{camera}").flat[0])
    with pytest.raises(AssertionError) as failed:
        assert_same_pass(case, "datapipe", {}, batch_size=BATCH)
    message = str(failed.value)
    assert f": not a sample of the native pass; the nearest not served yet, index {target} (" in message
    assert f"exact fields equal):obs/{camera}: values differ at element (0, 0, 0, 0): ours {value ^ 1}, " in message


def test_the_lerobot_pass_spawns_its_workers_so_a_native_decode_cannot_fail_in_a_fork(lerobot_datasets, monkeypatch):
    """After the parent decoded (``assert_same_samples``), forked workers inherited LeRobot's open torchcodec
    decoders and their file offsets: the native ``LeRobotDataset`` failed in them ("Could not push packet to
    decoder", measured 5 runs of 5) with a correct backend. Both DataLoaders now spawn their workers, as
    ``lerobot-train`` 0.6.1 does; negative control: before, both were built with the platform's default (fork)."""
    import torch.utils.data
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    native = LeRobotDataset(
        "local/sample",
        root=lerobot_datasets["av1_1cam"],
        return_uint8=True,
        delta_timestamps={"action": [0.0, 0.05, 0.1]},
        episodes=[0, 2, 4],
    )
    case = lerobot_case(native)
    assert_same_samples(case, "compressed_cache", {}, count=20)  # decoders now open in this process
    contexts = []

    class Recorded(torch.utils.data.DataLoader):
        def __init__(self, *args, **kwargs):
            contexts.append(kwargs.get("multiprocessing_context"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(torch.utils.data, "DataLoader", Recorded)
    assert assert_same_pass(case, "compressed_cache", {}, batch_size=32, num_workers=2) > 3
    assert contexts == ["spawn", "spawn"]  # the backend's DataLoader, then the native one
