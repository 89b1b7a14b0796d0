import json
import re

import pytest
from click.testing import CliRunner

import robo_loaders_plugin as rlp
from robo_loaders_plugin import BATCH, BackendOptionError, BackendSpec, Option, UnknownBackendError
from robo_loaders_plugin.cli import main


def test_builtin_backends_listed_native_first():
    names = rlp.list_backends()
    assert names[0] == "native"
    assert "compressed_cache" in names


def test_get_backend_spec_fields():
    spec = rlp.get_backend("compressed_cache")
    assert isinstance(spec, rlp.BackendSpec)
    assert spec.lossless_for("robomimic") == rlp.LOSSLESS and spec.gpu_for("robomimic") == rlp.GPU_NO
    assert "robomimic" in spec.frameworks and spec.kind_for("robomimic") == "indexed"
    assert spec.description


def test_spec_metadata_is_true_per_framework():
    """What `list --json` promises: video_stream is lossy on robomimic (video shards) and not bit-identical with
    NVDEC on LeRobot; the GPU backends say "optional"; LeRobot's compressed_cache is driven by LeRobot's
    DataLoader (a sample backend there), robomimic's by in-process threads unless loader=dataloader."""
    vs, gr, cc = (rlp.get_backend(n) for n in ("video_stream", "gpu_resampler", "compressed_cache"))
    assert vs.lossless_for("robomimic") == rlp.LOSSY_FRAMES
    assert vs.lossless_for("lerobot") == rlp.NOT_BIT_IDENTICAL_ON_NVDEC
    assert vs.gpu_for("lerobot") == rlp.GPU_OPTIONAL and vs.gpu_for("robomimic") == rlp.GPU_NO
    assert gr.gpu_for("robomimic") == gr.gpu_for("lerobot") == rlp.GPU_OPTIONAL
    assert cc.kind_for("lerobot") == "sample" and cc.kind_for("robomimic") == "indexed"
    assert rlp.get_backend("datapipe").lossless_for("lerobot") == rlp.LOSSLESS
    threads = cc.choose("robomimic", {}, "w")
    dataloader = cc.choose("robomimic", {"loader": "dataloader"}, "w")
    assert threads.kind == "indexed" and dataloader.kind == "sample"  # the choice's kind is what drives passes


def test_unknown_backend_lists_names():
    with pytest.raises(UnknownBackendError) as e:
        rlp.get_backend("nope")
    assert "native" in str(e.value) and "compressed_cache" in str(e.value)
    assert isinstance(e.value, KeyError)
    with pytest.raises(UnknownBackendError) as e:
        rlp.get_backend("datapipes", "train.data_backend")
    assert str(e.value).startswith("train.data_backend: unknown data backend 'datapipes' (did you mean 'datapipe'?)")
    with pytest.raises(UnknownBackendError) as e:
        rlp.get_backend("zzz", "train.data_backend")
    assert "did you mean" not in str(e.value)


def test_hookimpl_exported():
    import pluggy

    assert isinstance(rlp.hookimpl, pluggy.HookimplMarker)


def test_option_validation():
    spec = BackendSpec(
        name="x",
        description="d",
        frameworks=("robomimic",),
        kind=BATCH,
        options={"n": Option(int, 1, "", min=0), "s": Option((int, str), None, "")},
    )
    assert spec.choose("robomimic", {}, "w").options.as_dict() == {"n": 1, "s": None}
    assert spec.choose("robomimic", {"n": 3, "s": "2GB"}, "w").options.as_dict() == {"n": 3, "s": "2GB"}
    with pytest.raises(BackendOptionError, match="w: unknown option 'm' for backend 'x'; valid options: n, s"):
        spec.choose("robomimic", {"m": 1}, "w")
    with pytest.raises(BackendOptionError, match=r"w.n must be an integer, got str '3' \(backend 'x'\)"):
        spec.choose("robomimic", {"n": "3"}, "w")
    with pytest.raises(BackendOptionError, match="must be an integer"):
        spec.choose("robomimic", {"n": True}, "w")
    with pytest.raises(BackendOptionError, match=re.escape("w.n must be >= 0, got -1")):
        spec.choose("robomimic", {"n": -1}, "w")
    with pytest.raises(ValueError, match="kind"):
        BackendSpec(name="y", description="d", frameworks=("robomimic",), kind="weird")
    with pytest.raises(ValueError, match="unknown frameworks"):
        BackendSpec(name="y", description="d", frameworks=("tensorflow",))
    with pytest.raises(ValueError, match="must be declared as an Option"):
        BackendSpec(name="y", description="d", frameworks=("robomimic",), options={"n": (int, 1, "")})


def test_cli_list_table_and_json():
    r = CliRunner().invoke(main, ["list"])
    assert r.exit_code == 0 and "compressed_cache" in r.output and "lossless" in r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80, r.output
    r = CliRunner().invoke(main, ["list", "--json"])
    data = json.loads(r.output)
    assert {"name", "description", "frameworks", "gpu", "lossless", "kind", "options"} <= set(data[0])
    assert data[0]["name"] == "native"
    vs = next(d for d in data if d["name"] == "video_stream")
    assert vs["lossless"] == {"lerobot": rlp.NOT_BIT_IDENTICAL_ON_NVDEC, "robomimic": rlp.LOSSY_FRAMES}
    assert vs["options"]["buffer"]["values"] == "one of 'raw', 'lz4'"
    assert vs["options"]["storage_options"]["frameworks"] == ["lerobot"]


PLUGIN = """
from robo_loaders_plugin import SAMPLE, BackendSpec, hookimpl

@hookimpl
def robo_loaders_backends():
    return [BackendSpec(name="good_backend", description="d", frameworks=("robomimic",), kind=SAMPLE)]
"""


def test_a_broken_entry_point_is_skipped(tmp_path, monkeypatch):
    """One plugin failing to import must not hide the others (pluggy's loader stops at the first failure)."""
    import sys
    import warnings

    from robo_loaders_plugin.core import registry

    for name, entry in (("aaa_broken-0.1", "broken = no_such_module_anywhere"), ("zzz_good-0.1", "good = good_plugin")):
        dist = tmp_path / f"{name}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.split('-')[0]}\nVersion: 0.1\n")
        (dist / "entry_points.txt").write_text(f"[robo_loaders]\n{entry}\n")
    (tmp_path / "good_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.reset_cache()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            names = registry.list_backends()
        assert "good_backend" in names and "compressed_cache" in names
        assert any(
            "skipping plugin 'broken'" in str(w.message) and "no_such_module_anywhere" in str(w.message) for w in caught
        )
    finally:
        monkeypatch.undo()
        sys.modules.pop("good_plugin", None)
        registry.reset_cache()


def test_a_missing_dependency_names_the_extra_to_install(monkeypatch):
    """Choosing datapipe without torchdata (the [robomimic] extra alone) is one line naming the extra, before any
    data is read; a backend whose modules are present is chosen as before."""
    import importlib.util

    from robo_loaders_plugin import RoboLoadersError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchdata" else real(name, *a))
    with pytest.raises(
        RoboLoadersError,
        match=r"backend 'datapipe' needs torchdata, which is not installed: pip "
        r"install 'robo-loaders-plugin\[datapipe\]'",
    ):
        rlp.get_backend("datapipe").choose("robomimic", {}, "w")
    with pytest.raises(RoboLoadersError, match=r"video_stream' needs torchdata"):
        rlp.get_backend("video_stream").choose("lerobot", {}, "w")
    assert rlp.get_backend("gpu_resampler").choose("robomimic", {}, "w").name == "gpu_resampler"


def test_modes_without_rate_conversion_are_refused_naming_the_options():
    """Issue 23 B12: gpu_resampler's ``modes`` say how a field is read between two recorded steps, which only rate
    conversion asks for; given alone, LeRobot said "modes names ['action'] ... its fields are []" (and robomimic
    ignored them). Refused when the options are resolved, before any data is read, naming what to set."""
    spec = rlp.get_backend("gpu_resampler")
    with pytest.raises(
        BackendOptionError,
        match=r"^--dataset.backend_kwargs: modes apply to rate conversion .*none "
        r"is set: give target_fps or delta_timestamps too, or leave modes "
        r"out \(backend 'gpu_resampler'\)$",
    ):
        spec.choose("lerobot", {"modes": {"action": "previous"}}, "--dataset.backend_kwargs")
    with pytest.raises(
        BackendOptionError,
        match=r"^train.data_backend_kwargs: modes apply to rate conversion .*give "
        r"target_fps too, or leave modes out",
    ):
        spec.choose("robomimic", {"modes": {"actions": "previous"}}, "train.data_backend_kwargs")
    assert spec.choose("lerobot", {"modes": {"action": "previous"}, "target_fps": 10}, "w").options.modes
    assert spec.choose("lerobot", {"modes": {"action": "previous"}, "delta_timestamps": {"action": [0.0]}}, "w")
    assert spec.choose("robomimic", {"modes": {"actions": "previous"}, "target_fps": 10}, "w").options.modes


def test_non_finite_offsets_and_runaway_rates_are_refused_naming_the_option():
    """Issue 23 B7: ``delta_timestamps`` with NaN ended in ``IndexError: index out of range in self`` (the option not
    named); robomimic ``target_fps=1e9`` in a ``MemoryError`` allocating 52.9 GiB. Both are refused by the option
    declarations when the options are resolved, naming the option, before any data is read."""
    spec = rlp.get_backend("gpu_resampler")
    for bad in (float("nan"), float("inf")):
        with pytest.raises(
            BackendOptionError,
            match=r"^--dataset.backend_kwargs.delta_timestamps\['action'\] must "
            r"hold finite numbers of seconds",
        ):
            spec.choose("lerobot", {"delta_timestamps": {"action": [0.0, bad]}}, "--dataset.backend_kwargs")
    for framework, where in (("robomimic", "train.data_backend_kwargs"), ("lerobot", "--dataset.backend_kwargs")):
        with pytest.raises(
            BackendOptionError,
            match=rf"^{where}.target_fps must be a rate in frames per second in "
            r"\(0, 10000\], got 1000000000",
        ):
            spec.choose(framework, {"target_fps": 1e9}, where)
        with pytest.raises(BackendOptionError, match=rf"^{where}.target_fps must be a finite number, got nan"):
            spec.choose(framework, {"target_fps": float("nan")}, where)
