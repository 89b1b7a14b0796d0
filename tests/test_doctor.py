"""robo-loaders doctor: passes with the installed (pinned) frameworks, fails naming a patch point that moved."""

import pytest
from click.testing import CliRunner

from robo_loaders_plugin.cli import main


def rows(output: str) -> list[str]:
    """doctor's rows, each one line again: a row is a line starting with its status and the indented lines after it
    (its check and detail wrapped to the terminal's width), joined, every run of spaces one space."""
    out = []
    for line in output.splitlines():
        if line.startswith(" ") and out:
            out[-1] += " " + " ".join(line.split())
        elif line.strip():
            out.append(" ".join(line.split()))
    return out


def row(output: str, text: str) -> str:
    return next(x for x in rows(output) if text in x)


def test_doctor_passes_with_the_pinned_versions():
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 0, r.output
    for text in (
        "robomimic 0.3.0",
        "lerobot 0.6.",
        "run_epoch",
        "cycle",
        "DatasetReader._tolerance_s",
        "DataLoader draws one base seed",
        "torchcodec",
    ):
        assert row(r.output, text).startswith(("ok", "warn")), text


def test_doctor_fits_the_terminal_width(monkeypatch):
    """Issue 23 B15: doctor's table (status, check, detail in columns) wrapped at 80 and 120 columns. Every line now
    fits the terminal (a path longer than a line stays whole, alone on its line): the status and the check on one
    line, the detail wrapped and indented under it, nothing lost in the wrapping."""
    from robo_loaders_plugin.doctor import STATUS_WIDTH, Check, all_checks, render

    def fits(lines, width):  # a word longer than a line (a path) stays whole, alone on its line
        return [x for x in lines if len(x) > width and len(x[STATUS_WIDTH:].split()) > 1]

    checks = all_checks()
    for width in (60, 80, 120):
        lines = render(checks, width)
        assert not fits(lines, width)
        joined = rows("\n".join(lines))
        assert len(joined) == len(checks)
        for text, check in zip(joined, checks):
            assert text == " ".join(f"{check.status} {check.what} {check.detail}".split())
    long = Check("a check " * 12, False, "a detail with a path /a/very/long/" + "x" * 90 + " in it", required=False)
    lines = render([long], 80)
    assert lines[0].startswith("warn  a check") and not fits(lines, 80), lines
    assert rows("\n".join(lines)) == [" ".join(f"warn {long.what} {long.detail}".split())]
    monkeypatch.setenv("COLUMNS", "80")
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 0 and not fits(r.output.splitlines(), 80), r.output
    monkeypatch.setenv("COLUMNS", "120")
    r = CliRunner().invoke(main, ["list"])
    assert r.exit_code == 0 and max(len(x) for x in r.output.splitlines()) <= 120, r.output


def test_doctor_fails_on_a_renamed_patch_point(monkeypatch):
    import robomimic.utils.train_utils as train_utils

    monkeypatch.setattr(train_utils, "run_epoch_renamed", train_utils.run_epoch, raising=False)
    monkeypatch.delattr(train_utils, "run_epoch")
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 1
    line = row(r.output, "train_utils.run_epoch")
    assert line.startswith("FAIL") and "missing" in line and "cannot hook in" in line


def test_doctor_fails_on_a_changed_signature(monkeypatch):
    import lerobot.datasets.factory as factory

    from robo_loaders_plugin.lerobot import compat

    monkeypatch.setattr(factory, "make_dataset", lambda config, extra: None)
    monkeypatch.setitem(compat.ORIGINALS, "make_dataset", factory.make_dataset)
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 1
    line = row(r.output, "factory.make_dataset")
    assert line.startswith("FAIL") and "expected ('cfg',)" in line


def test_doctor_proves_nvdec_by_decoding_and_names_a_cpu_only_torchcodec(monkeypatch):
    """Where torch sees a GPU, doctor decodes a clip with NVDEC instead of trusting the GPU's presence. With the
    CPU-only torchcodec installed here that decode is refused, and doctor says which build to install (a warning:
    the CPU paths still work). The probe itself decodes on the CPU in tests/test_nvdec.py."""
    import torch
    import torchcodec

    if "+cpu" not in torchcodec.__version__:
        pytest.skip(
            f"torchcodec {torchcodec.__version__} is a CUDA build: the refusal checked here cannot happen "
            "(tests marked cuda check NVDEC itself)"
        )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A100-SXM4-80GB")
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 0, r.output  # a warning, not a failure
    line = row(r.output, "torchcodec CUDA build")
    assert line.startswith("warn") and "CPU-only build" in line and "--index-url" in line, line
    assert "NVDEC decodes av1" not in r.output  # the build is the problem to report, not the GPU's AV1 support


def test_doctor_checks_the_hf_datasets_internals_on_a_real_dataset(monkeypatch):
    """Issue 31: the ``datasets`` internals the LeRobot backends read (``lerobot/compat.py``: a ``Dataset``'s
    selection ``_indices`` and its ``_fingerprint``) are doctor rows, tried on a real in-memory ``Dataset``. Negative
    controls: a ``datasets`` whose selected datasets keep their selection under another name makes the rows check
    read the unselected table (FAIL, exit 1); one without a fingerprint is a warning."""
    import datasets

    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 0, r.output
    assert row(r.output, "Dataset._indices").startswith("ok") and row(r.output, "Dataset._fingerprint").startswith("ok")
    select = datasets.Dataset.select

    def renamed(self, *args, **kwargs):  # what a datasets version that renamed the attribute looks like to the read
        picked = select(self, *args, **kwargs)
        picked.__dict__["_selection"] = picked.__dict__.pop("_indices")
        return picked

    monkeypatch.setattr(datasets.Dataset, "select", renamed)
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 1
    failed = row(r.output, "Dataset._indices")
    assert (
        failed.startswith("FAIL")
        and "the rows [13, 11] selected read as [10, 11, 12, 13]: rows cannot be compared" in failed
    )

    def no_fingerprint(self, *args, **kwargs):
        picked = select(self, *args, **kwargs)
        del picked.__dict__["_fingerprint"]
        return picked

    monkeypatch.setattr(datasets.Dataset, "select", no_fingerprint)
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 0, r.output
    assert row(r.output, "Dataset._fingerprint").startswith("warn")
    assert row(r.output, "Dataset._indices").startswith("ok")


def test_installed_versions_are_read_once_per_process(monkeypatch):
    """``importlib.metadata.version`` scans every installed distribution (~10 ms), and the in-process batch path asks
    for LeRobot's version at every pass: it is read once. Control: the uncached function reads it again."""
    import importlib.metadata

    from robo_loaders_plugin.core import checks

    real = importlib.metadata.version
    calls = []
    monkeypatch.setattr(importlib.metadata, "version", lambda name: calls.append(name) or real(name))
    checks.installed_version.cache_clear()
    try:
        first, again = checks.installed_version("torch"), checks.installed_version("torch")
        assert first == again == real("torch") and calls == ["torch"]
        assert checks.installed_version.__wrapped__("torch") == first and calls == ["torch", "torch"]
        assert checks.installed_version("not-a-distribution-here") is None
    finally:
        checks.installed_version.cache_clear()


TORCHCODEC_ROW = """
import sys
if sys.argv[1] == "not installed":
    sys.modules["torchcodec"] = None  # how Python blocks an import: an environment without the pip package
elif sys.argv[1] == "no FFmpeg":
    import torch

    def load_library(path):  # what loading torchcodec's libraries does where FFmpeg's shared libraries are missing
        raise OSError("libavutil.so.59: cannot open shared object file: No such file or directory")

    torch.ops.load_library = load_library
from robo_loaders_plugin.doctor import torchcodec_check

row = torchcodec_check()
print(row.status, row.what, "|", row.detail)
"""


@pytest.mark.parametrize(
    "case, fix, not_said",
    [
        (
            "not installed",
            'not installed: LeRobot video datasets need it (pip install "robo-loaders-plugin[video]")',
            "apt",
        ),
        ("no FFmpeg", "installed, but cannot load FFmpeg's shared libraries", "pip install"),
    ],
)
def test_doctor_tells_a_missing_pip_package_from_missing_ffmpeg_libraries(case, fix, not_said):
    """Issue 42 item 17: without torchcodec doctor said ``apt-get install ffmpeg``, where a pip extra was missing.
    A missing package names the extra; torchcodec installed but unable to load FFmpeg's libraries (its loader
    failing as dlopen fails) names the system package. Control: installed and loading, the row is ok."""
    import os
    import subprocess
    import sys

    from robo_loaders_plugin.doctor import torchcodec_check

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", TORCHCODEC_ROW, case], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("warn torchcodec") and fix in p.stdout and not_said not in p.stdout, p.stdout
    if case == "no FFmpeg":
        assert "apt-get install ffmpeg" in p.stdout
    assert torchcodec_check().ok  # the control, in this process: installed, FFmpeg's libraries load
