"""``--dataset.mixture``, parsed and checked: the flag read as JSON and checked with the other flags at argument
parsing (each local root's ``meta/info.json`` too, ``dataset_root``), saved resolved (inline JSON) in
``train_config.json``; and which backends convert frame rates. No data is read here.

The first of the mixture's three steps, each a module that imports only those below it: this one decides what the
mixture is (a ``MixtureSpec``); ``mixture_meta`` reads and checks the components' ``meta/``; ``mixture`` builds and
serves them.
"""

from __future__ import annotations

import json
import os
import sys

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.registry import rate_converting_backends, streaming_backends
from robo_loaders_plugin.lerobot.dataset_root import check_component_roots
from robo_loaders_plugin.lerobot.flags import (
    FRAMEWORK,
    MIXTURE_FLAG,
    NAME_FLAG,
    OPTIONS_FLAG,
    backend_choice,
    component_name,
    flag_text,
)
from robo_loaders_plugin.mixtures.spec import MixtureError, parse_mixture
from robo_loaders_plugin.sources.lerobot_v3 import is_remote

# backend options that name one dataset's data: a mixture has one dataset per component
PER_DATASET_OPTIONS = ("shards",)


# -- the flag ------------------------------------------------------------------------------------------------------
def command_line_mixture(decoded, argv: list[str] | None = None):
    """``--dataset.mixture``'s value as typed on the command line, over what LeRobot's parser made of it.

    Why: LeRobot's parser reads every value as YAML and hands a ``str`` field the text of what it read, so inline
    JSON arrives as a Python repr (``[{'repo_id': ...}]``) and ``1e-3`` as a string; the text typed is JSON.

    Args:
        decoded: The field as LeRobot's parser decoded it (or as ``train_config.json`` holds it).
        argv: The command line (default: ``sys.argv[1:]``).

    Returns:
        The typed text when the command line gives the flag, else ``decoded``.
    """
    found = flag_text(sys.argv[1:] if argv is None else argv, MIXTURE_FLAG)
    return decoded if found is None else found[2]


def check_mixture_text(argv: list[str]) -> None:
    """Parse ``--dataset.mixture`` on the command line before LeRobot's parser reads it as YAML (malformed JSON
    would be a YAML traceback there).

    Args:
        argv: The command line without the program.

    Raises:
        RoboLoadersError: the mixture is refused (one line naming the flag, the component and what to do).
    """
    found = flag_text(argv, MIXTURE_FLAG)
    if found is not None and found[2].strip():
        parse(found[2])


def parse(value):
    """A mixture under LeRobot (``mixtures.spec.parse_mixture`` with the flag's name).

    Args:
        value: A JSON file's path, inline JSON, a dict or a list of components.

    Returns:
        The ``MixtureSpec``.

    Raises:
        MixtureError: naming ``--dataset.mixture``, the component and what to do.
    """
    return parse_mixture(value, FRAMEWORK, MIXTURE_FLAG)


def mixture_of(dataset_cfg):
    """The mixture ``cfg.dataset`` names, or ``None`` (a single dataset).

    Args:
        dataset_cfg: ``cfg.dataset`` (LeRobot's own ``DatasetConfig`` has no ``mixture``: ``None``).

    Returns:
        The ``MixtureSpec`` or ``None``.

    Raises:
        MixtureError: the mixture is refused.
    """
    value = getattr(dataset_cfg, "mixture", None)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return parse(value)


def resolve_mixture_flag(dataset_cfg) -> str | None:
    """Check ``--dataset.mixture`` with the other dataset flags, at argument parsing, and give the value to save.

    Args:
        dataset_cfg: The ``BackendDatasetConfig`` being built (``mixture`` holds the text given).

    Returns:
        The mixture as canonical inline JSON (local roots made absolute), or ``None`` without one.

    Raises:
        RoboLoadersError: no dataset at all, or the mixture refused alone or with the other flags.
    """
    spec = mixture_of(dataset_cfg)
    if spec is None:
        if not getattr(dataset_cfg, "repo_id", None):
            raise RoboLoadersError(
                "--dataset.repo_id is required (or --dataset.mixture=<file or inline JSON> to train on several "
                "datasets, docs/mixtures.md)"
            )
        return None
    check_flags(dataset_cfg, spec)
    return canonical_json(spec)


def canonical_json(spec) -> str:
    """The mixture as the inline JSON saved in ``train_config.json`` (components in order, local roots absolute).

    Args:
        spec: A ``MixtureSpec``.

    Returns:
        JSON text ``parse_mixture`` reads back to an equal spec.
    """
    components = []
    for c in spec.components:
        out: dict = {"repo_id": c.source}
        if c.root is not None:
            out["root"] = str(c.root) if is_remote(str(c.root)) else os.path.abspath(str(c.root))
        if c.weight is not None:
            out["weight"] = c.weight
        if c.episodes is not None:
            out["episodes"] = [int(e) for e in c.episodes]
        if c.rename:
            out["rename"] = dict(c.rename)
        if c.drop:
            out["drop"] = list(c.drop)
        components.append(out)
    doc: dict = {"components": components, "weights": spec.weights}
    if spec.target_fps is not None:
        doc["target_fps"] = spec.target_fps
    if spec.pad:
        doc["pad"] = dict(spec.pad)
    if spec.missing_cameras != "drop":
        doc["missing_cameras"] = spec.missing_cameras
    return json.dumps(doc, sort_keys=False)


def check_flags(dataset_cfg, spec) -> None:
    """What the other dataset flags cannot be with a mixture, at argument parsing.

    Args:
        dataset_cfg: ``cfg.dataset``.
        spec: Its ``MixtureSpec``.

    Raises:
        RoboLoadersError: ``--dataset.repo_id``/``root``/``episodes`` given too (on the command line, or by the
            config ``--config_path`` reads: a run trained on one dataset, resumed with a mixture),
            ``--dataset.streaming``, a remote component root with a backend that reads no remote source, a
            ``target_fps`` the backend cannot convert to (or two that differ), a backend option naming one
            dataset's data, or a component's local root or episodes LeRobot cannot train from
            (``dataset_root.check_component_roots``).
    """
    given = [f"--dataset.{k}" for k in ("repo_id", "root", "episodes") if getattr(dataset_cfg, k, None)]
    argv = sys.argv[1:]
    config_path = flag_text(argv, "--config_path")
    if given and config_path is not None and not any(flag_text(argv, flag) for flag in given):
        named = ", ".join(f"{flag}={getattr(dataset_cfg, flag.split('.')[1])}" for flag in given)
        raise RoboLoadersError(
            f"{MIXTURE_FLAG} names every dataset, but --config_path={config_path[2]} gives {named} (the dataset "
            f"that run trained on): leave {MIXTURE_FLAG} out to train on that dataset (--resume=true resumes on it), "
            f"or clear them ({' '.join(f'{flag}=' for flag in given)}) to train on the mixture as a new run "
            "(without --resume)"
        )
    if given and config_path is not None and flag_text(argv, MIXTURE_FLAG) is None:
        # the mixture is the saved config's (a run trained on a mixture), the dataset flags this command line's: a
        # reviewer's reproduction blamed --dataset.mixture, which the user never typed
        raise RoboLoadersError(
            f"--config_path={config_path[2]} gives {MIXTURE_FLAG} (that run trained on a mixture), and this command "
            f"line gives {', '.join(given)}: leave {', '.join(given)} out to go on with the mixture (--resume=true "
            f"resumes it), or train on one dataset as a new run (without --resume and --config_path)"
        )
    if given:
        raise RoboLoadersError(
            f"{MIXTURE_FLAG} names every dataset: leave {', '.join(given)} out (each component gives its own "
            "repo_id, root and episodes)"
        )
    if getattr(dataset_cfg, "streaming", False):
        raise RoboLoadersError(
            f"{MIXTURE_FLAG} cannot be combined with --dataset.streaming=true (a mixture draws its own order over "
            "map-style datasets)"
        )
    choice = backend_choice(dataset_cfg)
    check_remote_roots(spec, choice)
    check_rates(spec, choice)
    per_dataset = [o for o in PER_DATASET_OPTIONS if o in choice.options.given()]
    remote = choice.spec.remote_source_option
    if remote and remote in choice.options.given():
        per_dataset.append(remote)
    if per_dataset:
        raise RoboLoadersError(
            f"{OPTIONS_FLAG}.{per_dataset[0]} names one dataset's data; with {MIXTURE_FLAG} leave it out (each "
            "component is read from its own root, converted into the cache directory where the backend converts; "
            "a remote dataset is a component whose root is its URL)"
        )
    check_component_roots(spec)  # meta/info.json of each local root, before LeRobot goes to the Hub


def remote_root(component) -> str | None:
    """A component's ``root`` when it is remote (``s3://``, ``http(s)://``, ``hf://``), else ``None``.

    Args:
        component: A ``mixtures.spec.Component``.
    """
    root = None if component.root is None else str(component.root)
    return root if is_remote(root) else None


def check_remote_roots(spec, choice) -> None:
    """A remote component root needs a backend that reads a remote source (``BackendSpec.remote_source_option``):
    its tables are mirrored locally for LeRobot, its frames streamed (also checked when the mixture is built).

    Args:
        spec: The ``MixtureSpec``.
        choice: The LeRobot ``BackendChoice``.

    Raises:
        MixtureError: a remote root with a backend that reads local roots only, naming the component, the root and
            the backends that stream.
    """
    if choice.spec.remote_source_option:
        return
    for k, c in enumerate(spec.components):
        root = remote_root(c)
        if root is not None:
            raise MixtureError(
                f"{MIXTURE_FLAG}: {component_name(spec, k)}: root {root} is remote and {NAME_FLAG}={choice.name} "
                f"reads local roots only; choose a backend that streams remote datasets ({NAME_FLAG}="
                f"{streaming_backends(FRAMEWORK)}) or copy it locally first"
            )


def _rate_converting_backends() -> list[str]:
    """Backends whose LeRobot options include ``target_fps`` (they convert rates)."""
    return rate_converting_backends(FRAMEWORK)


def converts_rates(choice) -> bool:
    """Whether a backend choice converts frame rates under LeRobot (declares a ``target_fps`` option).

    Args:
        choice: A LeRobot ``BackendChoice``.
    """
    opt = choice.spec.options.get("target_fps")
    return opt is not None and opt.applies_to(FRAMEWORK)


def target_fps_of(spec, choice) -> float | None:
    """The rate the mixture is served at: the mixture's ``target_fps``, else the backend's own ``target_fps``
    option (``--dataset.backend_kwargs``), else ``None`` (each component's recorded rate).

    Args:
        spec: The ``MixtureSpec``.
        choice: The LeRobot ``BackendChoice``.
    """
    if spec.target_fps is not None:
        return float(spec.target_fps)
    own = getattr(choice.options, "target_fps", None) if converts_rates(choice) else None
    return None if own is None else float(own)


def check_rates(spec, choice) -> None:
    """A mixture's ``target_fps`` needs a backend that converts rates, and is the backend's ``target_fps`` where
    both are given (checked at argument parsing and by ``build_mixture``: the Python entry point dropped the
    backend's silently, a reviewer's reproduction).

    Args:
        spec: The ``MixtureSpec``.
        choice: The LeRobot ``BackendChoice``.

    Raises:
        MixtureError: ``target_fps`` with a backend that does not convert rates, or two ``target_fps`` that differ.
    """
    if spec.target_fps is not None and not converts_rates(choice):
        which = ", ".join(_rate_converting_backends()) or "none installed"
        raise MixtureError(
            f"{MIXTURE_FLAG}: target_fps={spec.target_fps:g} needs a backend that converts frame rates "
            f"({NAME_FLAG}={which}); {NAME_FLAG}={choice.name} serves each dataset at its recorded rate: "
            "leave target_fps out or choose such a backend"
        )
    own = getattr(choice.options, "target_fps", None) if converts_rates(choice) else None
    if spec.target_fps is not None and own is not None and float(own) != float(spec.target_fps):
        raise MixtureError(
            f"{MIXTURE_FLAG}: target_fps={spec.target_fps:g} but {OPTIONS_FLAG}.target_fps={own:g}; give one"
        )
