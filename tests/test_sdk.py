"""The SDK (``extend.frame_backend``, ``FrameStore``) without a framework: the spec it makes (footprints included, so
a mixture counts a store's), what it refuses (a store class that does not exist, at ``robo-loaders list``), the
default footprint as an upper bound of what a store of every field writes, the placement between RAM and disk, the
records of the episodes' fields, and the entry's manifest. (Serving a store against the native loaders, and a
store inside a mixture: examples/jpeg_backend/tests; compressed_cache, the built-in store: integration_tests.)"""

import functools
import json
import os
import pickle
import sys

import numpy as np
import pytest

from robo_loaders_plugin.core.factory_check import factory_problem
from robo_loaders_plugin.extend import (
    BATCH,
    INDEXED,
    LOSSY_FRAMES,
    SAMPLE,
    Available,
    BackendOptionError,
    BatchesInFlight,
    FieldInfo,
    FrameStore,
    Option,
    PlaceRequest,
    SourceError,
    StoreEpisodes,
    StoreRecord,
    cache_dir_option,
    cache_root,
    frame_backend,
    max_memory_option,
)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from toy_store import EveryFieldStore, InRamStore  # noqa: E402

GB = 10**9
STORE = "toy_store:EveryFieldStore"


def make(store=STORE, **kw):
    return frame_backend("toy_frames", store, description="d", **kw)


def test_the_spec_it_makes():
    spec = make(lossless=LOSSY_FRAMES, options={"quality": Option(int, 90, "q", min=1, max=100)})
    assert spec.kind_for("robomimic") == INDEXED and spec.kind_for("lerobot") == SAMPLE
    assert list(spec.options) == ["quality", "cache_dir"] and spec.options["cache_dir"].per_host  # the author's order
    for fw in ("robomimic", "lerobot"):
        assert factory_problem(spec.factories[fw], fw) is None  # registration accepts its factories
        # a mixture plans the store from metadata before building any component (it said "states no footprint")
        assert spec.footprints[fw].keywords == {"store": STORE, "backend": "toy_frames"}
    choice = spec.choose("robomimic", {"quality": 50}, "w")
    assert choice.options.shared() == {"quality": 50}  # per_host cache_dir is not part of the store's key
    with pytest.raises(BackendOptionError, match="quality"):
        spec.choose("lerobot", {"quality": 0}, "w")
    assert pickle.loads(pickle.dumps(spec.factories["lerobot"])).keywords == {"store": STORE, "backend": "toy_frames"}


def test_what_it_refuses():
    with pytest.raises(ValueError, match="store must be 'module:Class'"):
        make("toy_store.EveryFieldStore")
    with pytest.raises(ValueError, match="serves the sample or indexed kind"):
        make(kind=BATCH)
    with pytest.raises(ValueError, match="'cache_dir' is a local path and must be declared per_host=True"):
        make(options={"cache_dir": Option(str, None, "where")})
    assert make(options={"cache_dir": cache_dir_option("mine")}).options["cache_dir"].help == "mine"


def test_a_store_that_does_not_exist_is_refused_without_importing_it(monkeypatch):
    """A misspelled class or module is refused when the backend is declared, naming what the module has; the store's
    module is read, not imported (a registration must not import torch). Control: the right name is accepted."""
    monkeypatch.delitem(sys.modules, "toy_store")
    with pytest.raises(
        ValueError,
        match=r"backend 'toy_frames': store 'toy_store:EveryFieldStor': toy_store has no 'EveryFieldStor' "
        r"\(its classes: EveryFieldFrames, EveryFieldStore, FrameSource, FrameStore, InRamStore, StoreRecord\); "
        r"fix the store= of frame_backend\(\)",
    ):
        make("toy_store:EveryFieldStor")
    with pytest.raises(ValueError, match=r"store 'toy_stor:EveryFieldStore': no module named 'toy_stor'"):
        make("toy_stor:EveryFieldStore")
    assert make().name == "toy_frames" and "toy_store" not in sys.modules


PLUGIN = """
from robo_loaders_plugin.extend import frame_backend, hookimpl

@hookimpl
def robo_loaders_backends():
    return [frame_backend("toy_frames", "toy_store:{cls}", description="every field as .npy")]
"""


@pytest.mark.parametrize("cls,listed", [("EveryFieldStor", False), ("EveryFieldStore", True)])
def test_robo_loaders_list_refuses_a_misspelled_store_in_one_line(tmp_path, cls, listed):
    """It passed ``robo-loaders list`` and failed at the first build ("is not a FrameStore subclass"); now the
    plugin is refused by ``list`` in one line naming it and the class, exit status 1. Control: spelled right, it is
    listed, exit status 0."""
    from test_factory_protocol import install, run_list

    install(tmp_path, name="toy", module="toy_plugin")
    (tmp_path / "toy_plugin.py").write_text(PLUGIN.format(cls=cls))
    (tmp_path / "toy_store.py").write_text(open(os.path.join(HERE, "toy_store.py")).read())
    r = run_list(tmp_path)
    errors = [line for line in r["err"].splitlines() if line.startswith("error:")]
    if listed:
        assert r["code"] == 0 and "toy_frames" in r["out"] and not errors, r
        return
    assert r["code"] == 1 and "toy_frames" not in r["out"] and len(errors) == 1, r
    assert errors[0].startswith("error: plugin 'toy' (") and "toy_store has no 'EveryFieldStor'" in errors[0], errors
    assert "\n" not in errors[0] and "Traceback" not in r["err"]


# -- the default footprint: an upper bound ---------------------------------------------------------------------------
def robomimic_episodes(path: str) -> StoreEpisodes:
    """Every field robomimic's SequenceDataset serves of a file (cameras, low-dim, next_obs, float32 actions), read
    as the SDK reads them for a store."""
    from robo_loaders_plugin.robomimic.sequence import data_size, read_demo
    from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5
    from robo_loaders_plugin.windows.robomimic import SequenceOptions

    opts = SequenceOptions(
        obs_keys=("robot0_eef_pos", "object", "agentview_image", "robot0_eye_in_hand_image"),
        dataset_keys=("actions", "rewards", "dones"),
        load_next_obs=True,
        frame_stack=1,
        seq_length=3,
        pad_frame_stack=True,
        pad_seq_length=True,
        get_pad_mask=False,
        goal_mode=None,
        hdf5_cache_mode="low_dim",
    )
    source = RobomimicHdf5(path)
    with source.open() as f:
        demos = source.demos(f, None)
        size = data_size(source, f, demos, opts)

    def read():
        with source.open() as f:
            for d in demos:
                yield d, read_demo(source, f, d, opts, source.length(f, d))

    return StoreEpisodes(tuple(demos), frozenset(size.frame_step_bytes), size, read)


def test_the_default_footprint_bounds_what_a_store_of_every_field_writes(tiny_hdf5, tmp_path):
    """A store writing every field of every episode uncompressed, a .npy file each, wrote more than the default
    footprint stated (frames and other fields' bytes: the files' headers were not counted; the issue measured
    1,059,039 bytes written for 1.0 MB stated). Now the footprint bounds it, and the SDK's own records are within
    ``records_bytes``. Negative control: the old statement is below what is written."""
    from robo_loaders_plugin.sdk.placement import ARRAY_OVERHEAD
    from robo_loaders_plugin.sdk.records import Recorder, records_bytes

    episodes = robomimic_episodes(tiny_hdf5)
    size = episodes.size
    stated = EveryFieldStore().footprint(size, None)
    recorder = Recorder(episodes.names, size.lengths, episodes.cameras, episodes.read, "tiny")
    EveryFieldStore().build(str(tmp_path), StoreEpisodes(episodes.names, episodes.cameras, size, recorder.read), None)
    written = sum(os.path.getsize(tmp_path / n) for n in os.listdir(tmp_path))
    arrays = len(size.lengths) * (len(size.frame_step_bytes) + size.other_fields)
    # every field counted: 4 obs, 4 next_obs, actions, rewards, dones (the 16x16 cameras are below FRAME_MIN_BYTES)
    assert len(os.listdir(tmp_path)) == arrays and len(size.frame_step_bytes) + size.other_fields == 11, size
    assert written <= stated.disk_bytes < written + ARRAY_OVERHEAD * arrays, (written, stated.disk_bytes)
    assert size.frame_bytes + size.other_bytes < written  # the control: what the default stated before
    recorder.write(str(tmp_path))
    assert os.path.getsize(tmp_path / "robo-loaders-fields.json") <= records_bytes(len(size.lengths), 11)


def _sdk_dataset(ref, name, path, cache_dir, declared=None, given=None, **train):
    """A robomimic dataset of ``path`` served by the SDK backend ``name`` of store ``ref`` (options ``declared``,
    ``given`` values; ``train``: robomimic ``train.*`` settings)."""
    import robomimic.algo  # noqa: F401
    import robomimic.utils.obs_utils as ObsUtils
    from robomimic.config import config_factory

    from robo_loaders_plugin.sdk.serve import robomimic_dataset

    config = config_factory("bc")
    with config.values_unlocked():
        config.train.data = path
        config.observation.modalities.obs.rgb = ["agentview_image"]
        config.observation.modalities.obs.low_dim = ["robot0_eef_pos"]
        config.train.seq_length = 3
        for k, v in train.items():
            config.train[k] = v
    ObsUtils.initialize_obs_utils_with_config(config)
    spec = frame_backend(name, ref, description="d", options=declared)
    options = spec.choose("robomimic", {"cache_dir": cache_dir, **(given or {})}, "w").options
    return robomimic_dataset(ref, name, config, ["robot0_eef_pos", "agentview_image"], options=options)


def test_an_edited_record_is_built_again_never_served(tiny_hdf5, tmp_path):
    """A reviewer's reproduction: the SDK's record was checked by its size only, and a store taking its fields'
    dtypes from it (the documented pattern, ``toy_store``) served a float64 field as int64 after a same-size edit
    (``<f8`` -> ``<i8``). The record holds a checksum of itself (format 2): an edited one makes the entry be built
    again. Control: the unedited entry is reused."""
    cache_dir = str(tmp_path / "cache")
    first = _sdk_dataset(STORE, "toy_frames", tiny_hdf5, cache_dir)
    want = first[3]["obs"]["robot0_eef_pos"].copy()
    assert want.dtype == np.float64
    first.close()
    again = _sdk_dataset(STORE, "toy_frames", tiny_hdf5, cache_dir)
    assert again.serving.reused  # control
    again.close()
    record = os.path.join(again.location, "robo-loaders-fields.json")
    text = open(record).read()
    edited = text.replace('"obs/robot0_eef_pos": {"dtype": "<f8"', '"obs/robot0_eef_pos": {"dtype": "<i8"')
    assert edited != text and len(edited) == len(text)
    open(record, "w").write(edited)
    rebuilt = _sdk_dataset(STORE, "toy_frames", tiny_hdf5, cache_dir)
    got = rebuilt[3]["obs"]["robot0_eef_pos"]
    assert not rebuilt.serving.reused and got.dtype == np.float64 and np.array_equal(got, want)


def test_two_stores_naming_their_entries_alike_keep_entries_of_their_own(tiny_hdf5, tmp_path):
    """Reviewers' reproductions: a store inheriting its parent's ``kind`` opened the parent's entry of the same
    source and served it as its own (float fields not doubled); then, refused by the record, it had already run its
    ``verify`` on the parent's files and rebuilt the parent's entry in place. The store's class is part of the
    entry's key: each store builds and serves its own entry, the other's left as it was. Control: the parent's
    entry is reused afterwards, serving its own values."""
    cache_dir = str(tmp_path / "cache")
    parent = _sdk_dataset(STORE, "toy_frames", tiny_hdf5, cache_dir)
    want = parent[3]["obs"]["robot0_eef_pos"].copy()
    parent.close()
    child = _sdk_dataset("toy_store_same_kind:SameKindStore", "same_kind", tiny_hdf5, cache_dir)
    assert not child.serving.reused and child.location != parent.location
    assert np.array_equal(child[3]["obs"]["robot0_eef_pos"], want * 2)  # its own encoding, not the parent's
    child.close()
    again = _sdk_dataset(STORE, "toy_frames", tiny_hdf5, cache_dir)
    assert again.serving.reused and again.location == parent.location  # control: left as it was
    assert np.array_equal(again[3]["obs"]["robot0_eef_pos"], want)
    again.close()


def test_a_store_option_named_like_the_sdks_key_never_replaces_it(tiny_hdf5, tmp_path):
    """A reviewer's reproduction: the entry's key was the SDK's reading of the source merged with the store's
    ``key(options)``, so a store option named ``cache_mode`` replaced the SDK's ``cache_mode`` (robomimic's
    ``hdf5_cache_mode``, which decides the served dtypes): the store built under ``low_dim`` was reused under
    ``null``, serving float32 actions where robomimic serves float64. Each is apart now: one entry per cache mode.
    Control: the same option under another name gives the same entries."""
    from robo_loaders_plugin.extend import Option

    for name in ("cache_mode", "read_mode"):
        declared = {name: Option(str, "mmap", "how the store reads its files", choices=("mmap", "read"))}
        cache_dir = str(tmp_path / name)
        served = {}
        for mode in ("low_dim", None):
            ds = _sdk_dataset(STORE, "toy_frames", tiny_hdf5, cache_dir, declared, hdf5_cache_mode=mode)
            served[mode] = (ds.location, ds.serving.reused, ds[3]["actions"].dtype)
            ds.close()
        assert served["low_dim"][0] != served[None][0] and not served[None][1], (name, served)
        assert served["low_dim"][2] == np.float32 and served[None][2] == np.float64, (name, served)


def test_a_damaged_store_whose_verify_raises_is_rebuilt_and_a_store_error_names_the_store(
    tiny_hdf5, tmp_path, monkeypatch
):
    """Reviewers' reproductions: a store's ``verify`` parsing a damaged file of its own raised the parser's error
    (``JSONDecodeError``) bare on every run, the entry never rebuilt; and an error a store's ``build`` raised reached
    the user naming no store. Now the entry is rebuilt, the error named in the log, and ``build``'s error names the
    store and the call. Control: the intact entry is reused."""
    import toy_store_parsed

    from robo_loaders_plugin import RoboLoadersError

    ref, cache_dir = "toy_store_parsed:ParsedMetaStore", str(tmp_path / "cache")
    _sdk_dataset(ref, "parsed", tiny_hdf5, cache_dir).close()
    again = _sdk_dataset(ref, "parsed", tiny_hdf5, cache_dir)
    assert again.serving.reused  # control
    again.close()
    meta = os.path.join(again.location, "meta.json")
    with open(meta, "r+") as f:
        f.write("[")  # same size: the SDK's manifest of sizes passes it
    rebuilt = _sdk_dataset(ref, "parsed", tiny_hdf5, cache_dir)
    assert not rebuilt.serving.reused
    rebuilt.close()
    for flag, call in (("FAIL_BUILD", "build"), ("FAIL_KEY", "key")):  # FAIL_KEY: key()'s error was bare
        with monkeypatch.context() as patched:
            patched.setattr(toy_store_parsed.ParsedMetaStore, flag, True)
            with pytest.raises(
                RoboLoadersError,
                match=rf"frame store 'toy_store_parsed:ParsedMetaStore': {call}\(\) failed: ValueError: injected",
            ):
                _sdk_dataset(ref, "parsed", tiny_hdf5, str(tmp_path / "other"))
    # an I/O error or MemoryError keeps its type (a loop retrying on it sees it), named in a note
    for error in (OSError(5, "Input/output error"), MemoryError("injected")):

        def failing(*args, error=error):
            raise error

        with monkeypatch.context() as patched:
            patched.setattr(toy_store_parsed.ParsedMetaStore, "build", failing)
            with pytest.raises(type(error)) as raised:
                _sdk_dataset(ref, "parsed", tiny_hdf5, str(tmp_path / f"io-{type(error).__name__}"))
            assert "frame store 'toy_store_parsed:ParsedMetaStore': build() failed" in raised.value.__notes__


def test_files_a_build_wrote_that_its_own_verify_rejects_are_refused_not_served(tiny_hdf5, tmp_path, monkeypatch):
    """A reviewer's reproduction: the files a store's build had just written were stamped as verified without its
    ``verify`` being asked, so a store whose build wrote files its own check rejects (damaged or cut short after
    its checksums) was served as built, at that run and every later one. They are checked before the entry is
    renamed into place now, and refused in one line naming the store. Control: the same store writing good files
    builds and is reused."""
    import toy_store_parsed

    from robo_loaders_plugin import RoboLoadersError

    ref, cache_dir = "toy_store_parsed:ParsedMetaStore", str(tmp_path / "cache")
    monkeypatch.setattr(toy_store_parsed.ParsedMetaStore, "BAD_META", True)
    with pytest.raises(RoboLoadersError, match=r"the files its build wrote are not served: they fail its integrity"):
        _sdk_dataset(ref, "parsed", tiny_hdf5, cache_dir)
    assert not [p for p in os.listdir(cache_dir) if not p.startswith(".")]  # nothing left to be found next time
    monkeypatch.setattr(toy_store_parsed.ParsedMetaStore, "BAD_META", False)
    _sdk_dataset(ref, "parsed", tiny_hdf5, cache_dir).close()  # control
    again = _sdk_dataset(ref, "parsed", tiny_hdf5, cache_dir)
    assert again.serving.reused
    again.close()


def test_option_names_the_options_object_cannot_hold_are_refused_at_registration():
    """A reviewer's reproduction: an option named ``my-opt`` (no identifier) or ``shared``/``backend`` (names of the
    options object's own) was listed as fine, then failed at every use far from its cause (dataclasses' error, or
    'key() failed: int object is not callable' blaming the store). Refused where declared, naming the option.
    Control: an ordinary name registers."""
    for bad in ("my-opt", "shared", "given", "backend", "class"):
        with pytest.raises(ValueError, match=rf"backend 'toy_frames': option name '{bad}' cannot be used"):
            make(options={bad: Option(int, 1, "x")})
    make(options={"level": Option(int, 1, "x")})  # control


def test_an_option_named_backend_and_a_store_that_cannot_be_imported_are_one_line():
    """Reviewers' reproductions: ``choose(name, **given)`` took a given option named ``backend`` as its own argument
    (TypeError: got multiple values); a store whose module imports a package that is not installed was a traceback
    naming no store. Each is one line now: the option is checked as any other (here: unknown to the backend), the
    import failure names the store. And a whole number given to a float option is held as a float (``1`` and
    ``1.0`` were two keys, two cache entries of one content)."""
    from robo_loaders_plugin import RoboLoadersError
    from robo_loaders_plugin.lerobot.flags import choose as lerobot_choose
    from robo_loaders_plugin.robomimic.integration import choose as robomimic_choose
    from robo_loaders_plugin.sdk.serve import load_store

    for choose in (robomimic_choose, lerobot_choose):
        with pytest.raises(BackendOptionError, match=r"unknown option 'backend' for backend 'compressed_cache'"):
            choose("compressed_cache", backend="cv2")
    with pytest.raises(RoboLoadersError, match=r"frame store 'no_such_module_x:Store' cannot be imported: "
                       r"ModuleNotFoundError: .*frame_backend\(requires=...\)"):  # fmt: skip
        load_store("no_such_module_x:Store")
    spec = make(options={"ratio": Option(float, 0.5, "a ratio", min=0.0, max=1.0)})
    ones = [spec.choose("robomimic", {"ratio": v}, "p").options for v in (1, 1.0)]
    assert ones[0] == ones[1] and type(ones[0].ratio) is float
    assert EveryFieldStore().key(ones[0]) == EveryFieldStore().key(ones[1])


def test_max_memory_is_no_part_of_a_stores_default_key():
    """A reviewer's reproduction: the default ``key`` held every shared option, ``max_memory`` too, so two runs of
    other budgets built two copies of one store in RAM (docs: one copy shared by the host's processes) and a changed
    budget rebuilt a store on disk. Control: an option the content depends on is in the key."""
    declared = {"max_memory": max_memory_option(), "level": Option(int, 3, "a content option")}
    spec = make(options=declared)
    store = EveryFieldStore()
    keys = [store.key(spec.choose("robomimic", {"max_memory": m}, "p").options) for m in ("1GB", "2GB")]
    assert keys[0] == keys[1] and "max_memory" not in keys[0]
    assert store.key(spec.choose("robomimic", {"level": 4}, "p").options) != keys[0]  # control


def test_an_option_default_its_own_declaration_refuses_is_refused_at_registration():
    """A reviewer's reproduction: ``Option(int, "90")`` or a default under its ``min`` was registered silently and
    handed to the store, while the same value given by the user was refused. Refused at registration (``robo-loaders
    list``) in one line naming the plugin, the backend and the option. Control: a valid default registers."""
    import dataclasses

    from robo_loaders_plugin.core.registry import _factory_refusal

    for bad, why in (
        (Option(int, "90", "q"), "must be an integer, got str '90'"),
        (Option(int, 5, "l", min=10), ">= 10"),
    ):
        spec = dataclasses.replace(make(options={"quality": bad}), plugin="my-plugin")
        refusal = _factory_refusal(spec)
        assert refusal is not None and refusal.startswith(
            "plugin 'my-plugin': backend 'toy_frames' refused: the default of its option 'quality' "
        ), refusal
        assert why in refusal, refusal
    ok = dataclasses.replace(make(options={"quality": Option(int, 90, "q", min=10)}), plugin="my-plugin")
    assert _factory_refusal(ok) is None  # control

    def looks_at_the_machine(value):  # a check= of what the machine holds: never run at registration
        raise AssertionError(f"check ran at registration on {value!r}")

    probed = Option(str, "/data/shards", "a path checked when used", check=looks_at_the_machine)
    assert _factory_refusal(dataclasses.replace(make(options={"shards": probed}), plugin="my-plugin")) is None


def test_a_store_not_declared_thread_safe_is_read_by_one_thread_at_a_time(tiny_hdf5, tmp_path):
    """A reviewer's reproduction: robomimic's ``num_data_workers`` threads called a store's ``take`` together, and a
    store reading rows through one file handle (seek, read) served other samples' rows; nothing documented that
    ``take`` must be thread-safe. A store not declared ``thread_safe`` is read by one thread at a time. Control: one
    declared thread-safe is read by several at once."""
    from concurrent.futures import ThreadPoolExecutor

    from toy_store_threads import OverlapFrames

    for ref, most in (("toy_store_threads:OverlapStore", 1), ("toy_store_threads:ThreadSafeOverlapStore", 4)):
        ds = _sdk_dataset(ref, ref.split(":")[1].lower(), tiny_hdf5, str(tmp_path / "cache"))
        OverlapFrames.most = 0
        with ThreadPoolExecutor(4) as pool:
            served = list(pool.map(lambda i, ds=ds: ds[i]["obs"]["robot0_eef_pos"], range(0, 160, 10)))
        assert OverlapFrames.most == most if most == 1 else OverlapFrames.most > 1, (ref, OverlapFrames.most)
        assert all(np.array_equal(a, ds[i]["obs"]["robot0_eef_pos"]) for a, i in zip(served, range(0, 160, 10)))
        ds.close()


def test_a_stores_own_error_names_it_and_its_low_dim_hooks_are_its_own(tiny_hdf5, tmp_path):
    """A reviewer's reproductions: an error a store's ``take`` raised reached the user bare (``could not broadcast
    ...``), naming no backend; and the SDK's wrapper hid a store's ``low_dim_up_front`` and low-dim hooks, so a
    mixture read every episode whole at its start. Controls: the store's own line is kept in the message."""
    from toy_store_threads import OverlapFrames

    from robo_loaders_plugin import RoboLoadersError

    ds = _sdk_dataset("toy_store_threads:OverlapStore", "overlap", tiny_hdf5, str(tmp_path / "cache"))
    assert ds.frames.low_dim_up_front is False
    OverlapFrames.hooks.clear()
    fields = ["obs/robot0_eef_pos"]
    ds.frames.gather_low_dim(fields, np.zeros(2, np.int64), np.arange(2))
    ds.frames.low_dim_of_unit(fields, 0)
    assert OverlapFrames.hooks[:2] == ["gather_low_dim", "low_dim_of_unit"]
    OverlapFrames.fail = True
    try:
        failed = (
            r"frame store 'toy_store_threads:OverlapStore' \(.+\): (take|gather\w*)\(\) failed: ValueError: could not"
        )
        with pytest.raises(RoboLoadersError, match=failed):
            ds[0]
    finally:
        OverlapFrames.fail = False
        ds.close()


# -- placement between RAM and disk ----------------------------------------------------------------------------------
def machine(shm=20 * GB, host=20 * GB, disk=50 * GB) -> Available:
    return Available(
        host_bytes=host, shm_bytes=shm, shm_dir="/dev/shm", shm_is_ram=True, disk_bytes=disk, disk_dir="/d"
    )


def toy_size(episodes=10, length=100, frame=100_000):
    from robo_loaders_plugin.extend import DataSize

    return DataSize(np.full(episodes, length, np.int64), {"cam": frame}, 40, other_fields=2)


def options(**given):
    spec = make(options={"max_memory": max_memory_option()})
    return spec.choose("robomimic", given, "p").options


def test_a_store_that_may_live_in_ram_goes_there_when_it_fits_else_to_disk_saying_why():
    """``FrameStore.ram``: without cache_dir the store's files go to RAM when they fit max_memory, /dev/shm and the
    host's memory beside the batches in flight; else to disk, with why. Controls: a store that may not live in RAM
    goes to disk whatever fits; with cache_dir, disk; a store found on disk writes nothing."""
    size = toy_size()  # 100 MB of frames
    batches = BatchesInFlight(3, 10**6, "2 ahead + 1 held")
    files = InRamStore().footprint(size, None).disk_bytes

    def place(store, machine_=None, reusable=False, **given):
        request = PlaceRequest(size, machine_ or machine(), batches, reusable, "toy_frames", "robomimic", "p")
        return store.place(request, options(**given))

    ram = place(InRamStore())
    assert ram.in_ram and ram.footprint.shm_bytes == files and not ram.footprint.disk_bytes and not ram.spilled
    assert ram.footprint.host_bytes == size.other_bytes + batches.host_bytes
    assert "its files in RAM, at most" in ram.footprint.bound and ram.footprint.bound.endswith(
        "2 ahead + 1 held; 3.0 MB)"
    )
    budget = place(InRamStore(), max_memory="50MB")
    assert not budget.in_ram and budget.footprint.disk_bytes == files and budget.footprint.disk_dir == "/d"
    assert budget.spilled == f"p.max_memory=50.0 MB cannot hold up to {files / 1e6:.1f} MB"
    small = place(InRamStore(), machine(shm=GB // 20))
    assert not small.in_ram and small.spilled.startswith("/dev/shm (50.0 MB free) and the host's memory")
    assert not place(InRamStore(), cache_dir="/c").in_ram and not place(InRamStore(), cache_dir="/c").spilled
    assert not place(EveryFieldStore()).in_ram and not place(EveryFieldStore()).spilled  # may not live in RAM
    found = place(EveryFieldStore(), reusable=True)
    assert found.footprint.disk_bytes == 0 and found.footprint.build_s is None


def test_a_mixture_keeps_the_store_held_not_its_batches():
    from robo_loaders_plugin.sdk.placement import planned

    batches = BatchesInFlight(3, 10**6, "2 ahead + 1 held")
    request = PlaceRequest(toy_size(), machine(), batches, False, "toy_frames", "robomimic", "p")
    plan = planned(InRamStore().place(request, options()), machine(), ["x"], batches)
    assert plan.footprint.host_bytes - plan.kept.host_bytes == batches.host_bytes and plan.alternatives == ("x",)


# -- the records of a store's episodes -------------------------------------------------------------------------------
def episodes_of(*eps):
    names = tuple(f"ep{i}" for i in range(len(eps)))
    return names, [len(next(iter(e.values()))) for e in eps], (lambda: iter(zip(names, eps)))


def test_the_episodes_a_store_is_built_from_are_checked_and_recorded(tmp_path):
    from robo_loaders_plugin.sdk.records import Recorder

    good = {"cam": np.zeros((4, 2, 2, 3), np.uint8), "low": np.zeros((4, 2), np.float32)}
    names, lengths, read = episodes_of(good, good)
    recorder = Recorder(names, lengths, {"cam"}, read, "src")
    assert len(list(recorder.read())) == 2
    recorder.write(str(tmp_path))
    record = StoreRecord.read(str(tmp_path))
    assert record.names == ("ep0", "ep1") and record.lengths.tolist() == [4, 4]
    assert record.info("cam") == FieldInfo(np.dtype(np.uint8), (2, 2, 3), True) and not record.info("low").frames
    with pytest.raises(KeyError, match=rf"field 'x' is not in {tmp_path} \(it has \['cam', 'low'\]\)"):
        record.info("x")
    wrong = {
        "dtype": ({**good, "low": np.zeros((4, 2), np.float64)}, r"ep1/low is float64\(2,\), ep0/low is float32\(2,\)"),
        "shape": ({**good, "cam": np.zeros((4, 2, 2, 1), np.uint8)}, r"ep1/cam is uint8\(2, 2, 1\)"),
        "rows": ({**good, "low": np.zeros((3, 2), np.float32)}, r"ep1/low has 3 rows, the metadata says 4 steps"),
        "fields": ({"cam": good["cam"]}, r"ep1 holds the fields \['cam'\], ep0 holds \['cam', 'low'\]"),
    }
    for what, (second, said) in wrong.items():
        names, lengths, read = episodes_of(good, second)
        recorder = Recorder(names, [4, 4], {"cam"}, read, "src")
        with pytest.raises(SourceError, match=f"^src: {said}"):
            list(recorder.read())
        assert not recorder.complete, what
    half = Recorder(names, [4, 4], {"cam"}, read, "src")
    next(half.read())  # a build that stopped reading after the first episode
    with pytest.raises(SourceError, match="returned before reading every episode; it must store all 2"):
        half.write(str(tmp_path))
    with pytest.raises(SourceError, match=r"robo-loaders-fields\.json cannot be read .*delete .* to rebuild"):
        StoreRecord.read(str(tmp_path / "none"))


def test_a_store_that_writes_the_sdks_file_names_is_refused_not_overwritten(tmp_path):
    """The SDK writes robo-loaders-fields.json (the record) and robo-loaders-source.json (the entry's manifest)
    beside a store's files after its build: a build that wrote either would lose that file to ours, silently (the
    old behaviour). Controls: the same record and entry are written when the store's files have other names."""
    from robo_loaders_plugin.core.errors import RoboLoadersError
    from robo_loaders_plugin.sdk.records import Recorder
    from robo_loaders_plugin.storage.cached_dir import build_or_reuse

    good = {"cam": np.zeros((4, 2, 2, 3), np.uint8)}
    for name, refused in (("index.json", False), ("robo-loaders-fields.json", True)):
        directory = tmp_path / name.replace(".", "_")
        directory.mkdir()
        (directory / name).write_text("the store's own")
        names, lengths, read = episodes_of(good)
        recorder = Recorder(names, lengths, {"cam"}, read, "src")
        list(recorder.read())
        if refused:
            with pytest.raises(SourceError, match=r"^src: the store's build\(\) wrote robo-loaders-fields\.json"):
                recorder.write(str(directory))
            assert (directory / name).read_text() == "the store's own"
        else:
            recorder.write(str(directory))
            assert StoreRecord.read(str(directory)).names == ("ep0",)
    src = tmp_path / "src.txt"
    src.write_text("abc")
    for name, refused in (("data.json", False), ("robo-loaders-source.json", True)):

        def build(directory, name=name):
            with open(os.path.join(directory, name), "w") as f:
                f.write("the store's own")

        def entry(name=name, build=build):
            path, hold, _ = build_or_reuse(
                kind="toy-1", source=FileSource(src), key={"n": name}, build=build, cache_dir=str(tmp_path / "c"),
                description="toy store",
            )  # fmt: skip
            hold.release()
            return path

        if refused:
            with pytest.raises(RoboLoadersError, match=r"^toy store: its build wrote robo-loaders-source\.json"):
                entry()
        else:
            assert json.load(open(os.path.join(entry(), "robo-loaders-source.json")))["files"] == {name: 15}


# -- the one build-or-reuse helper: its manifest, earlier versions ---------------------------------------------------
class FileSource:
    def __init__(self, path):
        self.path = str(path)

    def fingerprint(self, recorded=None):
        from robo_loaders_plugin.storage import fingerprint

        return fingerprint.fingerprint(self.path, lambda: open(self.path).read(), recorded)


def test_an_entry_whose_files_changed_since_its_build_is_rebuilt(tmp_path, capsys):
    """The entry records every file's size (its manifest): one truncated, grown, removed or added since is rebuilt
    with a line naming the file, without reading any data; an entry whose files are as written is reused
    (control). The store's own check then runs once per version of its files (the version a build wrote too)."""
    from robo_loaders_plugin.storage.cached_dir import build_or_reuse

    src = tmp_path / "src.txt"
    src.write_text("abc")
    built, checked = [], []

    def build(directory):
        built.append(directory)
        with open(os.path.join(directory, "data.bin"), "wb") as f:
            f.write(b"x" * 1000)

    def entry():
        path, hold, reused = build_or_reuse(
            kind="toy-1", source=FileSource(src), key={"s": 1}, build=build, cache_dir=str(tmp_path / "c"),
            check=lambda p: checked.append(p) or True,
        )  # fmt: skip
        hold.release()
        return path, reused

    path, reused = entry()
    assert not reused and json.load(open(os.path.join(path, "robo-loaders-source.json")))["files"] == {"data.bin": 1000}
    # checked once as built (before it was renamed into place), then trusted until its files change
    assert entry() == (path, True) and checked == built
    with open(os.path.join(path, "data.bin"), "r+b") as f:
        f.truncate(10)
    capsys.readouterr()
    assert entry() == (path, False) and len(built) == 2
    assert (
        f"ignoring unusable cache {path} (data.bin is 10 bytes, 1000 were written); rebuilding"
        in capsys.readouterr().out
    )
    open(os.path.join(path, "extra"), "w").close()
    assert entry() == (path, False) and "(extra was not written by its build)" in capsys.readouterr().out
    os.utime(os.path.join(path, "data.bin"), ns=(1, 1))  # same size, another version: the store's check runs
    assert entry() == (path, True) and checked == [*built, path]


def test_entries_of_an_earlier_version_of_a_kind_are_removed(tmp_path, capsys):
    """A kind ending in ``-<version>`` replaces the entries of the same source and key its earlier versions wrote
    (a new format never finds them). Controls: another key's entry and a kind without a version are kept."""
    from robo_loaders_plugin.storage.cached_dir import build_or_reuse

    src = tmp_path / "src.txt"
    src.write_text("abc")

    def entry(kind, key):
        path, hold, _ = build_or_reuse(
            kind=kind, source=FileSource(src), key=key, build=lambda d: None, cache_dir=str(tmp_path / "c"),
            description="toy store",
        )  # fmt: skip
        hold.release()
        return path

    old, other, plain = entry("toy-1", {"s": 1}), entry("toy-1", {"s": 2}), entry("toy", {"s": 1})
    capsys.readouterr()
    new = entry("toy-2", {"s": 1})
    assert not os.path.exists(old) and all(os.path.exists(p) for p in (new, other, plain))
    assert f"removed {old}: the toy store of this source and these options in an earlier format" in (
        capsys.readouterr().out
    )


# -- unchanged from before -------------------------------------------------------------------------------------------
def test_cache_dir_is_checked_when_options_are_resolved(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(BackendOptionError, match=r"cache_dir.*is a file, not a directory"):
        make().choose("robomimic", {"cache_dir": str(tmp_path / "file")}, "train.data_backend_kwargs")
    assert cache_root(str(tmp_path / "new")) == str(tmp_path / "new") and os.path.isdir(tmp_path / "new")


def test_options_pickle_by_value():
    """A spawned worker reopens a store with the options it was built with (the options class is generated)."""
    options_ = make(options={"quality": Option(int, 90, "q")}).choose("lerobot", {"quality": 7}, "w").options
    copy = pickle.loads(pickle.dumps(options_))
    assert copy.quality == 7 and copy.cache_dir is None and copy.given() == {"quality": 7}
    assert copy.shared() == options_.shared()


def test_a_store_must_implement_build_and_open():
    class Half(FrameStore):
        kind = "half-1"

        def build(self, directory, episodes, options):
            pass

    with pytest.raises(TypeError, match=r"abstract method 'open'|abstract methods? .*open"):
        Half()


def test_option_messages_read_as_the_built_in_backends(tmp_path):
    """A reviewer's findings: an SDK backend's cache_dir refusal dropped the built-in wording ("must be a directory
    you can write to: ..."), and a bad size read "max_memory a size: expected a size like ...". Control: the
    built-in backend's cache_dir line."""
    (tmp_path / "f").write_text("x")
    spec = make(options={"max_memory": max_memory_option()})
    with pytest.raises(BackendOptionError, match=r"cache_dir must be a directory you can write to: "):
        spec.choose("robomimic", {"cache_dir": str(tmp_path / "f")}, "train.data_backend_kwargs")
    with pytest.raises(BackendOptionError, match=r"max_memory must be a size like 2GB or 512MiB, got 'abc'"):
        spec.choose("robomimic", {"max_memory": "abc"}, "train.data_backend_kwargs")


def test_a_sample_backend_whose_factory_returns_no_dataset_is_refused_naming_it():
    """A reviewer's reproduction: a ``SAMPLE``-kind backend's factory returning ``None`` failed later as a bare
    ``TypeError: object of type 'NoneType' has no len()`` naming no backend (the hook spec promises the returned
    object is checked against the declared kind). Refused naming the backend. Control: a list (indexed and sized)
    is recorded; an indexed backend returning a list is refused as before."""
    from robo_loaders_plugin import RoboLoadersError
    from robo_loaders_plugin.core.iteration import record_built
    from robo_loaders_plugin.extend import BackendSpec

    def spec(kind):
        return BackendSpec(
            name="hand_b", description="d", frameworks=("robomimic",), kind=kind, factories={"robomimic": "m:f"}
        )

    choice = spec(SAMPLE).choose("robomimic", {}, "w")
    with pytest.raises(RoboLoadersError, match=r"backend 'hand_b' .* declares kind 'sample' but its factory returned a "
                       r"NoneType, not a map-style dataset"):  # fmt: skip
        record_built(None, choice)
    record_built([1, 2], choice)
    with pytest.raises(RoboLoadersError, match=r"returned a list, not a IndexedDataset"):
        record_built([1, 2], spec(INDEXED).choose("robomimic", {}, "w"))


def test_a_built_stores_read_errors_name_its_directory(tiny_hdf5, tmp_path):
    """A reviewer's reading: an I/O error in a built store's ``take()`` was noted with the store's class alone, the
    store's own error naming a file inside it or nothing, so the entry to delete was not said. Its directory is
    named now, in the note of an ``OSError`` and in the line of any other error. Control: a build's error (its
    directory a temporary one, renamed when done) names none."""
    from robo_loaders_plugin import RoboLoadersError
    from robo_loaders_plugin.sdk.serve import StoreFrames, _named_errors

    ref = "toy_store_parsed:ParsedMetaStore"
    ds = _sdk_dataset(ref, "parsed", tiny_hdf5, str(tmp_path / "cache"))
    ds.close()
    options = frame_backend("parsed", ref, description="d").choose("robomimic", {}, "w").options
    frames = StoreFrames(ref, ds.location, options, check=False)

    def failing(*args, error):
        raise error

    for error in (OSError(5, "Input/output error"), ValueError("injected")):
        frames.inner.take = functools.partial(failing, error=error)
        with pytest.raises((OSError, RoboLoadersError)) as raised:
            frames.take("actions", np.array([0]), np.array([0]), np.empty((1, 7)))
        said = " ".join(getattr(raised.value, "__notes__", [])) + str(raised.value)
        assert f"frame store {ref!r} ({ds.location}): take() failed" in said
    frames.close()
    with pytest.raises(OSError) as raised:  # the control: no directory given, none named
        _named_errors(ref, "build()", functools.partial(failing, error=OSError(5, "Input/output error")))
    assert raised.value.__notes__ == [f"frame store {ref!r}: build() failed"]
