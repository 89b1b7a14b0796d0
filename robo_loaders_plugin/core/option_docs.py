"""Markdown generated from the backend declarations (``backends``, and any installed plugin's): the backend table
and every backend's option table in docs/backends.md, and the option summary in the README.

Why generated: the option tables were written by hand beside the declarations and drifted from them (defaults,
allowed values, frameworks). The documents keep marker comments around each generated block; :func:`render`
rewrites the blocks, ``python -m robo_loaders_plugin.core.option_docs README.md docs/backends.md`` writes them, and
a test fails when a committed document differs from what the declarations give.

Markers: ``<!-- robo-loaders:backends -->`` (the backend table), ``<!-- robo-loaders:options NAME -->`` (one
backend's options), ``<!-- robo-loaders:option-summary -->`` (every backend's option names), each
closed by ``<!-- /robo-loaders -->``.
"""

from __future__ import annotations

import re
import sys

from robo_loaders_plugin.core.spec import BackendSpec

_BLOCK = re.compile(
    r"(<!-- robo-loaders:(backends|options|option-summary)(?: ([a-z0-9_]+))? -->\n)(.*?)"
    r"(<!-- /robo-loaders -->)",
    re.S,
)
_NAMES = {"robomimic": "robomimic", "lerobot": "LeRobot"}


def _value(v) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return f"`{str(v).lower()}`"
    if isinstance(v, str):
        return f'`"{v}"`'
    return f"`{v}`"


def _default(opt) -> str:
    if opt.framework_defaults:
        text = ", ".join(f"{_value(v)} ({_NAMES.get(fw, fw)})" for fw, v in opt.framework_defaults.items())
    else:
        text = _value(opt.default)
    random = ", ".join(f"{_value(v)} ({_NAMES.get(fw, fw)})" for fw, v in opt.random_items_defaults.items())
    return f"{text}; where items draw random numbers (image transforms): {random}" if random else text


def _values(opt) -> str:
    base = opt.describe_values()
    per = "; ".join(f"{_NAMES.get(fw, fw)}: {opt.describe_values(fw)}" for fw in opt.framework_choices)
    text = "; ".join(x for x in (base, per) if x)
    return text.replace("'", "`") if text else "any"


def options_table(spec: BackendSpec) -> str:
    r"""One backend's options as a Markdown table: name, type, default, allowed values, frameworks, help.

    Args:
        spec: The backend's declaration.

    Returns:
        The table (``"No options.\n"`` for a backend without options), ending in a newline.
    """
    if not spec.options:
        return "No options.\n"
    rows = ["| option | type | default | values | frameworks | meaning |", "|---|---|---|---|---|---|"]
    for name, opt in spec.options.items():
        fws = ", ".join(_NAMES.get(f, f) for f in (opt.frameworks or spec.frameworks))
        rows.append(
            f"| `{name}` | {opt.type_name()} | {_default(opt)} | {_values(opt)} | {fws} | "
            f"{opt.help.replace('|', '/')} |"
        )
    return "\n".join(rows) + "\n"


def backends_table(specs: list[BackendSpec]) -> str:
    """Every backend as a Markdown table, one row per framework: kind, lossless promise, GPU use.

    Args:
        specs: The backends, in the order of the rows.

    Returns:
        The table, ending in a newline.
    """
    rows = ["| backend | framework | kind | lossless | GPU | what it does |", "|---|---|---|---|---|---|"]
    for spec in specs:
        for i, fw in enumerate(spec.frameworks):
            rows.append(
                f"| {'`' + spec.name + '`' if i == 0 else ''} | {_NAMES.get(fw, fw)} | {spec.kind_for(fw)} | "
                f"{spec.lossless_for(fw)} | {spec.gpu_for(fw)} | {spec.description if i == 0 else ''} |"
            )
    return "\n".join(rows) + "\n"


def option_summary(specs: list[BackendSpec]) -> str:
    """Each backend's option names as a Markdown table (the README's), those of one framework only marked so.

    Args:
        specs: The backends, in the order of the rows.

    Returns:
        The table, ending in a newline.
    """
    rows = ["| backend | options |", "|---|---|"]
    for spec in specs:
        names = [
            f"`{n}`" + (f" ({'/'.join(_NAMES.get(f, f) for f in o.frameworks)})" if o.frameworks else "")
            for n, o in spec.options.items()
        ]
        rows.append(f"| `{spec.name}` | {', '.join(names) or 'none'} |")
    return "\n".join(rows) + "\n"


def render(text: str, specs: list[BackendSpec] | None = None) -> str:
    """``text`` with every generated block rewritten from ``specs``.

    Args:
        text: A Markdown document with marker comments (see the module's docstring); text outside the blocks is kept.
        specs: The backends to describe (default: the registered backends, installed plugins' included).

    Returns:
        The document with each block's body replaced.

    Raises:
        KeyError: a block names a backend that is not in ``specs``.
    """
    if specs is None:
        from robo_loaders_plugin.core.registry import get_backend, list_backends

        specs = [get_backend(n) for n in list_backends()]
    by_name = {s.name: s for s in specs}

    def block(m: re.Match) -> str:
        what, name = m.group(2), m.group(3)
        body = (
            backends_table(specs)
            if what == "backends"
            else option_summary(specs)
            if what == "option-summary"
            else options_table(by_name[name])
        )
        return m.group(1) + body + m.group(5)

    return _BLOCK.sub(block, text)


def builtin_specs() -> list[BackendSpec]:
    """The built-in backends only (what the committed documents describe, whatever plugins are installed)."""
    from robo_loaders_plugin.core.registry import builtin_specs as registered

    return registered()


def main(paths: list[str]) -> int:
    """Rewrite the generated blocks of ``paths`` from the built-in declarations; prints each file that changed.

    Args:
        paths: The Markdown files to rewrite in place (``README.md``, ``docs/backends.md``).

    Returns:
        0, the process's exit status.
    """
    for path in paths:
        with open(path) as f:
            text = f.read()
        new = render(text, builtin_specs())
        if new != text:
            with open(path, "w") as f:
                f.write(new)
            print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
