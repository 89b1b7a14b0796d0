"""compressed_cache: every episode read once, camera frames kept losslessly compressed in one shared file."""
from robo_loaders_plugin.backends.compressed_cache.store import EpisodeStore, StoreWriter, StoreError

__all__ = ["EpisodeStore", "StoreWriter", "StoreError"]
