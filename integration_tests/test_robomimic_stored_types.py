"""How an HDF5 file stores its arrays and metadata must not change what a backend serves: a big-endian array, a
binary or empty attribute, an empty dataset among a demo's metadata (each served or ignored by robomimic, each a
reviewer's reproduction that failed or changed a backend), and a compound array, refused in one line."""

import h5py
import numpy as np
import pytest
from robomimic_helpers import make_config, obs_keys

from robo_loaders_plugin.core.errors import SourceError
from robo_loaders_plugin.testing import assert_same_pass, assert_same_samples, robomimic_case

BACKENDS = ["compressed_cache", "datapipe", "gpu_resampler", "video_stream"]


def write(path, compound=False):
    """Three demos; ``obs/pos`` big-endian float32, ``obs/depth`` big-endian uint16 (a depth map as some recorders
    write it), a camera; binary and empty attributes and an empty dataset robomimic never reads."""
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = '{"env_name": "x", "type": 1, "env_kwargs": {}}'
        data.attrs["calibration"] = np.void(b"\x80\x04\x95 a pickled blob \xff")  # not UTF-8
        data.attrs["nothing"] = h5py.Empty("f")
        for i, n in enumerate((12, 7, 20)):
            g = data.create_group(f"demo_{i}")
            g["actions"] = rng.standard_normal((n, 3)).astype(">f4")
            pos = rng.standard_normal((n, 3)).astype(">f4")
            g["obs/pos"] = np.zeros(n, dtype=[("a", "<f4"), ("b", "<i4")]) if compound else pos
            g["obs/depth"] = rng.integers(0, 65536, (n, 6, 6, 1)).astype(">u2")
            ramp = np.arange(16)[None, :, None, None] * 8 + np.arange(n)[:, None, None, None] * 4
            g["obs/cam"] = np.broadcast_to(ramp + np.arange(3) * 40, (n, 16, 16, 3)).astype(np.uint8)  # smooth
            g.attrs["num_samples"] = n
            g.attrs["raw"] = np.void(b"\xfe\xff")
        data["demo_1"].create_dataset("annotations", data=h5py.Empty("f"))
    return str(path)


def case_of(path):
    cfg = make_config(path, rgb=["cam"], low_dim=["pos", "depth"], hdf5_cache_mode="low_dim", seq_length=4)
    return robomimic_case(cfg, obs_keys(cfg))


@pytest.mark.parametrize("backend", BACKENDS)
def test_stored_byte_order_and_metadata_do_not_change_the_items(tmp_path, backend):
    """Big-endian arrays were served big-endian by three backends (a batch then failed in torch, naming nothing)
    and refused by ``gpu_resampler``; the binary attribute failed the conversion of ``datapipe`` and ``video_stream``
    (UnicodeDecodeError), the empty one and the empty dataset every backend (TypeError). Now every item equals
    native's, in this machine's byte order, and so does a training pass."""
    case = case_of(write(tmp_path / "stored.hdf5"))
    options = {"cache_dir": str(tmp_path / "cache")}
    min_psnr = {"obs/cam": 35.0} if backend == "video_stream" else None  # lossy frames, all else exact
    ours = assert_same_samples(case, backend, options, exhaustive=True, min_psnr=min_psnr)
    assert ours[0]["obs"]["depth"].dtype == np.dtype("<u2") and ours[0]["obs"]["pos"].dtype.isnative
    assert_same_pass(case, backend, options, batch_size=4, min_psnr=min_psnr)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_compound_array_is_one_line(tmp_path, backend):
    """A compound (record) array was served as raw bytes (``|V8``, its fields lost) by ``compressed_cache``,
    refused as a damaged shard by ``datapipe``/``video_stream``, and a torch TypeError by ``gpu_resampler``."""
    case = case_of(write(tmp_path / "compound.hdf5", compound=True))
    with pytest.raises(SourceError, match=r"data/demo_0/obs/pos holds records of a compound dtype .* store each field"):
        case.build(backend, {"cache_dir": str(tmp_path / "cache")})


def with_nested_mask(path):
    """Masks as robomimic reads them, ``f["mask/" + key]``: ``train`` and, in a group, ``splits/train``."""
    with h5py.File(path, "a") as f:
        f["mask/train"] = np.array([b"demo_0", b"demo_2"])
        f["mask/splits/train"] = np.array([b"demo_1", b"demo_2"])
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_mask_in_a_group_is_a_filter_key(tmp_path, backend):
    """A group under ``mask/`` failed the conversion of ``datapipe``/``video_stream`` with any filter key (h5py's
    "Accessing a group is done with bytes or str, not slice"), and ``splits/train``, which robomimic serves, was
    refused by every backend as not found."""
    path = with_nested_mask(write(tmp_path / "masks.hdf5"))
    options = {"cache_dir": str(tmp_path / "cache")}
    min_psnr = {"obs/cam": 35.0} if backend == "video_stream" else None
    for key, demos in (("train", ["demo_0", "demo_2"]), ("splits/train", ["demo_1", "demo_2"])):
        cfg = make_config(path, rgb=["cam"], low_dim=["pos"], hdf5_cache_mode="low_dim", seq_length=4)
        case = robomimic_case(cfg, obs_keys(cfg), filter_by_attribute=key)
        assert list(case.native().demos) == demos  # control: robomimic serves these
        assert_same_samples(case, backend, options, exhaustive=True, min_psnr=min_psnr)


def test_a_file_open_for_writing_is_not_called_corrupt(tmp_path):
    """A recorder or a mask-editing script holding the file open for writing: "truncated, corrupt or not an HDF5
    file; re-download or regenerate it", for an intact file. Now one line saying another process writes it.
    Control: once the writer exits, the file opens."""
    import subprocess
    import sys

    from robo_loaders_plugin.sources.robomimic_hdf5 import open_hdf5

    path = write(tmp_path / "held.hdf5")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import h5py, sys; f = h5py.File({path!r}, 'a'); print('open', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(SourceError, match=r"held\.hdf5: another process has it open for writing") as info:
            open_hdf5(path)
        assert "corrupt" not in str(info.value)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    open_hdf5(path).close()


def test_verify_a_big_endian_file_and_masks_by_any_link_robomimic_follows(tmp_path):
    """Session review's reproductions: ``verify --source`` reported every big-endian array as differing from the
    (right) shards; and a filter key that is a soft link or a second hard link under mask/ (robomimic reads
    ``f["mask/" + key]``) was refused once filter keys were walked by object, one name each."""
    from robo_loaders_plugin.robomimic.convert import convert_robomimic, verify_robomimic
    from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5, mask_keys

    path = with_nested_mask(write(tmp_path / "links.hdf5"))
    with h5py.File(path, "a") as f:
        f["mask/train_alias"] = h5py.SoftLink("/mask/train")
        f["mask/train_copy"] = f["mask/train"]  # a second hard link
        f["mask/gone"] = h5py.SoftLink("/mask/nothing")  # dangling: not a key
    convert_robomimic(path, str(tmp_path / "shards"), progress=False)
    assert verify_robomimic(str(tmp_path / "shards"), path) == []
    source = RobomimicHdf5(path)
    with source.open() as f:
        assert mask_keys(f) == ["splits/train", "train", "train_alias", "train_copy"]
        for key in ("train", "train_alias", "train_copy"):
            assert source.demos(f, key) == ["demo_0", "demo_2"]
