# The two commands of the README, and a few helpers. Everything runs from the project's .venv, which
# scripts/bootstrap creates on first use.
BIN := .venv/bin
# Tests and tools find the venv's executables (kubectl, hadolint, agentrun, kubectl-agentrun) on PATH.
export PATH := $(CURDIR)/.venv/bin:$(PATH)
PYTEST_ARGS ?=

.PHONY: help demo test lint up down bootstrap image e2e bench bench-quick crd policies chart

help:
	@echo "make demo   set everything up and run the support-ticket demo (eviction, resume, approval, one email)"
	@echo "make test   set everything up, then ruff + mypy + import contracts + the whole pytest suite"
	@echo "make lint   ruff, mypy, the import contracts (lint-imports) and hadolint only"
	@echo "make up     bootstrap and start the dev cluster"
	@echo "make down   stop the demo's operator and the dev cluster"
	@echo "make image  build the agentrun image from the Dockerfile (debootstrap base, buildah; docs/dev/real-node.md)"
	@echo "make e2e    a real node (kubelet, containerd, runc), the image, deploy/ applied, the support-ticket run"
	@echo "make bench  the benchmark suite P1-P5, full mode (README: Performance); bench-quick: CI's mode"
	@echo "make crd    regenerate crds/ (agentruns, agentrunschedules) from agentrun_core/api/"
	@echo "make policies  regenerate deploy/admission's policies from agentrun_core/api/ (then make chart)"
	@echo "make chart  regenerate deploy/helm/agentrun and deploy/install.yaml from deploy/ (kustomize)"

bootstrap:
	@scripts/bootstrap

up: bootstrap
	$(BIN)/agentrun dev up

demo: up
	$(BIN)/agentrun demo

# The CRD yaml is generated (never edited): agentrun_core.api.spec_schema is the one source of the spec schema.
crd: bootstrap
	$(BIN)/python -m agentrun_core.api.crdgen > crds/agentrun.dev_agentruns.yaml
	$(BIN)/python -m agentrun_core.api.schedule_crd > crds/agentrun.dev_agentrunschedules.yaml

# The admission policies are generated too: their templates (agentrun_core/api/policies) name every annotation,
# limit and phase by the API package's value (agentrun_core.api.meta, limits, status); input-limits-policy.yaml
# is rendered from the input bounds by agentrun_dev.input_policy.
policies: bootstrap
	$(BIN)/python -m agentrun_core.api.policygen
	$(BIN)/python -m agentrun_dev.input_policy

# The Helm chart's templates and deploy/install.yaml are generated from deploy/ (never edited).
chart: bootstrap
	$(BIN)/python -m agentrun_dev.helmgen

lint: bootstrap
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/hadolint Dockerfile

# scripts/test: the tests not marked `serial` on TEST_WORKERS processes (default 2), then the serial ones
# alone; PYTEST_ARGS go to both. No tests collected at all fails the target like any other failure.
TEST_WORKERS ?= 2
test: up
	scripts/ensure-prometheus
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	TEST_WORKERS=$(TEST_WORKERS) scripts/test $(PYTEST_ARGS)

# The benchmark suite (bench/, README "Performance"). Full mode takes long (P4 starts 1,000+ runs); pass
# BENCH_ARGS to choose, e.g. make bench BENCH_ARGS="p1 p2". `make test` runs the quick mode through
# tests/integration/test_bench_quick.py, so the scripts cannot rot.
BENCH_ARGS ?= all
bench: up
	$(BIN)/agentrun bench $(BENCH_ARGS)

bench-quick: up
	$(BIN)/agentrun bench all --quick

down:
	-@[ -x $(BIN)/agentrun ] && $(BIN)/agentrun demo stop
	-@[ -x $(BIN)/agentrun ] && $(BIN)/agentrun dev down

# The image from the unchanged Dockerfile: a Debian base by debootstrap (cached by its inputs), buildah bud.
image: bootstrap
	$(BIN)/python -m agentrun_dev.node.image build

# The end-to-end test on a real node (docs/dev/real-node.md): scripts/e2e prints each phase's time.
e2e: bootstrap
	scripts/e2e
