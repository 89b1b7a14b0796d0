"""Hugging Face ``datasets`` internals are read in ``lerobot/compat.py`` only (issue 31 item 4), behind small
documented functions that ``robo-loaders doctor`` tries on a real ``Dataset`` (``tests/test_doctor.py``): here, a
scan of the package for those reads anywhere else, and the functions on real ``datasets.Dataset`` objects."""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "robo_loaders_plugin")
ALLOWED = {"lerobot/compat.py"}
# the datasets internals: a Dataset's selection and fingerprint, and the Arrow storage under it
PRIVATE_ATTRS = {"_indices", "_fingerprint", "cache_files"}


def private_reads(source: str) -> list[str]:
    """Where ``source`` reads a ``datasets.Dataset``'s internals: an attribute of :data:`PRIVATE_ATTRS` (also through
    ``getattr``/``hasattr`` with the name as a string), or a column of its Arrow table (``x.data.column(...)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_ATTRS:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "column"
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "data"
        ):
            found.append(f"line {node.lineno}: .data.column")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in PRIVATE_ATTRS
        ):
            found.append(f"line {node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return sorted(found, key=lambda f: (int(f.split()[1].rstrip(":")), f))


def package_reads() -> dict[str, list[str]]:
    """:func:`private_reads` of every module of the package, by path relative to it (modules without any left out)."""
    out = {}
    for d, dirs, files in os.walk(PACKAGE):
        dirs[:] = [n for n in dirs if n != "__pycache__"]
        for n in files:
            if n.endswith(".py"):
                rel = os.path.relpath(os.path.join(d, n), PACKAGE).replace(os.sep, "/")
                with open(os.path.join(d, n)) as f:
                    reads = private_reads(f.read())
                if reads:
                    out[rel] = reads
    return out


def test_only_the_lerobot_compat_module_reads_hf_datasets_internals():
    reads = package_reads()
    outside = {k: v for k, v in reads.items() if k not in ALLOWED}
    assert not outside, f"move these reads behind a function of lerobot/compat.py: {outside}"
    # the scan sees the real reads where they are now
    there = " ".join(reads["lerobot/compat.py"])
    assert all(name in there for name in ("'_indices'", "'_fingerprint'", "'cache_files'", ".data.column")), there
    # negative control: the reads lerobot/dataset.py and lerobot/factories.py held before issue 31 are each caught
    before = """
indices = hf._indices.column(0) if getattr(hf, "_indices", None) is not None else None
col = hf.data.column(name)
cache_files = sorted({os.path.dirname(c["filename"]) for c in getattr(hf, "cache_files", None) or []})
doc = {"fingerprint": getattr(hf, "_fingerprint", None)}
"""
    assert private_reads(before) == [
        "line 2: ._indices",
        "line 2: getattr(..., '_indices')",
        "line 3: .data.column",
        "line 4: getattr(..., 'cache_files')",
        "line 5: getattr(..., '_fingerprint')",
    ]
    assert not private_reads("x.data.shape\nself.indices = 1\nhf.features\nrecorded_fingerprint(p)\n")


@pytest.fixture
def table():
    datasets = pytest.importorskip("datasets")
    return datasets.Dataset.from_dict({"index": [10, 11, 12, 13, 14], "x": [[0.5, 1.0]] * 5})


def test_hf_column_serves_the_rows_of_a_selection_in_its_order(table):
    from robo_loaders_plugin.lerobot import compat

    picked = table.select([4, 0, 2])
    assert compat.hf_column(picked, "index").to_pylist() == [picked[i]["index"] for i in range(3)] == [14, 10, 12]
    assert compat.hf_column(table, "index").to_pylist() == [10, 11, 12, 13, 14]
    # negative control: the Arrow table alone is the unselected rows (what reading it without the selection serves)
    assert picked.data.column("index").to_pylist() == [10, 11, 12, 13, 14]
    assert compat.hf_column(picked, "x").to_pylist() == [[0.5, 1.0]] * 3


def test_the_selection_digest_and_fingerprint_tell_selections_apart(table):
    from robo_loaders_plugin.lerobot import compat

    a, b = table.select([4, 0]), table.select([0, 4])
    assert compat.hf_selection_digest(table) is None
    assert compat.hf_selection_digest(a) != compat.hf_selection_digest(b)
    assert compat.hf_selection_digest(a) == compat.hf_selection_digest(table.select([4, 0]))
    assert len({compat.hf_fingerprint(t) for t in (table, a, b)}) == 3


def test_hf_cache_files_names_the_arrow_files_behind_a_table(table, tmp_path):
    import datasets

    from robo_loaders_plugin.lerobot import compat

    assert compat.hf_cache_files(table) == [] and compat.hf_cache_files(None) == []  # held in memory
    table.save_to_disk(str(tmp_path / "saved"))
    loaded = datasets.load_from_disk(str(tmp_path / "saved"))
    files = compat.hf_cache_files(loaded)
    assert files and all(f.startswith(str(tmp_path / "saved")) and os.path.exists(f) for f in files)
    assert compat.hf_cache_files(loaded.select([1, 0])) == files  # a selection reads the same files
