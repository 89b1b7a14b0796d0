"""Episode sources, one per input format: plain episodes (numpy arrays, decoded frames) and one fingerprint.

Every backend reads a format through its source: a store's build, shard conversion, a backend streaming the
source. No framework is imported here; the adapters (``robo_loaders_plugin.robomimic``/``.lerobot``) decide
which episodes and fields a run uses.
"""
