# The two commands README gives: `make demo` and `make test`. Each installs what it needs.
SHELL := /bin/bash
PYTHON ?= python3
# google-adk versions that run the whole suite: the newest, and the two newest that still
# have issue 7058. Keep ADK_NEWEST equal to adk_compat.NEWEST_TESTED_ADK.
ADK_VERSIONS ?= 2.13.0 2.12.0 1.39.1
ADK_NEWEST := $(firstword $(ADK_VERSIONS))
# The lifecycle tests (the scenario corpus, and the random lifecycle test where it exists)
# also run on a spread of older minors in `make test`, and on the latest patch of every
# minor since 1.14 (the first release with App) in `make matrix`.
LIFECYCLE_TESTS := tests/test_adk_compat.py tests/test_live_hooks.py \
  tests/test_plugin_lifecycle.py tests/test_call_ledger.py $(wildcard tests/test_lifecycle_random.py) \
  tests/test_nested_cut.py tests/test_sourceless_install.py
ADK_SPREAD ?= 1.14.1 1.20.0 1.33.0 2.0.0 2.5.0 2.9.2
ADK_MINORS ?= 1.14.1 1.15.1 1.16.0 1.17.0 1.18.0 1.19.0 1.20.0 1.21.0 1.22.1 1.23.0 \
  1.24.1 1.25.1 1.26.0 1.27.5 1.28.1 1.29.0 1.30.0 1.31.1 1.32.0 1.33.0 1.34.3 1.35.2 \
  1.36.2 1.37.0 1.38.0 1.39.1 2.0.0 2.1.0 2.2.0 2.3.0 2.4.0 2.5.0 2.6.3 2.7.1 2.8.0 \
  2.9.2 2.10.0 2.11.0 2.12.0 2.13.0
# Other interpreters, each with the newest google-adk up to ADK_NEWEST that supports it
# (2.12 and 2.13 need Python 3.11: 3.10 gets 2.11.0). A missing one is a named skip.
PYTHONS ?= 3.10 3.13
# The exit, SIGTERM and dead-endpoint tests also run on these (the full suites run them on
# 3.11): Python 3.12 refuses new threads at interpreter shutdown, 3.13 allows them again.
EXIT_PYTHONS ?= 3.12 3.13
EXIT_TESTS := tests/test_exit.py tests/test_export_outage.py
# Version venvs that run side by side (2 cores on CI).
JOBS ?= 2
MATRIX_OUT = $(VENVS)/matrix
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

# Every other venv is built by uv, from PyPI, its files hardlinked from one cache: seconds
# a venv, and one copy on disk of each package version the venvs share. uv
# itself comes from PyPI into a small venv of its own ($(UV_BOOT)); `make UV=uv` uses one
# on PATH. uv reads no pip.conf: a package mirror is UV_INDEX_URL (UV_NATIVE_TLS=1 for a
# proxy with its own CA). It never downloads an interpreter: each venv's python is one of
# this machine's.
UV_BOOT := $(VENVS)/.uv/bin/uv
UV ?= $(UV_BOOT)
UV_DEP := $(if $(filter $(UV_BOOT),$(UV)),$(UV_BOOT))
export UV_CACHE_DIR ?= $(abspath $(VENVS))/.uv-cache
export UV_PYTHON_DOWNLOADS := never
export UV_NO_PROGRESS := 1

$(UV_BOOT):
	$(call make_venv,$(VENVS)/.uv)
	$(VENVS)/.uv/bin/pip install -q "uv>=0.13.8,<0.14"

# $(call uv_venv,DIR,REQUIREMENTS,PYTHON,full): a fresh venv at DIR on PYTHON (default
# $(PYTHON)) with REQUIREMENTS installed. "full" (the full suites' and the demo's venvs)
# adds pip (the install check runs pip's resolver in them; demo users may too) and
# bytecode compiled at install, as pip does: the full suite starts hundreds of Python
# subprocesses, and where PYTHONDONTWRITEBYTECODE is set (CI) each would compile ADK's
# import chain again. A comma in REQUIREMENTS (extras) must come from a variable, as in
# ".[$(EXTRAS)]": call splits on bare ones.
define uv_venv
$(UV) venv -q --clear $(if $(4),--seed) --python $(or $(3),$(PYTHON)) $(1)
$(UV) pip install -q $(if $(4),--compile-bytecode) --python $(1)/bin/python $(2)
endef

.PHONY: stack-bin stack-test soak sampling-soak sampler-sizing demo screenshot test all-venvs lint unit lifecycle matrix install-check lowest system-deps venvs bench bench-quick stack-up stack-down dashboards rules docs docs-check wheel clean

# --- demo: the project's own virtualenv -------------------------------------------
# The demo reproduces ADK issue 7058, so it runs on the last release that has it;
# `make demo DEMO_ADK=2.13.0` shows the fix.
DEMO_ADK ?= 2.12.0

.venv/.installed-$(DEMO_ADK): pyproject.toml | $(UV_DEP)
	$(call uv_venv,.venv,-e ".[export]" "google-adk==$(DEMO_ADK)",,full)
	touch $@

demo: .venv/.installed-$(DEMO_ADK)
	.venv/bin/adk-task-telemetry demo
	.venv/bin/adk-task-telemetry demo -s stuck_upstream

# docs/img/demo-report.png: the demo's --html report (google-adk $(DEMO_ADK), the scenarios
# of docs/cli.md's capture) in headless Chromium. DEMO_CLI= another adk-task-telemetry
# command skips building .venv. The flags keep Chromium off the (closed) network.
DEMO_CLI ?= .venv/bin/adk-task-telemetry
SCREENSHOT_SCENARIOS := -s seed_bug -s parallel_one_fails -s recovered_error -s live_stop_streaming
SCREENSHOT_SIZE ?= 1280,1680
CHROMIUM_FLAGS := --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars
screenshot: $(if $(filter .venv/%,$(DEMO_CLI)),.venv/.installed-$(DEMO_ADK)) system-deps
	@cli='$(DEMO_CLI)'; case $$cli in .venv/*) cli=$$PWD/$$cli;; esac; \
	  out=$$PWD/docs/img/demo-report.png; mkdir -p docs/img; tmp=$$(mktemp -d); \
	  (cd $$tmp && $$cli demo -q $(SCREENSHOT_SCENARIOS) --html demo-report.html >/dev/null) && \
	  chromium $(CHROMIUM_FLAGS) --user-data-dir=$$tmp/profile --window-size=$(SCREENSHOT_SIZE) \
	    --screenshot=$$out file://$$tmp/demo-report.html 2>/dev/null; rc=$$?; \
	  rm -rf $$tmp; test $$rc = 0 && ls -l $$out

# --- test: one virtualenv per ADK version -------------------------------------
$(VENVS)/adk-%/.installed: pyproject.toml | $(UV_DEP)
	$(call uv_venv,$(VENVS)/adk-$*,-e ".[$(EXTRAS)]" "google-adk==$*",,full)
	touch $@

venvs: $(foreach v,$(ADK_VERSIONS),$(VENVS)/adk-$(v)/.installed)

# --- bench: benchmarks/ (docs/benchmarks.md; never part of `make test`) ---------------
# The hot path through a real Runner on each BENCH_ADK (CPU time, interleaved, paired;
# appended to benchmarks/results/hot_path-after-<adk>.json), then the section benchmarks
# in their own venv (the OpenInference instrumentor pulls a newer OpenTelemetry SDK), which
# write docs/benchmarks.md. `make bench-quick`: a smoke run of the sections.
BENCH_ADK ?= $(ADK_NEWEST) 1.39.1
BENCH_PY := $(VENVS)/bench/bin/python
BENCH_EXTRAS := export,bench

$(VENVS)/bench/.installed: pyproject.toml | $(UV_DEP)
	$(call uv_venv,$(VENVS)/bench,-e ".[$(BENCH_EXTRAS)]" "google-adk==$(ADK_NEWEST)")
	touch $@

bench: $(foreach v,$(BENCH_ADK),$(VENVS)/adk-$(v)/.installed) $(VENVS)/bench/.installed
	@set -e; for v in $(BENCH_ADK); do \
	  $(VENVS)/adk-$$v/bin/python -m benchmarks.bench_hot_path --rounds 3 --record after; done
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python -m benchmarks.bench_curve --record
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python -m benchmarks.bench_orphans --record
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python -m benchmarks.bench_memory --record
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python -m benchmarks.bench_server --record
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python -m benchmarks.bench_export --record
	$(BENCH_PY) -m benchmarks.run

bench-quick: $(VENVS)/bench/.installed
	$(BENCH_PY) -m benchmarks.run --quick

# Debian's prometheus (promtool, a real server), docker-compose and chromium (renders the
# HTML report in tests/test_html_report.py), where we are root.
system-deps:
	@if ! command -v promtool >/dev/null || ! command -v docker-compose >/dev/null \
	    || ! command -v chromium >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus docker-compose chromium >/dev/null; \
	  else echo "note: install Debian's prometheus, docker-compose and chromium packages to run every test"; fi; \
	fi

lint: $(VENVS)/adk-$(ADK_NEWEST)/.installed
	$(VENVS)/adk-$(ADK_NEWEST)/bin/ruff check src tests tools benchmarks dashboards deploy/k8s
	$(VENVS)/adk-$(ADK_NEWEST)/bin/mypy
	$(VENVS)/adk-$(ADK_NEWEST)/bin/pylint --disable=all --enable=duplicate-code src/adk_task_telemetry

# The whole suite once per full version, JOBS at a time, each version's output as one block.
unit: venvs system-deps
	@$(MAKE) --no-print-directory -k -j$(JOBS) --output-sync=target \
	  $(foreach v,$(ADK_VERSIONS),unit-adk-$(v))

unit-adk-%: $(VENVS)/adk-%/.installed
	@echo "== google-adk $*"
	$(VENVS)/adk-$*/bin/python -m pytest -q -p no:cacheprovider --ignore=tests/stack $(PYTEST_ARGS)

# Every venv make test uses, JOBS at a time.
all-venvs: $(UV_DEP)
	@$(MAKE) --no-print-directory -j$(JOBS) $(foreach v,$(ADK_VERSIONS),$(VENVS)/adk-$(v)/.installed) \
	  $(foreach v,$(ADK_SPREAD),$(VENVS)/life-adk-$(v)/.installed) \
	  $(foreach p,$(sort $(PYTHONS) $(EXIT_PYTHONS)),$(VENVS)/py$(p)/.installed) \
	  $(VENVS)/lowest/.installed

# The full suites, the lifecycle spread, the install check and the lowest bounds share
# JOBS slots (the full suites first: they take longest), each job's output as one block.
test: all-venvs lint system-deps
	@$(MAKE) --no-print-directory -k -j$(JOBS) --output-sync=target \
	  $(foreach v,$(ADK_VERSIONS),unit-adk-$(v)) $(foreach v,$(ADK_SPREAD),life-adk-$(v)) \
	  $(foreach p,$(PYTHONS),life-py$(p)) $(foreach p,$(EXIT_PYTHONS),exit-py$(p)) \
	  install-check lowest stack-test
	@echo "make test: every step passed"; \
	  for f in $(foreach p,$(PYTHONS),$(VENVS)/logs/python$(p).result) \
	    $(foreach p,$(EXIT_PYTHONS),$(VENVS)/logs/exit-python$(p).result); do \
	    grep -h '^SKIPPED' $$f 2>/dev/null | sed 's/^/  1 skipped: /'; done; true

# --- lifecycle tests on other ADK minors and Pythons ------------------------------
# Each version has its own venv (.venvs/life-adk-<version>, test tools only) and its own
# log (.venvs/logs/); up to JOBS run at once, each one's output printed as one block.
LIFE_VENV = $(VENVS)/life-adk-$(1)
LIFE_PYTEST = ADK_FUZZ_N=small $(1)/bin/python -m pytest -q -p no:cacheprovider $(LIFECYCLE_TESTS)

$(VENVS)/life-adk-%/.installed: pyproject.toml | $(UV_DEP)
	$(call uv_venv,$(VENVS)/life-adk-$*,-e ".[test]" "google-adk==$*")
	touch $@

# Runs the lifecycle tests (or, given, the command $(3)) in one venv: prints its log as one
# block, records a one-line result (.venvs/logs/<name>.result) and fails if they fail.
define run_lifecycle
@mkdir -p $(VENVS)/logs; log=$(VENVS)/logs/$(2).log; start=$$(date +%s); \
  if $(or $(3),$(call LIFE_PYTEST,$(1))) >$$log 2>&1; then r=PASS; else r=FAIL; fi; \
  secs=$$(( $$(date +%s) - start )); \
  echo "$$r: $$(tail -n 1 $$log | tr -d '=' | sed 's/^ *//;s/ *$$//') ($$secs s)" > $(VENVS)/logs/$(2).result; \
  echo "== $(2): $(if $(3),tests,lifecycle tests) $$r in $$secs s (log: $$log)"; \
  grep -E '^(FAILED|ERROR|XPASS)|^E  ' $$log | head -n 40 | sed 's/^/   /'; \
  tail -n 1 $$log | sed 's/^/   /'; test $$r = PASS
endef

life-adk-%: $(VENVS)/life-adk-%/.installed
	$(call run_lifecycle,$(VENVS)/life-adk-$*,google-adk-$*)

# python3.X with the newest ADK; an interpreter this machine lacks is a named skip.
# The interpreter: python3.X on PATH if it runs (a pyenv shim may not), else pyenv's own.
find_python = for c in python$(1) $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$(1).*/bin/python$(1) \
  2>/dev/null | sort -V | tail -n 1); do $$c -c '' 2>/dev/null && { echo $$c; break; }; done

$(VENVS)/py%/.installed: pyproject.toml | $(UV_DEP)
	@py=$$($(call find_python,$*)); mkdir -p $(@D); \
	  if [ -z "$$py" ]; then touch $(@D)/.missing; exit 0; fi; \
	  rm -f $(@D)/.missing; $(UV) venv -q --clear --python $$py $(@D) && \
	  $(UV) pip install -q --python $(@D)/bin/python -e ".[test]" "google-adk<=$(ADK_NEWEST)" && \
	  touch $@

# $(1): the Python version, $(2): the result's name, $(3): the target to run when it exists.
define py_or_skip
@if [ -e $(VENVS)/py$(1)/.missing ]; then mkdir -p $(VENVS)/logs; \
  msg="SKIPPED: no python$(1) interpreter on this machine (install it to test it)"; \
  echo "$$msg" > $(VENVS)/logs/$(2).result; \
  echo "== $(2): $$msg"; \
else $(MAKE) --no-print-directory $(3); fi
endef

life-py%: $(VENVS)/py%/.installed
	$(call py_or_skip,$*,python$*,life-py-run-$*)

# The exit, SIGTERM and dead-endpoint tests on python3.X.
exit-py%: $(VENVS)/py%/.installed
	$(call py_or_skip,$*,exit-python$*,exit-py-run-$*)

exit-py-run-%:
	$(call run_lifecycle,$(VENVS)/py$*,exit-python$*,$(VENVS)/py$*/bin/python -m pytest -q \
	  -p no:cacheprovider $(EXIT_TESTS))

life-py-run-%:
	@mkdir -p $(VENVS)/logs; $(VENVS)/py$*/bin/python -c "import platform; \
	  from importlib.metadata import version; \
	  print(f'Python {platform.python_version()}, google-adk {version(\"google-adk\")}')" \
	  > $(VENVS)/logs/python$*.versions
	$(call run_lifecycle,$(VENVS)/py$*,python$*)

lifecycle:
	@$(MAKE) --no-print-directory -k -j$(JOBS) --output-sync=target \
	  $(foreach v,$(ADK_SPREAD),life-adk-$(v)) $(foreach p,$(PYTHONS),life-py$(p))

# pip resolves this package beside an app that pins google-adk, and leaves its ADK alone.
install-check: venvs
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python tools/install_check.py \
	  $(foreach v,$(ADK_VERSIONS),$(VENVS)/adk-$(v)/bin/python)

# The lowest bounds pyproject.toml declares, installed exactly, run the lifecycle tests.
LOWEST_EXTRAS := test,prometheus
$(VENVS)/lowest/.installed: pyproject.toml tools/lowest_pins.py | $(UV_DEP)
	mkdir -p $(VENVS) && $(PYTHON) tools/lowest_pins.py > $(VENVS)/lowest.pins.txt
	$(call uv_venv,$(VENVS)/lowest,-e ".[$(LOWEST_EXTRAS)]" -c $(VENVS)/lowest.pins.txt)
	mv $(VENVS)/lowest.pins.txt $(VENVS)/lowest/pins.txt
	touch $@

lowest: $(VENVS)/lowest/.installed
	$(call run_lifecycle,$(VENVS)/lowest,lowest-bounds)

# --- matrix: the latest patch of every minor, and docs/versions.md ----------------
# Built through pattern rules, the venv markers would count as intermediate: keep them.
.PRECIOUS: $(VENVS)/adk-%/.installed $(VENVS)/life-adk-%/.installed $(VENVS)/py%/.installed

# A version that runs the whole suite reuses its full venv.
MATRIX_VENV = $(if $(filter $(1),$(ADK_VERSIONS)),$(VENVS)/adk-$(1),$(VENVS)/life-adk-$(1))
.SECONDEXPANSION:
matrix-adk-%: $$(call MATRIX_VENV,$$*)/.installed
	@mkdir -p $(MATRIX_OUT)
	-$(call run_lifecycle,$(call MATRIX_VENV,$*),google-adk-$*)
	@cp $(VENVS)/logs/google-adk-$*.result $(MATRIX_OUT)/; \
	  grep -q '^PASS' $(MATRIX_OUT)/google-adk-$*.result; echo $$? > $(MATRIX_OUT)/$*.rc; \
	  $(call MATRIX_VENV,$*)/bin/python tools/version_report.py > $(MATRIX_OUT)/$*.json \
	    2>$(MATRIX_OUT)/$*.report.log; test "$$(cat $(MATRIX_OUT)/$*.rc)" = 0

# Every minor's lifecycle tests and scenario report, both Pythons, the install check and
# the lowest bounds; then docs/versions.md from what they recorded. Fails if any failed.
matrix:
	@rm -rf $(MATRIX_OUT); rm -f $(VENVS)/logs/*.result; \
	  $(MAKE) --no-print-directory -k -j$(JOBS) --output-sync=target \
	  $(foreach v,$(ADK_MINORS),matrix-adk-$(v)) $(foreach p,$(PYTHONS),life-py$(p)) \
	  install-check lowest; rc=$$?; \
	  $(PYTHON) tools/versions_doc.py $(MATRIX_OUT) $(VENVS)/logs docs/versions.md $(ADK_MINORS); \
	  echo "docs/versions.md written"; exit $$rc

# --- the real programs of deploy/, built from their Go modules ----------------------
# The Collector of deploy/ (exactly its components), Jaeger v2, Prometheus 3 with promtool,
# Alertmanager with amtool, VictoriaLogs, into $(STACK_BIN), reusing Go's module and build
# caches.
STACK_BIN := .stack/bin

# Each binary is a file target on its module's go.mod/go.sum (and generated sources), so a
# re-run builds nothing when they are unchanged, and after `rm -rf .stack` only links (Go's
# caches are warm). Versions: tools/stack/versions.py (read from the go.mod files and the
# ocb manifest) is stamped into each program's --version.
STACK_PROGRAMS := otelcol-adk jaeger prometheus promtool alertmanager amtool victoria-logs
OTELCOL_DIST := deploy/otel-collector/distribution
STACK_GO := nice go
STACK_GOBUILD := $(STACK_GO) build -trimpath -buildvcs=false
stack-release = $(shell $(PYTHON) tools/stack/versions.py $(1))
stack-module = $(shell $(PYTHON) tools/stack/versions.py --module $(1))
PROM_VERSION_PKG := github.com/prometheus/common/version
prom-ldflags = -s -w -X $(PROM_VERSION_PKG).Version=$(1) -X $(PROM_VERSION_PKG).Revision=$(2) \
  -X $(PROM_VERSION_PKG).Branch=go-module -X $(PROM_VERSION_PKG).BuildUser=make-stack-bin

stack-bin: $(addprefix $(STACK_BIN)/,$(STACK_PROGRAMS))

$(STACK_BIN)/otelcol-adk: $(OTELCOL_DIST)/go.mod $(OTELCOL_DIST)/go.sum $(wildcard $(OTELCOL_DIST)/*.go)
	@mkdir -p $(@D)
	cd $(OTELCOL_DIST) && $(STACK_GOBUILD) -ldflags='-s -w' -o $(CURDIR)/$@ .

$(STACK_BIN)/jaeger: tools/stack/jaeger/go.mod tools/stack/jaeger/go.sum tools/stack/versions.py
	@mkdir -p $(@D)
	cd tools/stack/jaeger && $(STACK_GOBUILD) -o $(CURDIR)/$@ \
	  -ldflags='-s -w -X github.com/jaegertracing/jaeger/internal/version.latestVersion=v$(call stack-release,jaeger)' \
	  github.com/jaegertracing/jaeger/cmd/jaeger

$(STACK_BIN)/prometheus $(STACK_BIN)/promtool: $(STACK_BIN)/%: tools/stack/prometheus/go.mod tools/stack/prometheus/go.sum tools/stack/versions.py
	@mkdir -p $(@D)
	cd tools/stack/prometheus && $(STACK_GOBUILD) -o $(CURDIR)/$@ \
	  -ldflags='$(call prom-ldflags,$(call stack-release,prometheus),$(call stack-module,prometheus))' \
	  github.com/prometheus/prometheus/cmd/$*

AM_LDFLAGS = $(call prom-ldflags,$(call stack-release,alertmanager),$(call stack-module,alertmanager))

$(STACK_BIN)/amtool: tools/stack/alertmanager/go.mod tools/stack/alertmanager/go.sum tools/stack/versions.py
	@mkdir -p $(@D)
	cd tools/stack/alertmanager && $(STACK_GOBUILD) -o $(CURDIR)/$@ -ldflags='$(AM_LDFLAGS)' \
	  github.com/prometheus/alertmanager/cmd/amtool

# cmd/alertmanager embeds ui/app/dist, which the module does not ship (npm builds it in
# Alertmanager's release): built from a copy of the module with a placeholder there
# (tools/stack/alertmanager/ui-dist.txt), through a go.mod that is ours plus a replace
# (-modfile), so the UI pages are missing and everything else is the module as released.
AM_WORK := .stack/alertmanager-src
$(AM_WORK)/go.mod: tools/stack/alertmanager/go.mod tools/stack/alertmanager/go.sum tools/stack/alertmanager/ui-dist.txt
	rm -rf $(AM_WORK) && mkdir -p $(AM_WORK)
	src=$$(cd tools/stack/alertmanager && go mod download -json github.com/prometheus/alertmanager \
	  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$$/\1/p') && \
	  { test -d "$$src" || { echo "stack-bin: no source directory for github.com/prometheus/alertmanager" >&2; exit 1; }; } && \
	  cp -r "$$src" $(AM_WORK)/alertmanager && chmod -R u+w $(AM_WORK)/alertmanager
	mkdir -p $(AM_WORK)/alertmanager/ui/app/dist
	cp tools/stack/alertmanager/ui-dist.txt $(AM_WORK)/alertmanager/ui/app/dist/README.txt
	cp tools/stack/alertmanager/go.sum $(AM_WORK)/go.sum
	{ cat tools/stack/alertmanager/go.mod; echo; \
	  echo 'replace github.com/prometheus/alertmanager => $(CURDIR)/$(AM_WORK)/alertmanager'; } > $@

$(STACK_BIN)/alertmanager: $(AM_WORK)/go.mod tools/stack/versions.py
	@mkdir -p $(@D)
	cd tools/stack/alertmanager && $(STACK_GOBUILD) -modfile=$(CURDIR)/$< -o $(CURDIR)/$@ \
	  -ldflags='$(AM_LDFLAGS)' github.com/prometheus/alertmanager/cmd/alertmanager

# VictoriaLogs' pure-Go build (CGO_ENABLED=0: its own `app-local-pure`; no C toolchain),
# its version stamped as its release build does (lib/buildinfo).
$(STACK_BIN)/victoria-logs: tools/stack/victorialogs/go.mod tools/stack/victorialogs/go.sum tools/stack/versions.py
	@mkdir -p $(@D)
	cd tools/stack/victorialogs && CGO_ENABLED=0 $(STACK_GOBUILD) -o $(CURDIR)/$@ \
	  -ldflags='-s -w -X github.com/VictoriaMetrics/VictoriaMetrics/lib/buildinfo.Version=victoria-logs-go-module-tags-$(call stack-module,victorialogs)' \
	  github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs

# deploy/ as users run it, every program real, on loopback (tests/stack/), once, on the
# newest ADK.
stack-test: stack-bin $(VENVS)/adk-$(ADK_NEWEST)/.installed
	ADK_STACK_REQUIRED=1 ADK_STACK_BIN=$(abspath $(STACK_BIN)) \
	  $(VENVS)/adk-$(ADK_NEWEST)/bin/python -m pytest -q -s -p no:cacheprovider tests/stack $(PYTEST_ARGS)

# The traced-caller sampling test for 5 minutes at 20 runs/s, on the compose collector's
# config and the k8s sampler's (stack-test runs 40 s of it on the compose one); the
# figures in docs/deploy.md come from it.
sampling-soak: stack-bin $(VENVS)/adk-$(ADK_NEWEST)/.installed
	ADK_SAMPLING_LOAD_S=300 ADK_STACK_REQUIRED=1 ADK_STACK_BIN=$(abspath $(STACK_BIN)) \
	  $(VENVS)/adk-$(ADK_NEWEST)/bin/python -m pytest -q -s -p no:cacheprovider \
	  tests/stack/test_traceparent_sampling.py $(PYTEST_ARGS)

# Bytes per trace the tail sampler holds, and what each config's memory limit fits
# (docs/deploy.md; tests/sampler_capacity.py keeps the figures).
sampler-sizing: stack-bin $(VENVS)/adk-$(ADK_NEWEST)/.installed
	ADK_STACK_BIN=$(abspath $(STACK_BIN)) $(VENVS)/adk-$(ADK_NEWEST)/bin/python -m tests.stack.sampler_sizing

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

# --- docs: every captured output in README.md and docs/*.md (tools/docs_capture.py) ---
# Then the version tables from adk_compat/versions.py (tools/versions_doc.py --tables).
# Runs each block's command on the google-adk version it names (its .venvs/adk-<version>)
# and rewrites the blocks whose output changed; docs-check only compares (tests/test_docs.py
# does the same inside `make test`).
docs: venvs
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python tools/docs_capture.py --venvs $(VENVS)
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python tools/versions_doc.py --tables
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python tools/deploy_doc.py

docs-check: venvs
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python tools/docs_capture.py --venvs $(VENVS) --check
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python tools/versions_doc.py --tables --check
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python tools/deploy_doc.py --check

# --- wheel: dist/adk_task_telemetry-<version>-py3-none-any.whl, to install elsewhere ---
# (the package is not on an index yet: `pip install dist/adk_task_telemetry-*.whl`,
# README.md "Install"). Built offline by the newest venv's build + hatchling (dev extra).
wheel: $(VENVS)/adk-$(ADK_NEWEST)/.installed
	rm -f dist/adk_task_telemetry-*.whl
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python -m build --wheel --no-isolation --outdir dist .

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

# --- soak: a collector restart under load (tests/soak.py; figures in docs/reliability.md) ---
# 64 clients on ADK's server for 60 s, the collector stopped for 10 s, beside the same load
# without an outage; then an outage longer than a small buffer (loss = the dropped count).
SOAK_ARGS ?=
soak: $(VENVS)/adk-$(ADK_NEWEST)/.installed
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python -m tests.soak --baseline $(SOAK_ARGS)
	$(VENVS)/adk-$(ADK_NEWEST)/bin/python -m tests.soak --outage 20 --buffer-spans 1000 $(SOAK_ARGS)
