"""``robo_loaders_plugin.extend`` is the whole API a third-party backend needs, and the one public surface: every
name it exports (the lazily loaded ones included) is documented in its docstring, the contracts a backend
implements too (the hook, the factory protocols, ``FrameSource``, ``FieldInfo``); each is defined once in the
package, the root's names are extend's objects, and the SDK extend is built on imports nothing from it; no public
signature or ``Returns:`` section reachable from it names a private type (one a backend author could only find by
reading a private module)."""

import ast
import dataclasses
import inspect
import os
import re
import warnings

import pytest

import robo_loaders_plugin
from robo_loaders_plugin import extend, testing

PACKAGE = os.path.dirname(robo_loaders_plugin.__file__)


def private_class_names() -> set[str]:
    """Every class defined at the top level of a package module, less those the public modules export."""
    names = set()
    for d, dirs, files in os.walk(PACKAGE):
        dirs[:] = [n for n in dirs if n != "__pycache__"]
        for n in files:
            if n.endswith(".py"):
                with open(os.path.join(d, n)) as f:
                    names |= {c.name for c in ast.parse(f.read()).body if isinstance(c, ast.ClassDef)}
    public = set(extend.__all__) | set(robo_loaders_plugin.__all__) | {n for n in dir(testing) if n[:1].isupper()}
    return {n for n in names if not n.startswith("_")} - public


def returns_section(doc: str) -> str:
    """The text of a Google-style ``Returns:`` section (up to the next section or the end)."""
    m = re.search(
        r"^\s*Returns:\s*\n(.*?)(?=^\s*(?:Raises|Args|Yields|Attributes|Example\w*):|\Z)", doc or "", re.S | re.M
    )
    return m.group(1) if m else ""


def members(name: str, obj) -> list[tuple[str, object]]:
    """``(qualified name, function)`` of a function, or of a class's public methods and properties defined in
    this package (inherited ones included: they are reachable from the exported class)."""
    if inspect.isfunction(obj):
        return [(name, obj)]
    if not inspect.isclass(obj):
        return []
    out = [(name, obj)]
    for cls in obj.__mro__:
        if not cls.__module__.startswith("robo_loaders_plugin"):
            continue
        for attr, value in vars(cls).items():
            if attr.startswith("_") and attr != "__init__":
                continue
            fn = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
            if inspect.isfunction(fn):
                out.append((f"{name}.{attr}", fn))
    return out


def problems_of(name: str, fn, private: set[str]) -> list[str]:
    texts = [returns_section(inspect.getdoc(fn) or "")]
    if inspect.isfunction(fn):
        texts += [
            a if isinstance(a, str) else getattr(a, "__name__", str(a))
            for a in getattr(fn, "__annotations__", {}).values()
        ]
    found = sorted({w for t in texts for w in re.findall(r"\b[A-Z]\w+", t) if w in private})
    return [f"{name}: names private {found}"] if found else []


def undocumented_names(doc: str, names) -> list[str]:
    """The names of ``names`` that ``doc`` does not document (as ````name````, ``:class:``, ``:func:``, ``:data:``)."""
    forms = ("``{}``", ":class:`{}`", ":func:`{}`", ":data:`{}`")
    return [n for n in names if not any(form.format(n) in doc for form in forms)]


def test_every_exported_name_is_documented_in_extends_docstring():
    assert not undocumented_names(extend.__doc__, extend.__all__)


def test_the_doc_check_catches_an_undocumented_name():
    """Negative control: a name the docstring does not document is reported; one it documents is not."""
    assert undocumented_names(extend.__doc__, ["FrameStore", "NotDocumentedAnywhere"]) == ["NotDocumentedAnywhere"]


def contract_terms() -> list[str]:
    """What extend's docstring must state of the contracts a backend implements, read from the code that declares
    them: every hook (its name), each factory protocol's call (``factory(...)`` with its signature), every public
    method of ``FrameSource`` and its ``lengths``, and ``FieldInfo``'s fields in order."""
    from robo_loaders_plugin.core import hookspecs
    from robo_loaders_plugin.frames.base import FieldInfo, FrameSource

    hooks = [n for n, f in vars(hookspecs).items() if hasattr(f, f"{hookspecs.PROJECT_NAME}_spec")]
    assert hooks == ["robo_loaders_backends"], hooks  # the walk finds the hook
    methods = [n for n, f in vars(FrameSource).items() if callable(f) and not n.startswith("_")]
    assert {"info", "take", "gather", "gather_fields"} <= set(methods), methods
    return (
        [f"``{n}" for n in hooks]
        + [f"factory{inspect.signature(p)}" for p in (hookspecs.robomimic_factory, hookspecs.lerobot_factory)]
        + [f"``{n}(" for n in methods]
        + ["``lengths``", f"FieldInfo({', '.join(f.name for f in dataclasses.fields(FieldInfo))})"]
    )


def test_the_contracts_are_documented_in_extend():
    """An author reads the hook, the factory protocols, ``FrameSource`` and ``FieldInfo`` in extend, not in the
    private modules declaring them (``core/hookspecs.py``, ``frames/base.py``)."""
    missing = [t for t in contract_terms() if t not in extend.__doc__]
    assert not missing, missing


def test_the_contract_check_catches_a_missing_term():
    """Negative control: extend's docstring without ``take``, or with another protocol signature, fails the check."""
    doc = extend.__doc__.replace("``take(", "``put(").replace("dataset_path=None, *, options)", "*, options)")
    missing = [t for t in contract_terms() if t not in doc]
    assert "``take(" in missing and any(t.startswith("factory(config") for t in missing), missing


# -- one public surface: each name defined once, the root's names extend's, no sdk -> extend import ----------------
# Names extend exports that a second module still defines, each with why; the check fails once one is defined once
# (remove it from here then).
DEFINED_TWICE: dict[str, str] = {}


def top_level_definitions(sources: dict[str, str]) -> dict[str, list[str]]:
    """``{name: [module, ...]}`` of every name a module defines at its top level (``def``, ``class``, an assignment,
    also inside a top-level ``if``/``try``); imports are not definitions (a re-export is the same object).

    Args:
        sources: ``{module path: source}``.
    """
    found: dict[str, list[str]] = {}

    def names(node) -> list[str]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return [node.name]
        if isinstance(node, ast.Assign):
            targets = node.targets
        else:
            targets = [node.target] if isinstance(node, ast.AnnAssign) else []
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]

    def visit(body, module):
        for node in body:
            if isinstance(node, (ast.If, ast.Try)):
                visit(node.body + node.orelse + getattr(node, "finalbody", []), module)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body, module)
            for name in names(node):
                found.setdefault(name, []).append(module)

    for module, source in sources.items():
        visit(ast.parse(source).body, module)
    return found


def package_sources() -> dict[str, str]:
    out = {}
    for d, dirs, files in os.walk(PACKAGE):
        dirs[:] = [n for n in dirs if n != "__pycache__"]
        for n in files:
            if n.endswith(".py"):
                with open(os.path.join(d, n)) as f:
                    out[os.path.relpath(os.path.join(d, n), PACKAGE)] = f.read()
    return out


def defined_twice(defs: dict[str, list[str]], names) -> dict[str, list[str]]:
    """The names of ``names`` defined in more than one module."""
    return {n: sorted(defs.get(n, [])) for n in names if len(defs.get(n, [])) > 1}


def test_every_name_extend_exports_is_defined_once():
    """``ROBOMIMIC_OPTIONS``/``LEROBOT_OPTIONS`` were defined in extend and in sdk/serve.py, ``FRAME_MIN_BYTES`` in
    extend and sources/robomimic_hdf5.py, ``build_or_reuse``, ``pass_options`` and ``cache_root`` twice each: one
    definition each now, extend re-exporting it."""
    defs = top_level_definitions(package_sources())
    twice = defined_twice(defs, extend.__all__)
    assert set(twice) == set(DEFINED_TWICE), twice
    assert not [n for n in extend.__all__ if n not in defs], "each name is defined somewhere in the package"


def test_the_definition_scan_catches_a_second_definition():
    """Negative control: a constant, a function or a class defined again in a second module is reported, whatever
    the form (tuple assignment, inside ``try``); a re-export by import is not."""
    defs = top_level_definitions(
        {
            "a.py": "X = 1\ndef f():\n    pass\nclass C:\n    pass\nY, Z = 1, 2\nfrom b import W\n",
            "b.py": "try:\n    X = 2\nexcept ImportError:\n    pass\nf = None\nC: type = int\nZ = 3\nW = 4\n",
        }
    )
    assert defined_twice(defs, ["X", "f", "C", "Y", "Z", "W"]) == {
        "X": ["a.py", "b.py"],
        "f": ["a.py", "b.py"],
        "C": ["a.py", "b.py"],
        "Z": ["a.py", "b.py"],
    }


def test_the_roots_names_are_extends():
    """The root re-exports a few names, the same objects as extend's; the plugin API's names it exported before
    still resolve, to extend's objects, with a DeprecationWarning naming the import to use."""
    names = [n for n in robo_loaders_plugin.__all__ if n != "__version__"]
    assert sorted(names) == sorted(
        ["list_backends", "get_backend", "RoboLoadersError", "UnknownBackendError", "BackendOptionError"]
        + ["SourceError", "StaleSourceError", "CompatError"]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of these warns
        assert [n for n in names if getattr(robo_loaders_plugin, n) is not getattr(extend, n)] == []
    moved = robo_loaders_plugin._MOVED_TO_EXTEND
    assert {"hookimpl", "BackendSpec", "Option", "SamplingPlan", "LOSSY_FRAMES"} <= set(moved)
    for n in moved:
        with pytest.warns(DeprecationWarning, match=f"from robo_loaders_plugin.extend import {n}"):
            assert getattr(robo_loaders_plugin, n) is getattr(extend, n)
    with pytest.raises(AttributeError):
        robo_loaders_plugin.FrameStore  # noqa: B018  (extend's only: never exported by the root)


def sdk_imports_of_extend(sources: dict[str, str]) -> list[str]:
    """``module:line`` of every import of ``robo_loaders_plugin.extend`` in ``sources``, inside functions included.

    Args:
        sources: ``{module path: source}``.
    """
    hits = []
    for module, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module:
                named = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                named = [a.name for a in node.names]
            else:
                continue
            if "robo_loaders_plugin.extend" in named:
                hits.append(f"{module}:{node.lineno}")
    return hits


def test_the_sdk_imports_nothing_from_extend():
    """extend is built on the SDK: ``sdk/serve.py`` importing extend (inside its factories) made a circle."""
    sdk = {m: s for m, s in package_sources().items() if m.startswith("sdk" + os.sep)}
    assert len(sdk) >= 3, sdk.keys()
    assert sdk_imports_of_extend(sdk) == []


def test_the_import_scan_catches_an_import_inside_a_function():
    """Negative control: each way of importing extend is caught, inside a function too."""
    assert sdk_imports_of_extend(
        {
            "a.py": "def f():\n    from robo_loaders_plugin.extend import lerobot_episodes\n",
            "b.py": "from robo_loaders_plugin import extend\n",
            "c.py": "import robo_loaders_plugin.extend\n",
            "d.py": "from robo_loaders_plugin import testing\nfrom robo_loaders_plugin.core import spec\n",
        }
    ) == ["a.py:2", "b.py:1", "c.py:1"]


def test_no_public_signature_or_returns_names_a_private_type():
    private = private_class_names()
    assert {"DataSize", "Fingerprint", "BufferPool"} - private, "exported names are public"
    problems = []
    for name in extend.__all__:
        for qual, fn in members(name, getattr(extend, name)):
            problems += problems_of(qual, fn, private)
    assert not problems, "\n".join(problems)


def test_the_walk_finds_a_private_type():
    """Negative control: a function returning a private class, and one whose Returns: names it, are caught."""
    private = private_class_names()
    assert "EntryHold" in private

    def f() -> "EntryHold":  # noqa: F821  (a name only the check reads)
        """Returns:
        Nothing.
        """

    def g():
        """Do g.

        Returns:
            An ``EntryHold`` (private).
        """

    assert problems_of("f", f, private) == ["f: names private ['EntryHold']"]
    assert problems_of("g", g, private) == ["g: names private ['EntryHold']"]
    assert len(members("FrameSource", extend.FrameSource)) > 3


def test_the_backend_guide_shows_the_whole_example_as_it_is():
    """docs/writing-a-backend.md walks the complete example: each of its files appears there in full, verbatim
    (negative control: an edited copy of a file is not found)."""
    root = os.path.dirname(PACKAGE)
    with open(os.path.join(root, "docs", "writing-a-backend.md")) as f:
        guide = f.read()
    package = os.path.join(root, "examples", "jpeg_backend", "robo_loaders_jpeg")
    files = sorted(n for n in os.listdir(package) if n.endswith(".py") and n != "__init__.py")
    assert files == ["plugin.py", "store.py"]
    for n in files:
        with open(os.path.join(package, n)) as f:
            text = f.read().rstrip()
        assert f"```python\n{text}\n```" in guide, f"{n} is not shown in full in docs/writing-a-backend.md"
        assert f"```python\n{text.replace('quality', 'qualty', 1)}\n```" not in guide
