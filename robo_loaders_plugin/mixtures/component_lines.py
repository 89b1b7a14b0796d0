"""What a mixture's build says about its components' datasets, in both frameworks.

Why: each component's dataset is built by its backend as a single dataset is, and says what it serves in one line
(its store, where, how big, how bounded: ~900 characters) and, when it builds a store, shows a bar. A mixture of a
few components keeps those lines; a pretraining mixture of 400 printed 400 of them at every start (~360 kB) and 400
bars on its first, which hid the lines that matter (a refusal's reason, the padding, the mixture's own line). Past
:data:`~robo_loaders_plugin.core.units.NAMED_IN_A_LINE` components, each component's line is logged at ``DEBUG``
(``$ROBO_LOADERS_LOG_LEVEL=DEBUG`` prints them), one bar runs over the components with the backends' own bars
quieted (``core.progress``), and one line counts what was built: how many components' stores were reused and which
were built this start.
"""

from __future__ import annotations

import logging
from typing import Any

from tqdm.auto import tqdm

from robo_loaders_plugin.core.log import ENV_LEVEL
from robo_loaders_plugin.core.progress import quiet_inner_bars
from robo_loaders_plugin.core.units import NAMED_IN_A_LINE, plural, some_of


class ComponentLines:
    """A context around a mixture's component builds: each component's line at the level :attr:`level` says, its
    store's reuse counted (:meth:`built`), and the count logged when the block ends without an error.

    Args:
        count: The mixture's components.
        backend: The backend building them, for the bar and the count's line.
        logger: The adapter's logger.
        where: What the count's line starts with (``mixture``, ``--dataset.mixture``).
    """

    def __init__(self, count: int, backend: str, logger: logging.Logger, where: str = "mixture"):
        self.count, self.backend, self.logger, self.where = int(count), backend, logger, where
        self.many = self.count > NAMED_IN_A_LINE
        self.reused: list[str] = []
        self.stored: list[str] = []  # components whose store was built this start
        self._bar: Any = None
        self._quiet = quiet_inner_bars(self.many)

    @property
    def level(self) -> int:
        """The level of each component's line: ``INFO`` for a few components, ``DEBUG`` past
        :data:`~robo_loaders_plugin.core.units.NAMED_IN_A_LINE`."""
        return logging.DEBUG if self.many else logging.INFO

    def __enter__(self) -> ComponentLines:
        self._quiet.__enter__()
        if self.many:
            self._bar = tqdm(total=self.count, desc=f"{self.backend} mixture", unit="component", mininterval=0.5)
        return self

    def built(self, name: str, dataset: Any, line: str | None = None) -> None:
        """Say that a component's dataset is built: log ``line`` (when given) at :attr:`level`, count whether its
        store was reused (``Serving.reused``; nothing counted for a dataset that keeps no store between runs), move
        the bar.

        Args:
            name: The component as the log names it.
            dataset: Its built dataset.
            line: The line that says what it serves (``None``: logged already, at :attr:`level`).
        """
        if line is not None:
            self.logger.log(self.level, line)
        reused = getattr(getattr(dataset, "serving", None), "reused", None)
        if reused is not None:
            (self.reused if reused else self.stored).append(name)
        if self._bar is not None:
            self._bar.update(1)

    def tally(self) -> str:
        """The line that counts the components' datasets: how many were built, how many stores were reused and
        which were built this start.

        Returns:
            The line.
        """
        stores = ""
        if self.reused or self.stored:
            built = f", {len(self.stored)} built ({some_of(self.stored, 3)})" if self.stored else ", none built"
            stores = f"; their stores: {len(self.reused)} reused{built}"
        return (
            f"{self.where}: {plural(self.count, 'component')}' datasets built by {self.backend}{stores}; each "
            f"component's line is logged at DEBUG ({ENV_LEVEL}=DEBUG prints them)"
        )

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._bar is not None:
            self._bar.close()
        self._quiet.__exit__(exc_type, exc, tb)
        if self.many and exc_type is None:
            self.logger.info(self.tally())
