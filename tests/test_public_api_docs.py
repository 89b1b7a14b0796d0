"""The public API documents itself (issue 20): in the modules a third party builds on, every public function,
method and class has a docstring, and every one that takes arguments has an ``Args:`` section (Google style, as
pytest's hookspec.py documents its hooks)."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PUBLIC_MODULES = ["extend.py", "testing.py", "core/spec.py", "core/options.py", "core/iteration.py",
                  "core/hookspecs.py", "core/backend_json.py", "storage/cached_dir.py"]


def undocumented(source: str) -> list[str]:
    """Public callables of ``source`` without a docstring, or taking arguments without an ``Args:`` section."""
    problems = []

    def visit(node, prefix=""):
        for n in ast.iter_child_nodes(node):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_"):
                doc = ast.get_docstring(n) or ""
                params = [a.arg for a in n.args.args + n.args.kwonlyargs if a.arg not in ("self", "cls")]
                is_property = any(ast.unparse(d) == "property" for d in n.decorator_list)
                if not doc:
                    problems.append(f"{prefix}{n.name}: no docstring")
                elif params and not is_property and "Args:" not in doc:
                    problems.append(f"{prefix}{n.name}: arguments {params} but no Args: section")
            elif isinstance(n, ast.ClassDef) and not n.name.startswith("_"):
                if not ast.get_docstring(n):
                    problems.append(f"{n.name}: no docstring")
                visit(n, f"{n.name}.")

    visit(ast.parse(source))
    return problems


def test_the_public_modules_document_every_callable():
    problems = []
    for rel in PUBLIC_MODULES:
        with open(os.path.join(ROOT, "robo_loaders_plugin", rel)) as f:
            problems += [f"{rel}: {p}" for p in undocumented(f.read())]
    assert not problems, "\n".join(problems)


def test_the_check_fails_on_an_undocumented_function():
    """Negative control."""
    assert undocumented("def f(x):\n    '''Does f.'''\n") == ["f: arguments ['x'] but no Args: section"]
    assert undocumented("class C:\n    '''C.'''\n    def g(self):\n        pass\n") == ["C.g: no docstring"]
    assert undocumented("def _private(x):\n    pass\n") == []
