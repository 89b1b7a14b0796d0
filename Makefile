# `make setup` builds .venv once (re-runs only when pyproject.toml or this Makefile change);
# `make test` and `make demo` build on it.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.robo-loaders-setup
TORCH_PINS := torch==2.11.0 torchvision==0.26.0
PIP := $(PY) -m pip --disable-pip-version-check
# pip's progress bars are install options (not global ones): off, since setup shows pip's lines as they come
PIP_INSTALL := $(PIP) install --progress-bar off
# what setup shows of pip's output as it comes (the whole output is in $(VENV)/setup-*.log)
PIP_SHOWN := '^ *(Downloading|Building wheel|Successfully built|ERROR)'
DEMO_DIR ?= demo_out

.PHONY: setup test test-fast unit integration lint demo bench clean

# Six steps, each announced with the time elapsed (scripts/progress_lib.sh): pip's downloads are shown as they come,
# a "still running" line when nothing was shown for 30 s, and every step's whole output goes to $(VENV)/setup-*.log
# (named when a step fails). Minutes on a fresh machine (6 in issue 42's run), most of it torch and LeRobot.
setup: $(STAMP)

$(STAMP): pyproject.toml Makefile scripts/find_python312.sh scripts/progress_lib.sh
	@set -euo pipefail; started=$$SECONDS; steps=6; n=0; source scripts/progress_lib.sh; \
	py=$$(scripts/find_python312.sh); \
	echo "[setup] building $(VENV): minutes on a fresh machine (6 measured; torch and LeRobot are most of it)"; \
	step "Python 3.12 environment $(VENV) ($$py): seconds"; \
	if [ -x $(PY) ] && ! $(PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then \
	  echo "   $(VENV) is not Python 3.12: recreating it"; rm -rf $(VENV); fi; \
	if [ ! -x $(PY) ]; then "$$py" -m venv $(VENV); fi; \
	step "FFmpeg's shared libraries (torchcodec needs them)"; \
	if ldconfig -p 2>/dev/null | grep 'libavcodec\.so' >/dev/null; then echo "   found"; else \
	  echo "   missing: apt-get install ffmpeg (a minute or two)"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ffmpeg >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ffmpeg >/dev/null; fi; \
	fi; \
	step "pip, setuptools, wheel: seconds"; \
	run $(VENV)/setup-pip.log $(PIP_SHOWN) $(PIP_INSTALL) -U pip "setuptools>=71,<82" wheel; \
	step "torch, LeRobot 0.6.1, torchdata, torchcodec: the long step, several minutes (GBs to download)"; \
	run $(VENV)/setup-torch-lerobot.log $(PIP_SHOWN) \
	  $(PIP_INSTALL) $(TORCH_PINS) "lerobot[dataset,training]==0.6.1" torchdata==0.11.0 "torchcodec>=0.11,<0.12"; \
	step "robomimic 0.3.0 (egl_probe built from source, CMAKE_POLICY_VERSION_MINIMUM for CMake 4): a minute"; \
	run $(VENV)/setup-egl_probe.log $(PIP_SHOWN) env PATH="$(CURDIR)/$(VENV)/bin:$$PATH" CMAKE_POLICY_VERSION_MINIMUM=3.5 \
	  $(PIP_INSTALL) --no-build-isolation egl_probe; \
	run $(VENV)/setup-robomimic.log $(PIP_SHOWN) $(PIP_INSTALL) $(TORCH_PINS) robomimic==0.3.0 six; \
	step "robo-loaders-plugin (editable, every extra and the test tools): a minute"; \
	run $(VENV)/setup-plugin.log $(PIP_SHOWN) $(PIP_INSTALL) $(TORCH_PINS) -e ".[all,test]"; \
	$(PY) -c "import robomimic, lerobot, torchdata, torch, robo_loaders_plugin; print('[setup] ok: torch', torch.__version__)"; \
	echo "[setup] done in $$(elapsed)"; \
	touch $(STAMP)

# every test (the README's and CI's command): the package's unit and integration tests, the benchmark harness's
# (benchmarks/tests) and the example third-party backend's, in two processes (pytest-xdist; a module's tests stay
# in one); 24-32 min measured on a 2-core machine other jobs shared (budget: 30; the 60 slowest are listed at the end)
test: setup lint
	$(PY) -m pytest -ra -p no:cacheprovider -n 2 --dist loadscope --durations=60 tests integration_tests benchmarks/tests examples/jpeg_backend/tests

# the inner loop, -m fast: every unit test (tests/), the quick parity checks marked fast in integration_tests/ (one
# per backend and framework, against the native loaders) and the harness's fake-row tests: 2 min on a quiet
# 2-core machine (limit: 3 min)
test-fast: setup lint
	$(PY) -m pytest -ra -p no:cacheprovider -m fast tests integration_tests benchmarks/tests

unit: setup
	$(PY) -m pytest -ra -p no:cacheprovider tests

integration: setup
	$(PY) -m pytest -ra -p no:cacheprovider integration_tests

# lint, format, types, layers, import cycles and dead code (configured in pyproject.toml: [tool.ruff], [tool.mypy]
# and its files, [tool.importlinter], whose cycle contract is scripts/import_cycles.py, [tool.vulture] with
# scripts/vulture_whitelist.py), run first by test and test-fast, so by CI: a `# noqa` or `# type: ignore` names its
# code and says why
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/vulture

demo: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash examples/demo.sh $(DEMO_DIR)

# the README's loader tables: every backend against the native loader in the same run (3 rounds, each backend
# reported by its median run), written to benchmarks/results/, then the generated tables of every doc that has them
# (README.md, docs/benchmarks.md, docs/scale.md, docs/training-benchmark.md) regenerated from benchmarks/results/;
# data generated into bench_out/ (about 1 GB); tens of minutes on a 2-core machine. REPEATS=1 for a quicker look.
GENERATED_DOCS := README.md docs/benchmarks.md docs/scale.md docs/training-benchmark.md
bench: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" REPEATS=$${REPEATS:-3} bash benchmarks/robomimic_lift.sh
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" REPEATS=$${REPEATS:-3} PRESETS="$${PRESETS:-diffusion}" bash benchmarks/lerobot.sh
	for doc in $(GENERATED_DOCS); do $(PY) -m benchmarks.harness readme $$doc || exit 1; done

clean:
	rm -rf $(VENV) $(DEMO_DIR)
