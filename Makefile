# The README's two commands: `make train` and `make test`. Each creates .venv on first use and installs the
# project against constraints.txt (the reference versions), so a fresh machine needs only Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export MUJOCO_GL ?= egl

.PHONY: install train test test-fast test-slow bench lint clean proto

BASE_STAMP := $(VENV)/.installed-base

install: $(STAMP)

# The simulation install (what `make train` needs): the package and its base dependencies only.
$(BASE_STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e .
	@touch $(BASE_STAMP)

# Everything the tests need: the robot bridge, Ray, MJX/Warp (their CPU correctness tests), Minari, pytest, ruff.
$(STAMP): $(BASE_STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	@touch $(STAMP)

## train: train the default task (SAC on Pendulum-v1, a few minutes on 2 cores); extra Hydra overrides via ARGS="..."
train: $(BASE_STAMP)
	$(BIN)/robot-rl train $(ARGS)

## test: the fast suite, then the seeded learning tests CI can afford (Pendulum-v1, cartpole-swingup), the
## cross-backend trajectory test (CPU MuJoCo vs MJX vs MuJoCo Warp, all on the CPU), gpu_fast on mjx:/warp: and the
## whole human-in-the-loop workflow driven from the console page in Chromium (about two minutes); the fast suite's 25
## slowest tests are listed at its end, to keep it near its 10-minute budget
test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -q --durations=25
	$(BIN)/python -m pytest -m slow -q -k "test_pendulum_sac_reaches_minus_250 or test_dmc_cartpole_swingup or test_same_trajectory_as_cpu_mujoco or test_gpu_fast_preset_trains_on_the_gpu_backends or test_demos_labels_classifier_hil_train_and_deploy_from_the_page"

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -q

## test-slow: every seeded learning run (tens of minutes)
test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow -q

## bench: robot_rl against Stable-Baselines3 (bench/README.md; about an hour, not part of `make test`);
## options via ARGS, e.g. ARGS="--quick" or ARGS="--parts ab --compile --bf16"
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[bench]"
	$(BIN)/python -m bench.run $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

## proto: regenerate the gRPC modules of the robot bridge (real/proto/bridge.proto) and the policy server (policy.proto)
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I real/proto --python_out=real/proto --grpc_python_out=real/proto \
		--pyi_out=real/proto real/proto/bridge.proto
	sed -i 's/^import bridge_pb2 as bridge__pb2/from . import bridge_pb2 as bridge__pb2/' real/proto/bridge_pb2_grpc.py
	$(BIN)/python -m grpc_tools.protoc -I real/proto --python_out=real/proto --grpc_python_out=real/proto \
		--pyi_out=real/proto real/proto/policy.proto
	sed -i 's/^import policy_pb2 as policy__pb2/from . import policy_pb2 as policy__pb2/' real/proto/policy_pb2_grpc.py
