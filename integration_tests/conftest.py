import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from robomimic_helpers import SHARED_HDF5, make_config  # noqa: E402,F401


@pytest.fixture(scope="session")
def tiny_hdf5(tmp_path_factory):
    """12 demos of 40-50 steps (540+ samples), 2 cameras of 16x16: enough for 500-index parity checks."""
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    path = str(tmp_path_factory.mktemp("data") / "tiny.hdf5")
    return write_robomimic_hdf5(path, demos=12, image_size=16, cameras=2, seed=3, min_length=40, max_length=50,
                                valid_fraction=0.25, progress=False)


@pytest.fixture(scope="session")
def shared_hdf5():
    if not os.path.exists(SHARED_HDF5):
        pytest.skip(f"{SHARED_HDF5} absent (../shared is not beside this checkout)")
    return SHARED_HDF5
