import json

import pytest
from click.testing import CliRunner

import robo_loaders_plugin as rlp
from robo_loaders_plugin.cli import main
from robo_loaders_plugin import BATCH, BackendOptionError, BackendSpec, UnknownBackendError


def test_builtin_backends_listed_native_first():
    names = rlp.list_backends()
    assert names[0] == "native"
    assert "compressed_cache" in names


def test_get_backend_spec_fields():
    spec = rlp.get_backend("compressed_cache")
    assert isinstance(spec, rlp.BackendSpec)
    assert spec.lossless and not spec.needs_gpu and "robomimic" in spec.frameworks and spec.kind == "indexed"
    assert spec.description


def test_unknown_backend_lists_names():
    with pytest.raises(UnknownBackendError) as e:
        rlp.get_backend("nope")
    assert "native" in str(e.value) and "compressed_cache" in str(e.value)
    assert isinstance(e.value, KeyError)


def test_hookimpl_exported():
    import pluggy

    assert isinstance(rlp.hookimpl, pluggy.HookimplMarker)


def test_option_validation():
    spec = BackendSpec(name="x", description="d", frameworks=("robomimic",), kind=BATCH,
                       options={"n": (int, 1, ""), "s": ((int, str), None, "")})
    assert spec.validate_options({}, "w") == {"n": 1, "s": None}
    assert spec.validate_options({"n": 3, "s": "2GB"}, "w") == {"n": 3, "s": "2GB"}
    with pytest.raises(BackendOptionError, match="unknown option.*'m'.*valid options: n, s"):
        spec.validate_options({"m": 1}, "w")
    with pytest.raises(BackendOptionError, match="'n' of backend 'x' must be int"):
        spec.validate_options({"n": "3"}, "w")
    with pytest.raises(BackendOptionError, match="must be int"):
        spec.validate_options({"n": True}, "w")
    with pytest.raises(ValueError, match="kind"):
        BackendSpec(name="y", description="d", frameworks=("robomimic",), kind="weird")
    with pytest.raises(ValueError, match="unknown frameworks"):
        BackendSpec(name="y", description="d", frameworks=("tensorflow",))


def test_cli_list_table_and_json():
    r = CliRunner().invoke(main, ["list"])
    assert r.exit_code == 0 and "compressed_cache" in r.output and "lossless" in r.output
    r = CliRunner().invoke(main, ["list", "--json"])
    data = json.loads(r.output)
    assert {"name", "description", "frameworks", "needs_gpu", "lossless"} <= set(data[0])
    assert [d["name"] for d in data][0] == "native"


PLUGIN = '''
from robo_loaders_plugin import SAMPLE, BackendSpec, hookimpl

@hookimpl
def robo_loaders_backends():
    return [BackendSpec(name="good_backend", description="d", frameworks=("robomimic",), kind=SAMPLE)]
'''


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
        assert any("skipping plugin 'broken'" in str(w.message) and "no_such_module_anywhere" in str(w.message)
                   for w in caught)
    finally:
        monkeypatch.undo()
        sys.modules.pop("good_plugin", None)
        registry.reset_cache()
