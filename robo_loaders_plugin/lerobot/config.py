"""``--dataset.backend`` and ``--dataset.backend_kwargs`` for LeRobot's draccus configs.

The re-typing of ``TrainPipelineConfig.dataset`` itself is a patch, in ``robo_loaders_plugin.lerobot.compat``. Why a
subclass and a re-typed field: LeRobot's ``DatasetConfig`` is a plain dataclass (no draccus choice
registry), and draccus reads field types with ``typing.get_type_hints`` each time it builds the parser and each
time it decodes, so pointing ``TrainPipelineConfig.dataset`` at a subclass before parsing makes the flags parse,
appear in ``--help`` and get saved in ``train_config.json`` (so ``--resume`` works), while
``isinstance(cfg.dataset, DatasetConfig)`` still holds for LeRobot's code.

Every bad backend name or option (name or value) fails here, at parsing, before LeRobot reads any data: the
choice is resolved once (``core.registry.choose_backend``) and reused when the dataset is built. So does a
``--dataset.root``/``--dataset.episodes`` LeRobot cannot train from (``lerobot.dataset_root``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from draccus.utils import DecodingError
from lerobot.configs.default import DatasetConfig

from robo_loaders_plugin.core.spec import DEFAULT_BACKEND


@dataclass
class BackendDatasetConfig(DatasetConfig):
    """LeRobot's dataset options plus --dataset.backend, --dataset.backend_kwargs and --dataset.mixture
    (robo-loaders-plugin)."""

    # The dataset (LeRobot's own flag). Not given with --dataset.mixture, whose components name theirs: so it has a
    # default here, and a run with neither flag is refused naming both.
    repo_id: str = ""
    # Dataset backend from robo-loaders-plugin ('robo-loaders list'); "native" = LeRobot's own LeRobotDataset.
    backend: str = DEFAULT_BACKEND
    # Backend options as a JSON object (double quotes), e.g. --dataset.backend_kwargs='{"codec": "zstd"}';
    # 'robo-loaders list --json' lists each backend's options.
    backend_kwargs: dict[str, Any] = field(default_factory=dict)
    # Train on several datasets at once: a JSON file or inline JSON naming each component's repo_id, root, weight
    # (optional episodes, rename), e.g. --dataset.mixture=mix.json; docs/mixtures.md. Saved resolved (inline JSON).
    mixture: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        from robo_loaders_plugin.core.errors import BackendOptionError, RoboLoadersError
        from robo_loaders_plugin.lerobot.dataset_root import check_dataset_root
        from robo_loaders_plugin.lerobot.flags import backend_choice, command_line_options, saved_options_hint
        from robo_loaders_plugin.lerobot.mixture_flag import command_line_mixture, resolve_mixture_flag

        # DecodingError, not ValueError: LeRobot's parser prints it as one "error: ..." line (exit 1); an empty key
        # path, because the message already names the flag as the user typed it
        try:
            self.backend_kwargs = command_line_options(self.backend_kwargs)  # JSON numbers, not YAML's strings
            choice = backend_choice(self)
            self.mixture = command_line_mixture(self.mixture)  # the JSON text typed, not YAML's reading of it
            self.mixture = resolve_mixture_flag(self)  # checked now; saved resolved, so --resume reads the same
            if self.mixture is None:  # a mixture's components are checked with it
                check_dataset_root(self, choice)  # --dataset.root/episodes, before LeRobot goes to the Hub
        except RoboLoadersError as exc:  # options a resumed run's config holds: the hint says how to drop them
            hint = saved_options_hint() if isinstance(exc, BackendOptionError) else ""
            raise DecodingError((), f"{exc}{hint}") from None
