# The README's two commands are `make demo` and `make test`; both set up what they need.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: setup demo test lint typecheck contracts

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/strata demo

test: setup
	bash .ci/system-deps
	$(PY) .ci/test_data.py
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: setup
	MYPY=$(abspath $(VENV))/bin/mypy bash .ci/typecheck

contracts: setup
	$(PY) protos/generate.py
