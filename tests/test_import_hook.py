"""The .pth import hook: installed with the package, cheap at start-up, lazy, and switchable off."""

import os
import subprocess
import sys
import sysconfig


def py(code, **env):
    e = dict(os.environ)
    e.pop("ROBO_LOADERS_DISABLE", None)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=300)


def test_pth_file_is_installed():
    site = sysconfig.get_paths()["purelib"]
    pth = os.path.join(site, "robo_loaders_plugin_autopatch.pth")
    assert os.path.exists(pth)
    assert "arm()" in open(pth).read()


def test_startup_imports_nothing_heavy():
    r = py(
        "import sys; print(sorted(m for m in ('torch', 'robomimic', 'lerobot', 'numpy', 'h5py', 'pluggy') "
        "if m in sys.modules)); print(any(type(f).__name__ == '_Finder' for f in sys.meta_path))"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["[]", "True"]


def test_disable_env_var():
    r = py("import sys; print(any(type(f).__name__ == '_Finder' for f in sys.meta_path))", ROBO_LOADERS_DISABLE="1")
    assert r.stdout.strip() == "False"


def test_robomimic_gets_plugin_keys_only_with_hook():
    code = (
        "from robomimic.config import config_factory; c = config_factory('bc'); "
        "print(c.train.get('data_backend', 'MISSING'), c.train.get('data_backend_kwargs', 'MISSING'))"
    )
    assert py(code).stdout.strip().splitlines()[-1] == "None {}"
    assert py(code, ROBO_LOADERS_DISABLE="1").stdout.strip().splitlines()[-1] == "MISSING MISSING"


def test_robomimic_prints_no_private_macro_warning():
    """Issue 23 B15: every process importing robomimic (each run, each DataLoader worker, doctor) printed robomimic's
    five-line "No private macro file found!" block. Where the user has no macros_private the hook provides an empty
    one: the block is gone and robomimic's macro defaults are unchanged; without the hook it is printed (the
    control, unless this environment has a macros_private of its own)."""
    code = "import robomimic.macros as m; print('debug', m.DEBUG)"
    r = py(code)
    assert r.returncode == 0, r.stderr
    assert "No private macro file" not in r.stdout + r.stderr and r.stdout.strip().endswith("debug False")
    control = py(
        "import importlib.util; print(importlib.util.find_spec('robomimic.macros_private') is None); " + code,
        ROBO_LOADERS_DISABLE="1",
    )
    if control.stdout.startswith("True"):
        assert "No private macro file" in control.stdout + control.stderr
