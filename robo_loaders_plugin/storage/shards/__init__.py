"""robo-shards: tar shards of per-episode records for streaming backends (spec: docs/robo-shards.md)."""

from robo_loaders_plugin.storage.shards.format import DEFAULT_SHARD_BYTES, ShardError
from robo_loaders_plugin.storage.shards.reader import ShardReader, verify_dir
from robo_loaders_plugin.storage.shards.writer import ShardWriter, publish

__all__ = ["DEFAULT_SHARD_BYTES", "ShardError", "ShardReader", "ShardWriter", "publish", "verify_dir"]
