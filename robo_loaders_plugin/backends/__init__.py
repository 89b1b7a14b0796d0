"""The built-in backends, one package each: its spec and options (``__init__``), its footprint, its robomimic and
LeRobot factories, and what only it uses. Each package is a plugin registered through the ``robo_loaders``
entry-point group, as a third party's is (pyproject.toml). What two or more backends share lives in the layers
(``core``, ``storage``, ``sources``, ``windows``, ``frames``, ``pipeline``) and the framework adapters.
"""
