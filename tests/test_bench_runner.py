"""The benchmark's child runs: each starts from an empty cache directory of its own unless asked to reuse the
user's, so no backend's first-run cost depends on what an earlier run left (issue 23, item 14)."""
import json
import os
import sys

from robo_loaders_plugin.bench.runner import run_child

CHILD = """
import json, os, sys
cache = os.environ.get("ROBO_LOADERS_CACHE")
left = sorted(os.listdir(cache)) if cache and os.path.isdir(cache) else None
open(os.path.join(cache, "left-by-this-run"), "w").close() if cache and os.path.isdir(cache) else None
json.dump({"cache": cache, "left": left, "baseline_pss_bytes": 0}, open(sys.argv[2], "w"))
"""


def test_every_run_gets_an_empty_cache_unless_reuse_is_asked(tmp_path, monkeypatch):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "cache_probe.py").write_text(CHILD)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "mods") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    user = tmp_path / "user-cache"
    user.mkdir()
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(user))
    logs = tmp_path / "logs"
    logs.mkdir()
    first = run_child("cache_probe", {}, "a", str(logs), 120)
    second = run_child("cache_probe", {}, "a", str(logs), 120)
    assert "error" not in first, first
    assert first["cache"] != str(user) and first["cache"].startswith(str(logs)) and first["left"] == []
    assert second["left"] == [] and not os.path.exists(first["cache"])  # what the first left is gone
    reused = run_child("cache_probe", {}, "b", str(logs), 120, fresh_cache=False)
    again = run_child("cache_probe", {}, "b", str(logs), 120, fresh_cache=False)
    assert reused["cache"] == str(user) and again["left"] == ["left-by-this-run"]  # negative control: reuse sees it
