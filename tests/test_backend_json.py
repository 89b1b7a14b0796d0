"""One parser for backend options typed on a command line: a JSON object, one line naming the flag otherwise."""

import re

import click
import pytest

from robo_loaders_plugin.core.backend_json import click_backend_pairs, parse_backend_kwargs, parse_backend_pairs
from robo_loaders_plugin.core.errors import BackendOptionError

FLAG = "--dataset.backend_kwargs"


def test_a_json_object_is_parsed():
    assert parse_backend_kwargs('{"codec": "zstd", "level": 3}', FLAG) == {"codec": "zstd", "level": 3}
    assert parse_backend_kwargs("  ", FLAG) == {}
    assert parse_backend_pairs(['datapipe={"seed": 1}', "native="], "--backend-kwargs") == {
        "datapipe": {"seed": 1},
        "native": {},
    }


@pytest.mark.parametrize(
    "text, why",
    [
        ("{codec: zstd}", "is not JSON"),  # YAML, which LeRobot's parser would have accepted
        ('{"codec": "zstd"', "is not JSON"),  # malformed
        ("zstd", "is not JSON"),  # a plain string
        ("[1, 2]", "got list"),  # JSON, not an object
    ],
)
def test_anything_else_is_one_line_naming_the_flag(text, why):
    with pytest.raises(BackendOptionError) as e:
        parse_backend_kwargs(text, FLAG)
    message = str(e.value)
    assert message.startswith(f"{FLAG} must be a JSON object") and why in message and "\n" not in message


def test_pairs_and_the_click_callback():
    with pytest.raises(BackendOptionError, match=re.escape("expected BACKEND='{json}'")):
        parse_backend_pairs(["compressed_cache"], "--backend-kwargs")
    with pytest.raises(
        click.BadParameter, match=re.escape("--backend-kwargs 'x={a:1}': options must be a JSON object")
    ):
        click_backend_pairs(None, None, ["x={a:1}"])
