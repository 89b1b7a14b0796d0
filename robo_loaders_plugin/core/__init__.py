"""Framework-neutral core: backend specs, the plugin registry and hook specifications, errors, and the iteration
contract the framework adapters drive."""
