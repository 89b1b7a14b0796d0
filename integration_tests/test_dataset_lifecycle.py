"""A built dataset's explicit lifecycle: ``close()`` (or leaving ``with``) releases what it holds at once, not at
garbage collection (the cache entry it uses becomes prunable, its frames' maps, memory and spill files go), and a
read afterwards fails with one line naming what was closed.

Why: a training script that builds a train and a validation set, or a sweep that builds a dataset per trial, kept
every cache entry locked (unprunable) and every tier in memory until the objects happened to be collected.
"""

import pytest
from robomimic_helpers import make_config, obs_keys

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.robomimic import dataset_factory
from robo_loaders_plugin.storage import cache


def build(hdf5, backend, cache_dir):
    cfg = make_config(hdf5, backend=backend, backend_kwargs={"cache_dir": str(cache_dir)})
    return dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")


@pytest.mark.parametrize("backend", ["compressed_cache", "datapipe"])
def test_close_makes_the_cache_entry_prunable_and_later_reads_say_so(tiny_hdf5, tmp_path, backend):
    ds = build(tiny_hdf5, backend, tmp_path)
    before = ds.collate([0, 1])
    names = sorted(e.path for e in cache.entries(str(tmp_path)))
    assert names
    # negative control: while the dataset lives and is open, pruning everything leaves its entry alone, and its
    # recycled batch arrays are kept
    assert not set(cache.prune(str(tmp_path), 0)) & set(names)
    pool = ds.buffer_pool
    assert pool.held()[0] > 0
    with ds:
        assert ds.collate([0, 1]).keys() == before.keys()
    assert set(names) <= set(cache.prune(str(tmp_path), 0)), "the closed dataset still held its cache entry"
    assert pool.held() == (0, 0), "the closed dataset still kept its recycled batch arrays"
    with pytest.raises(RoboLoadersError, match="was closed; build it again"):
        ds.collate([0, 1])
    ds.close()  # idempotent


def test_close_releases_the_gpu_resampler_tiers(tiny_hdf5, tmp_path):
    ds = build(tiny_hdf5, "gpu_resampler", tmp_path)
    frames = ds.frames
    assert frames.tensors  # every field held as tensors
    ds.close()
    assert not frames.tensors and not frames.parts
    with pytest.raises(RoboLoadersError, match="was closed"):
        ds.collate([0])
