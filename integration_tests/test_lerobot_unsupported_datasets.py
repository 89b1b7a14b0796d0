"""LeRobot datasets the backends do not serve are refused in one line saying to use ``--dataset.backend=native``:
depth maps, language columns, video decoded by another backend than torchcodec, and ``--dataset.streaming=true``.

Why: each would otherwise be served differently from ``LeRobotDataset`` (a depth map decoded as colour frames,
language rows dropped, PyAV's frames differing from torchcodec's), the worst kind of bug here. These refusals
existed with no test reaching them (a reviewer's finding). Every case has its control: the same dataset unedited
(or with torchcodec, or without streaming) is served, item equal to LeRobot's.
"""

import json
import shutil

import pytest

from integration_tests.lerobot_helpers import REPO, cfg_for, same_item, serve
from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.lerobot.single import convert

BACKENDS = ["compressed_cache", "datapipe", "gpu_resampler", "video_stream"]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    return str(
        write_lerobot_dataset(
            tmp_path_factory.mktemp("unsupported") / "ds",
            episode_lengths=(12, 9),
            cameras=1,
            mode="h264",
            seed=5,
            progress=False,
        )
    )


def _edited(small, tmp_path, edit):
    """A copy of ``small`` whose meta/info.json ``edit`` changed (what another writer records)."""
    root = tmp_path / "edited"
    shutil.copytree(small, root)
    path = root / "meta" / "info.json"
    info = json.loads(path.read_text())
    edit(info)
    path.write_text(json.dumps(info, indent=4))
    return str(root)


def _camera(info):
    return next(k for k, f in info["features"].items() if f["dtype"] == "video")


def _depth(info):
    info["features"][_camera(info)].setdefault("info", {})["is_depth_map"] = True


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_depth_map_is_refused_and_the_same_dataset_without_it_served(small, tmp_path, backend):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    depth = LeRobotDataset(REPO, root=_edited(small, tmp_path, _depth))
    assert depth.meta.depth_keys  # LeRobot reads the camera as a depth map
    with pytest.raises(RoboLoadersError) as err:
        serve(backend, depth, cache_dir=str(tmp_path / "cache"))
    message = str(err.value)
    assert "depth features" in message and depth.meta.depth_keys[0] in message, message
    assert "--dataset.backend=native" in message and "\n" not in message, message
    native = LeRobotDataset(REPO, root=small)  # control
    ours = serve(backend, native, cache_dir=str(tmp_path / "cache"))
    for i in (0, 5, len(native) - 1):
        same_item(ours[i], native[i], f"{backend} item {i}")
    ours.close() if hasattr(ours, "close") else None


def _empty(t):
    """An empty arrow array of type ``t`` (extension types, structs and lists of them too)."""
    import pyarrow as pa

    if isinstance(t, pa.ExtensionType):
        return t.wrap_array(_empty(t.storage_type))
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays([_empty(f.type) for f in t], fields=list(t))
    if pa.types.is_list(t):
        return pa.ListArray.from_arrays(pa.array([0], type=pa.int32()), _empty(t.value_type))
    return pa.array([], type=t)


def _with_language(small, tmp_path):
    """A copy of ``small`` with LeRobot's two language columns (no rows), as its annotation tools write them."""
    import glob

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from lerobot.datasets import language

    def declare(info):
        info["features"].update(
            {k: dict(v, shape=list(v["shape"])) for k, v in language.language_feature_info().items()}
        )

    root = _edited(small, tmp_path, declare)
    rows = {
        language.LANGUAGE_PERSISTENT: language.language_persistent_row_arrow_type(),
        language.LANGUAGE_EVENTS: language.language_event_row_arrow_type(),
    }
    for path in glob.glob(f"{root}/data/*/*.parquet"):
        table = pq.read_table(path)
        for name, row in rows.items():
            offsets = pa.array(np.zeros(table.num_rows + 1, dtype=np.int32))
            table = table.append_column(name, pa.ListArray.from_arrays(offsets, _empty(row)))
        pq.write_table(table, path)
    return root


def test_language_columns_are_refused(small, tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    annotated = LeRobotDataset(REPO, root=_with_language(small, tmp_path))
    assert annotated.meta.has_language_columns and "language_persistent" in annotated[0]
    for backend in BACKENDS:
        with pytest.raises(RoboLoadersError) as err:
            serve(backend, annotated, cache_dir=str(tmp_path / "cache"))
        message = str(err.value)
        assert "language columns" in message and "--dataset.backend=native" in message, message


def test_video_decoded_with_pyav_is_refused_and_with_torchcodec_served(small, tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    pyav = LeRobotDataset(REPO, root=small, video_backend="pyav")
    for backend in BACKENDS:
        with pytest.raises(RoboLoadersError) as err:
            serve(backend, pyav, cache_dir=str(tmp_path / "cache"))
        message = str(err.value)
        assert "video_backend='pyav'" in message and "--dataset.video_backend=torchcodec" in message, message
    native = LeRobotDataset(REPO, root=small, video_backend="torchcodec")  # control
    same_item(serve("video_stream", native)[3], native[3], "torchcodec")


def test_streaming_with_a_backend_is_one_line_and_without_it_served(small, tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    native = LeRobotDataset(REPO, root=small)
    cfg = cfg_for(
        small, "compressed_cache", json.dumps({"cache_dir": str(tmp_path / "c")}), 0.0, "--dataset.streaming=true"
    )
    with pytest.raises(RoboLoadersError) as err:
        convert(native, cfg)
    assert str(err.value) == (
        "--dataset.backend=compressed_cache replaces LeRobot's map-style dataset; it cannot be combined with "
        "--dataset.streaming=true"
    )
    cfg = cfg_for(small, "compressed_cache", json.dumps({"cache_dir": str(tmp_path / "c")}))  # control
    same_item(convert(native, cfg)[4], native[4], "not streaming")
