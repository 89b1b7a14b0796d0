"""The integration tests' own helpers and the datasets of ../shared (the generated datasets, the test environment and
the cuda skip hook are the root conftest.py's, shared by every test directory)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from robomimic_helpers import SHARED_HDF5, make_config  # noqa: F401


@pytest.fixture(scope="session")
def shared_hdf5():
    if not os.path.exists(SHARED_HDF5):
        pytest.skip(f"{SHARED_HDF5} absent (../shared is not beside this checkout)")
    return SHARED_HDF5


@pytest.fixture(scope="session")
def shared_lerobot():
    path = os.path.join(os.path.dirname(SHARED_HDF5), "robosuite_lift_84_20demos_lerobot")
    if not os.path.isdir(path):
        pytest.skip(f"{path} absent (../shared is not beside this checkout)")
    return path
