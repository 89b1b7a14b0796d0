"""The project's own tooling run from a clone (not installed): ``import_cycles``, a contract ``lint-imports`` loads
(``[tool.importlinter] contract_types`` in pyproject.toml); the shell helpers beside it are sourced by the Makefile
and the demo."""
