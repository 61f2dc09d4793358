# Quick start: `make run` and `make test`. Both create .venv and install everything on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
RUN_GRAPH ?= resnet50

.PHONY: run test test-long install graphs clean experiments

install: $(STAMP)

# torch first and pinned (the CPU wheel on this machine's disk); torchvision at the release built
# for that torch. Its only wheel here is the CUDA build, whose C++ ops cannot load beside the CPU
# torch; the guard lets `import torchvision` (and transformers) succeed without them, installed
# only where a plain import fails (scripts/torchvision_guard.py says why and what the real fix is).
# The handoff extra (deepspeed, torchtitan) keeps that torch: both take any torch >= 2.
$(STAMP): pyproject.toml Makefile scripts/torchvision_guard.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet torchvision==0.28.0
	$(PY) scripts/torchvision_guard.py install
	$(PY) -m pip install --quiet -e '.[models,test,distributed,experiments,onnx,handoff]'
	$(PY) -m incsched.policy.warm  # the policy decoders and the placement moves into numba's cache: a first solve loads them in a second, not 8-10
	touch $(STAMP)

# The default objective (peer: memory balanced), then the throughput objective (slowest stage's
# compute + sends at 1 GB/s, 4 micro-batches under 1F1B), then both splits side by side as pipelines.
run: $(STAMP)
	$(VENV)/bin/incsched graph info $(RUN_GRAPH)
	@echo
	@mkdir -p out/run
	$(VENV)/bin/incsched solve $(RUN_GRAPH) --stages 4 --time-limit 60 --json out/run/peer.json
	@echo
	$(VENV)/bin/incsched solve $(RUN_GRAPH) --stages 4 --objective throughput --bandwidth 1e9 --micro-batches 4 --time-limit 40 --json out/run/throughput.json
	@echo
	$(PY) benchmarks/throughput.py --compare out/run/peer.json out/run/throughput.json --graph $(RUN_GRAPH) --bandwidth 1e9 --micro-batches 4

# Every test but the long end-to-end ones (about 10 minutes on 2 quiet cores); test-long runs
# those (about 6 more minutes); .ci/run runs both.
test: $(STAMP)
	$(PY) -m pytest -q -m "not long"

test-long: $(STAMP)
	$(PY) -m pytest -q -m long

# The quick profile of every shipped experiment (data/experiments), each with its report (tables,
# plots) under out/experiments/NAME-quick/report and its results page published to
# docs/results/NAME.md (figures in docs/results/NAME/, the index docs/results/README.md): about
# 5 minutes on 2 quiet cores, 19 at load 4-9. A rerun reuses the rows whose key still holds
# (rm -r out/experiments for a clean run).
EXPERIMENTS := inc_ilp respect icml24 doppler hsdag fidelity training
RESULTS ?= docs/results
experiments: $(STAMP)
	@for e in $(EXPERIMENTS); do \
		$(VENV)/bin/incsched experiment run $$e --profile quick -o out/experiments/$$e-quick && \
		$(VENV)/bin/incsched experiment report out/experiments/$$e-quick --publish $(RESULTS) || exit 1; \
	done

# Re-capture every shipped graph in data/graphs from the real models (random weights, offline).
graphs: $(STAMP)
	$(PY) scripts/capture_shipped_graphs.py --out data/graphs

clean:
	rm -rf $(VENV) build *.egg-info
