"""One package per built-in backend, registered through the entry-point group a third party uses, and no generic
module naming a backend.

Why: a backend's code spread over the layers (its placement in the store cache, its tiers among the frame sources,
its name in a generic module's branch) is what made the layout show layers instead of backends. The layers keep
what two or more backends share; only the backend packages, and the tools that choose backends by name as a user
does (``cli.py``, ``bench/``: which backends to measure, their colours in a plot), may say a backend's name.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os

import robo_loaders_plugin as rlp
from robo_loaders_plugin.core import registry
from robo_loaders_plugin.core.spec import DEFAULT_BACKEND

PACKAGE = os.path.dirname(rlp.__file__)
BUILTINS = ("native", "compressed_cache", "datapipe", "gpu_resampler", "video_stream")
NAMED = set(BUILTINS) - {DEFAULT_BACKEND}
# consumers that pick backends by name, as a user's command line does
CONSUMERS = ("backends", "bench", "cli.py")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def backend_names_in(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every code-level mention of a built-in backend's name in ``source``: an identifier, an
    attribute, or a string constant that is not a docstring (comments and docstrings may explain); the default
    backend's name only as the exact string."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            words = set(node.value.replace("'", " ").replace('"', " ").replace("=", " ").replace(":", " ").split())
            if words & NAMED or node.value == DEFAULT_BACKEND:
                hits.append((node.lineno, node.value))
        elif isinstance(node, ast.Name) and node.id in NAMED:
            hits.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in NAMED:
            hits.append((node.lineno, node.attr))
    return hits


def test_no_generic_module_names_a_backend():
    found = []
    for d, _dirs, files in os.walk(PACKAGE):
        rel_dir = os.path.relpath(d, PACKAGE)
        if rel_dir.split(os.sep)[0] in CONSUMERS:
            continue
        for name in files:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if not name.endswith(".py") or rel in CONSUMERS:
                continue
            with open(os.path.join(d, name)) as f:
                source = f.read()
            hits = backend_names_in(source)
            if rel == os.path.join("core", "spec.py"):  # where DEFAULT_BACKEND is defined, once
                hits = [h for h in hits if h[1] != DEFAULT_BACKEND]
            found += [f"{rel}:{line}: {text!r}" for line, text in hits]
    assert not found, (
        "generic modules name a backend (move the code into robo_loaders_plugin/backends/<name>/, or "
        "pass the name in from there):\n" + "\n".join(found)
    )


def test_the_scan_catches_a_backend_named_in_code():
    """Negative control: each way a generic module could name a backend is caught; prose is not."""
    assert backend_names_in('if backend == "datapipe":\n    pass\n')
    assert backend_names_in('label = "gpu_resampler: spilled"\n')
    assert backend_names_in("x = opts.video_stream\n")
    assert backend_names_in('name = "native"\n')
    assert backend_names_in('f"{flag} compressed_cache={{}}"\n')
    assert not backend_names_in('"""The datapipe backend, explained."""\n# gpu_resampler in a comment\nnative = 1\n')
    assert not backend_names_in('msg = "the native loader serves it"\n')


def test_builtins_register_through_the_entry_point_group():
    ours = {
        ep.name: ep.value
        for ep in importlib.metadata.entry_points(group="robo_loaders")
        if ep.dist is not None and ep.dist.metadata["Name"] == registry.BUILTIN_DISTRIBUTION
    }
    assert ours == {name: f"robo_loaders_plugin.backends.{name}" for name in BUILTINS}
    pm = registry.get_plugin_manager()
    for name in BUILTINS:
        plugin = pm.get_plugin(name)
        assert plugin is not None and plugin.__name__ == f"robo_loaders_plugin.backends.{name}"
        spec = registry.get_backend(name)
        assert spec.plugin == registry.BUILTIN
        for framework, factory in spec.factories.items():  # a backend's factories live in its own package
            assert factory == f"robo_loaders_plugin.backends.{name}.{framework}:{factory.split(':')[1]}", factory
    assert [s.name for s in registry.builtin_specs()] == sorted(BUILTINS, key=lambda n: (n != DEFAULT_BACKEND, n))


def test_built_in_plugins_import_nothing_heavy():
    """Listing backends imports each built-in's package: it must not pull torch, Blosc2 or a framework."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom robo_loaders_plugin.core import registry\nregistry.list_backends()\n"
        "print(sorted(m for m in ('torch', 'blosc2', 'robomimic', 'lerobot', 'torchdata') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
