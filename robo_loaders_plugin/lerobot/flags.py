"""The plugin's lerobot-train flags as a user types them, and the backend choice two of them give.

The bottom of the adapter's own modules, so that every module above names a setting the same way and none has to
import another one for it: the flags' names, how a message names a mixture's component, where a flag's value is on
the command line (:func:`flag_text`: LeRobot's parser reads values as YAML, the plugin reads what was typed, as
JSON), and ``--dataset.backend``/``--dataset.backend_kwargs`` resolved into one ``BackendChoice`` (at parsing, then
reused). The mixture flag's checks (``mixture_flag``), the roots' (``dataset_root``), the metadata's
(``mixture_meta``) and the builds (``single``, ``mixture``) import this; it imports none of them.
"""

from __future__ import annotations

import sys

from robo_loaders_plugin.core.backend_json import parse_backend_kwargs
from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.registry import choose_backend
from robo_loaders_plugin.core.spec import DEFAULT_BACKEND, BackendChoice

FRAMEWORK = "lerobot"
NAME_FLAG, OPTIONS_FLAG = "--dataset.backend", "--dataset.backend_kwargs"
MIXTURE_FLAG = "--dataset.mixture"


def component_name(spec, k: int) -> str:
    """``component K (repo_id)``, as the messages name a mixture's component.

    Args:
        spec: The ``MixtureSpec``.
        k: The component's position.
    """
    return f"component {k} ({spec.components[k].source})"


def flag_text(argv: list[str], flag: str = OPTIONS_FLAG) -> tuple[int, str, str] | None:
    """Where ``flag``'s value is in ``argv``: ``(position, what precedes the value there, the value)`` (``--flag
    value``: ``""``; ``--flag=value``: ``"--flag="``), as LeRobot's parser reads it (given twice, the last one
    counts); ``None`` when it is not there.

    Args:
        argv: The command line without the program.
        flag: The flag (default: ``--dataset.backend_kwargs``).

    Returns:
        The position and text of its value, or ``None``.
    """
    found = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            found = (i + 1, "", argv[i + 1])
        elif arg.startswith(flag + "="):
            found = (i, flag + "=", arg[len(flag) + 1 :])
    return found


def backend_choice(dataset_cfg) -> BackendChoice:
    """The backend choice of ``cfg.dataset`` (``backend`` missing or "native": LeRobot's own), resolved once per
    distinct (name, options) (``core.registry.choose_backend``): at argument parsing, then reused.

    ``native`` takes no options and refuses any, as every backend refuses the options it does not take (they were
    ignored, and saved in ``train_config.json`` as if they applied). A run resumed with another backend than its
    saved config's keeps the saved options (LeRobot's parser merges the flag into them): ``--dataset.backend_kwargs={}``
    drops them (:func:`command_line_options`).

    Args:
        dataset_cfg: ``cfg.dataset`` (a ``BackendDatasetConfig``, or LeRobot's own ``DatasetConfig``).

    Returns:
        The :class:`~robo_loaders_plugin.core.spec.BackendChoice`.

    Raises:
        RoboLoadersError: naming ``--dataset.backend`` / ``--dataset.backend_kwargs`` and what is wrong.
    """
    name = getattr(dataset_cfg, "backend", None)  # LeRobot's own DatasetConfig has no such field
    if name is None:
        name = DEFAULT_BACKEND
    # an empty name is refused (choose_backend), not taken as the default: `--dataset.backend=$BACKEND` with the
    # variable unset trained on native without a word (a reviewer's reproduction; robomimic refused "" already)
    kwargs = getattr(dataset_cfg, "backend_kwargs", None) or {}
    if isinstance(kwargs, str):
        kwargs = parse_backend_kwargs(kwargs, OPTIONS_FLAG)
    if not isinstance(kwargs, dict):
        raise RoboLoadersError(
            f'{OPTIONS_FLAG} must be a JSON object, e.g. \'{{"codec": "zstd"}}\', got {type(kwargs).__name__}'
        )
    return choose_backend(FRAMEWORK, name, kwargs, name_where=NAME_FLAG, options_where=OPTIONS_FLAG)


def choose(backend: str, /, **options) -> BackendChoice:
    """A LeRobot backend choice from Python (what ``--dataset.backend=NAME --dataset.backend_kwargs=JSON`` give).

    Args:
        backend: The backend's name.
        **options: Its options.

    Returns:
        The :class:`~robo_loaders_plugin.core.spec.BackendChoice`, for ``single.build_dataset``.

    Raises:
        RoboLoadersError: an unknown backend, or a bad option, named.
    """
    return choose_backend(FRAMEWORK, backend, options, name_where=NAME_FLAG, options_where=OPTIONS_FLAG)


def command_line_options(decoded: dict, argv: list[str] | None = None) -> dict:
    """The backend's options with the values typed on the command line read as JSON, over what LeRobot's parser
    made of them (YAML: ``1e9`` is the string ``'1e9'`` there, a number in JSON).

    Why after the parser, too: with ``--dataset.discover_packages_path=robo_loaders_plugin`` (the import hook
    off) the plugin is imported by LeRobot's parser after it read the command line, so
    ``integration.check_command_line`` never sees it; this runs on both paths, when the config is built.

    An empty object (``{}``, or an empty value) means no options, also on a run resumed from a ``--config_path``
    file, whose saved options LeRobot's parser would otherwise keep (it merges the flag into them): how a run is
    resumed with another backend, ``native`` included, which take none of the saved backend's options.

    Args:
        decoded: ``backend_kwargs`` as LeRobot's parser decoded it (merged with a ``--config_path`` file's).
        argv: The command line (default: ``sys.argv[1:]``).

    Returns:
        ``decoded`` with every option the command line gives taken from its JSON reading; ``{}`` when it gives an
        empty object.

    Raises:
        BackendOptionError: the command line's value is not a JSON object, naming the flag.
    """
    found = flag_text(sys.argv[1:] if argv is None else argv)
    if found is None or not isinstance(decoded, dict):
        return decoded
    typed = parse_backend_kwargs(found[2], OPTIONS_FLAG)
    return {**decoded, **typed} if typed else {}


def saved_options_hint(argv: list[str] | None = None) -> str:
    """What to add to the refusal of a backend's options that the command line did not give: they come from the
    ``--config_path`` file of a resumed run (another backend's, when the run is resumed with another one), and
    ``--dataset.backend_kwargs={}`` drops them (:func:`command_line_options`).

    Args:
        argv: The command line (default: ``sys.argv[1:]``).

    Returns:
        ``"; ..."`` to append to the message, or ``""`` when the options were typed or no config file is read.
    """
    argv = sys.argv[1:] if argv is None else argv
    if flag_text(argv) is not None or flag_text(argv, "--config_path") is None:
        return ""
    return (
        f"; these options come from the --config_path file (a resumed run keeps its saved options): give "
        f"{OPTIONS_FLAG}={{}} to drop them"
    )


def drop_n_last_frames_of(cfg) -> int:
    """The frames lerobot-train's sampler leaves out at each episode's end: the trained config's
    ``drop_n_last_frames`` (diffusion: 7), read as lerobot-train 0.6.1 reads it (``cfg.trainable_config``: the
    policy's, or the reward model's).

    Args:
        cfg: lerobot-train's ``TrainPipelineConfig``.

    Returns:
        The count (0 when the config has none).
    """
    active = getattr(cfg, "trainable_config", None) or getattr(cfg, "policy", None)
    return int(getattr(active, "drop_n_last_frames", 0) or 0)
