"""``robo_loaders_plugin.extend`` is the whole API a third-party backend needs: every name it exports (the lazily
loaded ones included) is documented in its docstring, and no public signature or ``Returns:`` section reachable
from it names a private type (one a backend author could only find by reading a private module)."""

import ast
import inspect
import os
import re

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


def test_every_exported_name_is_documented_in_extends_docstring():
    doc = extend.__doc__
    missing = [
        n
        for n in extend.__all__
        if f"``{n}``" not in doc
        and f":class:`{n}`" not in doc
        and f":func:`{n}`" not in doc
        and f":data:`{n}`" not in doc
    ]
    assert not missing, missing


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
