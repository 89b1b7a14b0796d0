"""compressed_cache vs LeRobotDataset[i], tensor by tensor (>= 500 random indices per dataset and setting)."""

import pickle
import zlib

import pytest
import torch
from lerobot_helpers import REPO, random_indices, same_item, serve

from robo_loaders_plugin.backends.compressed_cache.frames import CompressedFrames
from robo_loaders_plugin.lerobot.dataset import LeRobotSamples
from robo_loaders_plugin.lerobot.presets import delta_timestamps

# ("diffusion", False): float frames, 2 observation steps, action chunks; the quick parity check of `make test-fast`
SETTINGS = [
    ("none", True),
    ("act", True),
    ("diffusion", True),
    pytest.param("diffusion", False, marks=pytest.mark.fast),
    ("act", False),
]


def native(root, preset="none", return_uint8=True, repo=REPO, **kw):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    meta = LeRobotDatasetMetadata(repo, root=root)
    return LeRobotDataset(
        repo, root=root, delta_timestamps=delta_timestamps(preset, meta), return_uint8=return_uint8, **kw
    )


@pytest.mark.parametrize("name", ["av1_1cam", "h264_3cam_multifile", "png_1cam"])
@pytest.mark.parametrize("preset,return_uint8", SETTINGS)
def test_same_items_as_lerobot_dataset(lerobot_datasets, name, preset, return_uint8):
    nat = native(lerobot_datasets[name], preset, return_uint8)
    ours = serve("compressed_cache", nat)
    assert isinstance(ours, LeRobotSamples) and isinstance(ours.frames.inner, CompressedFrames)
    assert len(ours) == len(nat) == ours.num_frames and ours.num_episodes == nat.num_episodes
    for i in random_indices(len(nat), 500, seed=zlib.crc32(f"{name}{preset}".encode())):
        same_item(ours[i], nat[i], f"{name}/{preset}[{i}]")


def test_episode_filter(lerobot_datasets):
    nat = native(lerobot_datasets["h264_3cam_multifile"], "diffusion", episodes=[1, 3, 4])
    ours = serve("compressed_cache", nat)
    assert ours.episodes == [1, 3, 4] and len(ours) == len(nat) == 130 + 150 + 111
    assert ours.absolute_to_relative_idx == nat.absolute_to_relative_idx is not None
    for i in random_indices(len(nat), 500, seed=4):
        same_item(ours[i], nat[i], f"episodes[{i}]")


def test_image_transforms_applied_the_same_way(lerobot_datasets):
    from lerobot.transforms import ImageTransforms, ImageTransformsConfig

    tf = ImageTransforms(ImageTransformsConfig(enable=True, max_num_transforms=3, random_order=True))
    nat = native(lerobot_datasets["av1_1cam"], "diffusion", image_transforms=tf)
    ours = serve("compressed_cache", nat)
    for i in random_indices(len(nat), 100, seed=5):
        torch.manual_seed(i)
        a = ours[i]
        torch.manual_seed(i)
        b = nat[i]
        same_item(a, b, f"transforms[{i}]")


def test_image_transforms_in_batches_built_in_process_are_refused(lerobot_datasets):
    """A reviewer's reproduction: with image transforms, a backend building batches in the training process drew
    them from its RNG, not from lerobot-train's workers', and its threads in no fixed order: other augmentations
    than LeRobot's, and other ones at every run of the same seed. Refused in one line naming what serves them as
    LeRobot does. Control: without transforms it builds."""
    from lerobot.transforms import ImageTransforms, ImageTransformsConfig

    from robo_loaders_plugin import RoboLoadersError

    tf = ImageTransforms(ImageTransformsConfig(enable=True, max_num_transforms=2))
    nat = native(lerobot_datasets["av1_1cam"], "act", image_transforms=tf)
    in_process = (("gpu_resampler", {"device": "cpu"}), ("datapipe", {}), ("compressed_cache", {"loader": "threads"}))
    for backend, options in in_process:
        refused = r"builds batches in the training process, .* use one of native"
        with pytest.raises(RoboLoadersError, match=refused) as e:
            serve(backend, nat, **options)
        # only compressed_cache has an option (loader) whose default moves the items into the workers
        assert ("leave loader to its default, use one of" in str(e.value)) == (backend == "compressed_cache")
        assert "leave its options" not in str(e.value)
    assert len(serve("gpu_resampler", native(lerobot_datasets["av1_1cam"], "act"), device="cpu")) == len(nat)


def test_real_renders(shared_lerobot):
    """The simulator-rendered Lift dataset in ../shared (AV1, 2 cameras 84x84)."""
    nat = native(shared_lerobot, "diffusion", repo="local/robosuite_lift")
    ours = serve("compressed_cache", nat)
    for i in random_indices(len(nat), 500, seed=6):
        same_item(ours[i], nat[i], f"shared[{i}]")
    st = ours.frames.inner.store.stats
    assert st["compressed_nbytes"] * 2 < st["decoded_frame_nbytes"]  # "below half of the raw decoded frames"


def test_pickles_small_and_works_in_spawn_workers(lerobot_datasets, monkeypatch):
    """Spawned workers get the dataset by pickle, with the plugin's import hook switched off in them: nothing
    may depend on patches applied in the parent."""
    from lerobot.datasets import EpisodeAwareSampler

    nat = native(lerobot_datasets["av1_1cam"], "act")
    ours = serve("compressed_cache", nat)
    assert len(pickle.dumps(ours)) < ours.frames.inner.store.file_nbytes  # a path and small arrays, not the frames
    monkeypatch.setenv("ROBO_LOADERS_DISABLE", "1")  # inherited by the spawned workers

    def batches(ds, workers):
        sampler = EpisodeAwareSampler(
            ds.meta.episodes["dataset_from_index"],
            ds.meta.episodes["dataset_to_index"],
            episode_indices_to_use=ds.episodes,
            shuffle=True,
            seed=11,
            drop_n_last_frames=7,
            absolute_to_relative_idx=ds.absolute_to_relative_idx,
        )
        kw = dict(multiprocessing_context="spawn", persistent_workers=True) if workers else {}
        dl = torch.utils.data.DataLoader(ds, batch_size=16, sampler=sampler, num_workers=workers, **kw)
        return [b for _, b in zip(range(6), dl)]

    got, ref = batches(ours, 2), batches(nat, 0)
    assert len(got) == len(ref) == 6
    for a, b in zip(got, ref):
        same_item(a, b, "batch")


def test_a_cache_built_channels_first_is_built_again_channels_last_with_the_same_items(
    lerobot_datasets, tmp_path, capsys
):
    """A compressed cache of the earlier store format (camera frames channels first) is never read as this one:
    it is removed with a line saying why and built again channels last; both serve LeRobotDataset's items.
    Negative control: the new cache read as if its frames were stored as served gives other items."""
    import os

    from robo_loaders_plugin.backends.compressed_cache import episode_store as store_module
    from robo_loaders_plugin.backends.compressed_cache.store import CompressedStore
    from robo_loaders_plugin.storage import frame_layout

    root, cache_dir = lerobot_datasets["h264_3cam_multifile"], str(tmp_path / "cache")
    nat = native(root, "act")
    indices = random_indices(len(nat), 60, seed=12)
    with pytest.MonkeyPatch.context() as m:  # what an earlier robo-loaders built
        m.setattr(store_module, "FORMAT_VERSION", 2)
        m.setattr(CompressedStore, "kind", "compressed-cache-2")
        m.setattr(frame_layout, "stored_layout", lambda shape: None)
        old = serve("compressed_cache", nat, cache_dir=cache_dir)
        old_path = old.frames.directory
        assert old.frames.inner.store.header["format"] == 2
        for i in indices:
            same_item(old[i], nat[i], f"channels-first cache[{i}]")
        old.close()
    capsys.readouterr()
    new = serve("compressed_cache", native(root, "act"), cache_dir=cache_dir)
    said = [x for x in capsys.readouterr().out.splitlines() if f"removed {old_path}" in x]
    assert len(said) == 1 and "in an earlier format" in said[0] and not os.path.exists(old_path)
    store = new.frames.inner.store
    assert store.header["format"] == 3 and store.frame_layout(0, "observation.images.cam0") == "hwc"
    for i in indices:
        same_item(new[i], nat[i], f"channels-last cache[{i}]")
    with pytest.MonkeyPatch.context() as m:  # negative control: the layout ignored when reading
        m.setattr(store_module.EpisodeStore, "frame_layout", lambda self, ep, key: None)
        wrong = serve("compressed_cache", native(root, "act"), cache_dir=cache_dir)
        with pytest.raises(AssertionError, match="values differ"):
            for i in indices:
                same_item(wrong[i], nat[i], f"layout ignored[{i}]")
