"""``--dataset.backend`` and ``--dataset.backend_kwargs`` for LeRobot's draccus configs.

The re-typing of ``TrainPipelineConfig.dataset`` itself is a patch, in ``robo_loaders_plugin.lerobot.compat``. Why a
subclass and a re-typed field: LeRobot's ``DatasetConfig`` is a plain dataclass (no draccus choice
registry), and draccus reads field types with ``typing.get_type_hints`` each time it builds the parser and each
time it decodes, so pointing ``TrainPipelineConfig.dataset`` at a subclass before parsing makes the flags parse,
appear in ``--help`` and get saved in ``train_config.json`` (so ``--resume`` works), while
``isinstance(cfg.dataset, DatasetConfig)`` still holds for LeRobot's code.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from draccus.utils import DecodingError
from lerobot.configs.default import DatasetConfig


@dataclass
class BackendDatasetConfig(DatasetConfig):
    # Dataset backend from robo-loaders-plugin ('robo-loaders list'); "native" = LeRobot's own LeRobotDataset.
    backend: str = "native"
    # Backend options as a JSON object, e.g. --dataset.backend_kwargs='{"codec": "zstd"}'.
    backend_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        from robo_loaders_plugin.lerobot.integration import backend_choice
        from robo_loaders_plugin.core.errors import RoboLoadersError

        # DecodingError, not ValueError: LeRobot's parser prints it as one "error: ..." line (exit 1)
        try:
            backend_choice(self)
        except (RoboLoadersError, KeyError) as exc:
            field_name = "backend_kwargs" if "backend_kwargs" in str(exc) else "backend"
            raise DecodingError(("dataset", field_name), str(exc)) from None
