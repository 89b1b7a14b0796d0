"""robo-loaders convert robomimic / verify: lossless, parallel, resumable, safe on a shared folder."""

import contextlib
import json
import os
import subprocess
import sys

import h5py
import numpy as np

from robo_loaders_plugin.robomimic.convert import convert_robomimic, verify_robomimic
from robo_loaders_plugin.storage.shards import ShardReader
from robo_loaders_plugin.storage.shards import manifest as units

BIN = os.path.dirname(sys.executable)


def cli(*args):
    p = subprocess.run([os.path.join(BIN, "robo-loaders"), *args], capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def test_convert_parallel_and_verify(tiny_hdf5, tmp_path):
    out = str(tmp_path / "shards")
    rc, log = cli("convert", "robomimic", tiny_hdf5, out, "--num-workers", "2", "--shard-size", "100KB")
    assert rc == 0, log
    r = ShardReader(out)
    assert len(r.shards) > 2
    with h5py.File(tiny_hdf5, "r") as f:
        assert r.dataset["metadata"]["masks"]["valid"] == [x.decode() for x in f["mask/valid"][:]]
        assert json.loads(r.dataset["metadata"]["data_attrs"]["env_args"]) == json.loads(f["data"].attrs["env_args"])
        _, fields = r.read_episode(r.by_name["demo_3"])
        for key in ("obs/agentview_image", "actions", "dones", "next_obs/object"):
            src = f[f"data/demo_3/{key}"][()]
            assert fields[key].dtype == src.dtype and np.array_equal(fields[key], src)
    rc, log = cli("verify", out, "--source", tiny_hdf5)
    assert rc == 0 and "ok" in log, log


def test_foreign_manifest_is_refused(tiny_hdf5, tmp_path):
    """A conversion of another source, or of this one with other options, is refused naming what differs (a
    reviewer's finding: "another source or with other options" said neither)."""
    import pytest

    out = str(tmp_path / "shards")
    units.plan(out, "another-fingerprint", [["demo_0"]], {})
    with pytest.raises(units.ShardError, match="holds a conversion of another source, or another version of this one"):
        convert_robomimic(tiny_hdf5, out, shard_bytes=100_000, progress=False)
    other = str(tmp_path / "other")
    convert_robomimic(tiny_hdf5, other, shard_bytes=100_000, progress=False)
    with pytest.raises(units.ShardError, match=r"this source with other options \(shard_bytes 100000 -> 200000\)"):
        convert_robomimic(tiny_hdf5, other, shard_bytes=200_000, progress=False)
    # a reviewer's reproduction: LeRobot's --tolerance-s, kept beside the source's content, was called another version
    # of the source; it is shown as the option it is (control: another content is still another source)
    lerobot = {"source": {"content": "c1", "tolerance_s": 1e-4}, "options": {"shard_bytes": 1}}
    assert units._what_differs(lerobot, {"content": "c1", "tolerance_s": 0.01}, {"shard_bytes": 1}) == (
        "this source with other options (tolerance_s 0.0001 -> 0.01)"
    )
    assert units._what_differs(lerobot, {"content": "c2", "tolerance_s": 1e-4}, {"shard_bytes": 1}).startswith(
        "another source, or another version of this one"
    )


def test_resume_after_a_killed_worker(tiny_hdf5, tmp_path, monkeypatch):
    out = str(tmp_path / "shards")
    with monkeypatch.context() as m:  # plan only: no unit converted, so nothing can be published
        m.setattr(units, "work", lambda *a, **k: 0)
        with contextlib.suppress(units.ShardError):
            convert_robomimic(tiny_hdf5, out, shard_bytes=100_000, progress=False)
    assert not os.path.exists(os.path.join(out, "index.json"))
    # a converter leases a unit and is killed before writing it
    code = (
        "import os, sys; from robo_loaders_plugin.storage.shards import manifest as u; u.lease(sys.argv[1]); "
        "os._exit(9)"
    )
    assert subprocess.run([sys.executable, "-c", code, out]).returncode == 9
    m = json.load(open(os.path.join(out, "manifest.json")))
    assert [u["state"] for u in m["units"]].count("leased") == 1
    convert_robomimic(tiny_hdf5, out, shard_bytes=100_000, progress=False)  # resumes; the dead lease is taken over
    assert verify_robomimic(out, tiny_hdf5) == []


def test_two_processes_on_one_folder(tiny_hdf5, tmp_path):
    out = str(tmp_path / "shards")
    procs = [
        subprocess.Popen(
            [os.path.join(BIN, "robo-loaders"), "convert", "robomimic", tiny_hdf5, out, "--shard-size", "50KB"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    # both succeed: the slower converts what is left, waits for the other's units and publishes (one was refused
    # once in 40 runs, its check of the directory finding the other's manifest.json.tmp-*: a reviewer's reproduction)
    assert all(p.returncode == 0 for p in procs), outs
    assert verify_robomimic(out, tiny_hdf5) == []
    m = json.load(open(os.path.join(out, "manifest.json")))
    assert all(u["state"] == "done" for u in m["units"])
    names = [s["name"] for u in m["units"] for s in u["shards"]]
    assert len(names) == len(set(names)) == len(os.listdir(os.path.join(out, "shards")))


def test_verify_finds_differences_from_the_source(tiny_hdf5, tmp_path, capsys):
    """And shows its progress: every byte is read (a reviewer's find: minutes without a word at scale)."""
    import shutil

    src = str(tmp_path / "src.hdf5")
    shutil.copy(tiny_hdf5, src)
    out = str(tmp_path / "shards")
    convert_robomimic(src, out, progress=False)
    with h5py.File(src, "r+") as f:
        f["data/demo_1/actions"][0, 0] += 1
    capsys.readouterr()
    assert any("demo_1/actions" in p for p in verify_robomimic(out, src))
    bars = capsys.readouterr().err
    assert all(f"verify {what}" in bars for what in ("shards", "episodes", "against the source")), bars
    rc, log = cli("verify", out, "--source", src)
    assert rc == 1 and "demo_1/actions" in log


def test_verify_passes_byte_identical_arrays_that_hold_nan(tiny_hdf5, tmp_path):
    """A reviewer's reproduction: ``verify --source`` said a field holding NaN "differs from the source" though the
    shards were byte-identical (``np.array_equal``: NaN != NaN). Control: a NaN where the source holds a number
    differs."""
    import shutil

    src = str(tmp_path / "src.hdf5")
    shutil.copy(tiny_hdf5, src)
    with h5py.File(src, "r+") as f:
        f["data/demo_0/actions"][0, 0] = np.nan
    out = str(tmp_path / "shards")
    convert_robomimic(src, out, progress=False)
    assert verify_robomimic(out, src) == []
    with h5py.File(src, "r+") as f:
        f["data/demo_0/actions"][0, 0] = 0.5
        f["data/demo_0/actions"][0, 1] = np.nan
    assert verify_robomimic(out, src) == ["demo_0/actions: differs from the source"]


def test_a_file_with_no_demos_is_refused_at_convert(tiny_hdf5, tmp_path):
    """Issue 23 B7: 0 demos converted with rc 0 ("0 episodes in 0 shards"), then datapipe raised IndexError."""
    path = str(tmp_path / "empty.hdf5")
    with h5py.File(path, "w") as f:
        f.create_group("data").attrs["total"] = 0
    out = str(tmp_path / "shards")
    rc, log = cli("convert", "robomimic", path, out)
    assert rc == 2 and "Traceback" not in log, log
    assert log.strip().splitlines() == [
        f"error: {path}: data/ holds no demos (no demo_<i> group), so there is "
        "nothing to convert or train on; check that this is the file you meant "
        "(train.data)"
    ], log
    assert not os.path.exists(os.path.join(out, "index.json"))


def read_only_dir(tmp_path):
    """(directory, command prefix): a directory this process cannot write, as a user would meet it (as root a
    read-only tmpfs in a private mount namespace: root writes through permission bits)."""
    import pytest

    ro = tmp_path / "read-only"
    ro.mkdir()
    if os.geteuid() != 0:
        ro.chmod(0o555)
        return ro, []
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o ro none {ro} && ! touch {ro}/x"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip("running as root without a way to make a read-only directory (unshare -m + mount)")
    return ro, ["unshare", "-m", "sh", "-c", f'mount -t tmpfs -o ro none {ro} && exec "$@"', "sh"]


def test_a_read_only_output_directory_is_one_line_naming_it(tiny_hdf5, tmp_path):
    """Issue 23 B7: a raw OSError traceback before; both converters now say which directory cannot be written."""
    ro, prefix = read_only_dir(tmp_path)
    lerobot_root = tmp_path / "lerobot"  # what convert lerobot opens before it writes anything
    (lerobot_root / "meta").mkdir(parents=True)
    (lerobot_root / "meta" / "info.json").write_text(json.dumps({"fps": 10, "features": {}}))
    for args in (["robomimic", tiny_hdf5], ["lerobot", str(lerobot_root)]):
        for out in (ro, ro / "sub"):
            p = subprocess.run(
                prefix + [os.path.join(BIN, "robo-loaders"), "convert", *args, str(out)],
                capture_output=True,
                text=True,
                timeout=600,
            )
            log = p.stdout + p.stderr
            assert p.returncode == 2 and "Traceback" not in log, log
            assert log.strip().splitlines() == [
                f"error: {out}: cannot write the output directory (Read-only file "
                "system); choose a directory you can write to, or fix its "
                "permissions"
            ] or ("Permission denied" in log and f"error: {out}: cannot write the output directory" in log), log


def test_a_file_replaced_while_converted_is_withdrawn_not_published(tiny_hdf5, tmp_path, monkeypatch):
    """A reviewer's reproduction: the file replaced (mv) while ``robo-loaders convert`` ran left shards recording
    the first version's fingerprint and holding the second's arrays, accepted as the first once it came back with
    its mtime. Now the source is fingerprinted again after the conversion: changed, ``index.json`` and
    ``dataset.json`` are removed and the conversion refused in one line. Control: converting the unchanged file
    publishes them."""
    import shutil

    import pytest

    from robo_loaders_plugin import StaleSourceError
    from robo_loaders_plugin.storage.shards import executors

    path = str(tmp_path / "data.hdf5")
    shutil.copy2(tiny_hdf5, path)
    backup = str(tmp_path / "backup.hdf5")
    shutil.copy2(tiny_hdf5, backup)
    other = str(tmp_path / "other.hdf5")
    shutil.copy2(tiny_hdf5, other)
    with h5py.File(other, "r+") as f:
        f["data/demo_0/actions"][...] += 1.0
    execute = executors.execute

    def replaced_meanwhile(*args, **kwargs):
        os.replace(other, path)
        return execute(*args, **kwargs)

    monkeypatch.setattr(executors, "execute", replaced_meanwhile)
    out = str(tmp_path / "shards")
    with pytest.raises(StaleSourceError, match=r"data\.hdf5 changed while it was converted into .*withdrawn"):
        convert_robomimic(path, out, progress=False)
    assert not os.path.exists(os.path.join(out, "index.json"))
    assert not os.path.exists(os.path.join(out, "dataset.json"))
    monkeypatch.setattr(executors, "execute", execute)
    # the first version back with its mtime (cp -p): the same command resumed the withdrawn units and published the
    # other version's arrays as the first's (a reviewer's reproduction); every unit is converted again now
    shutil.copy2(backup, path)
    convert_robomimic(path, out, progress=False)
    assert verify_robomimic(out, path) == []
    control = str(tmp_path / "control")
    convert_robomimic(path, control, progress=False)  # the file as it is now, unchanged meanwhile
    assert os.path.exists(os.path.join(control, "index.json")) and verify_robomimic(control, path) == []


def test_a_unit_read_while_the_file_was_edited_then_restored_with_its_mtime_is_converted_again(
    tiny_hdf5, tmp_path, monkeypatch
):
    """A reviewer's reproduction: the file edited while units were read, then restored from a backup with its
    mtime (``cp -p``) before the end: the end-of-run check saw the first version's content and mtime, and the
    conversion of two versions was published and served. Each unit now records the stat (size, mtime, inode,
    ctime) it was read under; a unit read under another stat than the file's when publishing is converted again.
    Control: without the restore's new ctime (the manifest naming no source files), the edited unit is published."""
    import shutil

    from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5

    path = str(tmp_path / "data.hdf5")
    shutil.copy2(tiny_hdf5, path)
    backup = str(tmp_path / "backup.hdf5")
    shutil.copy2(tiny_hdf5, backup)
    read_all = RobomimicHdf5.read_all
    edits = []

    def edited_meanwhile(self, f, demo):
        fields, frames = read_all(self, f, demo)
        if demo == "demo_2" and not edits:  # what this unit read was written meanwhile, then the file restored
            edits.append(demo)
            fields["actions"] = fields["actions"] + 1.0
            shutil.copy2(backup, path)  # cp -p: content and mtime back, a new ctime
        return fields, frames

    monkeypatch.setattr(RobomimicHdf5, "read_all", edited_meanwhile)
    out = str(tmp_path / "shards")
    convert_robomimic(path, out, shard_bytes=100_000, progress=False)
    assert edits and verify_robomimic(out, path) == []  # the unit read before the restore was converted again
    plan = units.plan
    edits.clear()
    monkeypatch.setattr(units, "plan", lambda *a, source_files=None, **k: plan(*a, **k))  # control: no stat kept
    control = str(tmp_path / "control")
    convert_robomimic(path, control, shard_bytes=100_000, progress=False)
    assert edits and any("demo_2/actions" in p for p in verify_robomimic(control, path))


def _flip_member_byte(out, episode=0, key="actions"):
    """One bit of a member flipped in place: the shard keeps its size."""
    r = ShardReader(out)
    ep = r.episodes[episode]
    loc = ep["members"][f"{ep['name']}.{key}.npy"]
    with open(os.path.join(out, ep["shard"]), "r+b") as f:
        f.seek(loc["offset"] + loc["size"] - 1)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 1]))


def test_converting_again_repairs_a_member_damaged_in_place(tiny_hdf5, tmp_path):
    """A reviewer's reproduction: a flipped bit in a member is refused by the reader, which says to convert again;
    the conversion run again checked the done shards' sizes only and published the same damaged shard. Now a done
    unit's shard must match its recorded SHA-256, so it is converted again. Control: the damage is refused before
    the repair."""
    import pytest

    from robo_loaders_plugin.storage.shards import ShardError

    out = str(tmp_path / "shards")
    convert_robomimic(tiny_hdf5, out, progress=False)
    _flip_member_byte(out)
    with pytest.raises(ShardError, match=r"CRC32 mismatch.*convert the dataset again"):
        ShardReader(out).read_episode(0)  # control
    convert_robomimic(tiny_hdf5, out, progress=False)
    reader = ShardReader(out)
    for i in range(len(reader.episodes)):
        reader.read_episode(i)
    assert verify_robomimic(out, tiny_hdf5) == []


def test_a_damaged_member_of_a_conversion_kept_in_the_cache_is_converted_again_next_run(tiny_hdf5, tmp_path):
    """The same damage in a conversion on first use (``open_shards``): every later run reused the entry (its check
    reads sizes) and failed at that demo. Now the refusal withdraws the cached conversion (its ``index.json``), said
    in the message, and the next run converts it again. Control: shards a user gave are never withdrawn."""
    import pytest

    from robo_loaders_plugin.pipeline.options import open_shards
    from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5
    from robo_loaders_plugin.storage.shards import ShardError

    cache = str(tmp_path / "cache")

    def opened(shards=None):
        return open_shards(
            framework="robomimic",
            source=RobomimicHdf5(tiny_hdf5, cache_dir=cache),
            shards=shards,
            cache_dir=cache,
            check_source=True,
            key_desc={"source": os.path.realpath(tiny_hdf5), "test": 1},
            convert=lambda out, fp: convert_robomimic(tiny_hdf5, out, fingerprint=fp, cache_dir=cache, progress=False),
            option_prefix="train.data_backend_kwargs",
            convert_hint="convert",
            backend="datapipe",
        )[0]

    first = opened()
    _flip_member_byte(first.dir, episode=1)
    with pytest.raises(ShardError, match=r"CRC32 mismatch.*withdrawn: the next run converts it again"):
        opened().read_episode(1)
    again = opened()
    assert again.dir == first.dir
    for i in range(len(again.episodes)):
        again.read_episode(i)
    assert verify_robomimic(again.dir, tiny_hdf5) == []
    given = str(tmp_path / "given")
    convert_robomimic(tiny_hdf5, given, progress=False)
    _flip_member_byte(given, episode=1)
    with pytest.raises(ShardError, match="CRC32 mismatch") as err:
        opened(shards=given).read_episode(1)
    assert "withdrawn" not in str(err.value) and os.path.exists(os.path.join(given, "index.json"))


def test_an_output_directory_of_the_users_or_inside_the_source_is_refused_before_converting(tiny_hdf5, tmp_path):
    """A reviewer's reproductions: ``convert`` into a directory of the user's own replaced its index.json and
    dataset.json without a word; into a directory inside a LeRobot dataset it converted everything, was withdrawn
    as "changed while converted" and refused at every run after. Both are refused in one line before anything is
    written. Controls: a new directory, an empty one and one holding a conversion (resumed) are accepted."""
    import pytest

    from robo_loaders_plugin.storage.shards import ShardError
    from robo_loaders_plugin.storage.shards.format import check_output_dir

    users = tmp_path / "project"
    users.mkdir()
    (users / "index.json").write_text('{"my": "web app index"}')
    with pytest.raises(ShardError, match=r"project: holds files of its own \(index\.json\) and no conversion"):
        convert_robomimic(tiny_hdf5, str(users), progress=False)
    assert (users / "index.json").read_text() == '{"my": "web app index"}' and not (users / "shards").exists()
    root = tmp_path / "lerobot_root"
    (root / "meta").mkdir(parents=True)
    with pytest.raises(ShardError, match=r"the output directory is inside the source .*lerobot_root"):
        check_output_dir(str(root / "shards"), str(root))
    with pytest.raises(ShardError, match=r"the output directory is holding the source"):
        check_output_dir(str(tmp_path), str(root))
    (tmp_path / "empty").mkdir()
    for ok in (tmp_path / "new", tmp_path / "empty"):
        check_output_dir(str(ok), tiny_hdf5)  # controls
    done = tmp_path / "done"
    convert_robomimic(tiny_hdf5, str(done), progress=False)
    convert_robomimic(tiny_hdf5, str(done), progress=False)  # a conversion there: resumed (nothing to do)
    # what another conversion into it writes before its manifest, or a run killed then leaves (a reviewer's
    # reproduction: one of two identical conversions started together was refused, 1 run in 40)
    early = tmp_path / "early"
    (early / "shards").mkdir(parents=True)
    (early / "manifest.lock").write_text("")
    (early / "manifest.json.tmp-4242-0123abcd").write_text("{")
    convert_robomimic(tiny_hdf5, str(early), progress=False)
    assert (early / "index.json").exists() and not (early / "manifest.json.tmp-4242-0123abcd").exists()


def test_verify_compares_the_filter_keys_and_attributes_with_the_source(tiny_hdf5, tmp_path):
    """A reviewer's reproduction: ``verify --source`` compared the demos' arrays only, so a source whose
    ``mask/train`` or ``env_args`` was edited after converting verified "ok", though the shards' masks and
    attributes are what ``datapipe`` serves for filter keys and env metadata. Control: the unedited copy is ok."""
    import shutil

    src = str(tmp_path / "src.hdf5")
    shutil.copy(tiny_hdf5, src)
    with h5py.File(src, "r+") as f:  # a NaN attribute equals itself (a reviewer's reproduction: it failed verify)
        f["data/demo_0"].attrs["success_rate"] = np.nan
    out = str(tmp_path / "shards")
    convert_robomimic(src, out, shard_bytes=100_000, progress=False)
    assert verify_robomimic(out, src) == []  # control
    with h5py.File(src, "r+") as f:
        train = f["mask/train"][()]
        del f["mask/train"]
        f["mask/train"] = train[:-1]
    assert verify_robomimic(out, src) == [f"{out}: its filter keys (mask/) differ from {src}'s"]
    with h5py.File(src, "r+") as f:
        del f["mask/train"]
        f["mask/train"] = train
        f["data"].attrs["env_args"] = json.dumps({"env_name": "Other", "env_kwargs": {}})
        f["data/demo_1"].attrs["model_file"] = "<xml>another model</xml>"
    assert verify_robomimic(out, src) == [
        f"{out}: its data attributes differ from {src}'s",
        f"{out}: its attributes of demo_1 differ from {src}'s",
    ]


def test_attributes_of_several_values_are_converted_and_verified(tiny_hdf5, tmp_path):
    """A reviewer's reproduction: an attribute holding several values (``np.arange(5.0)``, an array of byte
    strings) made the conversion fail (``can only convert an array of size 1 to a Python scalar``), so such a file
    could not be converted nor served by the backends that convert it; a one-value array of bytes failed JSON. They
    are kept as lists (one value: a scalar, as before) and verify against the source. Control: an edited one is
    found."""
    import shutil

    src = str(tmp_path / "src.hdf5")
    shutil.copy(tiny_hdf5, src)
    with h5py.File(src, "r+") as f:
        f["data/demo_0"].attrs["init_state"] = np.arange(5.0)
        f["data"].attrs["cameras"] = np.array([b"agentview", b"wrist"])
        f["data"].attrs["one"] = np.array([b"abc"])
    out = str(tmp_path / "shards")
    convert_robomimic(src, out, shard_bytes=100_000, progress=False)
    meta = ShardReader(out).dataset["metadata"]
    assert meta["demo_attrs"]["demo_0"]["init_state"] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert meta["data_attrs"]["cameras"] == ["agentview", "wrist"] and meta["data_attrs"]["one"] == "abc"
    assert verify_robomimic(out, src) == []
    with h5py.File(src, "r+") as f:
        f["data/demo_0"].attrs["init_state"] = np.arange(1.0, 6.0)
    assert verify_robomimic(out, src) == [f"{out}: its attributes of demo_0 differ from {src}'s"]  # control


INTERRUPTED_AFTER_ONE_UNIT = """
import sys
from robo_loaders_plugin.storage.shards import manifest
done = manifest.complete

def complete(*args, **kwargs):  # Ctrl-C right after the first unit is recorded
    done(*args, **kwargs)
    raise KeyboardInterrupt

manifest.complete = complete
sys.argv = ["robo-loaders", *sys.argv[1:]]
from robo_loaders_plugin.cli import _run
_run()
"""


def test_ctrl_c_during_a_conversion_says_what_was_kept_and_the_same_command_resumes(tiny_hdf5, tmp_path):
    """A reviewer's reproduction: Ctrl-C during ``robo-loaders convert`` printed click's "Aborted!" alone. Now one
    line says how many work units are kept and that the same command resumes, exit status 130; the same command
    then finishes (control: what it wrote matches the source)."""
    out = str(tmp_path / "shards")
    args = ["convert", "robomimic", tiny_hdf5, out, "--shard-size", "50KB"]
    p = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_AFTER_ONE_UNIT, *args], capture_output=True, text=True, timeout=600
    )
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 130, p.stdout + p.stderr
    planned = len(json.load(open(os.path.join(out, "manifest.json")))["units"])
    assert planned > 1 and last == (
        f"interrupted: 1 of {planned} work units finished are kept in {out}; run the same command again to resume"
    ), p.stderr
    assert "Aborted!" not in p.stdout + p.stderr and "Traceback" not in p.stderr
    rc, log = cli(*args)
    assert rc == 0, log
    assert verify_robomimic(out, tiny_hdf5) == []
