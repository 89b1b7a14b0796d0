# `make setup` builds .venv once (re-runs only when pyproject.toml or this Makefile change);
# `make test` and `make demo` build on it.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.robo-loaders-setup
TORCH_PINS := torch==2.11.0 torchvision==0.26.0
PIP := $(PY) -m pip --disable-pip-version-check -q
DEMO_DIR ?= demo_out

.PHONY: setup test test-fast unit integration lint demo bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile scripts/find_python312.sh
	@set -euo pipefail; \
	py=$$(scripts/find_python312.sh); \
	if [ -x $(PY) ] && ! $(PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then \
	  echo "[setup] $(VENV) is not Python 3.12: recreating it"; rm -rf $(VENV); fi; \
	if [ ! -x $(PY) ]; then echo "[setup] creating $(VENV) with $$py"; "$$py" -m venv $(VENV); fi; \
	if ! (ldconfig -p 2>/dev/null | grep 'libavcodec\.so' >/dev/null); then \
	  echo "[setup] FFmpeg shared libraries missing (torchcodec needs them): apt-get install ffmpeg"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ffmpeg >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ffmpeg >/dev/null; fi; \
	fi; \
	echo "[setup] installing torch, LeRobot, torchdata, torchcodec"; \
	$(PIP) install -U pip "setuptools>=71,<82" wheel; \
	$(PIP) install $(TORCH_PINS) "lerobot[dataset,training]==0.6.1" torchdata==0.11.0 "torchcodec>=0.11,<0.12"; \
	echo "[setup] installing robomimic 0.3.0 (egl_probe needs CMAKE_POLICY_VERSION_MINIMUM under CMake 4)"; \
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" CMAKE_POLICY_VERSION_MINIMUM=3.5 $(PIP) install --no-build-isolation egl_probe; \
	$(PIP) install $(TORCH_PINS) robomimic==0.3.0 six; \
	echo "[setup] installing robo-loaders-plugin (editable, all extras and the test extra)"; \
	$(PIP) install $(TORCH_PINS) -e ".[all,test]"; \
	$(PY) -c "import robomimic, lerobot, torchdata, torch, robo_loaders_plugin; print('[setup] ok: torch', torch.__version__)"; \
	touch $(STAMP)

# every test (the README's and CI's command): the package's unit and integration tests, the benchmark harness's
# (benchmarks/tests) and the example third-party backend's, in two processes (pytest-xdist; a module's tests stay
# in one); 24-32 min measured on a 2-core machine other jobs shared (budget: 30; the 25 slowest are listed at the end)
test: setup lint
	$(PY) -m pytest -ra -p no:cacheprovider -n 2 --dist loadscope --durations=25 tests integration_tests benchmarks/tests examples/jpeg_backend/tests

# the inner loop, -m fast: every unit test (tests/), the quick parity checks marked fast in integration_tests/ (one
# per backend and framework, against the native loaders) and the harness's fake-row tests: 2 min on a quiet
# 2-core machine (limit: 3 min)
test-fast: setup lint
	$(PY) -m pytest -ra -p no:cacheprovider -m fast tests integration_tests benchmarks/tests

unit: setup
	$(PY) -m pytest -ra -p no:cacheprovider tests

integration: setup
	$(PY) -m pytest -ra -p no:cacheprovider integration_tests

# lint, format, types and layers (configured in pyproject.toml: [tool.ruff], [tool.mypy] and its files,
# [tool.importlinter]), run first by test and test-fast, so by CI: a `# noqa` or `# type: ignore` names its code
# and says why
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

demo: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash examples/demo.sh $(DEMO_DIR)

# the README's loader tables: every backend against the native loader in the same run (3 rounds, each backend
# reported by its median run), written to benchmarks/results/, then the README's tables regenerated from them; data
# generated into bench_out/ (about 1 GB); tens of minutes on a 2-core machine. REPEATS=1 for a quicker look.
bench: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" REPEATS=$${REPEATS:-3} bash benchmarks/robomimic_lift.sh
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" REPEATS=$${REPEATS:-3} PRESETS="$${PRESETS:-diffusion}" bash benchmarks/lerobot.sh
	$(PY) -m benchmarks.harness readme

clean:
	rm -rf $(VENV) $(DEMO_DIR)
