"""sources.nvdec: which GPUs NVIDIA's table says lack AV1 (matched as whole model names), and the decode probe,
which runs the same code on the CPU here (no GPU on these machines)."""

import pytest

from robo_loaders_plugin.sources.nvdec import lacks_av1, probe

NO_AV1 = [
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA A100 80GB PCIe",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H200",
    "NVIDIA H20",
    "NVIDIA GH200 480GB",
    "NVIDIA A30",
    "Tesla T4",
    "Tesla V100-SXM2-16GB",
    "Tesla P4",
    "Tesla P40",
    "NVIDIA GeForce RTX 2080 Ti",
    "Quadro RTX 6000",
    "NVIDIA GeForce GTX 1660 SUPER",
    "TITAN V",
]
AV1 = [
    "NVIDIA L4",
    "NVIDIA L40S",
    "NVIDIA A10G",
    "NVIDIA A40",
    "NVIDIA RTX A4000",
    "NVIDIA GeForce RTX 3090",
    "NVIDIA GeForce RTX 4090",
    "NVIDIA B200",
    "NVIDIA RTX A3000 Laptop GPU",
    "NVIDIA RTX 2000 Ada Generation",
]  # names that contain "A30" and "RTX 20"


@pytest.mark.parametrize("name", NO_AV1)
def test_gpus_without_av1_nvdec(name):
    assert lacks_av1(name)


@pytest.mark.parametrize("name", AV1)
def test_gpus_with_av1_nvdec_are_not_mistaken_for_them(name):
    assert not lacks_av1(name)


@pytest.mark.parametrize("codec", ["h264", "hevc", "av1"])
def test_the_probe_decodes_every_codec_it_is_asked_for(codec):
    p = probe(codec, "cpu")
    assert p.ok and p.detail.startswith(f"decodes {codec} (") and "dB" in p.detail, p
