# The two commands of the README, and a few helpers. Everything runs from the project's .venv, which
# scripts/bootstrap creates on first use.
BIN := .venv/bin
# Tests and tools find the venv's executables (kubectl, hadolint, agentrun, kubectl-agentrun) on PATH.
export PATH := $(CURDIR)/.venv/bin:$(PATH)
PYTEST_ARGS ?=

.PHONY: help demo test lint up down bootstrap

help:
	@echo "make demo   set everything up and run the support-ticket demo (eviction, resume, approval, one email)"
	@echo "make test   set everything up, then ruff + mypy + the whole pytest suite"
	@echo "make lint   ruff, mypy and hadolint only"
	@echo "make up     bootstrap and start the dev cluster"
	@echo "make down   stop the demo's operator and the dev cluster"

bootstrap:
	@scripts/bootstrap

up: bootstrap
	$(BIN)/agentrun dev up

demo: up
	$(BIN)/agentrun demo

lint: bootstrap
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/hadolint Dockerfile

# pytest exit codes: 0 passed; 5 = no tests collected, which must fail the target like any other code.
test: up
	scripts/ensure-prometheus
	$(BIN)/ruff check .
	$(BIN)/mypy
	@$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; fi; \
	  exit $$rc

down:
	-@[ -x $(BIN)/agentrun ] && $(BIN)/agentrun demo stop
	-@[ -x $(BIN)/agentrun ] && $(BIN)/agentrun dev down
