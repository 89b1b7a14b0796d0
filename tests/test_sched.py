"""A video encode leaves the calling thread's scheduling as it was (core/sched.py): SVT-AV1 run as root switched it to
real-time priority, inherited by every process started afterwards."""

import os
import subprocess
import sys
import textwrap

import pytest

ENCODE = textwrap.dedent(
    """
    import io, os, sys
    import av, numpy as np
    from robo_loaders_plugin.core.sched import kept_scheduling

    def encode():
        with av.open(io.BytesIO(), "w", format="mp4") as c:
            s = c.add_stream("libsvtav1", rate=10)
            s.width, s.height, s.pix_fmt = 64, 64, "yuv420p"
            for _ in range(3):
                c.mux(s.encode(av.VideoFrame.from_ndarray(np.zeros((64, 64, 3), np.uint8), format="rgb24")))
            c.mux(s.encode(None))

    if sys.argv[1] == "kept":
        with kept_scheduling():
            encode()
    elif sys.argv[1] == "package":  # the package's own encoder (storage/video.py), AV1
        from robo_loaders_plugin.storage.video import VideoSettings, encode as encode_frames
        encode_frames(np.zeros((3, 64, 64, 3), np.uint8), VideoSettings(codec="av1", pix_fmt="yuv420p"))
    else:
        encode()
    child = os.fork()
    if child == 0:
        os._exit(0 if os.sched_getscheduler(0) == os.SCHED_OTHER else 1)
    _, status = os.waitpid(child, 0)
    print(os.sched_getscheduler(0), os.waitstatus_to_exitcode(status))
    """
)


def run(mode: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", ENCODE, mode], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    policy, child = out.stdout.split()[-2:]
    return int(policy), int(child)


@pytest.mark.parametrize("mode", ["kept", "package"])
def test_an_av1_encode_leaves_the_thread_and_its_children_at_normal_priority(mode):
    assert run(mode) == (os.SCHED_OTHER, 0)


def test_control_without_it_svt_av1_as_root_leaves_real_time_priority():
    if os.geteuid() != 0:
        pytest.skip("SVT-AV1 raises a thread's priority only when run as root")
    policy, child = run("bare")
    assert policy == os.SCHED_FIFO and child == 1  # what every later process inherited


def test_back_to_normal_lowers_a_real_time_thread_only():
    from robo_loaders_plugin.core.sched import back_to_normal

    assert back_to_normal() is False or os.sched_getscheduler(0) == os.SCHED_OTHER
    assert os.sched_getscheduler(0) == os.SCHED_OTHER
