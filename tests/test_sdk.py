"""The SDK's declaration half (``extend.frame_backend``, ``cache_dir_option``, ``cache_root``), without data: the
spec it makes, what it refuses, and that its factories pass the registration's protocol check. (Serving a store
against the native loaders: examples/jpeg_backend/tests.)"""

import os
import pickle

import pytest

from robo_loaders_plugin import INDEXED, LOSSY_FRAMES, SAMPLE, BackendOptionError, Option
from robo_loaders_plugin.core.factory_check import factory_problem
from robo_loaders_plugin.extend import BATCH, FrameStore, cache_dir_option, cache_root, frame_backend


def make(**kw):
    return frame_backend("toy_frames", "toy_store:ToyStore", description="d", **kw)


def test_the_spec_it_makes():
    spec = make(lossless=LOSSY_FRAMES, options={"quality": Option(int, 90, "q", min=1, max=100)})
    assert spec.kind_for("robomimic") == INDEXED and spec.kind_for("lerobot") == SAMPLE
    assert set(spec.options) == {"cache_dir", "quality"} and spec.options["cache_dir"].per_host
    for fw in ("robomimic", "lerobot"):
        assert factory_problem(spec.factories[fw], fw) is None  # registration accepts its factories
    choice = spec.choose("robomimic", {"quality": 50}, "w")
    assert choice.options.shared() == {"quality": 50}  # per_host cache_dir is not part of the store's key
    with pytest.raises(BackendOptionError, match="quality"):
        spec.choose("lerobot", {"quality": 0}, "w")
    assert pickle.loads(pickle.dumps(spec.factories["lerobot"])).keywords == {
        "store": "toy_store:ToyStore",
        "backend": "toy_frames",
    }


def test_what_it_refuses():
    with pytest.raises(ValueError, match="store must be 'module:Class'"):
        frame_backend("x", "toy_store.ToyStore", description="d")
    with pytest.raises(ValueError, match="serves the sample or indexed kind"):
        make(kind=BATCH)
    with pytest.raises(ValueError, match="'cache_dir' is a local path and must be declared per_host=True"):
        make(options={"cache_dir": Option(str, None, "where")})
    assert make(options={"cache_dir": cache_dir_option("mine")}).options["cache_dir"].help == "mine"


def test_cache_dir_is_checked_when_options_are_resolved(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(BackendOptionError, match=r"cache_dir.*is a file, not a directory"):
        make().choose("robomimic", {"cache_dir": str(tmp_path / "file")}, "train.data_backend_kwargs")
    assert cache_root(str(tmp_path / "new")) == str(tmp_path / "new") and os.path.isdir(tmp_path / "new")


def test_options_pickle_by_value():
    """A spawned worker reopens a store with the options it was built with (the options class is generated)."""
    options = make(options={"quality": Option(int, 90, "q")}).choose("lerobot", {"quality": 7}, "w").options
    copy = pickle.loads(pickle.dumps(options))
    assert copy.quality == 7 and copy.cache_dir is None and copy.given() == {"quality": 7}
    assert copy.shared() == options.shared()


def test_a_store_must_implement_build_and_open():
    class Half(FrameStore):
        kind = "half-1"

        def build(self, directory, episodes, options):
            pass

    with pytest.raises(TypeError, match=r"abstract method 'open'|abstract methods? .*open"):
        Half()
