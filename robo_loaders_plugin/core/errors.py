"""The plugin's user-facing errors. Every one of them names the file, key or option at fault and says what to do."""
from __future__ import annotations


class RoboLoadersError(Exception):
    """Base class of the plugin's user-facing errors (bad config, bad data, bad options)."""


class UnknownBackendError(RoboLoadersError, KeyError):
    def __init__(self, name: str, known: list[str]):
        self.name, self.known = name, known
        super().__init__(name)

    def __str__(self) -> str:
        return (f"unknown data backend {self.name!r}; registered backends: {', '.join(self.known)}. "
                "Run 'robo-loaders list' to see them with descriptions.")


class BackendOptionError(RoboLoadersError, ValueError):
    """A backend option (``data_backend_kwargs`` / ``--dataset.backend_kwargs``) is unknown or ill-typed."""


class SourceError(RoboLoadersError):
    """A source dataset (robomimic HDF5, LeRobot v3 directory) is missing, unreadable or inconsistent."""


class StaleSourceError(RoboLoadersError):
    """Persisted data (a cache, converted shards) was made from a source that has changed since."""


class CompatError(RoboLoadersError):
    """The installed framework is not the version whose internals the plugin was written against."""
