"""LeRobot datapipe: converter, items vs LeRobotDataset[i], the training pipeline vs EpisodeAwareSampler's frames."""

import os
import re
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch
from lerobot_helpers import REPO, random_indices, same_item, serve

from robo_loaders_plugin import RoboLoadersError
from robo_loaders_plugin.backends.datapipe.lerobot import LeRobotShardSamples
from robo_loaders_plugin.lerobot.convert import convert_lerobot, verify_lerobot
from robo_loaders_plugin.lerobot.integration import cycle, sampling_plan
from robo_loaders_plugin.lerobot.presets import delta_timestamps
from robo_loaders_plugin.testing import episode_aware_sampler

BIN = os.path.dirname(sys.executable)
NAMES = ["av1_1cam", "h264_3cam_multifile", "png_1cam"]


def native(root, preset="none", return_uint8=True, **kw):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    meta = LeRobotDatasetMetadata(REPO, root=root)
    return LeRobotDataset(
        REPO, root=root, delta_timestamps=delta_timestamps(preset, meta), return_uint8=return_uint8, **kw
    )


@pytest.fixture(scope="module")
def shards(lerobot_datasets, tmp_path_factory):
    base = tmp_path_factory.mktemp("lerobot_shards")
    out = {}
    for name in NAMES:  # small shards so that the multi-file dataset spans several
        out[name] = str(base / name)
        convert_lerobot(lerobot_datasets[name], out[name], repo_id=REPO, shard_bytes=200_000, progress=False)
    return out


def sampler_for(nat, drop_n_last=0, seed=3):
    """lerobot-train's sampler for ``nat`` (seed 3 unless given)."""
    return episode_aware_sampler(nat, seed=seed, drop_n_last=drop_n_last)


def one_pass(ds, dataloader):
    """One pass of what lerobot-train's cycle(dataloader) serves."""
    return list(ds.batch_source(sampling_plan(dataloader)))


def lerobot_cycle(ds, dataloader):
    """lerobot-train's (patched) cycle(dataloader), for a dataset the datapipe backend built."""
    return cycle(dataloader)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "preset,return_uint8",
    [  # fast: a quick parity check of `make test-fast`
        ("act", True),
        pytest.param("diffusion", False, marks=pytest.mark.fast),
        ("none", True),
    ],
)
def test_items_equal_lerobot_dataset(lerobot_datasets, shards, name, preset, return_uint8):
    nat = native(lerobot_datasets[name], preset, return_uint8)
    ours = serve("datapipe", nat, shards=shards[name])
    assert isinstance(ours, LeRobotShardSamples) and len(ours) == len(nat) and ours.num_episodes == nat.num_episodes
    for i in random_indices(len(nat), 300, seed=zlib.crc32(f"{name}{preset}".encode())):
        same_item(ours[i], nat[i], f"{name}/{preset}[{i}]")


def test_converted_dataset_verifies_against_its_source(lerobot_datasets, shards):
    from robo_loaders_plugin.storage.shards import ShardReader

    reader = ShardReader(shards["h264_3cam_multifile"])
    assert len(reader.shards) > 1 and len(reader.episodes) == 5
    meta = reader.dataset["metadata"]
    assert meta["framework"] == "lerobot" and meta["info"]["fps"] and meta["tasks"] and meta["stats"]
    assert verify_lerobot(shards["h264_3cam_multifile"], lerobot_datasets["h264_3cam_multifile"]) == []


@pytest.mark.parametrize("drop_n_last,batch_size,workers", [(0, 16, 0), (7, 10, 2)])
def test_training_pass_serves_the_samplers_frames_once_each_equal_to_native(
    lerobot_datasets, shards, drop_n_last, batch_size, workers
):
    """Every frame EpisodeAwareSampler would serve (drop_n_last_frames, episode filter) appears exactly once per
    pass, and each item of each pipeline batch equals LeRobotDataset's item for that frame."""
    nat = native(lerobot_datasets["h264_3cam_multifile"], "diffusion", episodes=[0, 2, 3, 4])
    ds = serve("datapipe", nat, shards=shards["h264_3cam_multifile"], shuffle_buffer=2)
    sampler = sampler_for(nat, drop_n_last)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch_size, sampler=sampler, num_workers=workers)
    batches = one_pass(ds, dl)
    a2r = nat.absolute_to_relative_idx  # the sampler yields rows of the filtered dataset; items carry `index`
    seen = [a2r[int(i)] for b in batches for i in b["index"]]
    assert len(seen) == len(sampler) and sorted(seen) == sorted(sampler.indices)
    assert len(batches) == -(-len(sampler) // batch_size)
    rng = np.random.default_rng(drop_n_last)
    for b in rng.choice(len(batches), 4, replace=False):
        rows = [a2r[int(i)] for i in batches[b]["index"]]
        expected = torch.utils.data.default_collate([nat[r] for r in rows])
        same_item(batches[b], expected, f"batch {b}")


def test_the_episode_buffer_reads_each_episode_about_once_per_pass(lerobot_datasets, shards):
    """With fewer episodes kept in memory than the pass touches, locality is the plan's doing: a buffer of 1 reads
    each of the 5 episodes about once; drawing from all 5 at once (the same cache) reads them again and again."""
    nat = native(lerobot_datasets["h264_3cam_multifile"], "act")

    def loads(shuffle_buffer):
        ds = serve("datapipe", nat, shards=shards["h264_3cam_multifile"], shuffle_buffer=shuffle_buffer)
        ds.frames.cache.capacity = 2  # fewer than the 5 episodes
        dl = torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler_for(nat), num_workers=1)
        batches = one_pass(ds, dl)
        assert sum(len(b["index"]) for b in batches) == len(nat)
        return ds.frames.cache.loads

    local, mixed = loads(1), loads(5)
    assert local <= 2 * len(nat.meta.episodes), local
    assert mixed > 5 * local, (local, mixed)


def test_passes_differ_are_seeded_and_resume_at_the_samplers_offset(lerobot_datasets, shards):
    nat = native(lerobot_datasets["av1_1cam"], "act")
    ds = serve("datapipe", nat, shards=shards["av1_1cam"])

    def first_batches(state=None, seed=3, n=3):
        sampler = sampler_for(nat, seed=seed)
        if state:
            sampler.load_state_dict(state)
        it = lerobot_cycle(ds, torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler))
        return [next(it)["index"].tolist() for _ in range(n)]

    a, b = first_batches(), first_batches()
    assert a == b and first_batches(seed=4) != a
    per_pass = -(-len(nat) // 8)
    sampler = sampler_for(nat)
    it = lerobot_cycle(ds, torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler))
    stream = [next(it)["index"].tolist() for _ in range(per_pass + 5)]
    assert sorted(i for batch in stream[:per_pass] for i in batch) == list(range(len(nat)))
    assert stream[per_pass : per_pass + 3] != stream[:3]  # the next pass is shuffled differently
    # lerobot-train's --resume: compute_sampler_state(step) -> load_state_dict -> cycle
    assert first_batches({"epoch": 1, "start_index": 2 * 8}) == stream[per_pass + 2 : per_pass + 5]


def test_two_cycles_over_one_dataloader_at_once_each_serve_every_frame_once(lerobot_datasets, shards):
    """lerobot-train's cycle(dataloader) twice over one DataLoader, consumed in turn: each stream's first pass serves
    every frame the sampler would, once (by each item's ``index``), and its batches equal LeRobotDataset's items.
    Control: two passes driving the one pipeline at once (as every pass did) miss frames."""
    from itertools import islice

    from robo_loaders_plugin.core.iteration import pass_batches

    nat = native(lerobot_datasets["av1_1cam"], "act")
    ds = serve("datapipe", nat, shards=shards["av1_1cam"], shuffle_buffer=2)
    dl = torch.utils.data.DataLoader(ds, batch_size=16, sampler=sampler_for(nat), num_workers=2)
    per_pass = -(-len(nat) // 16)
    both = list(zip(islice(lerobot_cycle(ds, dl), per_pass), islice(lerobot_cycle(ds, dl), per_pass)))
    for stream in zip(*both):
        assert sorted(int(i) for batch in stream for i in batch["index"]) == list(range(len(nat)))
        for b in (0, per_pass - 1):
            rows = [int(i) for i in stream[b]["index"]]
            same_item(stream[b], torch.utils.data.default_collate([nat[r] for r in rows]), f"batch {b}")
    source = pass_batches(dl, sampling_plan)  # the control: the one pipeline driven by two passes at once
    shared = list(zip(source.batches(5), source.batches(6)))
    served = [sorted(int(i) for batch in stream for i in batch["index"]) for stream in zip(*shared)]
    assert any(s != list(range(len(nat))) for s in served)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (pinned memory)")
def test_pinned_batches_on_cuda(lerobot_datasets, shards):
    nat = native(lerobot_datasets["av1_1cam"], "act")
    ds = serve("datapipe", nat, shards=shards["av1_1cam"])
    dl = torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler_for(nat), pin_memory=True)
    batch = next(lerobot_cycle(ds, dl))
    assert batch["action"].is_pinned() and batch["observation.images.cam0"].is_pinned()


def test_sampling_with_replacement(lerobot_datasets, shards):
    """A pass has as many frames as the sampler's, drawn with replacement (repeats), every item still LeRobot's."""
    nat = native(lerobot_datasets["av1_1cam"], "act")
    ds = serve("datapipe", nat, shards=shards["av1_1cam"], replacement=True)
    sampler = sampler_for(nat)
    batches = one_pass(ds, torch.utils.data.DataLoader(ds, batch_size=32, sampler=sampler))
    seen = np.concatenate([b["index"].numpy() for b in batches])
    assert len(seen) == len(sampler) and len(set(seen.tolist())) < 0.8 * len(seen)  # ~63% distinct expected
    assert (
        one_pass(ds, torch.utils.data.DataLoader(ds, batch_size=32, sampler=sampler_for(nat)))[0]["index"].tolist()
        == batches[0]["index"].tolist()
    )
    same_item(batches[1], torch.utils.data.default_collate([nat[int(i)] for i in batches[1]["index"]]), "batch 1")


def test_cli_parallel_convert_verify_and_damage(lerobot_datasets, tmp_path):
    root, out = lerobot_datasets["h264_3cam_multifile"], str(tmp_path / "cli")
    cli = os.path.join(BIN, "robo-loaders")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    p = subprocess.run(
        [cli, "convert", "lerobot", root, out, "--repo-id", REPO, "--num-workers", "2", "--shard-size", "100KB"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    p = subprocess.run([cli, "verify", out, "--source", root], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr[-2000:]
    shard = sorted(os.listdir(os.path.join(out, "shards")))[1]
    path = os.path.join(out, "shards", shard)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    p = subprocess.run([cli, "verify", out], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 1 and f"{shard}: SHA-256 mismatch" in p.stderr, p.stderr[-2000:]


def _edit_in_place(path, edit):
    """Change a file's content, then restore its mtime (what cp -p, rsync -t or unpacking an archive do)."""
    st = os.stat(path)
    edit(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_stale_or_mismatched_shards_are_refused(lerobot_datasets, shards, tmp_path):
    import shutil

    import pyarrow.parquet as pq

    from robo_loaders_plugin import StaleSourceError

    nat = native(lerobot_datasets["av1_1cam"])

    def serves_the_converted_items(ds, where):
        """Built (not refused), and serving the items of the dataset the shards were converted from."""
        assert len(ds) == len(nat), where
        for i in (0, 3, len(nat) - 1):
            same_item(ds[i], nat[i], f"{where}[{i}]")

    with pytest.raises(StaleSourceError, match=r"png_1cam.*does not match .*av1_1cam"):
        serve("datapipe", nat, shards=shards["png_1cam"])
    copy = tmp_path / "copy"
    shutil.copytree(lerobot_datasets["av1_1cam"], copy)
    serves_the_converted_items(serve("datapipe", native(copy), shards=shards["av1_1cam"]), "copy")  # still matches
    (copy / "meta" / "extra.txt").write_text("changed")
    with pytest.raises(StaleSourceError, match=re.escape("meta/extra.txt: added")):
        serve("datapipe", native(copy), shards=shards["av1_1cam"])
    os.unlink(copy / "meta" / "extra.txt")
    serves_the_converted_items(serve("datapipe", native(copy), shards=shards["av1_1cam"]), "extra file removed")

    video = next((copy / "videos").rglob("*.mp4"))  # re-encoded, same size: a few bytes differ

    def flip(path):
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 0x01]))

    _edit_in_place(video, flip)
    with pytest.raises(StaleSourceError, match="content digest differs"):
        serve("datapipe", native(copy), shards=shards["av1_1cam"])
    _edit_in_place(video, flip)  # flipped back: the same content again
    serves_the_converted_items(serve("datapipe", native(copy), shards=shards["av1_1cam"]), "flipped back")

    data = next((copy / "data").rglob("*.parquet"))  # one action value changed

    def change_action(path):
        table = pq.read_table(path)
        col = table.column("action").to_pylist()
        col[3] = [v + 1.0 for v in col[3]]
        pq.write_table(
            table.set_column(
                table.schema.get_field_index("action"), "action", pa.array(col, type=table.schema.field("action").type)
            ),
            path,
        )

    import pyarrow as pa

    _edit_in_place(data, change_action)
    with pytest.raises(StaleSourceError, match="does not match"):
        serve("datapipe", native(copy), shards=shards["av1_1cam"])
    # opt-out: the shards are served as converted (row 3's old action), unchecked against the edited source
    serves_the_converted_items(
        serve("datapipe", native(copy), shards=shards["av1_1cam"], check_source=False), "check_source=False"
    )
    with pytest.raises(RoboLoadersError, match="tolerance_s"):
        serve("datapipe", native(lerobot_datasets["av1_1cam"], tolerance_s=1e-5), shards=shards["av1_1cam"])


def test_a_dataset_changed_while_converted_is_withdrawn_not_published(lerobot_datasets, tmp_path, monkeypatch):
    """As for robomimic (``test_robomimic_convert``): a file of the dataset replaced while ``robo-loaders convert
    lerobot`` ran; the conversion is withdrawn (no ``index.json``, ``dataset.json``), refused in one line. Control:
    the unchanged dataset's conversion is published."""
    import shutil

    from robo_loaders_plugin import StaleSourceError
    from robo_loaders_plugin.storage.shards import executors

    copy = tmp_path / "copy"
    shutil.copytree(lerobot_datasets["av1_1cam"], copy)
    execute = executors.execute

    def replaced_meanwhile(*args, **kwargs):
        video = next((copy / "videos").rglob("*.mp4"))
        shutil.copy(video, str(video) + ".new")
        os.replace(str(video) + ".new", video)  # another file at its path (a sync tool, a re-encode)
        return execute(*args, **kwargs)

    monkeypatch.setattr(executors, "execute", replaced_meanwhile)
    out = tmp_path / "shards"
    with pytest.raises(StaleSourceError, match=r"copy changed while it was converted into .*withdrawn"):
        convert_lerobot(copy, out, repo_id=REPO, progress=False)
    assert not (out / "index.json").exists() and not (out / "dataset.json").exists()
    monkeypatch.setattr(executors, "execute", execute)
    convert_lerobot(copy, tmp_path / "control", repo_id=REPO, progress=False)
    assert (tmp_path / "control" / "index.json").exists()


def test_tables_read_while_a_data_file_was_edited_then_restored_with_its_mtime_are_read_again(
    lerobot_datasets, tmp_path, monkeypatch
):
    """A reviewer's reproduction: the data parquet edited while ``convert_lerobot`` read the tables (before any
    unit), then restored with its mtime (``cp -p``): every unit recorded the restored stat, the end-of-run check saw
    the first version's content, and shards holding the edited actions were published. The stat taken before the
    tables are read is each unit's, so the units are converted again from tables read again. Control: with no
    stat kept (the manifest naming no source files), the edited actions are published."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from robo_loaders_plugin.lerobot import convert as lerobot_convert
    from robo_loaders_plugin.storage.shards import manifest

    copy = tmp_path / "copy"
    shutil.copytree(lerobot_datasets["png_1cam"], copy)
    data = next((copy / "data").rglob("*.parquet"))
    backup = tmp_path / "backup.parquet"
    shutil.copy2(data, backup)
    read_tables = lerobot_convert.LeRobotEpisodes
    edits = []

    def edited_meanwhile(source, tolerance_s, *a, **k):
        if not edits:  # someone writes the file while the tables are read, then restores it with cp -p
            edits.append(1)
            table = pq.read_table(data)
            i = table.schema.get_field_index("action")
            shifted = pa.array([[x + 100.0 for x in row] for row in table.column(i).to_pylist()], table.field(i).type)
            pq.write_table(table.set_column(i, table.field(i), shifted), data)
            episodes = read_tables(source, tolerance_s, *a, **k)
            shutil.copy2(backup, data)
            return episodes
        return read_tables(source, tolerance_s, *a, **k)

    monkeypatch.setattr(lerobot_convert, "LeRobotEpisodes", edited_meanwhile)
    convert_lerobot(copy, tmp_path / "shards", repo_id=REPO, progress=False)
    assert edits and verify_lerobot(str(tmp_path / "shards"), copy) == []
    plan = manifest.plan
    edits.clear()
    monkeypatch.setattr(manifest, "plan", lambda *a, source_files=None, **k: plan(*a, **k))  # control: no stat kept
    convert_lerobot(copy, tmp_path / "control", repo_id=REPO, progress=False)
    assert edits and any("action" in p for p in verify_lerobot(str(tmp_path / "control"), copy))


def test_cache_dir_rebuilds_when_the_source_changes_and_retires_the_old_copy(lerobot_datasets, tmp_path, monkeypatch):
    """No options: converted into the user cache directory; a source changed in place (same size, mtime restored)
    is converted again, the new shards serve the new values, and the old copy is removed."""
    import shutil

    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "home"))
    copy = tmp_path / "copy"
    shutil.copytree(lerobot_datasets["av1_1cam"], copy)
    first = serve("datapipe", native(copy, "act"))
    dirs = [n for n in os.listdir(tmp_path / "home") if not n.startswith(".")]
    assert len(dirs) == 1 and dirs[0].startswith("lerobot-shards-")
    assert serve("datapipe", native(copy, "act")).location == first.location  # reused
    del first

    import pyarrow as pa
    import pyarrow.parquet as pq

    data = next((copy / "data").rglob("*.parquet"))

    def change_state(path):
        table = pq.read_table(path)
        col = table.column("observation.state").to_pylist()
        col[0] = [v * 0.5 for v in col[0]]
        field = table.schema.field("observation.state")
        pq.write_table(
            table.set_column(table.schema.get_field_index(field.name), field.name, pa.array(col, type=field.type)), path
        )

    _edit_in_place(data, change_state)  # mtime restored: LeRobot's own HF cache still serves the old rows...
    with pytest.raises(RoboLoadersError, match=r"column 'observation.state' differs at 1 of \d+ rows \(first: row 0"):
        serve("datapipe", native(copy, "act"))  # ...which the row check catches instead of training on either
    os.utime(data)  # an ordinary edit: LeRobot reads the new rows too
    nat = native(copy, "act")
    again = serve("datapipe", nat)
    assert os.path.basename(again.location) != dirs[0] and os.path.dirname(again.location) == str(tmp_path / "home")
    same_item(again[0], nat[0], "changed row 0")
    dirs_after = [n for n in os.listdir(tmp_path / "home") if not n.startswith(".")]
    assert dirs_after == [os.path.basename(again.location)]  # the copy of the old content is gone


def test_real_renders(shared_lerobot, tmp_path):
    """The simulator-rendered Lift dataset in ../shared (AV1, 2 cameras 84x84), converted on first use."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    repo = "local/robosuite_lift"
    meta = LeRobotDatasetMetadata(repo, root=shared_lerobot)
    nat = LeRobotDataset(repo, root=shared_lerobot, delta_timestamps=delta_timestamps("diffusion", meta))
    ours = serve("datapipe", nat, cache_dir=str(tmp_path))
    for i in random_indices(len(nat), 300, seed=6):
        same_item(ours[i], nat[i], f"shared[{i}]")


def test_conversion_resumes_after_a_killed_worker(lerobot_datasets, tmp_path, monkeypatch):
    """A converter that leased a unit and died: the next run takes the dead lease over and finishes."""
    import json

    from robo_loaders_plugin.storage.shards import manifest as units

    root, out = lerobot_datasets["av1_1cam"], str(tmp_path / "shards")
    with monkeypatch.context() as m:  # plan only: nothing converted, so nothing may be published
        m.setattr(units, "work", lambda *a, **k: 0)
        with pytest.raises(units.ShardError, match="not done yet"):
            convert_lerobot(root, out, repo_id=REPO, shard_bytes=50_000, progress=False)
    assert not os.path.exists(os.path.join(out, "index.json"))
    code = (
        "import os, sys; from robo_loaders_plugin.storage.shards import manifest as u; u.lease(sys.argv[1]); "
        "os._exit(9)"
    )
    assert subprocess.run([sys.executable, "-c", code, out]).returncode == 9
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert [u["state"] for u in manifest["units"]].count("leased") == 1 and len(manifest["units"]) > 1
    convert_lerobot(root, out, repo_id=REPO, shard_bytes=50_000, progress=False)
    assert verify_lerobot(out, root) == []


EXIT_MID_PASS = """
import sys, torch
from lerobot.datasets import EpisodeAwareSampler
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from robo_loaders_plugin.lerobot.integration import build_dataset, choose, cycle
nat = LeRobotDataset("local/sample", root=sys.argv[1], delta_timestamps={"action": [i / 20 for i in range(10)]},
                     return_uint8=True)
ds = build_dataset(nat, choose("datapipe", shards=sys.argv[2]))
sampler = EpisodeAwareSampler(nat.meta.episodes["dataset_from_index"], nat.meta.episodes["dataset_to_index"],
                              shuffle=True, seed=1)
batches = cycle(torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2))
for _ in range(3):
    next(batches)
"""


def test_a_run_that_ends_mid_pass_exits_cleanly(lerobot_datasets, shards):
    """Training ends while the pipeline's threads are still prefetching; without an orderly shutdown at exit the
    interpreter finalizes under them and the process aborts (exit 134) more often than not on this machine."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    for attempt in range(4):
        p = subprocess.run(
            [sys.executable, "-c", EXIT_MID_PASS, lerobot_datasets["av1_1cam"], shards["av1_1cam"]],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert p.returncode == 0, (attempt, p.returncode, p.stderr[-2000:])


def test_shards_converted_channels_first_serve_the_same_items_and_say_so(lerobot_datasets, shards, tmp_path, capsys):
    """Shards of an earlier version store camera frames channels first (as LeRobot serves them); read as stored,
    with one line saying so, their items equal LeRobotDataset's, as the channels-last shards' do. Negative control:
    the channels-last shards' frames read as if stored channels first give other items, which the check catches."""
    from robo_loaders_plugin.storage import frame_layout
    from robo_loaders_plugin.storage.encoded_frames import EncodedFrames
    from robo_loaders_plugin.storage.shards import ShardReader
    from robo_loaders_plugin.storage.shards import writer as shard_writer

    root = lerobot_datasets["av1_1cam"]
    old = str(tmp_path / "old")
    with pytest.MonkeyPatch.context() as m:  # what robo-loaders converted before robo-shards version 4
        m.setattr(shard_writer, "VERSION", 3)
        m.setattr(frame_layout, "stored_layout", lambda shape: None)
        convert_lerobot(root, old, repo_id=REPO, progress=False)
    assert ShardReader(old).version == 3 and ShardReader(shards["av1_1cam"]).version == 4
    capsys.readouterr()
    nat = native(root, "diffusion")
    ours = serve("datapipe", nat, shards=old)
    said = [x for x in capsys.readouterr().out.splitlines() if "stores camera frames channels first" in x]
    assert len(said) == 1 and f"{old} stores camera frames channels first (robo-shards version 3" in said[0]
    indices = random_indices(len(nat), 60, seed=11)
    for i in indices:
        same_item(ours[i], nat[i], f"old shards[{i}]")
    new = serve("datapipe", nat, shards=shards["av1_1cam"])
    assert not [x for x in capsys.readouterr().out.splitlines() if "channels first" in x]
    for i in indices:
        same_item(new[i], nat[i], f"new shards[{i}]")
    with pytest.MonkeyPatch.context() as m:  # negative control: channels-last frames read as stored as served
        m.setattr(EncodedFrames, "decode_into", _ignoring_layout(EncodedFrames.decode_into))
        wrong = serve("datapipe", native(root, "diffusion"), shards=shards["av1_1cam"])
        with pytest.raises(AssertionError, match="values differ"):
            for i in indices:
                same_item(wrong[i], nat[i], f"layout ignored[{i}]")


def _ignoring_layout(decode_into):
    def decode(self, indices, out, out_rows=None):
        layout, self.layout = self.layout, None
        try:
            decode_into(self, indices, out, out_rows)
        finally:
            self.layout = layout

    return decode


def test_the_pass_order_is_the_same_over_shards_of_another_codec(lerobot_datasets, shards, tmp_path):
    """A reviewer's reproduction: the shuffle buffer (so each pass's order) was sized from the shards' stored bytes,
    which change with the codec, its level or the compressor's version: a run resumed over the dataset converted
    again went on in another order (19 of 141 frames served twice, as many never). It is sized from the frames'
    decoded bytes (metadata; no lossless store exceeds them): the same buffer and order over either conversion.
    Control: the two conversions do store other bytes."""
    from robo_loaders_plugin.storage.codec import FrameCodec
    from robo_loaders_plugin.storage.shards import ShardReader

    name = "h264_3cam_multifile"
    other = str(tmp_path / "zstd")
    convert_lerobot(
        lerobot_datasets[name], other, repo_id=REPO, shard_bytes=200_000, progress=False,
        codec=FrameCodec(codec="zstd", level=9),
    )  # fmt: skip
    stored = [
        sum(map(ShardReader(d).episode_bytes, range(len(ShardReader(d).episodes)))) for d in (shards[name], other)
    ]
    assert stored[0] != stored[1]  # control
    nat = native(lerobot_datasets[name], "diffusion")
    orders = []
    for d in (shards[name], other):
        ds = serve("datapipe", nat, shards=d, cache_memory="5MB")
        dl = torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler_for(nat, seed=5), num_workers=1)
        orders.append((ds.passes.shuffle_buffer, ds.batch_source(sampling_plan(dl)).plan_of(0)))
    assert orders[0][0] == orders[1][0] and np.array_equal(orders[0][1], orders[1][1])


def test_feature_names_lerobot_accepts_are_converted_and_served(tmp_path):
    """A reviewer's reproduction: LeRobot accepts any feature name without '/' ('observation.gripper:pos', a camera
    'observation.images.left cam'); datapipe's conversion refused them at its first episode ("cannot be stored in a
    shard member name") where every other backend served the dataset. Escaped in member names now, every item
    LeRobot's (windows included). Control: the escaped names come back as the features' own, and a camera's frames
    are not another field's."""
    from lerobot.configs import RGBEncoderConfig
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robo_loaders_plugin.storage.shards import ShardReader

    cam, grip = "observation.images.left cam", "observation.gripper:pos"
    feats = {
        "observation.state": {"dtype": "float32", "shape": (2,), "names": None},
        "action": {"dtype": "float32", "shape": (2,), "names": None},
        cam: {"dtype": "video", "shape": (16, 32, 3), "names": ["height", "width", "channels"]},
        grip: {"dtype": "float32", "shape": (1,), "names": None},
    }
    root = tmp_path / "odd"
    ds = LeRobotDataset.create(REPO, 10, feats, root=root, rgb_encoder=RGBEncoderConfig(vcodec="h264"))
    rng = np.random.default_rng(1)
    for n in (5, 6):
        for _ in range(n):
            ds.add_frame({
                "observation.state": rng.normal(size=2).astype(np.float32),
                "action": rng.normal(size=2).astype(np.float32),
                cam: rng.integers(0, 256, (16, 32, 3), dtype=np.uint8),
                grip: np.array([rng.normal()], np.float32),
                "task": "x",
            })  # fmt: skip
        ds.save_episode()
    ds.finalize()
    nat = LeRobotDataset(REPO, root=root, delta_timestamps={cam: [-0.1, 0.0], grip: [0.0, 0.1]})
    ours = serve("datapipe", nat, cache_dir=str(tmp_path / "cache"))
    assert len(ours) == len(nat)
    for i in range(len(nat)):
        same_item(ours[i], nat[i], f"odd names[{i}]")
    out = str(tmp_path / "shards")
    convert_lerobot(root, out, repo_id=REPO, progress=False)
    stored = ShardReader(out).stored_fields(0)
    assert stored[cam] == "frames" and grip in stored and "observation.gripper%3Apos" not in stored


def test_episodes_given_as_a_numpy_array_are_served_after_an_earlier_build(lerobot_datasets, tmp_path):
    """A reviewer's reproduction: LeRobot serves ``episodes=np.array([...])``; datapipe's record of its row check
    kept them as given, so once an earlier build of the dataset had left a record, json refused the array: a bare
    TypeError at every build. Served now, every item LeRobot's, as given as numpy ints and as a list."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = lerobot_datasets["h264_3cam_multifile"]
    cache = str(tmp_path / "cache")
    serve("datapipe", native(root), cache_dir=cache)  # the earlier run: leaves the record
    picked = [int(e) for e in np.random.default_rng(0).permutation(LeRobotDataset(REPO, root=root).num_episodes)[:3]]
    for episodes in (np.array(picked), [np.int64(e) for e in picked], picked):
        nat = LeRobotDataset(REPO, root=root, episodes=episodes)
        ours = serve("datapipe", nat, cache_dir=cache)
        assert len(ours) == len(nat)
        for i in random_indices(len(nat), 40, seed=1):
            same_item(ours[i], nat[i], f"episodes {episodes!r}[{i}]")


def test_frames_decoded_by_another_torchcodec_or_ffmpeg_are_not_served_from_a_cache(
    lerobot_datasets, tmp_path, monkeypatch
):
    """A reviewer's reproduction: the caches of decoded frames (compressed_cache, datapipe, gpu_resampler) were keyed
    by the source alone, so after an upgrade of torchcodec (or a build against another FFmpeg) LeRobot decoded new
    pixels while the caches served the old ones, silently. The decoder's versions are in every key now (another
    entry is built), and given shards converted by another decoder are refused naming both. Controls: the same
    decoder reuses the entry and reads the shards."""
    from robo_loaders_plugin import StaleSourceError
    from robo_loaders_plugin.backends.datapipe import lerobot as datapipe_lerobot
    from robo_loaders_plugin.backends.gpu_resampler import lerobot as gpu_lerobot
    from robo_loaders_plugin.sources import lerobot_v3

    def upgraded(mp):
        for module in (lerobot_v3, datapipe_lerobot, gpu_lerobot):
            mp.setattr(module, "decoder_identity", lambda: "torchcodec 9.9.9, FFmpeg 9.9", raising=False)

    root = lerobot_datasets["av1_1cam"]
    for backend, options in (("compressed_cache", {}), ("datapipe", {}), ("gpu_resampler", {"device": "cpu"})):
        options = dict(options, cache_dir=str(tmp_path / backend))

        def entry(ds):  # gpu_resampler's location also says how its tiers were made (built, mapped)
            return ds.location.split()[-1]

        first = serve(backend, native(root), **options)
        assert entry(serve(backend, native(root), **options)) == entry(first), backend  # control
        with monkeypatch.context() as mp:
            upgraded(mp)
            assert entry(serve(backend, native(root), **options)) != entry(first), backend
        del first
    out = str(tmp_path / "shards")
    convert_lerobot(str(root), out, progress=False)
    serve("datapipe", native(root), shards=out)  # control
    with monkeypatch.context() as mp:
        upgraded(mp)
        with pytest.raises(StaleSourceError, match=r"were converted with decoder_version torchcodec .*, this run's is "
                           r"torchcodec 9.9.9, FFmpeg 9.9: their frames may differ"):  # fmt: skip
            serve("datapipe", native(root), shards=out)


def test_a_dataset_of_images_needs_no_decoder_and_camera_layouts_are_read_as_lerobot_reads_them(
    lerobot_datasets, tmp_path, monkeypatch
):
    """A reviewer's reproduction of this session's change: the decoder's versions were read for every LeRobot
    dataset, so a dataset of PNG images (which LeRobot serves without torchcodec) failed on every cache backend
    where torchcodec cannot be imported (not installed, or no FFmpeg). Keyed by the decoder only where there are
    videos now; and ``camera_chw`` takes the layout from names that name the channels' axis, else from the last
    dimension's size (a channels-last camera named ["height", "width", "rgb"] was taken as channels-first)."""
    import sys

    from robo_loaders_plugin.sources.lerobot_v3 import camera_chw, decoder_identity

    cases = [
        ((16, 24, 3), ["height", "width", "channels"]),
        ((3, 16, 24), ["channels", "height", "width"]),
        ((16, 24, 3), ["height", "width", "rgb"]),
        ((16, 24, 3), None),
        ((3, 16, 24), None),
    ]
    for shape, names in cases:
        assert camera_chw({"shape": shape, "names": names}) == (3, 16, 24), (shape, names)
    monkeypatch.setitem(sys.modules, "torchcodec", None)  # as if not installed
    assert decoder_identity().startswith("torchcodec unavailable (")
    root = lerobot_datasets["png_1cam"]
    for backend, options in (("compressed_cache", {}), ("gpu_resampler", {"device": "cpu"})):
        ours = serve(backend, native(root), cache_dir=str(tmp_path / backend), **options)
        same_item(ours[3], native(root)[3], backend)
