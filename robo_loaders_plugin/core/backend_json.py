"""Backend options as users type them on a command line: a JSON object (``--dataset.backend_kwargs='{...}'``), or
``BACKEND='{json}'`` pairs (``robo-loaders bench --backend-kwargs``). One parser, so every command accepts and
refuses the same things with the same words.

Why JSON and not YAML: LeRobot's parser reads dict-typed flags as YAML, which accepts ``{codec: zstd}`` and turns a
malformed object into a 40-line traceback; the docs promise JSON, so JSON is what is parsed, and anything else is
one line naming the flag.
"""
from __future__ import annotations

import json

from robo_loaders_plugin.core.errors import BackendOptionError

EXAMPLE = '\'{"codec": "zstd"}\''


def parse_backend_kwargs(text: str, flag: str) -> dict:
    """A backend's options from the JSON object a user typed.

    Args:
        text: What follows the flag (empty or blank: no options).
        flag: The flag's name as typed (``--dataset.backend_kwargs``), for the error.

    Returns:
        The options, as a dict.

    Raises:
        BackendOptionError: one line naming ``flag``: not JSON (with the position), or JSON but not an object.
    """
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BackendOptionError(f"{flag} must be a JSON object, e.g. {flag}={EXAMPLE}: {text!r} is not JSON "
                                 f"({exc.msg} at character {exc.pos}; JSON needs double quotes around names and "
                                 "strings)") from None
    if not isinstance(value, dict):
        raise BackendOptionError(f"{flag} must be a JSON object, e.g. {flag}={EXAMPLE}, got {type(value).__name__} "
                                 f"{text!r}")
    return value


def parse_backend_pairs(values, flag: str) -> dict[str, dict]:
    """``BACKEND='{json}'`` pairs, as ``robo-loaders bench --backend-kwargs`` takes them.

    Args:
        values: The pairs as typed (one per use of the flag).
        flag: The flag's name, for errors.

    Returns:
        ``{backend: options}``.

    Raises:
        BackendOptionError: a pair without ``=``, or options that are not a JSON object, naming the flag.
    """
    out = {}
    for v in values:
        name, sep, payload = v.partition("=")
        if not sep or not name:
            raise BackendOptionError(f"{flag} {v!r}: expected BACKEND='{{json}}', e.g. {flag} compressed_cache="
                                     f"{EXAMPLE}")
        out[name] = parse_backend_kwargs(payload, f"{flag} {name}=")
    return out
