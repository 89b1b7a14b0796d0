"""Factories are checked against their framework's protocol (``core.hookspecs.FACTORY_PROTOCOLS``) by binding the
adapters' calls to the imported factory's ``inspect.signature``: a third-party factory with a wrong signature is
refused by ``robo-loaders list`` with one line naming the plugin, backend, framework and the expected signature, not
at the first training run. The built-ins' factories are checked here (importing them would cost every listing
torch's import: ``test_backend_packages.py::test_built_in_plugins_import_nothing_heavy``) and when they build."""

import functools
import json
import os
import subprocess
import sys

import pytest

from robo_loaders_plugin.core import installs
from robo_loaders_plugin.core.factory_check import expected_signature, factory_problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PLUGIN = """
from robo_loaders_plugin.extend import SAMPLE, BackendSpec, hookimpl

@hookimpl
def robo_loaders_backends():
    return [BackendSpec(name="good_one", description="d", frameworks=("robomimic", "lerobot"), kind=SAMPLE,
                        factories={"robomimic": "proto_factories:good_robomimic",
                                   "lerobot": "proto_factories:good_lerobot"}),
            BackendSpec(name="wrong_one", description="d", frameworks=("robomimic", "lerobot"), kind=SAMPLE,
                        factories={"robomimic": "proto_factories:good_robomimic",
                                   "lerobot": "proto_factories:wrong_lerobot"})]
"""
# the factories' module imports torch at the top, as a real one may: the check imports it (listing pays torch's import)
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


def install(site, name="proto", module="proto_plugin", entry=None):
    """What ``pip install`` leaves for an entry point of the ``robo_loaders`` group: distribution ``name`` 0.1,
    entry point ``entry`` (default: ``name``) naming ``module``."""
    dist = site / f"{name}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[robo_loaders]\n{entry or name} = {module}\n")


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
        "factory(native, *, options) (the protocols: robo_loaders_plugin.extend)"
    )
    assert r["factories"], r  # the imported factory's signature, not its source
    j = run_list(tmp_path, "--json")
    assert j["code"] == 1 and "wrong_one" in j["err"]
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


def test_a_factory_that_is_not_a_def_or_does_not_import_is_refused_at_registration(tmp_path, monkeypatch):
    """What source parsing could not read (a factory assigned in its module, a method) is checked as any other,
    by its signature once imported; a module that fails to import, or lacks the name, is one line too."""
    (tmp_path / "assigned_factories.py").write_text(
        "def _make(native):\n    return 1\n\nmake = _make\n\n"
        "class Maker:\n    @staticmethod\n    def build(native, *, options):\n        return 1\n"
    )
    (tmp_path / "broken_factories.py").write_text("import no_such_module_for_this_test\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert factory_problem("assigned_factories:make", "lerobot") == (
            "factory assigned_factories:make has the signature (native); expected factory(native, *, options)"
        )
        assert factory_problem("assigned_factories:Maker.build", "lerobot") is None
        assert factory_problem("assigned_factories:missing", "lerobot") == (
            "factory 'assigned_factories:missing' cannot be imported (AttributeError: module "
            "'assigned_factories' has no attribute 'missing')"
        )
        assert factory_problem("broken_factories:f", "lerobot") == (
            "factory 'broken_factories:f' cannot be imported (ModuleNotFoundError: No module named "
            "'no_such_module_for_this_test')"
        )
    finally:
        for m in ("assigned_factories", "broken_factories"):
            sys.modules.pop(m, None)


def test_a_factory_whose_declared_modules_are_missing_is_checked_when_chosen(tmp_path, monkeypatch):
    """A factory module that needs what its backend declares missing is not imported at registration (it would
    fail on that import): the backend is listed, choosing it names what to install, and the build checks its
    signature when it imports it (``BackendSpec.factory_for``), built-ins included."""
    from robo_loaders_plugin.core import registry
    from robo_loaders_plugin.extend import SAMPLE, BackendSpec, RoboLoadersError

    (tmp_path / "needs_factories.py").write_text("def make(native):\n    return 1\n")
    spec = BackendSpec(
        name="needs",
        description="d",
        frameworks=("lerobot",),
        kind=SAMPLE,
        factories={"lerobot": "needs_factories:make"},
        requires={"lerobot": (("no_such_module_for_this_test", "pip install it"),)},
        plugin="p",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert registry._factory_refusal(spec) is None and "needs_factories" not in sys.modules
        with pytest.raises(RoboLoadersError, match=r"no_such_module_for_this_test.*pip install it"):
            spec.check_requirements("lerobot")
        with pytest.raises(
            RoboLoadersError,
            match=r"^plugin 'p': backend 'needs' refused: its lerobot factory needs_factories:make has the signature "
            r"\(native\); expected factory\(native, \*, options\)",
        ):
            spec.factory_for("lerobot")
        # control: with its modules present, registration imports and refuses it
        ok = BackendSpec(**{**spec.__dict__, "requires": {}})
        assert "needs_factories:make has the signature (native)" in registry._factory_refusal(ok)
    finally:
        sys.modules.pop("needs_factories", None)


def test_every_built_in_factory_follows_its_protocol():
    """The built-ins are not imported at registration: their signatures are held here (a wrong one is caught by
    the same check: ``test_callables_and_references``)."""
    from robo_loaders_plugin.core import registry

    checked = 0
    for spec in registry.builtin_specs():
        for framework, factory in spec.factories.items():
            if not installs.missing(spec.requires.get(framework, ())):
                assert factory_problem(factory, framework) is None, (spec.name, framework)
                checked += 1
    assert checked >= 9, checked  # native, compressed_cache, datapipe, gpu_resampler: both; video_stream
