"""The plugin's user-facing errors. Every one of them names the file, key or option at fault and says what to do."""
from __future__ import annotations


class RoboLoadersError(Exception):
    """Base class of the plugin's user-facing errors (bad config, bad data, bad options)."""


class UnknownBackendError(RoboLoadersError, KeyError):
    """A backend name no plugin registered; the message names the setting (``where``), the closest registered
    name and every registered one."""

    def __init__(self, name: str, known: list[str], where: str = ""):
        self.name, self.known, self.where = name, known, where
        super().__init__(name)

    def __str__(self) -> str:
        import difflib

        close = difflib.get_close_matches(str(self.name), self.known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        where = f"{self.where}: " if self.where else ""
        return (f"{where}unknown data backend {self.name!r}{hint}; registered backends: {', '.join(self.known)}. "
                "Run 'robo-loaders list' to see them with descriptions.")


class BackendOptionError(RoboLoadersError, ValueError):
    """A backend option (``data_backend_kwargs`` / ``--dataset.backend_kwargs``) is unknown or ill-typed."""


class SourceError(RoboLoadersError):
    """A source dataset (robomimic HDF5, LeRobot v3 directory) is missing, unreadable or inconsistent."""


class StaleSourceError(RoboLoadersError):
    """Persisted data (a cache, converted shards) was made from a source that has changed since."""


class CompatError(RoboLoadersError):
    """The installed framework is not the version whose internals the plugin was written against."""
