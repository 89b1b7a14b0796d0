"""What the SDK (``extend.frame_backend``) does around the example's store, through public names only: the
footprint is checked before any data is read, the cache and the source's validation records go where the backend's
``cache_dir`` says, a pickled dataset carries no frame data and reopens the store, and ``close()`` / ``with``
release the store."""

import os
import pickle

import pytest
from test_jpeg_frames import robomimic_config

from robo_loaders_plugin import RoboLoadersError
from robo_loaders_plugin.extend import Footprint, ResourceRefused
from robo_loaders_plugin.testing import robomimic_case


def test_the_footprint_is_checked_before_anything_is_read(robomimic_hdf5, tmp_path, monkeypatch):
    """Negative control: a store stating more host RAM than any machine has is refused with the numbers, and
    nothing was read or written (no store was built, the store's build was never called)."""
    from robo_loaders_jpeg.store import JpegStore

    built = []
    monkeypatch.setattr(JpegStore, "footprint", lambda self, size, options: Footprint(host_bytes=10**18))
    monkeypatch.setattr(JpegStore, "build", lambda self, *a: built.append(a))
    case = robomimic_case(*robomimic_config(robomimic_hdf5))
    with pytest.raises(
        ResourceRefused,
        match=r"backend 'jpeg_frames' cannot serve this dataset on this machine.*"
        r"host RAM: needs 1000000\.0 TB.*before reading any data",
    ):
        case.build("jpeg_frames", {"cache_dir": str(tmp_path / "cache")})
    assert built == []
    assert not [n for n in os.listdir(tmp_path / "cache") if n.startswith("jpeg-frames")]


def test_the_cache_and_the_validation_records_go_to_cache_dir(robomimic_hdf5, tmp_path):
    case = robomimic_case(*robomimic_config(robomimic_hdf5))
    with case.build("jpeg_frames", {"cache_dir": str(tmp_path)}) as ds:
        assert os.path.dirname(ds.location) == str(tmp_path)
        assert os.listdir(tmp_path / ".validated")  # the HDF5's validation record, beside the store
        assert "demos" in ds.serving.summary and "host RAM" in ds.serving.summary  # the footprint, stated


def test_close_and_with_release_the_store(robomimic_hdf5, tmp_path):
    case = robomimic_case(*robomimic_config(robomimic_hdf5))
    ds = case.build("jpeg_frames", {"cache_dir": str(tmp_path)})
    assert ds[0]["actions"].shape[0] == 5
    hold = ds.serving.hold
    with ds:
        pass
    assert hold._finalizer.alive is False  # the cache entry's use lock is released: it may be pruned now
    with pytest.raises(RoboLoadersError, match="was closed; build it again"):
        ds[0]
    ds.close()  # idempotent


def test_a_pickled_dataset_reopens_the_store_and_carries_no_frames(robomimic_hdf5, tmp_path):
    """A spawned worker's copy: only the store's class, directory and options travel (the mapped frames.bin does
    not), and the copy serves the same samples."""
    case = robomimic_case(*robomimic_config(robomimic_hdf5))
    with case.build("jpeg_frames", {"cache_dir": str(tmp_path), "quality": 80}) as ds:
        blob = pickle.dumps(ds.frames)
        frames_bin = os.path.getsize(os.path.join(ds.location, "frames.bin"))
        assert len(blob) < 2000 < frames_bin, (len(blob), frames_bin)
        copy = pickle.loads(pickle.dumps(ds))
        assert copy.frames.inner is not ds.frames.inner and copy.frames.directory == ds.location
        a, b = ds[7], copy[7]
        assert all((a["obs"][k] == b["obs"][k]).all() for k in a["obs"])
        copy.close()


@pytest.mark.parametrize("stated", [True, False])
def test_a_mixture_of_its_datasets_counts_the_stores_footprint(robomimic_hdf5, tmp_path, monkeypatch, capsys, stated):
    """A mixture plans every component by its backend's footprint before building any (docs/mixtures.md,
    *Footprint*): the SDK's factories now state the store's placement from metadata (``BackendSpec.footprints``),
    where a ``FrameStore`` backend logged "states no footprint; each component is checked when built". Negative
    control (``stated=False``): the same spec without its footprints logs that line again."""
    import shutil

    from robomimic.utils.train_utils import dataset_factory

    from robo_loaders_plugin.extend import get_backend

    if not stated:
        monkeypatch.delitem(get_backend("jpeg_frames").footprints, "robomimic")
    copy = str(tmp_path / "copy.hdf5")
    shutil.copy(robomimic_hdf5, copy)
    mixture = {"components": [{"path": robomimic_hdf5, "weight": 1}, {"path": copy, "weight": 1}]}
    config, keys = robomimic_config(
        robomimic_hdf5,
        data_backend="jpeg_frames",
        data_backend_kwargs={"cache_dir": str(tmp_path / "cache")},
        data_mixture=mixture,
    )
    capsys.readouterr()
    mix = dataset_factory(config, keys)
    out = capsys.readouterr().out
    assert len(mix) > 0
    said = "train.data_mixture: 2 components on backend 'jpeg_frames' need "
    silent = "train.data_mixture: backend 'jpeg_frames' states no footprint"
    assert (said in out, silent in out) == (stated, not stated), out[-2000:]
