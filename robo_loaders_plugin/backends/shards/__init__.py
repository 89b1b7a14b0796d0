"""robo-shards: tar shards of per-episode records for streaming backends (spec: docs/robo-shards.md)."""
from robo_loaders_plugin.backends.shards.format import ShardError, ShardReader, ShardWriter

__all__ = ["ShardError", "ShardReader", "ShardWriter"]
