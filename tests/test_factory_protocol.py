"""Factories are checked against their framework's protocol when the backends are registered
(``core.hookspecs.FACTORY_PROTOCOLS``): a wrong signature is refused by ``robo-loaders list`` with one line naming
the plugin, backend, framework and the expected signature, not at the first training run; and the check reads the
factory's source, so listing still imports neither torch nor the factory's module."""

import functools
import json
import os
import subprocess
import sys

import pytest

from robo_loaders_plugin.core.factory_check import expected_signature, factory_problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PLUGIN = """
from robo_loaders_plugin import SAMPLE, BackendSpec, hookimpl

@hookimpl
def robo_loaders_backends():
    return [BackendSpec(name="good_one", description="d", frameworks=("robomimic", "lerobot"), kind=SAMPLE,
                        factories={"robomimic": "proto_factories:good_robomimic",
                                   "lerobot": "proto_factories:good_lerobot"}),
            BackendSpec(name="wrong_one", description="d", frameworks=("robomimic", "lerobot"), kind=SAMPLE,
                        factories={"robomimic": "proto_factories:good_robomimic",
                                   "lerobot": "proto_factories:wrong_lerobot"})]
"""
# the factories' module imports torch at the top, as a real one does: the check must not import it
FACTORIES = """
import torch

def good_robomimic(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options):
    return None

def good_lerobot(native, *, options, extra=1):
    return None

def wrong_lerobot(native, options):  # options positional: the adapter passes it by keyword, but "native" only...
    return None

def wrong_lerobot(native):  # ...the last definition is the one imported: no options at all
    return None
"""
CODE = (
    "import json, sys\n"
    "from click.testing import CliRunner\n"
    "from robo_loaders_plugin.cli import main\n"
    "r = CliRunner().invoke(main, sys.argv[1:])\n"
    "print(json.dumps({'code': r.exit_code, 'out': r.stdout, 'err': r.stderr,\n"
    "                  'torch': 'torch' in sys.modules, 'factories': 'proto_factories' in sys.modules}))\n"
)


def install(site, name="proto", module="proto_plugin"):
    """What ``pip install`` leaves for an entry point of the ``robo_loaders`` group."""
    dist = site / f"{name}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[robo_loaders]\n{name} = {module}\n")


def run_list(site, *argv):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), ROOT] + sys.path))
    p = subprocess.run(
        [sys.executable, "-c", CODE, "list", *argv], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_wrong_factory_signature_is_refused_by_list_naming_plugin_backend_framework(tmp_path):
    install(tmp_path)
    (tmp_path / "proto_plugin.py").write_text(PLUGIN)
    (tmp_path / "proto_factories.py").write_text(FACTORIES)
    r = run_list(tmp_path)
    assert r["code"] == 1, r
    assert "good_one" in r["out"] and "wrong_one" not in r["out"]  # refused, the rest listed
    lines = [line for line in r["err"].splitlines() if line.startswith("error:")]
    assert len(lines) == 1, r["err"]
    assert lines[0] == (
        "error: plugin 'proto': backend 'wrong_one' refused: its lerobot factory "
        "proto_factories:wrong_lerobot has the signature (native); expected "
        "factory(native, *, options) (the protocol: robo_loaders_plugin/core/hookspecs.py)"
    )
    assert not r["torch"] and not r["factories"], r  # read from source: nothing imported
    j = run_list(tmp_path, "--json")
    assert j["code"] == 1 and "wrong_one" in j["err"] and not j["torch"] and not j["factories"]
    assert [d["name"] for d in json.loads(j["out"]) if d["plugin"] == "proto"] == ["good_one"]


def test_the_same_plugin_with_right_signatures_is_listed(tmp_path):
    """Positive control: with the wrong factory fixed, both backends are listed and the exit status is 0."""
    install(tmp_path)
    (tmp_path / "proto_plugin.py").write_text(PLUGIN.replace("wrong_lerobot", "good_lerobot"))
    (tmp_path / "proto_factories.py").write_text(FACTORIES)
    r = run_list(tmp_path)
    assert r["code"] == 0 and "good_one" in r["out"] and "wrong_one" in r["out"] and "error:" not in r["err"], r


def test_choosing_a_refused_backend_says_why(tmp_path, monkeypatch):
    from robo_loaders_plugin import RoboLoadersError
    from robo_loaders_plugin.core import registry

    install(tmp_path)
    (tmp_path / "proto_plugin.py").write_text(PLUGIN)
    (tmp_path / "proto_factories.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.reset_cache()
    try:
        assert "wrong_one" in registry.refused_backends() and "good_one" in registry.list_backends()
        with pytest.raises(
            RoboLoadersError,
            match=r"--dataset.backend: plugin 'proto': backend 'wrong_one' "
            r"refused: its lerobot factory",
        ):
            registry.get_backend("wrong_one", "--dataset.backend")
    finally:
        monkeypatch.undo()
        for m in ("proto_plugin", "proto_factories"):
            sys.modules.pop(m, None)
        registry.reset_cache()


def _rm(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options):
    """A robomimic factory."""


def _rm_positional_options(config, obs_keys, filter_by_attribute, dataset_path, options):
    """No defaults, options positional too: every call the adapters make binds."""


def _rm_missing_dataset_path(config, obs_keys, filter_by_attribute=None, *, options):
    """No dataset_path."""


def _lr_kwargs(native, **kwargs):
    """Takes anything by keyword."""


@pytest.mark.parametrize(
    "factory,framework,ok",
    [
        (_rm, "robomimic", True),
        (_rm_positional_options, "robomimic", True),
        (_lr_kwargs, "lerobot", True),
        (functools.partial(_rm, extra=1), "robomimic", True),
        (_rm_missing_dataset_path, "robomimic", False),
        (_rm, "lerobot", False),
        (_lr_kwargs, "robomimic", False),
        ("no_colon_here", "lerobot", False),
        ("no_such_package_anywhere.mod:f", "lerobot", False),
    ],
)
def test_callables_and_references(factory, framework, ok):
    problem = factory_problem(factory, framework)
    assert (problem is None) == ok, problem
    if not ok and callable(factory):
        assert expected_signature(framework) in problem


def test_a_factory_that_is_not_a_def_is_checked_when_imported(tmp_path, monkeypatch):
    """A factory assigned in its module cannot be read from source: it is registered, and refused with the same
    line when its module is imported (``BackendSpec.factory_for``), still before it is called."""
    from robo_loaders_plugin import SAMPLE, BackendSpec, RoboLoadersError

    (tmp_path / "assigned_factories.py").write_text("def _make(native):\n    return 1\n\nmake = _make\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert factory_problem("assigned_factories:make", "lerobot") is None  # cannot be told from source
        spec = BackendSpec(
            name="assigned",
            description="d",
            frameworks=("lerobot",),
            kind=SAMPLE,
            factories={"lerobot": "assigned_factories:make"},
            plugin="p",
        )
        with pytest.raises(
            RoboLoadersError,
            match=r"plugin 'p': backend 'assigned' refused: its lerobot factory "
            r"_make has the signature \(native\); expected "
            r"factory\(native, \*, options\)",
        ):
            spec.factory_for("lerobot")
    finally:
        sys.modules.pop("assigned_factories", None)
