"""``robo-loaders doctor``: can the installed frameworks work with this plugin, and what is missing?

Why a command: every patch and private read the plugin relies on is written against one framework version
(``robomimic.compat``, ``lerobot.compat``, ``core.torch_compat``). After an upgrade, this names the symbol that
moved instead of a traceback mid-training. Exit status 1 when a required check fails.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import textwrap

from robo_loaders_plugin.core.checks import Check


def hook_checks() -> list[Check]:
    """Rows about the start-up import hook: its ``.pth`` file is installed, and it is armed in this interpreter
    (or disabled by ``ROBO_LOADERS_DISABLE``). Warnings only: the frameworks can be patched explicitly without it.
    """
    from robo_loaders_plugin import _autopatch

    pth = os.path.join(sysconfig.get_paths()["purelib"], "robo_loaders_plugin_autopatch.pth")
    armed = any(type(f).__name__ == "_Finder" for f in sys.meta_path)
    rows = [
        Check(
            "import hook file robo_loaders_plugin_autopatch.pth",
            os.path.exists(pth),
            pth
            if os.path.exists(pth)
            else f"not in {os.path.dirname(pth)}: reinstall the package; or use "
            "'robo-loaders robomimic-train' / --dataset.discover_packages_path=robo_loaders_plugin",
            required=False,
        )
    ]
    if _autopatch.disabled():
        rows.append(
            Check(
                "import hook",
                False,
                "disabled by ROBO_LOADERS_DISABLE: robomimic and LeRobot run unmodified unless patched explicitly",
                required=False,
            )
        )
    else:
        rows.append(
            Check(
                "import hook armed in this interpreter",
                armed,
                "patches apply when robomimic/LeRobot load" if armed else "not armed: the .pth file did not run",
                required=False,
            )
        )
    return rows


def torchcodec_check() -> Check:
    """The row about torchcodec, saying which of two different fixes applies: the pip package is not installed (the
    ``[video]`` extra), or it is installed and cannot load FFmpeg's shared libraries (a system package: apt).

    Why two: doctor said ``apt-get install ffmpeg`` where the missing piece was a pip extra.

    Returns:
        An ok row, or a warning naming the one command that fixes it.
    """
    from robo_loaders_plugin.backends.requirements import TORCHCODEC
    from robo_loaders_plugin.core.checks import installed_version
    from robo_loaders_plugin.core.installs import install_command, is_installed

    module, hint = TORCHCODEC
    if not is_installed(module):
        return Check(
            "torchcodec",
            False,
            f"not installed: LeRobot video datasets need it ({install_command([hint])})",
            required=False,
        )
    try:
        import torchcodec
        from torchcodec.decoders import VideoDecoder  # noqa: F401  (loads FFmpeg's libraries)
    except Exception as exc:  # noqa: BLE001 - RuntimeError/OSError when FFmpeg's libraries are missing, or broken
        return Check(
            " ".join(filter(None, ("torchcodec", installed_version(module), "with FFmpeg"))),
            False,
            f"installed, but cannot load FFmpeg's shared libraries ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:120].rstrip(':')}): install FFmpeg 4-8 (apt-get install ffmpeg; "
            "conda install ffmpeg)",
            required=False,
        )
    return Check(f"torchcodec {torchcodec.__version__} with FFmpeg", True, "decodes LeRobot videos on the CPU")


def video_checks() -> list[Check]:
    """Rows about video decoding: torchcodec loads with FFmpeg's libraries (:func:`torchcodec_check`); whether
    torch sees CUDA; and, when it does, the NVDEC probes (:func:`nvdec_checks`). A row that fails here is a
    warning, never a doctor failure.
    """
    rows = [torchcodec_check()]
    if not rows[0].ok:
        return rows
    import torch

    if not torch.cuda.is_available():
        rows.append(
            Check(
                "CUDA / NVDEC",
                False,
                "no CUDA device visible to torch: GPU decoding and device-resident "
                "backends unavailable (the CPU paths work)",
                required=False,
            )
        )
        return rows
    names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    rows.append(Check(f"CUDA {torch.version.cuda}", True, names))
    return rows + nvdec_checks(torch.cuda.get_device_name())


def nvdec_checks(gpu_name: str) -> list[Check]:
    """NVDEC as video_stream would use it, proven by decoding (``sources.nvdec.probe``): H.264 (what
    ``robo-loaders transcode`` writes) and AV1 (LeRobot's default), against what NVIDIA's table says of this GPU.

    Args:
        gpu_name: ``torch.cuda.get_device_name()``, to explain an AV1 failure NVIDIA's table expects.

    Returns:
        Optional rows: one saying the torchcodec build is CPU-only, or one per codec.
    """
    from robo_loaders_plugin.sources.nvdec import CUDA_BUILD_HINT, lacks_av1, probe

    h264 = probe("h264", "cuda")
    if h264.detail == CUDA_BUILD_HINT:
        return [Check("torchcodec CUDA build (NVDEC)", False, CUDA_BUILD_HINT, required=False)]
    rows = [Check("NVDEC decodes h264", h264.ok, h264.detail, required=False)]
    av1 = probe("av1", "cuda")
    detail = av1.detail
    if not av1.ok and lacks_av1(gpu_name):
        detail += (
            f"; as expected: NVDEC on {gpu_name} has no AV1. Train AV1 datasets with decode_device: cpu, or "
            "from an H.264 copy (robo-loaders transcode ROOT OUT --codec h264)"
        )
    return rows + [Check("NVDEC decodes av1", av1.ok, detail, required=False)]


def all_checks() -> list[Check]:
    """Every row of ``robo-loaders doctor``: Python, torch and torchdata internals, robomimic's and LeRobot's patch
    points and private reads, "a supported framework" (required: robomimic 0.3.0 or LeRobot 0.6), the import hook,
    and video decoding.
    """
    from robo_loaders_plugin.core import torch_compat
    from robo_loaders_plugin.lerobot import compat as lerobot_compat
    from robo_loaders_plugin.robomimic import compat as robomimic_compat

    rows = [
        Check(
            f"Python {sys.version.split()[0]}",
            sys.version_info[:2] >= (3, 10),
            "LeRobot 0.6 needs 3.12" if sys.version_info[:2] < (3, 12) else "",
        )
    ]
    rows += torch_compat.checks()
    rows += robomimic_compat.checks()
    rows += lerobot_compat.checks()
    if not any(r.what.startswith(("robomimic 0", "lerobot 0")) and r.ok for r in rows):
        rows.append(Check("a supported framework", False, "neither robomimic 0.3.0 nor LeRobot 0.6 is installed"))
    return rows + hook_checks() + video_checks()


STATUS_WIDTH = 6  # "FAIL  "


def render(rows: list[Check], width: int) -> list[str]:
    """The checks as lines of at most ``width`` characters (a word longer than a line aside).

    The status and the check go on one line, the detail wrapped and indented under it: a row is its first line (it
    starts with its status) and the indented lines that follow it.

    Args:
        rows: The checks.
        width: The terminal's width (at least 40 is used).

    Returns:
        The lines, without newlines.
    """
    width = max(width, 40)
    out = []
    for r in rows:
        out += textwrap.wrap(
            r.what,
            width,
            initial_indent=f"{r.status:<{STATUS_WIDTH}}",
            subsequent_indent=" " * STATUS_WIDTH,
            break_long_words=False,
            break_on_hyphens=False,
        )
        if r.detail:
            out += textwrap.wrap(
                r.detail,
                width,
                initial_indent=" " * (STATUS_WIDTH + 2),
                subsequent_indent=" " * (STATUS_WIDTH + 2),
                break_long_words=False,
                break_on_hyphens=False,
            )
    return out
