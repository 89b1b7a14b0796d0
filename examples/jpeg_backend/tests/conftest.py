"""Installs the example backend the way pip would, through its entry point (a ``.dist-info`` with
``entry_points.txt`` on ``sys.path``), and makes small datasets with ``robo-loaders sample-data``."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
SHARED = os.path.join(PACKAGE_ROOT, "..", "..", "..", "shared", "data")
BIN = os.path.dirname(sys.executable)


def install_entry_point(site: str) -> None:
    """What ``pip install`` leaves for the entry point: the package importable and its metadata."""
    dist = os.path.join(site, "robo_loaders_jpeg-0.1.0.dist-info")
    os.makedirs(dist, exist_ok=True)
    with open(os.path.join(dist, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: robo-loaders-jpeg\nVersion: 0.1.0\n")
    with open(os.path.join(dist, "entry_points.txt"), "w") as f:
        f.write("[robo_loaders]\njpeg_frames = robo_loaders_jpeg.plugin\n")


@pytest.fixture(scope="session", autouse=True)
def installed(tmp_path_factory):
    from robo_loaders_plugin.testing import reset_plugins

    site = str(tmp_path_factory.mktemp("site"))
    install_entry_point(site)
    sys.path[:0] = [site, PACKAGE_ROOT]
    os.environ["PYTHONPATH"] = os.pathsep.join([site, PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")])
    os.environ.setdefault("ROBO_LOADERS_CACHE", str(tmp_path_factory.mktemp("cache")))
    reset_plugins()
    yield site
    reset_plugins()


@pytest.fixture(scope="session")
def robomimic_hdf5(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("rm") / "small.hdf5")
    subprocess.run(
        [
            os.path.join(BIN, "robo-loaders"),
            "sample-data",
            "robomimic",
            out,
            "--demos",
            "6",
            "--image-size",
            "48",
            "--min-length",
            "20",
            "--max-length",
            "30",
        ],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="session")
def lerobot_root(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("lr") / "small")
    subprocess.run(
        [
            os.path.join(BIN, "robo-loaders"),
            "sample-data",
            "lerobot",
            out,
            "--episodes",
            "3",
            "--image-size",
            "48x64",
            "--codec",
            "h264",
            "--min-length",
            "20",
            "--max-length",
            "30",
        ],
        check=True,
        capture_output=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    return out
