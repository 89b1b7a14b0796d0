"""One package per built-in backend, registered through the entry-point group a third party uses, and no generic
module naming a backend, in its code or, in the layers below ``backends/``, in its prose.

Why: a backend's code spread over the layers (its placement in the store cache, its tiers among the frame sources,
its name in a generic module's branch) is what made the layout show layers instead of backends. The layers keep
what two or more backends share; only the backend packages, and the tools that choose backends by name as a user
does (``cli.py``, ``bench/``: which backends to measure, their colours in a plot), may say a backend's name. A
layer below the backends that names one in a docstring, comment or message ("the datapipe backend's pipeline", "a
backend that writes nothing (video_stream)") describes a backend instead of what it shares, and goes stale when
that backend changes.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import os
import re
import tomllib

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


with open(os.path.join(os.path.dirname(PACKAGE), "pyproject.toml"), "rb") as _f:
    _PYPROJECT = tomllib.load(_f)
# the package's extras: "robo-loaders-plugin[datapipe,video]" names an extra, not a backend
EXTRAS = set(_PYPROJECT["project"]["optional-dependencies"])


def layers_below_backends() -> list[str]:
    """The packages and modules of the layers below ``backends`` in the layer contract (pyproject.toml's
    ``[tool.importlinter]``), top to bottom: the framework adapters, the shared layers, core."""
    contract = next(c for c in _PYPROJECT["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    layers = contract["layers"]
    below = layers[layers.index("backends") + 1 :]
    return [name.strip() for layer in below for name in re.split(r"[|:]", layer)]


def backend_names_in_prose(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every line of ``source`` that names a built-in backend other than the default one, in
    any form: code, a docstring, a comment, a message (an extra of the package in brackets aside: ``[datapipe]``).
    The default backend is the framework's own loader, which the layers below the backends serve themselves
    (``core.spec.DEFAULT_BACKEND``)."""
    names = re.compile(r"\b(" + "|".join(sorted(NAMED)) + r")\b")
    extra = "(?:" + "|".join(sorted(EXTRAS)) + ")"
    extras = re.compile(rf"\[\s*{extra}(?:\s*,\s*{extra})*\s*\]")
    return [(i, line.strip()) for i, line in enumerate(source.splitlines(), 1) if names.search(extras.sub("[]", line))]


def test_no_layer_below_the_backends_names_one_in_its_prose():
    """Docstrings, comments and messages of the layers below ``backends/`` name no backend (the code check above
    covers code only). Measurements quoted in them moved to docs/benchmarks.md, *Measurements behind the code*."""
    layers = layers_below_backends()
    assert {"robomimic", "lerobot", "mixtures", "pipeline", "windows", "frames", "sources", "storage", "core"} <= set(
        layers
    ), layers
    found, read = [], 0
    for layer in layers:
        top = os.path.join(PACKAGE, *layer.split("."))
        paths = [top + ".py"] if os.path.isfile(top + ".py") else []
        for d, dirs, files in os.walk(top):
            dirs[:] = [n for n in dirs if n != "__pycache__"]
            paths += [os.path.join(d, n) for n in files if n.endswith(".py")]
        for path in paths:
            read += 1
            with open(path) as f:
                hits = backend_names_in_prose(f.read())
            found += [f"{os.path.relpath(path, PACKAGE)}:{line}: {text}" for line, text in hits]
    assert read > 80, read  # the walk reads the layers' modules
    assert not found, (
        "layers below the backends name a backend in their prose (say what the layer shares, or name the backends "
        "from the registry in a message; measurements go to docs/benchmarks.md):\n" + "\n".join(found)
    )


def test_the_prose_scan_catches_a_backend_named_in_prose():
    """Negative control: a backend named in a docstring, a comment or a message is caught (each line reported
    once); an extra of the package, the default backend and the English words around the names are not."""
    docstring = '"""The datapipe pipeline."""\n'
    assert backend_names_in_prose(docstring) == [(1, docstring.strip())]
    assert [n for n, _ in backend_names_in_prose("x = 1\n# gpu_resampler's tiers\n")] == [2]
    assert backend_names_in_prose('raise E("or a backend that writes nothing (video_stream)")\n')
    assert backend_names_in_prose("``compressed_cache`` at a million frames sent 0.4 MB\n")
    assert backend_names_in_prose('pip install "robo-loaders-plugin[video_stream]"\n')  # not an extra
    assert not backend_names_in_prose('pip install "robo-loaders-plugin[datapipe,video]"; asked for ``[datapipe]``\n')
    assert not backend_names_in_prose('"""Served as the native loader serves it; ``native`` first; datapipes."""\n')


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
            if isinstance(factory, functools.partial):  # a frame store the SDK serves: the store lives there
                assert factory.keywords["store"].startswith(f"robo_loaders_plugin.backends.{name}."), factory
                continue
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
