"""robo-loaders doctor: passes with the installed (pinned) frameworks, fails naming a patch point that moved."""
import pytest
from click.testing import CliRunner

from robo_loaders_plugin.cli import main


def test_doctor_passes_with_the_pinned_versions():
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 0, r.output
    for row in ("robomimic 0.3.0", "lerobot 0.6.", "run_epoch", "cycle", "DatasetReader._tolerance_s",
                "DataLoader draws one base seed", "torchcodec"):
        assert row in r.output, row


def test_doctor_fails_on_a_renamed_patch_point(monkeypatch):
    import robomimic.utils.train_utils as train_utils

    monkeypatch.setattr(train_utils, "run_epoch_renamed", train_utils.run_epoch, raising=False)
    monkeypatch.delattr(train_utils, "run_epoch")
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 1
    line = next(x for x in r.output.splitlines() if "train_utils.run_epoch" in x)
    assert line.startswith("FAIL") and "missing" in line and "cannot hook in" in line


def test_doctor_fails_on_a_changed_signature(monkeypatch):
    import lerobot.datasets.factory as factory

    from robo_loaders_plugin.lerobot import compat

    monkeypatch.setattr(factory, "make_dataset", lambda config, extra: None)
    monkeypatch.setitem(compat.ORIGINALS, "make_dataset", factory.make_dataset)
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 1
    line = next(x for x in r.output.splitlines() if "factory.make_dataset" in x)
    assert line.startswith("FAIL") and "expected ('cfg',)" in line


def test_doctor_proves_nvdec_by_decoding_and_names_a_cpu_only_torchcodec(monkeypatch):
    """Where torch sees a GPU, doctor decodes a clip with NVDEC instead of trusting the GPU's presence. With the
    CPU-only torchcodec installed here that decode is refused, and doctor says which build to install (a warning:
    the CPU paths still work). The probe itself decodes on the CPU in tests/test_nvdec.py."""
    import torch
    import torchcodec

    if "+cpu" not in torchcodec.__version__:
        pytest.skip(f"torchcodec {torchcodec.__version__} is a CUDA build: the refusal checked here cannot happen "
                    "(tests marked cuda check NVDEC itself)")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A100-SXM4-80GB")
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 0, r.output  # a warning, not a failure
    line = next(x for x in r.output.splitlines() if "torchcodec CUDA build" in x)
    assert line.startswith("warn") and "CPU-only build" in line and "--index-url" in line, line
    assert "NVDEC decodes av1" not in r.output  # the build is the problem to report, not the GPU's AV1 support
