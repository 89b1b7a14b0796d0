import json
import re
import sys

import pytest
from click.testing import CliRunner

from robo_loaders_plugin import extend as rlp
from robo_loaders_plugin.cli import main
from robo_loaders_plugin.extend import BATCH, BackendOptionError, BackendSpec, Option, UnknownBackendError


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
    NVDEC on LeRobot; the GPU backends say "optional"; compressed_cache is driven by in-process threads in both
    frameworks unless loader=dataloader (LeRobot's default where image transforms draw random numbers)."""
    vs, gr, cc = (rlp.get_backend(n) for n in ("video_stream", "gpu_resampler", "compressed_cache"))
    assert vs.lossless_for("robomimic") == rlp.LOSSY_FRAMES
    assert vs.lossless_for("lerobot") == rlp.NOT_BIT_IDENTICAL_ON_NVDEC
    assert vs.gpu_for("lerobot") == rlp.GPU_OPTIONAL and vs.gpu_for("robomimic") == rlp.GPU_NO
    assert gr.gpu_for("robomimic") == gr.gpu_for("lerobot") == rlp.GPU_OPTIONAL
    assert cc.kind_for("lerobot") == cc.kind_for("robomimic") == "indexed"
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
from robo_loaders_plugin.extend import SAMPLE, BackendSpec, hookimpl

@hookimpl
def robo_loaders_backends():
    return [BackendSpec(name="good_backend", description="d", frameworks=("robomimic",), kind=SAMPLE)]
"""


def test_a_broken_entry_point_is_skipped(tmp_path, monkeypatch):
    """One plugin failing to import must not hide the others (pluggy's loader stops at the first failure)."""
    import warnings

    from test_factory_protocol import install

    from robo_loaders_plugin.core import registry

    install(tmp_path, "aaa_broken", "no_such_module_anywhere", entry="broken")
    install(tmp_path, "zzz_good", "good_plugin", entry="good")
    (tmp_path / "good_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.reset_cache()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            names = registry.list_backends()
        assert "good_backend" in names and "compressed_cache" in names
        assert any(
            "plugin 'broken' (entry point 'broken = no_such_module_anywhere' of distribution aaa_broken 0.1) "
            "skipped: it failed to load"
            in str(w.message)
            and "no_such_module_anywhere" in str(w.message)
            for w in caught
        )
    finally:
        monkeypatch.undo()
        sys.modules.pop("good_plugin", None)
        registry.reset_cache()


# Issue 42 item 8: third-party plugins that are wrong in each way a registration can be, beside a good one. Each
# module's hook is marked with {order} (pluggy calls tryfirst hooks first, trylast ones last, the others in reverse
# order of registration: after the built-ins, before them or between): none may take the built-ins down.
_SPEC = 'BackendSpec(name="{}", description="d", frameworks=("robomimic",), kind=SAMPLE)'
_HEAD = (
    "from robo_loaders_plugin.extend import SAMPLE, BackendSpec, hookimpl\n\n"
    "@hookimpl{order}\ndef robo_loaders_backends():\n"
)
BAD = {  # distribution: (entry point, its module's hook body, what the line says is wrong, a backend it declares)
    "junk": ("junk", f"    return [{_SPEC.format('junk_extra')}, 42]", "returned 42 (int) at position 1", "junk_extra"),
    "shadow": (
        "shadow",
        f"    return [{_SPEC.format('native')}, {_SPEC.format('shadow_extra')}]",
        "it declares backend 'native', a built-in backend's name",
        "shadow_extra",
    ),
    "dpname": (
        "datapipe",
        f"    return [{_SPEC.format('dp_fast')}]",
        "entry-point name 'datapipe' is a built-in",
        "dp_fast",
    ),
    "raising": (
        "raising",
        "    raise RuntimeError('boom')",
        "robo_loaders_backends() raised RuntimeError('boom')",
        None,
    ),
    "noreturn": ("noreturn", "    specs = []", "returned None (a missing return?)", None),  # its return forgotten
    "badname": (  # a reviewer's finding: accepted, and unusable on a command line
        "badname",
        f"    return [{_SPEC.format('bad name!')}]",
        "it declares backend 'bad name!', not a backend name",
        None,
    ),
}
FIXED = {  # the same plugins, right: the control
    "junk": f"    return [{_SPEC.format('junk_extra')}]",
    "shadow": f"    return [{_SPEC.format('shadow_native')}, {_SPEC.format('shadow_extra')}]",
    "raising": f"    return [{_SPEC.format('raising_extra')}]",
    "badname": f"    return [{_SPEC.format('bad-name.ok_1')}]",
    "noreturn": f"    return [{_SPEC.format('noreturn_extra')}]",
    "twin_b": f"    return [{_SPEC.format('twin_b')}]",
}
TWINS = {"twin_a": f"    return [{_SPEC.format('twin')}]", "twin_b": f"    return [{_SPEC.format('twin')}]"}


def _install_plugins(site, order="", fixed=False):
    """The bad plugins, the two plugins declaring one backend name and the good one, installed in ``site`` as ``pip
    install`` leaves them; ``fixed``: the same plugins right (``dpname`` under its own entry-point name)."""
    from test_factory_protocol import install

    plugins = {dist: (entry, body) for dist, (entry, body, _, _) in BAD.items()}
    plugins.update({dist: (dist, body) for dist, body in TWINS.items()})
    for dist, (entry, body) in plugins.items():
        install(site, dist, f"{dist}_plugin", entry=dist if fixed else entry)
        (site / f"{dist}_plugin.py").write_text(_HEAD.format(order=order) + (FIXED.get(dist, body) if fixed else body))
    install(site, "good", "good_plugin")
    (site / "good_plugin.py").write_text(PLUGIN)


def _forget_plugins():
    from robo_loaders_plugin.core import registry

    for module in [f"{d}_plugin" for d in (*BAD, *TWINS, "good")]:
        sys.modules.pop(module, None)
    registry.reset_cache()


@pytest.mark.parametrize("order", ["", "(tryfirst=True)", "(trylast=True)"])
def test_a_bad_plugin_is_skipped_in_one_line_and_every_other_backend_works(tmp_path, monkeypatch, order):
    """A plugin returning something that is not a BackendSpec, declaring a built-in's name (before or after the
    built-ins are asked), registered under a built-in's entry-point name, or whose hook raises: each is skipped
    with one line naming its entry point and distribution and what is wrong; choosing one of its backends says so.
    Two plugins declaring one name: that backend is refused (which one served depended on the installation order).
    The built-ins, ``native`` (``data_backend: null``) and the good plugin keep working. Before: ``native`` and
    every other backend failed (``robo-loaders list`` exited 2), and the ``datapipe`` entry point was skipped
    without a word."""
    import warnings

    from robo_loaders_plugin import RoboLoadersError
    from robo_loaders_plugin.core import registry

    _install_plugins(tmp_path, order)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.reset_cache()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            names = registry.list_backends()
        builtins = ["native", "compressed_cache", "datapipe", "gpu_resampler", "video_stream"]
        assert set(builtins) | {"good_backend"} <= set(names) and not {"junk_extra", "twin"} & set(names), names
        assert registry.get_backend("native").plugin == registry.get_backend("datapipe").plugin == "builtin"
        for framework, name in (("robomimic", "native"), ("lerobot", "native"), ("robomimic", "compressed_cache")):
            assert registry.choose_backend(framework, name, None, name_where="w", options_where="o").name == name
        rejected = registry.rejected_plugins()
        assert sorted(rejected) == sorted(entry for entry, _, _, _ in BAD.values()), rejected
        warned = [str(w.message) for w in caught]
        for dist, (entry, _, wrong, declared) in BAD.items():
            line = rejected[entry]
            assert line.startswith(
                f"plugin '{entry}' (entry point '{entry} = {dist}_plugin' of distribution {dist} 0.1) skipped: "
            ), line
            assert wrong in line and "\n" not in line, line
            assert [w for w in warned if line in w] == [f"robo-loaders: {line}"]  # warned once
            if declared:  # choosing its backend says why it is unavailable
                with pytest.raises(RoboLoadersError, match=re.escape(f"train.data_backend: {line}")):
                    registry.get_backend(declared, "train.data_backend")
        twin = registry.refused_backends()["twin"]
        assert twin.startswith("backend 'twin' refused: declared by plugin 'twin_a' (entry point 'twin_a = ") and (
            "plugin 'twin_b'" in twin
        )
        with pytest.raises(RoboLoadersError, match="backend 'twin' refused"):
            registry.get_backend("twin")
    finally:
        monkeypatch.undo()
        _forget_plugins()


def test_the_same_plugins_right_are_listed(tmp_path, monkeypatch):
    """Control: fixed, every plugin is registered and nothing is skipped or refused (one of the twins alone
    serves its name)."""
    from robo_loaders_plugin.core import registry

    _install_plugins(tmp_path, fixed=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.reset_cache()
    try:
        names = registry.list_backends()
        wanted = {"junk_extra", "shadow_native", "shadow_extra", "dp_fast", "raising_extra", "twin", "twin_b"}
        wanted.add("bad-name.ok_1")
        assert wanted | {"native", "good_backend"} <= set(names), names
        assert not registry.rejected_plugins() and not registry.refused_backends()
        assert registry.get_backend("twin").plugin == "twin_a"
    finally:
        monkeypatch.undo()
        _forget_plugins()


def test_robo_loaders_list_shows_the_working_backends_and_one_line_per_bad_plugin(tmp_path):
    """``robo-loaders list`` (and ``--json``): every working backend, then one ``error:`` line per skipped plugin or
    refused backend, exit status 1 (an installation check must see that a plugin does not work). Control: the same
    plugins fixed, exit status 0 and no error line."""
    from test_factory_protocol import run_list

    _install_plugins(tmp_path)
    r = run_list(tmp_path)
    assert r["code"] == 1, r
    for name in ("native", "compressed_cache", "datapipe", "video_stream", "good_backend"):
        assert name in r["out"], r["out"]
    errors = r["err"].splitlines()
    assert len(errors) == len(BAD) + 1 and all(e.startswith("error: ") for e in errors), r["err"]  # no warnings too
    assert sum(f"error: plugin '{entry}' (entry point" in r["err"] for entry, _, _, _ in BAD.values()) == len(BAD)
    j = run_list(tmp_path, "--json")
    listed = [d["name"] for d in json.loads(j["out"])]
    assert j["code"] == 1 and "native" in listed and "good_backend" in listed and "junk_extra" not in listed

    fixed = tmp_path / "fixed"
    fixed.mkdir()
    _install_plugins(fixed, fixed=True)
    r = run_list(fixed)
    assert r["code"] == 0 and not r["err"] and "dp_fast" in r["out"] and "twin_b" in r["out"], r


def test_every_missing_dependency_is_named_in_one_line_with_one_pip_command(monkeypatch):
    """Choosing a backend whose modules are missing is one line naming every one of them and the one pip command
    that installs their extras, before any data is read (issue 42 item 17: ``video_stream`` asked for
    ``[datapipe]``, then, once installed, for ``[video]``). Modules are blocked as Python blocks an import (``None``
    in ``sys.modules``). Controls: one missing names its extra alone; with the modules present the backend is
    chosen."""
    import sys

    from robo_loaders_plugin import RoboLoadersError

    monkeypatch.setitem(sys.modules, "torchdata", None)
    monkeypatch.setitem(sys.modules, "torchcodec", None)
    with pytest.raises(RoboLoadersError) as caught:
        rlp.get_backend("video_stream").choose("lerobot", {}, "--dataset.backend_kwargs")
    assert str(caught.value) == (
        "backend 'video_stream' needs torchdata and torchcodec, which are not installed: "
        'pip install "robo-loaders-plugin[datapipe,video]"'
    )
    monkeypatch.delitem(sys.modules, "torchcodec")
    with pytest.raises(RoboLoadersError) as caught:
        rlp.get_backend("datapipe").choose("robomimic", {}, "w")
    assert str(caught.value) == (
        "backend 'datapipe' needs torchdata, which is not installed: pip install \"robo-loaders-plugin[datapipe]\""
    )
    assert rlp.get_backend("gpu_resampler").choose("robomimic", {}, "w").name == "gpu_resampler"
    monkeypatch.delitem(sys.modules, "torchdata")
    assert rlp.get_backend("video_stream").choose("lerobot", {}, "w").name == "video_stream"
    # robomimic's video shards are decoded by torchcodec too (storage.video.decode), encoded by PyAV
    monkeypatch.setitem(sys.modules, "torchcodec", None)
    with pytest.raises(RoboLoadersError) as caught:
        rlp.get_backend("video_stream").choose("robomimic", {}, "w")
    assert str(caught.value) == (
        "backend 'video_stream' needs torchcodec, which is not installed: pip install \"robo-loaders-plugin[video]\""
    )
    monkeypatch.delitem(sys.modules, "torchcodec")
    assert rlp.get_backend("video_stream").choose("robomimic", {}, "w").name == "video_stream"


def test_install_hints_of_one_package_merge_into_one_command():
    """Extras of one package in one pair of brackets, whatever quotes a hint used; a hint of another form (a
    third-party backend's) kept whole after it."""
    from robo_loaders_plugin.core.installs import install_command

    assert install_command(['pip install "p[a]"', "pip install 'p[b]'", 'pip install "p[a]"', "apt-get install x"]) == (
        'pip install "p[a,b]"; apt-get install x'
    )
    assert install_command(["pip install x"]) == "pip install x"


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


@pytest.mark.parametrize("backend", ["datapipe", "video_stream"])
def test_a_negative_seed_is_refused_naming_the_option(backend):
    """A reviewer's reproduction: ``seed: -1`` was accepted and failed at the first batch with numpy's "expected
    non-negative integer", naming neither the option nor the backend. Refused when the options are resolved.
    Control: 0 is a seed."""
    from robo_loaders_plugin import BackendOptionError
    from robo_loaders_plugin.core import registry

    with pytest.raises(BackendOptionError, match=r"^o\.seed must be >= 0, got -1"):
        registry.choose_backend("robomimic", backend, {"seed": -1}, name_where="w", options_where="o")
    assert registry.choose_backend("robomimic", backend, {"seed": 0}, name_where="w", options_where="o").name == backend
