# trainop developer entry points. `make demo` and `make test` are the README's two commands.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
TRAINOP := $(VENV)/bin/trainop
PYTEST := $(VENV)/bin/pytest

.PHONY: install lock build-binaries test test-unit test-integration test-e2e lint typecheck \
        importlint generate check-generated demo demo-down bench bench-scale bench-admission bench-schema bench-memory bench-integrations test-faults bench-eligibility bench-placement clean chart-lint \
        real-deps build-node-binaries images test-real demo-real demo-real-down

# The venv installs exactly requirements-dev.lock (every version pinned, hashes checked), then
# trainop itself without dependencies: two installs from one checkout get the same packages.
# --no-compile: Python compiles a module when it is first imported, and most of the 77
# packages' modules never are (a fresh CI clone: 59 s -> 17 s for this line, 22 -> 7 s CPU).
$(VENV)/.installed: pyproject.toml requirements-dev.lock
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q --no-compile --require-hashes -r requirements-dev.lock
	$(VENV)/bin/pip install -q --no-deps -e .
	touch $@

install: $(VENV)/.installed

# requirements.lock (runtime: the operator image, trainop.cluster.images) and
# requirements-dev.lock (runtime + dev: make install), by pip-tools' pip-compile from
# pyproject.toml for this Python (3.11, Linux). The dev lock is resolved first and seeds the
# runtime one, so both pin a shared package to the same version. Existing pins are kept while
# pyproject.toml allows them; `make lock UPGRADE=1` takes the newest versions allowed.
PIP_COMPILE := $(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
               --no-emit-find-links --no-emit-index-url --no-emit-trusted-host
lock: install
	$(VENV)/bin/pip install -q 'pip-tools>=7.5,<8'
	$(PIP_COMPILE) $(if $(UPGRADE),--upgrade) --extra dev -o requirements-dev.lock pyproject.toml
	cp requirements-dev.lock requirements.lock
	$(PIP_COMPILE) -o requirements.lock pyproject.toml

build-binaries: install
	$(TRAINOP) cluster build

# Integration modules mostly wait on their API server and on polls, so pytest-xdist runs
# them TEST_WORKERS at a time, whole modules to a worker (--dist loadfile: module fixtures and
# clusters stay per module), each worker on a cluster of its own (tests/integration/conftest.py);
# the unit modules come last and fill the workers as the integration modules end.
TEST_WORKERS ?= 3
test: install build-binaries
	$(PYTEST) -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  tests/integration tests/e2e tests/unit --durations=25

test-unit: install
	$(PYTEST) tests/unit

test-integration: install build-binaries
	$(PYTEST) tests/integration

# Fault tests at full size: bursts of 200 jobs with the operator killed, 60 jobs under 20%
# injected API errors (the short variants run in `make test`).
test-faults: install build-binaries
	TRAINOP_FAULTS_LONG=1 $(PYTEST) tests/integration/test_faults.py

test-e2e: install
	$(PYTEST) tests/e2e

# --- the real-node tier (root; see docs/real-nodes.md) -----------------------------------
# Debian packages real nodes and image builds need, installed when missing.
REAL_DEBS := runc containernetworking-plugins mmdebstrap iproute2
real-deps:
	@missing=""; for p in $(REAL_DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install$$missing"; apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# kubelet, containerd 2.x (+ shim, ctr) and CoreDNS, built once from the Go module proxy.
build-node-binaries: install
	$(TRAINOP) cluster build --real-nodes

# pause, pytorch-cpu, mpi-cpu, operator, the framework images (tensorflow-cpu, jax-cpu,
# paddle-cpu, mxnet-cpu) and hf-cpu (trixie's torch with transformers and Lightning, for
# tests/real/test_6_trainers.py; about 3 minutes cold); mmdebstrap, cached by content, two
# builds at a time (-j).
images: install real-deps
	$(TRAINOP) images build --name none -j 2 pause pytorch-cpu mpi-cpu operator \
	  tensorflow-cpu jax-cpu paddle-cpu mxnet-cpu hf-cpu

# Go builds (CPU) and image builds (mostly download and dpkg) overlap: -j2.
test-real: install build-binaries real-deps
	$(MAKE) -j2 build-node-binaries images
	$(PYTEST) tests/real --timeout 1800 --durations=0

lint: install
	$(VENV)/bin/ruff check operator tests bench
	$(VENV)/bin/ruff format --check operator tests bench

typecheck: install
	$(VENV)/bin/mypy

importlint: install
	$(VENV)/bin/lint-imports

generate: install
	$(TRAINOP) generate crds --out crds --chart charts/trainop/crds

# helm lint (strict) of charts/trainop with default and all-features values; helm comes
# from PATH or the build cache (`make build-binaries`).
chart-lint: install build-binaries
	helm=$$($(PY) -c 'from trainop.cluster.binaries import resolve_binaries as r; print(r(build=False)["helm"])') && \
	  "$$helm" lint --strict charts/trainop && \
	  "$$helm" lint --strict charts/trainop --values tests/integration/chart-values-all.yaml

demo: install build-binaries
	bash examples/demo.sh

# The real-node demo (root): one real node, a PyTorch DDP job that trains, its log.
demo-real: install build-binaries build-node-binaries real-deps
	bash examples/demo-real.sh

demo-real-down: install
	-@pid=$${XDG_STATE_HOME:-$$HOME/.local/state}/trainop/operator-real.pid; \
	  [ -f $$pid ] && kill $$(cat $$pid) 2>/dev/null; rm -f $$pid
	$(TRAINOP) cluster down --name trainop-real

demo-down: install
	-@pid=$${XDG_STATE_HOME:-$$HOME/.local/state}/trainop/operator.pid; \
	  [ -f $$pid ] && kill $$(cat $$pid) 2>/dev/null; rm -f $$pid
	$(TRAINOP) cluster down

bench: install bench-placement
	$(PY) bench/run.py

# The operator against bare pods on a 1,000-node fake fleet (burst) and a 2,000-node deep
# queue; minutes, not part of `make test` (its smoke variant is). Results: bench/results/scale.*
bench-scale: install build-binaries
	$(PY) -m bench.scale

# The operator's admission cycle alone (no API server) on synthetic fleets of 1,000 to
# 10,000 nodes: decision time per cycle, pods/s, one-pod-change cost, RSS.
# Results: bench/results/admission.{json,md,png}
bench-admission: install
	$(PY) -m bench.admission

# What the TrainingJob schema costs the API server per create and status patch, against
# the same kind with status undescribed and with no schema (one local cluster, ~1 minute).
bench-schema: install build-binaries
	$(PY) -m bench.schema_cost

# The operator's state fed 2,000 nodes, 8,000 pods and 1,250 TrainingJobs in-process (no API
# server): RSS, tracemalloc's top 10, the size of each part. Results: bench/results/memory.*
bench-memory: install
	$(PY) -m bench.memory

# trainop's trainer callbacks (trainop.integrations) under the real transformers and Lightning
# Trainers on CPU: step-time overhead (callback on/off in one run) and checkpoint-request
# latency. Needs the extras (pip install 'trainop[transformers,lightning]'), which are not in
# the dev lock; says so when they are missing. Results: bench/results/integrations.{json,md}
bench-integrations: install
	$(PY) bench/integrations.py

bench-eligibility: install
	$(PY) bench/eligibility.py

# Placement policies x workloads through the simulator's admission cycle (bench/placement);
# writes bench/results/placement.{json,md}, placement-*.png and, elastic gangs against
# fixed-size ones, placement-elastic.{json,md} (~10 min on 2 busy cores).
bench-placement: install
	$(PY) -m bench.placement

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
