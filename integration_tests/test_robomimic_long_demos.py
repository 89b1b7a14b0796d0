"""Long robomimic demos (300-400 steps, 2 cameras of 84x84, ``next_obs``: the shape of robomimic's can, square,
tool_hang and transport image sets) through every robomimic backend, compared with robomimic's own
SequenceDataset.

Why a file of its own: the other robomimic tests use 40-50-step demos, which conversions store whole; these are
stored in parts (robo-shards v3, ``format.part_bounds``), and datapipe refused them after converting (issue 30 A1).
With ``frames.chunks.UNIT_BYTES`` lowered (as 240x240 or 480p cameras make it), datapipe buffers parts of demos
(``frames.chunks.EpisodeUnits``): every window once per pass, each byte-identical to SequenceDataset's, across unit
edges, with ``goal_mode="last"``'s goals (the demo's last ``next_obs``, in another unit), and camera frames read
only from the parts holding a unit's rows.
"""

import hashlib
import itertools
import pickle

import h5py
import numpy as np
import pytest
import torch
from robomimic_helpers import assert_same_sample, decoded_copy, make_config, obs_keys

from robo_loaders_plugin.extend import SamplingPlan
from robo_loaders_plugin.frames import chunks
from robo_loaders_plugin.mixtures.dataset import DATASET_INDEX
from robo_loaders_plugin.robomimic import dataset_factory
from robo_loaders_plugin.storage.shards import ShardReader

COMBOS = {
    "bc_rnn_next_obs": dict(hdf5_cache_mode="low_dim", seq_length=10, frame_stack=1, hdf5_load_next_obs=True),
    "goal_all": dict(
        hdf5_cache_mode="all",
        seq_length=4,
        frame_stack=3,
        goal_mode="last",
        hdf5_load_next_obs=True,
        pad_seq_length=False,
    ),
}
STEP = 4 * 84 * 84 * 3  # decoded camera bytes of one step: 2 cameras, obs and next_obs
BATCH = 64


@pytest.fixture(scope="module")
def shards_dir(tmp_path_factory):
    """One cache directory for the module: the long file is converted once, whatever the unit size."""
    return str(tmp_path_factory.mktemp("long-shards"))


def build(path, combo, backend, kwargs=None, filter_key=None):
    cfg = make_config(path, **combo)
    native = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute=filter_key)
    with cfg.values_unlocked():
        cfg.train.data_backend = backend
        cfg.train.data_backend_kwargs = dict(kwargs or {})
    return native, dataset_factory(cfg, obs_keys(cfg), filter_by_attribute=filter_key)


def one_pass(ds):
    """A shuffled pass of the pipeline as robomimic's loop gets it: (sample index of every row, batches)."""
    source = ds.batch_source(SamplingPlan(batch_size=BATCH, shuffle=True, drop_last=False, num_workers=2))
    try:
        batches = list(source.batches(0))
        return source.groups.indices(source.plan_of(0)), batches
    finally:
        source.shutdown()


def digest(sample) -> str:
    """Keys (in order), dtypes, shapes and bytes of a sample, as one SHA-1."""
    h = hashlib.sha1()

    def add(x, path):
        if isinstance(x, dict):
            for k, v in x.items():
                add(v, f"{path}/{k}")
            return
        a = np.asarray(x)
        h.update(f"{path}:{a.dtype}:{a.shape};".encode())
        h.update(np.ascontiguousarray(a).tobytes())

    add(sample, "")
    return h.hexdigest()


_NATIVE: dict = {}


def native_digests(native) -> list[str]:
    """The digest of every SequenceDataset sample, computed once per native dataset configuration (a native
    sample of four 84x84 cameras over 10 steps is read from the HDF5 each time: the tests below compare several
    passes with the same native dataset)."""
    key = (native.hdf5_path, native.filter_by_attribute, repr(native))
    if key not in _NATIVE:
        _NATIVE[key] = [digest(native[i]) for i in range(len(native))]
    return _NATIVE[key]


def mismatches(native, order, batches, limit=None) -> list:
    """(batch, row, sample) of every served row (of the first ``limit`` batches) that is not byte-identical to
    SequenceDataset's sample."""
    expected = native_digests(native)
    bad = []
    for b, batch in enumerate(batches[:limit]):
        for r in range(len(batch["actions"])):
            i = int(order[b * BATCH + r])
            if digest(batch_row(batch, r)) != expected[i]:
                bad.append((b, r, i))
    return bad


def batch_row(batch, r: int) -> dict:
    """Row ``r`` of a batch, nested as a sample (a mixture's ``dataset_index`` left out: no native sample has it)."""
    return {
        k: ({kk: np.asarray(vv[r]) for kk, vv in v.items()} if isinstance(v, dict) else np.asarray(v[r]))
        for k, v in batch.items()
        if k != DATASET_INDEX
    }


def mixture_rows(batches) -> list:
    """(component, digest) of every row of a mixture's batches, in the order served."""
    return [
        (int(batch[DATASET_INDEX][r]), digest(batch_row(batch, r)))
        for batch in batches
        for r in range(len(batch["actions"]))
    ]


def assert_pass_is_native(native, ds):
    order, batches = one_pass(ds)
    assert sorted(order.tolist()) == list(range(len(native)))  # every window exactly once
    bad = mismatches(native, order, batches)
    assert not bad, f"{len(bad)} rows differ from SequenceDataset's, first (batch, row, sample): {bad[:3]}"


def test_the_long_demos_are_stored_in_parts(long_hdf5, shards_dir):
    """What the rest of this file relies on: the conversion cut every demo's camera members into parts."""
    _native, ds = build(long_hdf5, COMBOS["bc_rnn_next_obs"], "datapipe", {"cache_dir": shards_dir})
    reader = ShardReader(ds.location)
    with h5py.File(long_hdf5) as f:
        assert min(f[f"data/{d}/actions"].shape[0] for d in f["data"]) >= 300
    assert all(reader.has_parts(i) for i in range(len(reader.episodes)))
    assert reader.stored_fields(0)["obs/agentview_image"] == "frames"


@pytest.mark.parametrize("combo", list(COMBOS))
@pytest.mark.parametrize("backend", ["compressed_cache", "gpu_resampler"])
def test_in_memory_backends_equal_native_on_long_demos(long_hdf5, backend, combo):
    native, ours = build(long_hdf5, COMBOS[combo], backend)
    assert len(ours) == len(native) > 1000
    rng = np.random.default_rng(5)
    indices = rng.choice(len(native), size=300, replace=False)
    for idx in indices:
        assert_same_sample(ours[int(idx)], native[int(idx)], f"[{idx}]")
    batch = indices[:32].tolist()
    assert_same_sample(ours.collate(batch), torch.utils.data.default_collate([native[j] for j in batch]), "batch")


@pytest.mark.parametrize("combo", list(COMBOS))
def test_datapipe_serves_long_demos_whole_from_their_parts(long_hdf5, shards_dir, combo):
    """At 84x84 a 400-step demo (34 MB decoded) is one unit: read whole, from its parts."""
    native, ds = build(long_hdf5, COMBOS[combo], "datapipe", {"cache_dir": shards_dir, "shuffle_buffer": 3})
    assert type(ds.frames).__name__ == "EpisodeFrames"
    assert_pass_is_native(native, ds)


@pytest.fixture
def small_units(monkeypatch):
    """Units of ~40 steps (as 240x240 cameras make 400-step demos), read from the shards' parts of ~99 steps."""
    monkeypatch.setattr(chunks, "UNIT_BYTES", 40 * STEP)


@pytest.mark.parametrize("filter_key", [None, "train"])
@pytest.mark.parametrize("combo", list(COMBOS))
def test_datapipe_buffers_parts_of_long_demos_and_equals_native(
    long_hdf5, shards_dir, small_units, monkeypatch, combo, filter_key
):
    native, built = build(
        long_hdf5, COMBOS[combo], "datapipe", {"cache_dir": shards_dir, "shuffle_buffer": 3}, filter_key
    )
    # served as a spawned DataLoader worker gets it: pickled (its units' and goals' loaders were closures)
    ds = pickle.loads(pickle.dumps(built))
    assert type(ds.frames).__name__ == "EpisodeUnits"
    assert ds.frames.unit_count > 7 * ds.n_demos  # cut into units of ~40 steps
    assert ds.episode_of().max() == ds.frames.unit_count - 1
    # camera frames come only from the parts holding a unit's rows: never a whole demo read
    whole_reads = []
    read_episode = ShardReader.read_episode

    def counting(self, i, decode_frames=True, fields=None):
        if fields is None or any("image" in k for k in fields):
            whole_reads.append(i)
        return read_episode(self, i, decode_frames, fields)

    monkeypatch.setattr(ShardReader, "read_episode", counting)
    assert_pass_is_native(native, ds)
    assert whole_reads == []


def test_datapipe_one_step_windows_with_goals_over_parts_equal_native(long_hdf5, shards_dir, small_units):
    """A reviewer's reproduction: goal-conditioned BC (``seq_length=1``, ``frame_stack=1``, ``goal_mode="last"``) on
    demos cut into units: the observation window of the sample at a demo's last step is the goal's step, and the
    units served every camera at that step from the pinned goal rows, which hold the ``next_obs/`` cameras only (a
    ``KeyError: 'obs/agentview_image'``). Only the goal's fields are pinned now."""
    combo = dict(hdf5_cache_mode="low_dim", seq_length=1, frame_stack=1, goal_mode="last", hdf5_load_next_obs=True)
    native, ds = build(long_hdf5, combo, "datapipe", {"cache_dir": shards_dir, "shuffle_buffer": 3})
    assert type(ds.frames).__name__ == "EpisodeUnits" and ds.frames.pinned_fields
    assert_pass_is_native(native, ds)


def test_the_unit_parity_check_fails_on_shifted_frames_or_goals(long_hdf5, shards_dir, small_units):
    """Negative controls: the comparison above sees a unit's frames one step off and wrong goal frames; a unit
    loaded without the steps its windows reach after it is an error, never other frames."""
    native, ds = build(long_hdf5, COMBOS["goal_all"], "datapipe", {"cache_dir": shards_dir, "shuffle_buffer": 3})
    order, batches = one_pass(ds)
    assert not mismatches(native, order, batches, limit=4)
    pinned = ds.frames.load_pinned  # goals are served from the pinned rows: flipped there, every goal differs
    ds.frames.load_pinned = lambda ep: {k: np.ascontiguousarray(v[::-1]) for k, v in pinned(ep).items()}
    ds.frames._pinned = type(ds.frames._pinned)(ds.frames._load_pinned, ds.n_demos)
    order, batches = one_pass(ds)
    assert len(mismatches(native, order, batches, limit=4)) == 4 * BATCH  # every sample carries its demo's goal
    native, ds = build(long_hdf5, COMBOS["bc_rnn_next_obs"], "datapipe", {"cache_dir": shards_dir})
    load = ds.frames.chunks.load
    ds.frames.chunks.load = lambda ep, lo, hi: {k: np.roll(v, 1, axis=0) for k, v in load(ep, lo, hi).items()}
    order, batches = one_pass(ds)
    assert len(mismatches(native, order, batches, limit=4)) > 2 * BATCH
    native, ds = build(long_hdf5, COMBOS["bc_rnn_next_obs"], "datapipe", {"cache_dir": shards_dir})
    c = ds.frames.chunks
    c.hi = np.minimum(c.hi, c.unit_start + c.lengths)  # no margin
    with pytest.raises(IndexError, match="reach outside unit"):
        one_pass(ds)


def test_shards_without_parts_buffer_whole_demos_and_say_so(long_hdf5, tmp_path, small_units, monkeypatch, capsys):
    """Shards converted before parts existed (or with parts larger than the demos): whole demos, a log line."""
    from robo_loaders_plugin.storage.shards import format as shard_format

    monkeypatch.setattr(shard_format, "FRAMES_PART_BYTES", 1 << 30)
    native, ds = build(long_hdf5, COMBOS["bc_rnn_next_obs"], "datapipe", {"cache_dir": str(tmp_path)})
    assert not ShardReader(ds.location).has_parts(0)
    assert (
        "stores its long demos whole (converted by an earlier robo-loaders), so whole demos are buffered; convert "
        "it again to buffer parts of them" in capsys.readouterr().out
    )
    assert type(ds.frames).__name__ == "EpisodeFrames"
    assert_pass_is_native(native, ds)


def test_video_stream_on_long_demos_equals_native_over_the_decoded_frames(long_hdf5, tmp_path):
    """video_stream (lossy frames): every window once, byte-identical to SequenceDataset over the HDF5 whose
    camera datasets hold the decoded video (the windows, padding and dtypes are SequenceDataset's)."""
    from robo_loaders_plugin.robomimic.convert import convert_robomimic
    from robo_loaders_plugin.storage.video import VideoSettings

    out = str(tmp_path / "video")
    convert_robomimic(long_hdf5, out, video=VideoSettings("h264", 18), progress=False)
    decoded = decoded_copy(long_hdf5, out, str(tmp_path / "decoded.hdf5"))
    combo = COMBOS["bc_rnn_next_obs"]
    native = build(decoded, combo, "native")[0]
    ds = build(long_hdf5, combo, "video_stream", {"source": out, "shuffle_buffer": 3})[1]
    assert_pass_is_native(native, ds)


@pytest.fixture(scope="module")
def long_hdf5_b(tmp_path_factory):
    """A second file of the long shape (2 demos of 300-320 steps), for a mixture of long demos."""
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    path = str(tmp_path_factory.mktemp("long-b") / "long_b.hdf5")
    return write_robomimic_hdf5(
        path, demos=2, image_size=84, cameras=2, seed=12, min_length=300, max_length=320, valid_fraction=0.5,
        progress=False,
    )  # fmt: skip


def test_a_mixture_of_long_demos_is_served_by_parts_every_window_once_and_resumes_mid_pass(
    long_hdf5, long_hdf5_b, shards_dir, small_units
):
    """A ``datapipe`` mixture of two files of long demos, each cut into units of ~40 steps: the pass is served by
    unit (``MixtureOrder(units=...)``, the units being parts of demos), and with ``weights: "size"`` every window of
    both files is served once, each row byte-identical to its file's SequenceDataset sample; a fresh pipeline
    started at batch 5 serves the rest of the pass as the uninterrupted one did. Controls: a row compared with the
    other file's samples is not found; the pass started at batch 6 is not the rest."""
    combo = COMBOS["bc_rnn_next_obs"]
    natives = [
        dataset_factory(make_config(p, **combo), obs_keys(make_config(p, **combo))) for p in (long_hdf5, long_hdf5_b)
    ]
    cfg = make_config(
        long_hdf5, backend="datapipe", backend_kwargs={"cache_dir": shards_dir, "shuffle_buffer": 3}, **combo
    )
    with cfg.values_unlocked():
        cfg.train.data_mixture = {"components": [{"path": long_hdf5}, {"path": long_hdf5_b}], "weights": "size"}
    mix = dataset_factory(cfg, obs_keys(cfg))
    units, _ = mix.units()
    assert units is not None and len(np.unique(units)) > 7 * (4 + 2)  # served by unit, the units parts of demos
    plan = SamplingPlan(batch_size=BATCH, shuffle=True, drop_last=False, num_workers=2)

    served = mixture_rows(mix.batch_source(plan).batches(0))
    want = sorted((k, d) for k, n in enumerate(natives) for d in native_digests(n))
    assert sorted(served) == want  # every window of both files once, each byte-identical to its native sample
    assert (1 - served[0][0], served[0][1]) not in set(want)  # control: another file's samples do not hold it
    resumed = mixture_rows(mix.batch_source(plan).batches(0, 5))
    assert resumed == served[5 * BATCH :]
    assert mixture_rows(mix.batch_source(plan).batches(0, 6)) != served[5 * BATCH :]


def test_a_joined_mixture_of_long_demos_keeps_each_demos_low_dim_rows_at_its_first_batch(
    long_hdf5, long_hdf5_b, shards_dir
):
    """A ``datapipe`` mixture of two files of long demos served whole (units are demos): its batches are joined
    over both files (``robomimic.joined``), the low-dim rows (``actions``, the low-dim ``obs`` and ``next_obs``)
    kept in one table each and written demo by demo at the first batch that reaches it
    (``FrameSource.low_dim_up_front`` false for ``datapipe``'s whole-record sources), not read at the start; over a
    whole pass every window of both files is served once, byte-identical to its file's SequenceDataset sample.
    Control: demos marked written without their rows serve zeros, which differ from SequenceDataset's samples."""
    combo = COMBOS["bc_rnn_next_obs"]
    natives = [
        dataset_factory(make_config(p, **combo), obs_keys(make_config(p, **combo))) for p in (long_hdf5, long_hdf5_b)
    ]
    want = sorted((k, d) for k, n in enumerate(natives) for d in native_digests(n))

    def mixture():
        cfg = make_config(long_hdf5, backend="datapipe", backend_kwargs={"cache_dir": shards_dir}, **combo)
        with cfg.values_unlocked():
            cfg.train.data_mixture = {"components": [{"path": long_hdf5}, {"path": long_hdf5_b}], "weights": "size"}
        return dataset_factory(cfg, obs_keys(cfg))

    plan = SamplingPlan(batch_size=BATCH, shuffle=True, drop_last=False, num_workers=2)
    mix = mixture()
    assert mix.joined is not None
    frames = mix.joined.frames
    assert {"actions", "obs/robot0_eef_pos", "next_obs/object"} <= set(frames.tables)
    assert len(frames.lengths) == 4 + 2 and min(frames.lengths) >= 300  # units are the long demos, whole
    assert frames.pending_units() == len(frames.lengths)  # no demo's rows read at the start
    served = mixture_rows(mix.batch_source(plan).batches(0))
    assert frames.pending_units() == 0  # the pass reached every demo
    assert sorted(served) == want  # every window of both files once, each byte-identical to its native sample

    mix = mixture()
    mix.joined.frames._filled[:] = True  # control: marked written, rows never written
    batches = mix.batch_source(plan).batches(0)
    try:
        first = mixture_rows(itertools.islice(batches, 1))
    finally:
        batches.close()  # the pipeline's threads stop with the generator
    assert len(first) == BATCH and not set(first) & set(want)
