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


def _json_object(text: str) -> tuple[dict | None, str]:
    """(the object, "") or (None, why ``text`` is not a JSON object)."""
    if not text.strip():
        return {}, ""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, (
            f"{text!r} is not JSON ({exc.msg} at character {exc.pos}; JSON needs double quotes around "
            "names and strings)"
        )
    if not isinstance(value, dict):
        return None, f"got {type(value).__name__} {text!r}"
    return value, ""


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
    value, why = _json_object(text)
    if value is None:
        raise BackendOptionError(f"{flag} must be a JSON object, e.g. {flag}={EXAMPLE}: {why}")
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
        value, why = _json_object(payload) if sep and name else (None, "expected BACKEND='{json}'")
        if value is None:
            raise BackendOptionError(
                f"{flag} {v!r}: options must be a JSON object, e.g. {flag} BACKEND={EXAMPLE}: {why}"
            )
        out[name] = value
    return out


def click_backend_pairs(ctx, param, values) -> dict[str, dict]:
    """A click callback (or a plain call with ``ctx=param=None``) for a repeatable ``BACKEND='{json}'`` option.

    Args:
        ctx: click's context (unused).
        param: The option (its name is the flag in messages; ``None``: ``--backend-kwargs``).
        values: The pairs as typed.

    Returns:
        ``{backend: options}`` (:func:`parse_backend_pairs`).

    Raises:
        click.BadParameter: a bad pair, as click's usage error naming the option.
    """
    import click

    flag = "--" + param.name.replace("_", "-") if param is not None and param.name else "--backend-kwargs"
    try:
        return parse_backend_pairs(values, flag)
    except BackendOptionError as exc:
        raise click.BadParameter(str(exc)) from None
