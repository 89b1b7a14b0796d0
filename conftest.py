"""What every test directory shares (``tests/``, ``integration_tests/``, ``benchmarks/tests/``): the test
environment, the generated datasets, the ``cuda`` skip hook and the test tiers.

Tiers (``make test`` runs everything; ``make test-fast`` runs ``-m fast``): every test under ``tests/`` is a unit
test and marked ``fast`` here; elsewhere a test joins the fast tier by its own ``@pytest.mark.fast`` (the quick
parity checks against the native loaders).
"""

import atexit
import os
import shutil
import tempfile

import pytest

ROOT = os.path.dirname(os.path.abspath(__file__))
UNIT_DIR = os.path.join(ROOT, "tests")

# Tests never reach the Hugging Face Hub: every LeRobot dataset here is local (subprocesses inherit this too).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# ... nor write into the user's cache directory (backends convert there when given no cache_dir)
if "ROBO_LOADERS_CACHE" not in os.environ:  # removed when the session ends (it holds conversions: megabytes)
    os.environ["ROBO_LOADERS_CACHE"] = tempfile.mkdtemp(prefix="robo-loaders-test-cache-")
    atexit.register(shutil.rmtree, os.environ["ROBO_LOADERS_CACHE"], True)


@pytest.fixture(scope="session")
def tiny_hdf5(tmp_path_factory):
    """12 demos of 40-50 steps (540+ samples), 2 cameras of 16x16: enough for 500-index parity checks."""
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    path = str(tmp_path_factory.mktemp("data") / "tiny.hdf5")
    return write_robomimic_hdf5(
        path,
        demos=12,
        image_size=16,
        cameras=2,
        seed=3,
        min_length=40,
        max_length=50,
        valid_fraction=0.25,
        progress=False,
    )


@pytest.fixture(scope="session")
def long_hdf5(tmp_path_factory):
    """4 demos of 300-400 steps, 2 cameras of 84x84 with next_obs (robomimic's can/square image sets are this
    shape): each demo's frames are 25-34 MB decoded, so conversions store them in parts (robo-shards v3)."""
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    path = str(tmp_path_factory.mktemp("long") / "long.hdf5")
    return write_robomimic_hdf5(
        path,
        demos=4,
        image_size=84,
        cameras=2,
        seed=11,
        min_length=300,
        max_length=400,
        valid_fraction=0.25,
        progress=False,
    )


# -- LeRobot datasets, written with LeRobot's own LeRobotDataset.create/add_frame/save_episode/finalize ----------
LEROBOT_LENGTHS = (90, 130, 64, 150, 111)  # 545 frames: >= 500 distinct indices


@pytest.fixture(scope="session")
def lerobot_datasets(tmp_path_factory):
    """AV1 1 camera (one mp4 per camera), H.264 3 cameras (several mp4 files, episodes packed in them), PNG images."""
    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    base = tmp_path_factory.mktemp("lerobot")
    return {
        "av1_1cam": write_lerobot_dataset(
            base / "av1_1cam", episode_lengths=LEROBOT_LENGTHS, cameras=1, mode="av1", seed=1, progress=False
        ),
        "h264_3cam_multifile": write_lerobot_dataset(
            base / "h264_3cam",
            episode_lengths=LEROBOT_LENGTHS,
            cameras=3,
            mode="h264",
            seed=2,
            video_files_size_in_mb=0.02,
            progress=False,
        ),
        "png_1cam": write_lerobot_dataset(
            base / "png_1cam", episode_lengths=LEROBOT_LENGTHS, cameras=1, mode="png", seed=3, progress=False
        ),
    }


@pytest.fixture(scope="session")
def lerobot_zero_episodes(tmp_path_factory):
    """A LeRobot dataset with 0 episodes, as LeRobot's writer leaves one created and finalized before any
    ``save_episode`` (``meta/info.json`` only, ``total_episodes`` 0): bad input LeRobot cannot train from."""
    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    return write_lerobot_dataset(
        tmp_path_factory.mktemp("lerobot_zero") / "zero", episode_lengths=(), mode="h264", progress=False
    )


# -- a LeRobot mixture: three small H.264 datasets at 20 fps; "c" records its main camera as cam1 (mixtures rename it)
LEROBOT_MIXTURE = {
    "a": {"episode_lengths": (20, 26, 14), "cameras": 1, "seed": 21},
    "b": {"episode_lengths": (18, 30), "cameras": 1, "seed": 22},
    "c": {"episode_lengths": (16, 22, 12), "cameras": 2, "seed": 23},
    # refused beside "a": another frame rate; a camera of another size
    "slow": {"episode_lengths": (6,), "cameras": 1, "seed": 24, "fps": 10},
    "small_cam": {"episode_lengths": (6,), "cameras": 1, "seed": 25, "image_size": (16, 16)},
}


@pytest.fixture(scope="session")
def lerobot_mixture_datasets(tmp_path_factory):
    """``{name: (repo_id, root)}`` of :data:`LEROBOT_MIXTURE`, written with LeRobot's own writer (~2 s each)."""
    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    base = tmp_path_factory.mktemp("lerobot_mixture")
    out = {}
    for name, kw in LEROBOT_MIXTURE.items():
        kw = {"image_size": (24, 32), **kw}
        repo = f"mix/{name}"
        out[name] = (repo, str(write_lerobot_dataset(base / name, repo_id=repo, mode="h264", progress=False, **kw)))
    return out


# -- a mixture of robots: a 7-dof arm, a 14-dof bimanual robot (two cameras), a 6-dof arm; tiny, 20 fps
LEROBOT_ROBOTS = {
    "arm7": {"episode_lengths": (8, 10), "cameras": 1, "seed": 31, "state_dim": 7, "action_dim": 7},
    "bimanual14": {"episode_lengths": (9,), "cameras": 2, "seed": 32, "state_dim": 14, "action_dim": 14},
    "arm6": {"episode_lengths": (7, 8), "cameras": 1, "seed": 33, "state_dim": 6, "action_dim": 6},
}


@pytest.fixture(scope="session")
def lerobot_robot_kinds():
    """:data:`LEROBOT_ROBOTS`: each robot's writer arguments, for a test that writes the robots otherwise (another
    rate)."""
    return LEROBOT_ROBOTS


@pytest.fixture(scope="session")
def lerobot_robots(tmp_path_factory):
    """``{name: (repo_id, root)}`` of :data:`LEROBOT_ROBOTS`, written with LeRobot's own writer (~1 s each)."""
    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    base = tmp_path_factory.mktemp("lerobot_robots")
    out = {}
    for name, kw in LEROBOT_ROBOTS.items():
        repo = f"robots/{name}"
        root = write_lerobot_dataset(base / name, repo_id=repo, mode="h264", image_size=(16, 16), progress=False, **kw)
        out[name] = (repo, str(root))
    return out


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection, which must see the fast marks added here
def pytest_collection_modifyitems(config, items):
    """Tests under ``tests/`` are the unit tier (``fast``). Tests marked ``cuda`` run only where torch sees a GPU
    (``pytest -m cuda`` selects them)."""
    for item in items:
        if str(item.path).startswith(UNIT_DIR + os.sep):
            item.add_marker(pytest.mark.fast)
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    """A test runs at normal priority even when a fixture's AV1 encode (SVT-AV1 as root, through LeRobot's writer in a
    thread the package cannot wrap) left this worker at real-time priority: inherited by the ``lerobot-train`` and
    DataLoader processes a test starts, it made two training processes starve each other (core/sched.py)."""
    from robo_loaders_plugin.core.sched import back_to_normal

    back_to_normal()


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef, request):
    """As :func:`pytest_runtest_call`, before each fixture: a module fixture that trains (``lerobot-train`` under
    ``torchrun``) may run right after another fixture's AV1 encode."""
    from robo_loaders_plugin.core.sched import back_to_normal

    back_to_normal()
