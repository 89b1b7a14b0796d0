"""``robo-loaders`` imports a command's modules only when that command runs (issue 31 item 8): ``list``, ``doctor``
and the others do not import ``robo_loaders_plugin.bench`` (the benchmark runner and the report's plots and
tables) nor the transcoder. Each check runs in a fresh interpreter, where ``sys.modules`` shows what was imported."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def imported_by(*argv: str) -> set[str]:
    """The package's modules imported by ``import robo_loaders_plugin.cli`` and running ``robo-loaders ARGV`` (its
    exit status 0), in a fresh interpreter."""
    code = (
        "import json, sys\n"
        "from click.testing import CliRunner\n"
        "from robo_loaders_plugin.cli import main\n"
        f"r = CliRunner().invoke(main, {list(argv)!r}, catch_exceptions=False)\n"
        "assert r.exit_code == 0, r.output\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('robo_loaders_plugin'))))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT] + sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_list_does_not_import_bench_or_the_transcoder():
    mods = imported_by("list")
    assert "robo_loaders_plugin.cli" in mods and "robo_loaders_plugin.core.registry" in mods  # list ran
    assert not {m for m in mods if m == "robo_loaders_plugin.bench" or m.startswith("robo_loaders_plugin.bench.")}
    assert "robo_loaders_plugin.tools.transcode" not in mods
    # negative control: the check sees the imports of the commands that need them
    assert {"robo_loaders_plugin.bench", "robo_loaders_plugin.bench.plots"} <= imported_by("report", "--help")
    assert "robo_loaders_plugin.tools.transcode" in imported_by("transcode", "--help")


def test_the_lazy_commands_are_listed_and_run():
    from click.testing import CliRunner

    from robo_loaders_plugin.cli import LAZY_COMMANDS, main

    r = CliRunner().invoke(main, ["--help"])
    assert r.exit_code == 0 and all(f"  {name} " in r.output for name in LAZY_COMMANDS), r.output
    r = CliRunner().invoke(main, ["report"])  # the real command's usage error, not "No such command"
    assert r.exit_code == 2 and "Missing argument 'RESULTS...'" in r.output, r.output
    r = CliRunner().invoke(main, ["nope"])
    assert r.exit_code == 2 and "No such command 'nope'" in r.output
