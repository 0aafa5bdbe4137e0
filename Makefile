# The two commands README gives: `make demo` and `make test`. Each installs what it needs.
SHELL := /bin/bash
PYTHON ?= python3
# google-adk versions CI tests: the newest, and the two that still have issue 7058.
ADK_VERSIONS ?= 2.13.0 2.12.0 1.39.1
ADK_NEWEST := $(firstword $(ADK_VERSIONS))
VENVS := .venvs
EXTRAS := dev,export,instrument
PYTEST_ARGS ?=

# python3 -m venv; on a Debian python without ensurepip, install python3-venv first (as root).
define make_venv
$(PYTHON) -m venv $(1) 2>/dev/null || { \
  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null; \
  fi; rm -rf $(1); $(PYTHON) -m venv $(1); }
endef

.PHONY: demo test lint unit system-deps venvs bench bench-quick stack-up stack-down dashboards rules clean

# --- demo: the project's own virtualenv -------------------------------------------
# The demo reproduces ADK issue 7058, so it runs on the last release that has it;
# `make demo DEMO_ADK=2.13.0` shows the fix.
DEMO_ADK ?= 2.12.0

.venv/.installed-$(DEMO_ADK): pyproject.toml
	$(call make_venv,.venv)
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -e ".[export]" "google-adk==$(DEMO_ADK)"
	rm -f .venv/.installed-*
	touch $@

demo: .venv/.installed-$(DEMO_ADK)
	.venv/bin/adk-task-telemetry demo

# --- test: one virtualenv per ADK version -------------------------------------
$(VENVS)/adk-%/.installed: pyproject.toml
	$(call make_venv,$(VENVS)/adk-$*)
	$(VENVS)/adk-$*/bin/pip install -q --upgrade pip
	$(VENVS)/adk-$*/bin/pip install -q -e ".[$(EXTRAS)]" "google-adk==$*"
	touch $@

venvs: $(foreach v,$(ADK_VERSIONS),$(VENVS)/adk-$(v)/.installed)

# Debian's prometheus (promtool, a real server) and docker-compose, where we are root.
system-deps:
	@if ! command -v promtool >/dev/null || ! command -v docker-compose >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus docker-compose >/dev/null; \
	  else echo "note: install Debian's prometheus and docker-compose packages to run every test"; fi; \
	fi

lint: $(VENVS)/adk-$(ADK_NEWEST)/.installed
	$(VENVS)/adk-$(ADK_NEWEST)/bin/ruff check src tests benchmarks dashboards deploy/k8s
	$(VENVS)/adk-$(ADK_NEWEST)/bin/mypy

unit: venvs system-deps
	@set -e; for v in $(ADK_VERSIONS); do \
	  echo "== google-adk $$v"; \
	  $(VENVS)/adk-$$v/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS); \
	done

test: lint unit

# Benchmarks get a virtualenv of their own: the OpenInference instrumentor they
# compare against pulls a newer OpenTelemetry SDK than the test venvs pin.
BENCH_PY := $(VENVS)/bench/bin/python

$(VENVS)/bench/.installed: pyproject.toml
	$(call make_venv,$(VENVS)/bench)
	$(VENVS)/bench/bin/pip install -q --upgrade pip
	$(VENVS)/bench/bin/pip install -q -e ".[export,bench]" "google-adk==$(ADK_NEWEST)"
	touch $@

bench: $(VENVS)/bench/.installed
	$(BENCH_PY) -m benchmarks.run

bench-quick: $(VENVS)/bench/.installed
	$(BENCH_PY) -m benchmarks.run --quick

# --- the observability stack (deploy/compose; needs a Docker engine) ---------------
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
STACK := $(COMPOSE) -f deploy/compose/docker-compose.yml

stack-up:
	@test -n "$$GRAFANA_ADMIN_PASSWORD" || { echo "stack-up: export GRAFANA_ADMIN_PASSWORD first (docs/deploy.md)" >&2; exit 2; }
	$(STACK) up -d

stack-down:
	$(STACK) down

# Base of every alert's runbook_url (<base>/<AlertName>.md). Empty: the docs/runbooks
# folder of this repository ([project.urls] in pyproject.toml when declared, else the
# repository-relative path docs/runbooks); see docs/deploy.md. Exported, so that the
# test that the committed rules equal their generated form uses the same base.
export RUNBOOK_BASE_URL ?=

# Regenerates the Prometheus rules, their promtool tests' expected runbook URLs and
# the PrometheusRule from deploy/prometheus/alerts.py.
rules: $(VENVS)/adk-$(ADK_NEWEST)/.installed
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python deploy/prometheus/alerts.py --runbook-base-url "$(RUNBOOK_BASE_URL)"
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python deploy/k8s/render_prometheusrule.py

# Regenerates the committed dashboard JSON (and, through `rules`, the alert rules).
dashboards: rules $(VENVS)/adk-$(ADK_NEWEST)/.installed
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python dashboards/adk_task_telemetry.py

clean:
	rm -rf .venv $(VENVS) .pytest_cache .mypy_cache .ruff_cache

# --- fuzz: the randomized lifecycle test with more scenarios (docs/testing.md) ---
# `make test` runs 200 scenarios per ADK version; `make fuzz SEED=123 N=2000` runs N from SEED.
SEED ?= 0
N ?= 2000
.PHONY: fuzz
fuzz: venvs
	@set -e; for v in $(ADK_VERSIONS); do \
	  echo "== google-adk $$v: $(N) scenarios from seed $(SEED)"; \
	  ADK_FUZZ_SEED=$(SEED) ADK_FUZZ_N=$(N) $(VENVS)/adk-$$v/bin/python -m pytest -q \
	    -p no:cacheprovider tests/test_lifecycle_random.py -k test_random_lifecycle $(PYTEST_ARGS); \
	done
