"""Episode sources, one per input format: plain episodes (numpy arrays, decoded frames) and one fingerprint.

Every backend reads a format through its source: the compressed_cache build, shard conversion and the coming
backends. No framework is imported here; the adapters (``robo_loaders_plugin.robomimic``/``.lerobot``) decide
which episodes and fields a run uses.
"""
