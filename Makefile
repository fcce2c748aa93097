# The README's two commands are `make demo` and `make test`; both set up what they need.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
# Exactly one ONNX Runtime: the CPU build here; a GPU host runs
# `make setup VENV=.venv-gpu EXTRAS=gpu,test`
# (onnxruntime-gpu, TensorRT 10, cuda-python, NVML; see tests/shared/test_extras.py).
# quantize: nncf and openvino, for `strata models quantize --engine openvino`.
EXTRAS ?= cpu,test,quantize
# --system-site-packages: a GPU host's own PyTorch (EXTRAS=gpu-torch,test).
VENV_FLAGS ?=

.PHONY: setup demo test lint typecheck contracts gpu-check

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

setup: $(VENV)/.installed

# The demo's clip is vtest.avi's street camera, fetched as `make test` fetches it; without it
# (no apt) `strata demo` says so in one line and shows the synthetic clip.
demo: setup
	$(PY) .ci/test_data.py
	$(VENV)/bin/strata demo

# Locally a machine without apt (or root) still runs the tests, those needing the missing
# tools skipped with the reason; with CI set, a missing tool stops the run here.
test: setup
	bash .ci/system-deps || test -z "$${CI:-}"
	$(PY) .ci/test_data.py
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: setup
	MYPY=$(abspath $(VENV))/bin/mypy bash .ci/typecheck

contracts: setup
	$(PY) protos/generate.py

# Every gpu test, the edge GPU benchmark and the FP16 agreement, in one JSON report
# (build/gpu-check.json). Without an NVIDIA GPU it says so and exits 2. It uses the venv as
# it is (no install): on a GPU host set it up with EXTRAS=gpu,test, or bring your own torch.
gpu-check:
	$(PY) -m strata.tools.gpucheck --out build/gpu-check.json
