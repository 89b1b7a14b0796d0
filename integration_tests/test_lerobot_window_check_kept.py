"""What a backend keeps (a compressed store, `gpu_resampler`'s tiers, `datapipe`'s shards) serves camera windows
only if its frames were checked against them.

Why: a frame within a raised ``tolerance_s`` but half a window step or more from its row (a video missing a frame)
is one LeRobot's ``delta_timestamps`` windows would not pick; the decoder refuses it while it decodes for a run with
camera windows. A reviewer's reproduction: a store or tiers built by a run without windows were reused by a windowed
run and served 22 of 30 items otherwise than ``LeRobotDataset``, silently; ``datapipe`` never made the check at all.
Now, when the tolerance lets such frames through (``sources.lerobot_v3.gaps_at_risk``), what is kept is keyed by the
windows and built with the check, and given shards converted without it are refused. Controls: the same data
without windows is served equal to LeRobot's; at LeRobot's default tolerance a store built without windows is
reused by a windowed run (nothing rebuilt); a video without a gap is served in windows.
"""

import os
import shutil

import pytest

from integration_tests.lerobot_helpers import REPO, drop_a_frame, same_item, serve
from robo_loaders_plugin.core.errors import SourceError

KEPT = ["compressed_cache", "gpu_resampler", "datapipe"]
FPS = 20


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """``{"whole": root, "gap": root}``: one camera, 3 episodes of 60 frames at 20 fps; in "gap" the video lacks
    frame 10 (the later frames keep their times)."""
    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    base = tmp_path_factory.mktemp("window_check")
    whole = str(
        write_lerobot_dataset(
            base / "whole", episode_lengths=(60, 60, 60), cameras=1, mode="h264", seed=7, fps=FPS, progress=False
        )
    )
    gap = str(base / "gap")
    shutil.copytree(whole, gap)
    cam = next(d for d in os.listdir(os.path.join(gap, "videos")))
    drop_a_frame(os.path.join(gap, "videos", cam, "chunk-000", "file-000.mp4"), FPS, append_last=True)
    return {"whole": whole, "gap": gap, "camera": cam}


def _native(root, camera, windows: bool, tolerance_s: float):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    delta = {camera: [k / FPS for k in (-2, -1, 0, 1, 2)]} if windows else None
    return LeRobotDataset(REPO, root=root, delta_timestamps=delta, tolerance_s=tolerance_s, return_uint8=True)


def _same(ours, native, where):
    for i in (0, 9, 10, 11, 12, 70, len(native) - 1):
        same_item(ours[i], native[i], f"{where} item {i}")


@pytest.mark.parametrize("backend", KEPT)
def test_kept_without_windows_is_not_served_to_windows_when_the_tolerance_lets_a_gap_through(
    datasets, tmp_path, backend
):
    raised = 1.6 / FPS  # past a frame: the gap's frames pass it
    cache = str(tmp_path / "cache")
    plain = _native(datasets["gap"], datasets["camera"], False, raised)
    # built and kept without windows (not compared: on a video with a gap, LeRobot's own frames past the gap depend
    # on the order items are asked for, its decoder seeking from where the last item left it)
    assert len(serve(backend, plain, cache_dir=cache)) == len(plain)
    windowed = _native(datasets["gap"], datasets["camera"], True, raised)
    with pytest.raises(SourceError, match="half a window step or more from their rows"):
        serve(backend, windowed, cache_dir=cache)  # was: the entry above reused, other frames than LeRobot's
    whole = _native(datasets["whole"], datasets["camera"], True, raised)  # control: no gap, windows served
    _same(serve(backend, whole, cache_dir=cache), whole, f"{backend} windows, no gap")


@pytest.mark.parametrize("backend", KEPT)
def test_at_the_default_tolerance_runs_with_and_without_windows_share_what_is_kept(datasets, tmp_path, backend):
    cache = str(tmp_path / "cache")
    plain = _native(datasets["whole"], datasets["camera"], False, 1e-4)
    first = serve(backend, plain, cache_dir=cache)
    windowed = _native(datasets["whole"], datasets["camera"], True, 1e-4)
    again = serve(backend, windowed, cache_dir=cache)
    entries = [n for n in os.listdir(cache) if not n.startswith(".")]
    # one entry: at this tolerance no frame can lie half a step away from its row
    assert len(entries) == 1 and entries[0] in str(first.location) and entries[0] in str(again.location), entries
    _same(again, windowed, f"{backend} windows, reused")


def test_given_shards_converted_without_the_windows_check_are_refused_for_windows(datasets, tmp_path):
    from robo_loaders_plugin.lerobot.convert import convert_lerobot

    raised = 1.6 / FPS
    loose = str(tmp_path / "loose")
    convert_lerobot(datasets["whole"], loose, tolerance_s=raised, progress=False)  # robo-loaders convert, no windows
    windowed = _native(datasets["whole"], datasets["camera"], True, raised)
    with pytest.raises(SourceError) as err:
        serve("datapipe", windowed, shards=loose)
    assert "were not checked against this run's delta_timestamps windows" in str(err.value), str(err.value)
    plain = _native(datasets["whole"], datasets["camera"], False, raised)  # control: without windows, served
    _same(serve("datapipe", plain, shards=loose), plain, "given shards, no windows")
    strict = str(tmp_path / "strict")  # control: converted at the default tolerance, windows served
    convert_lerobot(datasets["whole"], strict, progress=False)
    at_default = _native(datasets["whole"], datasets["camera"], True, 1e-4)
    _same(serve("datapipe", at_default, shards=strict), at_default, "given shards, windows")
