# Two commands on a fresh clone:  `make demo`  and  `make test`.  Each installs what it needs first.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The node-opcua PLC stand-in of the tests and benchmarks (an OPC UA server that is not asyncua).
STANDIN := tests/opcua_standin
NODE_STAMP := $(STANDIN)/node_modules/.installed

.PHONY: install demo test test-integration test-all test-edge test-isa wheel lint bench bench-loop bench-loop-load bench-returns bench-a2c-rainbow bench-ray bench-throughput clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

$(NODE_STAMP): $(STANDIN)/package-lock.json
	cd $(STANDIN) && npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

install: $(STAMP) $(NODE_STAMP)

# Train PPO on CartPole-v1, export every quantization mode, evaluate each artifact.
demo: $(STAMP)
	$(PY) scripts/demo.py

# pytest's own report of one invocation, where $RL2EDGE_JUNIT_DIR names a folder (.ci/run sets it; its table
# and benchmarks/ci_time.py read them): junit XML with every test's duration.
junit = $(if $(RL2EDGE_JUNIT_DIR),--junitxml=$(RL2EDGE_JUNIT_DIR)/$(1).xml)
# pytest exits 5 when a selection holds no test (a tier with no serial test): that is not a failure here.
PYTEST_OK5 = ; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ]

# The default test suite: lint, the type check of all five packages (scripts/typecheck.py), then every test not
# marked slow or integration: two files at a time (pytest-xdist; a file's module fixtures are built once, the
# session's runs and artifacts once per run: tests/conftest.py), then the `serial` ones alone. Measured on a
# 2-core AMD EPYC, clean clone: 581 s with ruff and mypy, 1072 tests (benchmarks/results/ci_time.md; 998 tests
# took 692-1378 s one at a time).
TIER_DEFAULT := not slow and not integration
test: install
	$(PY) -m ruff check .
	$(PY) scripts/typecheck.py
	$(PY) -m pytest -n 2 --dist loadfile -m "$(TIER_DEFAULT) and not serial" $(call junit,default) $(PYTEST_OK5)
	$(PY) -m pytest -m "$(TIER_DEFAULT) and serial" $(call junit,default-serial) $(PYTEST_OK5)

# The integration tier (CI runs it after `make test`): training, export and serve end to end at larger budgets,
# Ray clusters, the Mender client, and every benchmark script on tiny settings. Two files at a time, then the
# `serial` ones alone (Ray clusters, the fleet smoke that drives the Mender client, benchmarks and loops whose timing is
# measured: each says why next to its mark). Measured, clean clone at a30061d: 213 tests two at a time in
# 1103 s, then 20 serial ones in 433 s (26 minutes in all; it was 23-54 minutes with the serial group of before).
TIER_INTEGRATION := integration and not slow
test-integration: install
	$(PY) -m pytest -n 2 --dist loadfile -m "$(TIER_INTEGRATION) and not serial" $(call junit,integration) $(PYTEST_OK5)
	$(PY) -m pytest -m "$(TIER_INTEGRATION) and serial" $(call junit,integration-serial) $(PYTEST_OK5)

# The edge install on CPython 3.10 (the Jetson's): the wheel with [edge] in its own venv, and the runtime and
# bridge tests run there against it (CI runs this after `make test` and `make test-integration`).
test-edge: install
	scripts/test_edge.sh

# The float-sensitive tests as other CPUs would run them: oneDNN capped at AVX2, oneDNN off, and the
# default, each with 1 and 2 threads (oneDNN picks kernels by ISA; thread counts change reduction order).
ISA_TESTS ?= tests/test_export.py tests/test_offpolicy_export.py tests/test_ppo_tf.py tests/test_offpolicy_mechanics.py tests/test_runtime.py
test-isa: install
	set -e; for isa in default AVX2 no-onednn; do for threads in 1 2; do \
	  echo "== oneDNN $$isa, $$threads thread(s)"; \
	  env $$(case $$isa in AVX2) echo ONEDNN_MAX_CPU_ISA=AVX2;; no-onednn) echo TF_ENABLE_ONEDNN_OPTS=0;; esac) \
	    OMP_NUM_THREADS=$$threads TF_NUM_INTRAOP_THREADS=$$threads TF_NUM_INTEROP_THREADS=$$threads \
	    $(PY) -m pytest -q -p no:cacheprovider $(ISA_TESTS); \
	done; done

# The wheel a device installs: pip install 'dist/rl2edge-<version>-py3-none-any.whl[edge]'.
wheel: $(STAMP)
	rm -rf dist && $(PY) -m pip wheel --quiet --no-deps --no-build-isolation -w dist .
	ls dist

# Everything, the integration and slow tests too (full-length training runs).
test-all: install
	$(PY) -m pytest -m ""

# Every benchmark; results (JSON + markdown + PNG) in benchmarks/results/. About 15 minutes on 2 cores.
bench: install
	test -d demo-out/artifacts/int8 || $(PY) scripts/demo.py
	$(PY) benchmarks/latency.py --suite
	$(PY) benchmarks/latency.py --artifact demo-out/artifacts/int8
	$(PY) benchmarks/train_throughput.py --repeats 2
	$(PY) benchmarks/quantization.py
	$(PY) benchmarks/loop_latency.py --artifact demo-out/artifacts/int8

# Returns next to the RL Baselines3 Zoo's: SAC/TD3 on Pendulum (20k), DQN on CartPole (50k), 3 seeds,
# torch and TF, each with its int8 artifact. About 90 minutes on 2 cores; resumes where it stopped.
bench-returns: install
	$(PY) benchmarks/returns.py --suite must-show

# A2C and Rainbow (CartPole, Acrobot; 3 seeds, both backends, 30 episodes per file), Rainbow LunarLander
# (500k steps, seed 0), and their throughput next to SB3's A2C and DQN. About 3 hours on 2 cores.
bench-a2c-rainbow: install
	$(PY) benchmarks/returns.py --suite a2c-rainbow --episodes 30 --name returns_a2c_rainbow
	$(PY) benchmarks/returns.py --cells rainbow:LunarLander-v3 --seeds 0 --episodes 30 --name returns_rainbow_lunarlander
	$(PY) benchmarks/train_throughput.py --algo a2c --steps 500000
	$(PY) benchmarks/train_throughput.py --algo rainbow --steps 50000

# Loop latency over OPC UA alone (needs an artifact: `make demo` makes demo-out/artifacts/int8).
# Ray: a 16-trial SAC sweep with ASHA (about 15 minutes on 2 cores) and PPO rollout scaling on a slow env.
bench-ray: install
	$(PY) benchmarks/sweep.py
	$(PY) benchmarks/rollout_scaling.py

bench-loop: install
	$(PY) benchmarks/loop_latency.py --artifact demo-out/artifacts/int8

# serve under load (busy and memory-hungry neighbours), without and with --realtime (some 15 minutes)
bench-loop-load: install
	$(PY) benchmarks/loop_under_load.py --artifact demo-out/artifacts/int8 --must-show-cycles 6000 --slow-plant-cycles 5000

# Training throughput next to SB3 with the roofline line: PPO with its profile, SAC (20k) and TD3 (13k)
# at one and at two threads per op. About 40 minutes on 2 cores.
bench-throughput: install
	$(PY) benchmarks/train_throughput.py --algo ppo --profile
	$(PY) benchmarks/train_throughput.py --algo sac --env Pendulum-v1 --steps 20000
	$(PY) benchmarks/train_throughput.py --algo sac --env Pendulum-v1 --steps 20000 --threads 2
	$(PY) benchmarks/train_throughput.py --algo td3 --env Pendulum-v1 --steps 13000
	$(PY) benchmarks/train_throughput.py --algo td3 --env Pendulum-v1 --steps 13000 --threads 2
	$(PY) benchmarks/train_throughput.py --algo dqn --steps 50000

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf $(VENV) .venv-edge dist runs artifacts demo-out .pytest_cache .ruff_cache
