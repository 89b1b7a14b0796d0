"""robo-loaders transcode (robo_loaders_plugin/tools/transcode.py) on a tiny AV1 dataset written by LeRobot's own
writer (2 cameras, 5 episodes packed two or three per mp4, laid out differently per camera): the H.264 output loads
in plain LeRobotDataset with every camera frame within the PSNR floor of the source's and every other value
byte-identical, tables copied byte for byte, info.json telling the truth; a killed transcode re-run redoes only the
unfinished files; HEVC, sampled PSNR and the floor; the refusals."""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time

import av
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from robo_loaders_plugin.core.errors import SourceError
from robo_loaders_plugin.sources.lerobot_v3 import LeRobotV3
from robo_loaders_plugin.tools import transcode as tc

REPO = "local/sample"
LENGTHS = (24, 31, 18, 27, 22)  # 122 frames; with 20 kB video files: 2 mp4 files per camera, 2-3 episodes each
ENCODER_FIELDS = {
    "video.codec",
    "video.pix_fmt",
    "video.height",
    "video.width",
    "video.fps",
    "video.channels",
    "video.g",
    "video.crf",
    "video.preset",
    "video.fast_decode",
    "video.extra_options",
    "video.video_backend",
}


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = (a.to(torch.float64) - b.to(torch.float64)).pow(2).mean().item()
    return tc.PSNR_CAP if mse == 0 else min(tc.PSNR_CAP, 10 * np.log10(255.0**2 / mse))


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    root = write_lerobot_dataset(
        tmp_path_factory.mktemp("src") / "av1",
        repo_id=REPO,
        episode_lengths=LENGTHS,
        cameras=2,
        mode="av1",
        seed=5,
        video_files_size_in_mb=0.02,
        progress=False,
        image_size=(48, 64),
    )  # libx265 needs >= 64 px wide (the refusal is tested)
    src = LeRobotV3(root)
    files = tc.video_files(src)
    assert len(files) == 4 and all(len(f["starts"]) >= 2 for f in files.values())  # episodes packed per file
    return str(root)


@pytest.fixture(scope="module")
def transcoded(source, tmp_path_factory):
    """The command as users run it: defaults (h264), two worker processes."""
    out = str(tmp_path_factory.mktemp("out") / "h264")
    res = CliRunner().invoke(tc.transcode_cmd, [source, out, "--num-workers", "2"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "observation.images.cam0" in res.output and "mean PSNR dB" in res.output
    return out


def lerobot(root):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset(REPO, root=root)


def test_output_loads_in_lerobot_with_frames_within_the_psnr_floor_and_everything_else_identical(source, transcoded):
    theirs, ours = lerobot(source), lerobot(transcoded)
    assert len(ours) == len(theirs) == sum(LENGTHS)
    cams = ours.meta.camera_keys
    assert cams == ["observation.images.cam0", "observation.images.cam1"]
    own, neighbour = {c: [] for c in cams}, {c: [] for c in cams}
    src_frames = {c: [] for c in cams}
    for i in range(len(theirs)):
        a, b = theirs[i], ours[i]
        assert list(a) == list(b)
        for k, v in a.items():
            if k in cams:
                assert b[k].shape == v.shape and b[k].dtype == v.dtype
                p = psnr(b[k], v)
                assert p >= tc.DEFAULT_MIN_PSNR, f"item {i} {k}: {p:.2f} dB < floor {tc.DEFAULT_MIN_PSNR}"
                own[k].append(p)
                src_frames[k].append(v)
            elif isinstance(v, torch.Tensor):
                assert b[k].dtype == v.dtype and torch.equal(b[k], v), f"item {i} {k} differs"
            else:
                assert b[k] == v, f"item {i} {k}: {b[k]!r} != {v!r}"
    # the right frame, not a neighbour: each output frame is much closer to its own source frame than to the next
    for k in cams:
        for i in range(len(theirs) - 1):
            if int(theirs[i]["episode_index"]) == int(theirs[i + 1]["episode_index"]):
                neighbour[k].append(psnr(ours[i][k], src_frames[k][i + 1]))
        assert np.mean(own[k]) > np.mean(neighbour[k]) + 3, (k, np.mean(own[k]), np.mean(neighbour[k]))

    # tables byte for byte; info.json differs only in the video features' encoder fields, which tell the truth
    rel = sorted(os.path.relpath(os.path.join(d, f), source) for d, _, fs in os.walk(source) for f in fs)
    tables = [r for r in rel if not r.startswith("videos") and r != os.path.join("meta", "info.json")]
    assert tables and all(
        open(os.path.join(source, r), "rb").read() == open(os.path.join(transcoded, r), "rb").read() for r in tables
    )
    src_info = json.load(open(os.path.join(source, "meta", "info.json")))
    out_info = json.load(open(os.path.join(transcoded, "meta", "info.json")))
    assert list(out_info) == list(src_info) and list(out_info["features"]) == list(src_info["features"])
    assert {k: v for k, v in out_info.items() if k != "features"} == {
        k: v for k, v in src_info.items() if k != "features"
    }
    for key, ft in src_info["features"].items():
        got = out_info["features"][key]
        assert {k: v for k, v in got.items() if k != "info"} == {k: v for k, v in ft.items() if k != "info"}
        if ft["dtype"] != "video":
            assert got == ft
            continue
        changed = {k for k in set(got["info"]) | set(ft["info"]) if got["info"].get(k) != ft["info"].get(k)}
        assert changed <= ENCODER_FIELDS and "video.codec" in changed
        assert got["info"]["video.codec"] == "h264" and got["info"]["video.pix_fmt"] == "yuv420p"
        assert (got["info"]["video.g"], got["info"]["video.crf"]) == (tc.DEFAULT_GOP, tc.DEFAULT_CRF["h264"])

    # every output file: H.264 yuv420p, the source's frame timestamps, a keyframe at each episode's first frame
    out_src = LeRobotV3(transcoded)
    for rel_path, f in tc.video_files(out_src).items():
        with av.open(os.path.join(source, rel_path)) as a, av.open(os.path.join(transcoded, rel_path)) as b:
            sa, sb = a.streams.video[0], b.streams.video[0]
            assert (sb.codec_context.name, sb.pix_fmt) == ("h264", "yuv420p")
            pa = sorted(float(p.pts * sa.time_base) for p in a.demux(sa) if p.size)
            pb = {float(p.pts * sb.time_base): p.is_keyframe for p in b.demux(sb) if p.size}
        assert sorted(pb) == pa
        for start in f["starts"]:
            assert pb[min(pb, key=lambda t: abs(t - start))], f"{rel_path}: no keyframe at episode start {start}"
    # nothing left behind but the state directory
    leftovers = [r for d, _, fs in os.walk(transcoded) for r in fs if r.endswith(tc.TMP_SUFFIX) or ".tmp-" in r]
    assert leftovers == []
    report = json.load(open(os.path.join(transcoded, tc.STATE_DIR, tc.REPORT)))
    assert report["psnr_frames"] == "all"
    for key, row in report["cameras"].items():
        assert row["compared"] == row["frames"] == sum(LENGTHS)
        assert tc.DEFAULT_MIN_PSNR <= row["psnr_min"] <= min(own[key]) + 1e-6  # all frames: at least the items'


def test_video_stream_trains_from_the_transcode_byte_identical_to_lerobot_dataset(transcoded):
    """What the transcode is for: the H.264 copy is what video_stream (and NVDEC) decode; its CPU-decoded items
    equal LeRobotDataset's on the same copy, byte for byte, including windows across episode starts."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
    from lerobot_helpers import same_item, serve

    from robo_loaders_plugin.lerobot.presets import delta_timestamps

    meta = LeRobotDatasetMetadata(REPO, root=transcoded)
    nat = LeRobotDataset(REPO, root=transcoded, delta_timestamps=delta_timestamps("diffusion", meta), return_uint8=True)
    ours = serve("video_stream", nat)
    for i in (0, 1, 23, 24, 25, 54, 55, 80, len(nat) - 1):  # episode starts and ends, inside, the last frame
        same_item(ours[i], nat[i], f"transcode[{i}]")


KILLED_RUN = textwrap.dedent("""
    import os, sys
    from robo_loaders_plugin.tools import transcode as tc

    src, out = sys.argv[1:3]
    calls = []
    compare = tc.compare

    def dies_on_the_third_file(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == 3:  # two files kept, the third encoded under its temporary name: the run is killed
            os._exit(9)
        return compare(*args, **kwargs)

    tc.compare = dies_on_the_third_file
    tc.transcode(src, out, progress=False)
""")


def test_a_killed_transcode_is_resumed_redoing_only_the_unfinished_files(source, tmp_path, monkeypatch):
    out = str(tmp_path / "out")
    p = subprocess.run([sys.executable, "-c", KILLED_RUN, source, out], capture_output=True, text=True, timeout=120)
    assert p.returncode == 9, p.stderr[-3000:]
    with open(os.path.join(out, tc.STATE_DIR, "manifest.json")) as f:
        units = json.load(f)["units"]
    assert [u["state"] for u in units] == ["done", "done", "leased", "planned"]
    names = [u["episodes"][0] for u in units]
    assert os.path.exists(os.path.join(out, names[2] + tc.TMP_SUFFIX))  # the half-done file, never renamed
    assert not os.path.exists(os.path.join(out, names[2])) and not os.path.exists(os.path.join(out, names[3]))
    with pytest.raises(SourceError, match=re.escape("meta/info.json not found")):  # a partial OUT is not a dataset
        LeRobotV3(out)
    kept = {n: (os.stat(os.path.join(out, n)).st_ino, os.stat(os.path.join(out, n)).st_mtime_ns) for n in names[:2]}

    encoded = []
    real_encode = tc._encode
    monkeypatch.setattr(tc, "_encode", lambda src, *a, **k: encoded.append(src) or real_encode(src, *a, **k))
    report = tc.transcode(source, out, progress=False)
    assert encoded == [os.path.join(os.path.realpath(source), n) for n in names[2:]]  # only the unfinished files
    assert {
        n: (os.stat(os.path.join(out, n)).st_ino, os.stat(os.path.join(out, n)).st_mtime_ns) for n in names[:2]
    } == kept
    assert not os.path.exists(os.path.join(out, names[2] + tc.TMP_SUFFIX))
    assert [f["name"] for f in report["files"]] == names
    assert all(f["psnr_min"] >= tc.DEFAULT_MIN_PSNR for f in report["files"])
    ds = lerobot(out)
    assert len(ds) == sum(LENGTHS) and ds[len(ds) - 1]["observation.images.cam1"].shape == (3, 48, 64)

    # run again once finished: nothing is encoded, the same dataset is published
    encoded.clear()
    info = open(os.path.join(out, "meta", "info.json"), "rb").read()
    assert tc.transcode(source, out, progress=False)["cameras"] == report["cameras"]
    assert encoded == [] and open(os.path.join(out, "meta", "info.json"), "rb").read() == info


def test_a_source_changed_while_transcoded_is_withdrawn_and_transcoded_again(source, tmp_path, monkeypatch):
    """A reviewer's reproduction: a source video replaced midway gave an OUT mixed from two versions (each file was
    compared with the source at its own turn), published, and accepted again by the same command once the first
    version was back with its mtime. The source is fingerprinted again after the run: changed, OUT is withdrawn (no
    meta/info.json) and every file planned again. Control: the rerun on the unchanged source encodes every file and
    publishes."""
    from robo_loaders_plugin.core.errors import StaleSourceError

    src = str(tmp_path / "src")
    shutil.copytree(source, src)
    out = str(tmp_path / "out")
    touched = os.path.join(src, sorted(tc.video_files(LeRobotV3(src)))[-1])
    mtime = os.stat(touched).st_mtime_ns
    encoded = []
    real_encode = tc._encode

    def changed_meanwhile(path, *a, **k):
        if not encoded:
            os.utime(touched, ns=(mtime + 10**9, mtime + 10**9))  # as a replacement of that file does
        encoded.append(path)
        return real_encode(path, *a, **k)

    monkeypatch.setattr(tc, "_encode", changed_meanwhile)
    with pytest.raises(StaleSourceError, match=r"changed while it was transcoded into .*withdrawn"):
        tc.transcode(src, out, progress=False)
    assert not os.path.exists(os.path.join(out, "meta", "info.json"))
    os.utime(touched, ns=(mtime, mtime))  # the first version back, mtime and all
    encoded.clear()
    monkeypatch.setattr(tc, "_encode", lambda path, *a, **k: encoded.append(path) or real_encode(path, *a, **k))
    report = tc.transcode(src, out, progress=False)
    assert len(encoded) == len(report["files"]) == 4 and os.path.exists(os.path.join(out, "meta", "info.json"))


def test_a_file_rewritten_while_encoded_and_put_back_with_its_mtime_is_encoded_again(source, tmp_path, monkeypatch):
    """A reviewer's reproduction: a camera's video swapped for another recording's while it was encoded, then put
    back with its mtime (``cp -p``), was published from the other recording: the end-of-run check compares names,
    sizes, mtimes and content, all equal again. Each file's encoding now records the stat of the source's files it
    was read under (ctime and inode too), and a file encoded under another stat is encoded again before publishing.
    Here the file is rewritten in place while encoded (its ctime moves) and its mtime set back (the stat is the
    source's files' together: the files encoded before the rewrite are encoded again too)."""
    src = str(tmp_path / "src")
    shutil.copytree(source, src)
    out = str(tmp_path / "out")
    touched = os.path.join(src, sorted(tc.video_files(LeRobotV3(src)))[-1])
    encoded = []
    real_encode = tc._encode

    def rewritten_meanwhile(path, *a, **k):
        got = real_encode(path, *a, **k)
        if os.path.realpath(path) == os.path.realpath(touched) and path not in encoded:
            st = os.stat(touched)
            data = open(touched, "rb").read()
            with open(touched, "r+b") as f:  # in place, as a copy onto it does: the inode kept, the ctime moved
                f.write(data)
            os.utime(touched, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back
        encoded.append(path)
        return got

    monkeypatch.setattr(tc, "_encode", rewritten_meanwhile)
    report = tc.transcode(src, out, progress=False)
    assert os.path.exists(os.path.join(out, "meta", "info.json"))
    again = [p for p in encoded if os.path.realpath(p) == os.path.realpath(touched)]
    assert len(again) == 2, encoded  # encoded again under the files' stat at publishing
    assert len(report["files"]) == 4  # every file published (those encoded before the rewrite encoded again too)


@pytest.mark.timeout(120)
def test_a_worker_process_killed_by_a_signal_fails_the_run_instead_of_hanging_and_a_rerun_resumes(source, tmp_path):
    """A worker that dies without returning (the OOM killer, or libx265 aborting the process on frames under 64 px
    wide, as it did before those were refused) used to leave multiprocessing.Pool waiting forever for its result."""
    import multiprocessing
    import signal
    import threading

    from robo_loaders_plugin.storage.shards.format import ShardError

    out = str(tmp_path / "out")
    killed, stop = [], threading.Event()
    before = {p.pid for p in multiprocessing.active_children()}

    def kill_a_worker():  # the first worker process of this run seen holding a unit (a video file) it works on
        manifest_json = os.path.join(out, tc.STATE_DIR, "manifest.json")
        while not stop.is_set() and not killed:
            children = {p.pid for p in multiprocessing.active_children()} - before
            with contextlib.suppress(OSError, ValueError):  # not written yet, or being replaced
                with open(manifest_json) as f:
                    holders = {u["lease"]["pid"] for u in json.load(f)["units"] if u["state"] == "leased"}
                for pid in holders & children:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    break
            time.sleep(0.01)

    killer = threading.Thread(target=kill_a_worker, daemon=True)
    killer.start()
    try:
        with pytest.raises(
            ShardError,
            match=r"a worker process \(pid \d+\) was killed by signal SIGKILL; the units "
            "it held are free again: run the same command again to resume",
        ):
            tc.transcode(source, out, num_workers=2, progress=False)
    finally:
        stop.set()
        killer.join()
    assert len(killed) == 1 and {p.pid for p in multiprocessing.active_children()} <= before  # none left running
    with open(os.path.join(out, tc.STATE_DIR, "manifest.json")) as f:
        assert {u["state"] for u in json.load(f)["units"]} <= {"planned", "leased", "done"}
    report = tc.transcode(source, out, progress=False)  # the same command again: finishes what was left
    assert len(report["files"]) == 4 and all(f["psnr_min"] >= tc.DEFAULT_MIN_PSNR for f in report["files"])
    assert len(lerobot(out)) == sum(LENGTHS)


def test_hevc_with_sampled_psnr_on_the_datatrove_executor(source, tmp_path):
    pytest.importorskip("datatrove")
    out = str(tmp_path / "hevc")
    report = tc.transcode(
        source,
        out,
        codec="hevc",
        psnr_frames=5,
        num_workers=2,
        executor="datatrove-local",
        executor_options={"logging_dir": str(tmp_path / "logs")},
        progress=False,
    )
    assert report["psnr_frames"] == 5 and all(f["compared"] == 5 for f in report["files"])
    info = json.load(open(os.path.join(out, "meta", "info.json")))
    for key in ("observation.images.cam0", "observation.images.cam1"):
        assert info["features"][key]["info"]["video.codec"] == "hevc"
        assert report["cameras"][key]["psnr_min"] >= tc.DEFAULT_MIN_PSNR
    theirs, ours = lerobot(source), lerobot(out)
    for i in (0, 23, 24, 60, len(ours) - 1):  # first/last frames of episodes, one inside
        for k in ours.meta.camera_keys:
            assert psnr(ours[i][k], theirs[i][k]) >= tc.DEFAULT_MIN_PSNR
        assert torch.equal(ours[i]["action"], theirs[i]["action"])


def test_a_file_below_the_psnr_floor_is_not_kept(source, tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(tc.TranscodeError, match=r"below --min-psnr 32 .*lower --crf \(now 51\)"):
        tc.transcode(source, out, crf=51, min_psnr=32, progress=False)
    assert not [f for d, _, fs in os.walk(os.path.join(out, "videos")) for f in fs]  # neither output nor temporary
    assert not os.path.exists(os.path.join(out, "meta", "info.json"))
    with open(os.path.join(out, tc.STATE_DIR, "manifest.json")) as f:
        assert {u["state"] for u in json.load(f)["units"]} == {"planned"}  # given back: a re-run encodes it


def test_refusals(source, transcoded, tmp_path, monkeypatch):
    # OUT is something else
    other = tmp_path / "not-a-transcode"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(tc.TranscodeError, match="is not empty and is not a transcode"):
        tc.transcode(source, str(other), progress=False)
    assert os.listdir(other) == ["notes.txt"]
    # OUT is a transcode of this ROOT with other options (nothing is touched)
    before = {n: os.stat(os.path.join(transcoded, n)).st_mtime_ns for n in ("meta/info.json", "meta/stats.json")}
    with pytest.raises(tc.TranscodeError, match=r"with other options: crf 18 \(asked 30\)"):
        tc.transcode(source, transcoded, crf=30, progress=False)
    with pytest.raises(tc.TranscodeError, match=r"codec 'h264' \(asked 'hevc'\)"):
        tc.transcode(source, transcoded, codec="hevc", crf=18, progress=False)
    # ... or of another dataset (here: ROOT copied and changed)
    changed = tmp_path / "changed"
    shutil.copytree(source, changed)
    with open(changed / "meta" / "stats.json", "a") as f:
        f.write(" ")
    with pytest.raises(tc.TranscodeError, match="is a transcode of another dataset"):
        tc.transcode(str(changed), transcoded, progress=False)
    assert {n: os.stat(os.path.join(transcoded, n)).st_mtime_ns for n in before} == before
    # a preset typo: refused before OUT records it (it failed in the worker, and the corrected command was refused)
    typo = str(tmp_path / "typo")
    with pytest.raises(tc.TranscodeError, match=r"--preset 'veryslw': must be one of ultrafast"):
        tc.transcode(source, typo, preset="veryslw", progress=False)
    assert not os.path.exists(typo)
    res = CliRunner().invoke(tc.transcode_cmd, [source, typo, "--preset", "veryslw"])
    assert res.exit_code == 2 and "Invalid value for '--preset'" in res.output and not os.path.exists(typo)
    # OUT where nothing can be written (an OSError traceback before)
    with pytest.raises(tc.TranscodeError, match=r"OUT /proc/nope/out: cannot create"):
        tc.transcode(source, "/proc/nope/out", progress=False)
    # OUT inside ROOT
    with pytest.raises(tc.TranscodeError, match="overlap"):
        tc.transcode(source, os.path.join(source, "h264"), progress=False)
    # ROOT is not a LeRobot v3 dataset
    with pytest.raises(SourceError, match="not a LeRobot v3 dataset root"):
        tc.transcode(str(other), str(tmp_path / "o1"), progress=False)
    old = tmp_path / "v21"
    shutil.copytree(os.path.join(source, "meta"), old / "meta")
    info = json.load(open(old / "meta" / "info.json"))
    info["codebase_version"] = "v2.1"
    (old / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(SourceError, match=re.escape("a LeRobot v2.1 dataset; transcode reads the v3.0 format")):
        tc.transcode(str(old), str(tmp_path / "o2"), progress=False)
    # frames too narrow for libx265 (which would abort the process): refused before anything is written
    narrow = tmp_path / "narrow"
    shutil.copytree(source, narrow)
    info = json.load(open(narrow / "meta" / "info.json"))
    info["features"]["observation.images.cam1"]["info"]["video.width"] = 48
    (narrow / "meta" / "info.json").write_text(json.dumps(info))
    height = info["features"]["observation.images.cam1"]["info"]["video.height"]
    with pytest.raises(
        tc.TranscodeError,
        match=rf"observation.images.cam1 is 48x{height}; libx265 cannot encode frames narrower than 64 .*"
        "--codec h264",
    ):
        tc.transcode(str(narrow), str(tmp_path / "o5"), codec="hevc", progress=False)
    # ... or too low (every height below 16: a worker failed, and OUT was left with the failed options; a reviewer's)
    info["features"]["observation.images.cam1"]["info"].update({"video.width": 96, "video.height": 12})
    (narrow / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(tc.TranscodeError, match=r"cam1 is 96x12; libx265 cannot encode .* lower than 16 pixels"):
        tc.transcode(str(narrow), str(tmp_path / "o6"), codec="hevc", progress=False)
    # an odd size, which yuv420p (the output's format) cannot hold: a PyAV traceback from a worker, for both codecs
    info["features"]["observation.images.cam1"]["info"].update({"video.width": 85, "video.height": 83})
    (narrow / "meta" / "info.json").write_text(json.dumps(info))
    for codec in ("h264", "hevc"):
        with pytest.raises(tc.TranscodeError, match=rf"cam1 is 85x83; the transcode writes yuv420p, which {codec}"):
            tc.transcode(str(narrow), str(tmp_path / "o7"), codec=codec, progress=False)
    # --min-psnr nan: every comparison with it false, so no floor, said nowhere
    with pytest.raises(tc.TranscodeError, match=r"--min-psnr nan: must be a number of dB >= 0"):
        tc.transcode(source, str(tmp_path / "o8"), min_psnr=float("nan"), progress=False)
    # an encoder the installed FFmpeg lacks
    monkeypatch.setitem(tc.ENCODERS, "hevc", "libx265_absent")
    with pytest.raises(
        tc.TranscodeError,
        match="needs the libx265_absent encoder, which the FFmpeg of the installed "
        r"PyAV .* does not have \(H.264/HEVC encoders it has: .*libx264",
    ):
        tc.transcode(source, str(tmp_path / "o3"), codec="hevc", progress=False)
    for name in ("o1", "o2", "o3", "o5", "o6", "o7", "o8"):
        assert not os.path.exists(tmp_path / name)  # refused before anything was written
    # on the command line
    res = CliRunner().invoke(tc.transcode_cmd, [source, str(other)])
    assert isinstance(res.exception, tc.TranscodeError)
    res = CliRunner().invoke(tc.transcode_cmd, [source, str(tmp_path / "o4"), "--psnr-frames", "0"])
    assert res.exit_code == 2 and "'all' or a number of frames" in res.output
    with contextlib.suppress(FileNotFoundError):
        assert not os.listdir(tmp_path / "o4")


def test_an_output_of_the_earlier_version_is_not_transcoded_again(source, tmp_path, monkeypatch):
    """A reviewer's reproduction: an OUT transcoded by the previous robo-loaders (its manifest without the source's
    files or each file's stat) was transcoded again whole by the next run, warning of a stat change that never
    happened. Its done files are trusted as that version trusted them (the content digest, unchanged). Control: a
    rerun on this version's OUT encodes nothing either."""
    from robo_loaders_plugin.storage.shards import manifest

    src = str(tmp_path / "src")
    shutil.copytree(source, src)
    out = str(tmp_path / "out")
    tc.transcode(src, out, progress=False)
    encoded = []
    real_encode = tc._encode
    monkeypatch.setattr(tc, "_encode", lambda path, *a, **k: encoded.append(path) or real_encode(path, *a, **k))
    tc.transcode(src, out, progress=False)
    assert encoded == []  # control
    state = os.path.join(out, tc.STATE_DIR)
    with manifest._locked(state):  # as the earlier version wrote it
        m = manifest._read(state)
        m.pop("source_files")
        for u in m["units"]:
            u.pop("source_stat")
        manifest._write(state, m)
    tc.transcode(src, out, progress=False)
    assert encoded == []
