"""The option tables in the README and docs/backends.md are what the declarations give (no drift), and the
declarations are what the factories and the codec accept."""

import dataclasses
import os

from robo_loaders_plugin.core import option_docs
from robo_loaders_plugin.core.options import Option, to_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_committed_documents_match_the_declarations():
    for name in ("README.md", os.path.join("docs", "backends.md")):
        with open(os.path.join(ROOT, name)) as f:
            text = f.read()
        assert "<!-- robo-loaders:" in text, f"{name} has no generated block"
        assert option_docs.render(text, option_docs.builtin_specs()) == text, (
            f"{name} is out of date with the backend packages (robo_loaders_plugin/backends/): run "
            "'python -m robo_loaders_plugin.core.option_docs README.md docs/backends.md'"
        )


def test_a_changed_declaration_changes_the_documents():
    """Negative control: the drift check sees a changed default."""
    with open(os.path.join(ROOT, "docs", "backends.md")) as f:
        text = f.read()
    specs = option_docs.builtin_specs()
    cc = next(s for s in specs if s.name == "compressed_cache")
    changed = dict(cc.options, level=dataclasses.replace(cc.options["level"], default=7))
    specs = [dataclasses.replace(s, options=changed) if s.name == "compressed_cache" else s for s in specs]
    assert option_docs.render(text, specs) != text


def test_one_codec_list_serves_the_options_the_codec_table_the_command_line_and_the_estimates():
    from robo_loaders_plugin.backends.compressed_cache import COMPRESSED_CACHE_OPTIONS
    from robo_loaders_plugin.cli import main
    from robo_loaders_plugin.core.codecs import CODECS, FILTERS
    from robo_loaders_plugin.core.footprint import COMPRESS_MB_S
    from robo_loaders_plugin.storage.codec import CODEC_CHOICES, FILTER_CHOICES

    assert tuple(CODEC_CHOICES) == CODECS and tuple(FILTER_CHOICES) == FILTERS
    assert COMPRESSED_CACHE_OPTIONS["codec"].choices == CODECS and COMPRESSED_CACHE_OPTIONS["filter"].choices == FILTERS
    assert set(COMPRESS_MB_S) == set(CODECS)
    for framework in ("robomimic", "lerobot"):
        codec = next(p for p in main.commands["convert"].commands[framework].params if p.name == "codec")
        assert tuple(codec.type.choices) == CODECS and codec.default == CODECS[0]


def test_option_describes_itself():
    opt = Option(int, 5, "h", min=0, max=9)
    assert opt.as_dict() == {
        "type": "an integer",
        "types": ["integer"],
        "default": 5,
        "help": "h",
        "per_host": False,
        "min": 0,
        "max": 9,
        "values": "0..9",
    }
    # machine-readable too (robo-loaders list --json): JSON types, choices, a size converted to bytes, per_host
    size = Option((float, str), None, "s", convert=to_bytes, per_host=True)
    assert size.as_dict()["types"] == ["number", "string"] and size.as_dict()["converted_to"] == "bytes"
    assert size.as_dict()["per_host"] is True
    assert Option(str, "a", choices=("a", "b")).as_dict()["choices"] == ["a", "b"]
    assert opt.validate(3, "robomimic") is None and "got 10" in opt.validate(10, "robomimic")
    assert "got true" not in (opt.validate(True, "robomimic") or "") and opt.validate(True, "robomimic")
