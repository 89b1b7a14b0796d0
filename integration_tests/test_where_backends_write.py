"""Issue 30 item 13: everything a backend writes goes under its ``cache_dir`` when given (else
``$ROBO_LOADERS_CACHE``, else ``~/.cache/robo-loaders``). Each backend, on real robomimic and LeRobot datasets, is
given a ``cache_dir`` and the other places it could write (the environment's cache root, the home directory, the RAM
directory) are walked before and after: nothing new there. Before, the ``.validated/`` records of the checks made
once per version of a file went to the default root whatever ``cache_dir`` said, and video_stream had no
``cache_dir`` (its conversion followed ``$ROBO_LOADERS_CACHE`` only)."""

import os

import pytest
from lerobot_helpers import REPO, serve
from robomimic_helpers import make_config, obs_keys

from robo_loaders_plugin.robomimic import dataset_factory


def files_under(path) -> set:
    return {os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs} | {
        os.path.join(d, s) for d, ss, _ in os.walk(path) for s in ss
    }


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """The places a backend could write besides its cache_dir, each empty (HOME's robo-loaders cache: what other
    libraries put in HOME is theirs)."""
    places = {name: tmp_path / name for name in ("env_cache", "ram")}
    for p in places.values():
        p.mkdir()
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(places["env_cache"]))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("ROBO_LOADERS_RAM_DIR", str(places["ram"]))
    return dict(places, home=tmp_path / "home" / ".cache" / "robo-loaders")


ROBOMIMIC = [("compressed_cache", {}), ("datapipe", {}), ("video_stream", {}), ("gpu_resampler", {"device": "cpu"})]


@pytest.mark.parametrize("backend, options", ROBOMIMIC)
def test_a_robomimic_backend_given_a_cache_dir_writes_nothing_outside_it(
    tiny_hdf5, tmp_path, elsewhere, backend, options
):
    import robomimic.utils.train_utils as TrainUtils

    mine = tmp_path / "mine"
    cfg = make_config(tiny_hdf5, backend=backend, backend_kwargs=dict(options, cache_dir=str(mine)), seq_length=5)
    ds = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")
    ds[0], ds[len(ds) - 1]
    # and through what robomimic's train() calls, which checks the filter keys first (a reviewer's reproduction:
    # that check wrote the file's validation record into the default root)
    with cfg.values_unlocked():
        cfg.train.hdf5_filter_key = "train"
        cfg.train.hdf5_validation_filter_key = "valid"
        cfg.experiment.validate = True
    TrainUtils.load_data_for_training(cfg, obs_keys(cfg))
    for name, place in elsewhere.items():
        assert files_under(place) == set(), f"{backend} wrote into {name}: {sorted(files_under(place))}"
    written = files_under(mine)
    assert any(os.sep + ".validated" + os.sep in p for p in written), sorted(written)  # the file's validation record
    del ds


def test_without_a_cache_dir_the_environments_root_is_used(tiny_hdf5, elsewhere):
    """Negative control: the walk sees a write, and the default is $ROBO_LOADERS_CACHE."""
    cfg = make_config(tiny_hdf5, backend="gpu_resampler", backend_kwargs={"device": "cpu"}, seq_length=5)
    dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")
    assert any(".validated" in p for p in files_under(elsewhere["env_cache"]))
    assert files_under(elsewhere["home"]) == set()


def native(root):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset(REPO, root=root)


@pytest.mark.parametrize("backend", ["compressed_cache", "datapipe", "gpu_resampler", "video_stream"])
def test_a_lerobot_backend_given_a_cache_dir_writes_nothing_outside_it(
    lerobot_datasets, tmp_path, monkeypatch, backend
):
    nat = native(lerobot_datasets["av1_1cam"])  # LeRobot's own object first (its Hugging Face caches are its own)
    nat[0]
    places = {name: tmp_path / name for name in ("env_cache", "ram")}
    for p in places.values():
        p.mkdir()
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(places["env_cache"]))
    monkeypatch.setenv("ROBO_LOADERS_RAM_DIR", str(places["ram"]))
    mine = tmp_path / "mine"
    ds = serve(backend, nat, cache_dir=str(mine), **({"device": "cpu"} if backend == "gpu_resampler" else {}))
    ds[0], ds[len(ds) - 1]
    for name, place in places.items():
        assert files_under(place) == set(), f"{backend} wrote into {name}: {sorted(files_under(place))}"
    if backend == "datapipe":  # shards converted on first use, and the record that its rows were checked
        assert any(".validated" in p for p in files_under(mine)) and any(
            p.endswith("index.json") for p in files_under(mine)
        )
    del ds


def test_lerobot_video_stream_mirrors_a_remote_sources_tables_into_its_cache_dir(
    lerobot_datasets, tmp_path, monkeypatch
):
    """The copy of a remote dataset's tables LeRobot builds its dataset from (``remote-tables-*``) went to
    $ROBO_LOADERS_CACHE whatever the options said; it goes to video_stream's cache_dir."""
    import json

    import draccus
    from lerobot.configs.train import TrainPipelineConfig
    from lerobot.policies.act.configuration_act import ACTConfig  # noqa: F401  (registers --policy.type=act)
    from remote_servers import S3Server

    import robo_loaders_plugin.lerobot as rl

    env_cache, mine = tmp_path / "env_cache", tmp_path / "mine"
    env_cache.mkdir()
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(env_cache))
    with S3Server(lerobot_datasets["av1_1cam"]) as s3:
        kwargs = json.dumps({"source": s3.url, "storage_options": s3.storage_options, "cache_dir": str(mine)})
        cfg = draccus.parse(
            TrainPipelineConfig,
            args=[
                f"--dataset.repo_id={REPO}",
                "--policy.type=act",
                "--policy.device=cpu",
                "--policy.push_to_hub=false",
                "--dataset.backend=video_stream",
                f"--dataset.backend_kwargs={kwargs}",
            ],
        )
        ds = rl.make_dataset(cfg)
        assert len(ds) == len(native(lerobot_datasets["av1_1cam"]))
    assert files_under(env_cache) == set(), sorted(files_under(env_cache))
    assert [n for n in os.listdir(mine) if n.startswith("remote-tables-")], os.listdir(mine)


@pytest.mark.parametrize("backend", ["compressed_cache", "gpu_resampler"])
def test_a_cache_dir_inside_the_lerobot_dataset_is_refused_before_anything_is_written(
    lerobot_datasets, tmp_path, monkeypatch, backend
):
    """A reviewer's reproduction: a cache_dir inside the dataset's root made the entry's own files files of the
    dataset, so every build saw its source "changed while built", removed what it built and said to run again, at
    every run, leaving its lock files in the dataset. Refused up front naming the option (or the environment
    variable), nothing written in the dataset (the option's check leaves the directory it probed). Control: a
    cache_dir beside the dataset serves it."""
    import shutil

    from robo_loaders_plugin import RoboLoadersError

    root = tmp_path / "dataset"
    shutil.copytree(lerobot_datasets["av1_1cam"], root)
    nat = native(root)
    before = files_under(root)
    options = {"device": "cpu"} if backend == "gpu_resampler" else {}
    refused = r"--dataset.backend_kwargs.cache_dir='.*/dataset/\.robo_cache' is inside the dataset .*: .* outside"
    with pytest.raises(RoboLoadersError, match=refused):
        serve(backend, nat, cache_dir=str(root / ".robo_cache"), **options)
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(root / "cache"))
    with pytest.raises(RoboLoadersError, match=r"the cache directory '.*/dataset/cache' \(\$ROBO_LOADERS_CACHE\) is"):
        serve(backend, nat, **options)
    # the option's check of a writable directory made it (empty): nothing else was written in the dataset
    assert files_under(root) - before <= {str(root / ".robo_cache")} and not os.listdir(root / ".robo_cache")
    ds = serve(backend, nat, cache_dir=str(tmp_path / "beside"), **options)
    assert len(ds) == len(nat)
    # a reviewer's reproduction: video_stream writes nothing for a local dataset; a cache root inside it is taken
    if backend == "compressed_cache":
        monkeypatch.setenv("ROBO_LOADERS_CACHE", str(root / "inner"))
        assert len(serve("video_stream", nat)) == len(nat) and not (root / "inner").exists()
