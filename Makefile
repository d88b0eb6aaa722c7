# gx10: `make lab` runs the whole pipeline on the two-node lab; `make test` runs every test.
# Both install what they need: a .venv with pinned dependencies, mmdebstrap for the lab images.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV := $(CURDIR)/.venv
STAMP := $(VENV)/.installed
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_FORCE_COLOR ?= 0
PYTHON ?= python3

.PHONY: help venv host-deps browser-deps proxy-deps prometheus-tools lab lab-up lab-down lab-status images test lint docs unit molecule e2e e2e-engine clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# uv installs the lock (about 90 packages, `ansible` among them with its tens of thousands of
# files) in 17 s where pip takes 46 s (docs/PERFORMANCE.md); it is pinned and comes from PyPI.
UV_VERSION := 0.9.5
$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(VENV)/bin/uv pip install --quiet --python $(VENV)/bin/python -r requirements.lock
	$(VENV)/bin/uv pip install --quiet --python $(VENV)/bin/python --no-deps -e .
	touch $@

venv: $(STAMP) ## Create .venv with the pinned dependencies

host-deps: ## Install the host tools the lab needs (mmdebstrap, iproute2) if missing
	@command -v docker >/dev/null || { echo "make: Docker is required (docker CLI not found)"; exit 1; }
	@missing=""; command -v mmdebstrap >/dev/null || missing="$$missing mmdebstrap"; \
	  command -v ip >/dev/null || missing="$$missing iproute2"; \
	  if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" != 0 ]; then echo "make: install$$missing (as root: apt-get install$$missing)"; exit 1; fi; \
	    echo "installing$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  fi

browser-deps: ## Install the headless browser the report tests use (chromium, chromedriver) if missing
	@missing=""; command -v chromium >/dev/null || missing="$$missing chromium"; \
	  command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	  if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" != 0 ]; then echo "make: install$$missing (as root: apt-get install$$missing)"; exit 1; fi; \
	    echo "installing$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  fi

proxy-deps: ## Install the reverse proxy the gateway tests run (haproxy) if missing
	@if ! command -v haproxy >/dev/null; then \
	    if [ "$$(id -u)" != 0 ]; then echo "make: install haproxy (as root: apt-get install haproxy)"; exit 1; fi; \
	    echo "installing haproxy"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null; \
	  fi
# promtool and node exporter for the unit tests, from Debian's own packages, unpacked (not
# installed: installing `prometheus` would start a Prometheus on this machine's port 9090, the
# port the lab's Prometheus is published on, and needs root). Any Debian/Ubuntu apt source works.
PROMETHEUS_TOOLS := $(CURDIR)/.cache/prometheus-tools
prometheus-tools: ## Unpack promtool and node exporter from Debian's packages into .cache/ if missing
	@if [ -x $(PROMETHEUS_TOOLS)/promtool ] && [ -x $(PROMETHEUS_TOOLS)/prometheus-node-exporter ]; then exit 0; fi; \
	  for tool in apt-get dpkg-deb; do command -v $$tool >/dev/null || { echo "make: prometheus-tools needs $$tool (Debian/Ubuntu)"; exit 1; }; done; \
	  tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  echo "fetching Debian's prometheus and prometheus-node-exporter packages (unpacked into $(PROMETHEUS_TOOLS))"; \
	  (cd "$$tmp" && apt-get download -qq prometheus prometheus-node-exporter 2>&1 | grep -v '^W: Download is performed unsandboxed' || true); \
	  ls "$$tmp"/prometheus_*.deb "$$tmp"/prometheus-node-exporter_*.deb >/dev/null || { echo "make: apt-get download failed (run apt-get update?)"; exit 1; }; \
	  for deb in "$$tmp"/*.deb; do dpkg-deb -x "$$deb" "$$tmp/root"; done; \
	  mkdir -p $(PROMETHEUS_TOOLS); \
	  install -m 0755 "$$tmp/root/usr/bin/promtool" "$$tmp/root/usr/bin/prometheus-node-exporter" $(PROMETHEUS_TOOLS)/

LAB_BENCH := $(CURDIR)/.lab/bench
# The pair agent and the GPU telemetry writer have no .py suffix (they are installed as
# commands): lint names them explicitly.
PAIR_AGENT := roles/vllm_supervisor/files/gx10-pair
# So has the memory guard's node tool (earlyoom runs it by path).
MEMORY_GUARD_TOOL := roles/memory_guard/files/gx10-memory-guard
GPU_METRICS := roles/metrics_exporter/files/gx10-gpu-metrics
GPU_CLOCK_TOOL := roles/gpu_clock/files/gx10-gpu-clock
# The lab node's bytecode cache for modules run from a zip (test equipment, not a package module).
ZIPIMPORT_CACHE := python/gx10/lab/image/node/gx10_lab_zipimport_cache.py

lab: venv host-deps ## Bring the lab up, run site.yml against it, then a short benchmark and its report
	gx10 lab up
	gx10 provision -i inventories/lab
	rm -rf $(LAB_BENCH)
	gx10 bench -i inventories/lab --run bench/lab-short.yml --out $(LAB_BENCH)
	@echo "open the report: $(LAB_BENCH)/report.html"
	@echo "Prometheus (scraping the lab): http://127.0.0.1:$${GX10_LAB_PROMETHEUS_PORT:-9090}/targets"
	@echo "the API, behind the gateway as on real nodes: a key for you, then your agents' configs:"
	@echo "  gx10 keys add $${USER:-me} -i inventories/lab --key-file ~/gx10-lab.key"
	@echo "  gx10 clients -i inventories/lab --key-file ~/gx10-lab.key --out lab-clients"
	@echo "  (lab-clients/README.md starts each agent; docs/CLIENTS.md, docs/SECURITY.md)"
	@if [ -n "$${DISPLAY:-}$${WAYLAND_DISPLAY:-}" ] && command -v xdg-open >/dev/null; then \
	  xdg-open $(LAB_BENCH)/report.html >/dev/null 2>&1 || true; fi

lab-up: venv host-deps ## Bring the lab up (idempotent)
	gx10 lab up

lab-down: venv ## Remove the lab: containers, cables, volumes, network
	gx10 lab down

lab-status: venv ## Show the lab
	gx10 lab status

images: venv host-deps ## Build the lab images that are missing (cached by recipe); start nothing
	gx10 lab images

# The timing report's records (docs/PERFORMANCE.md, "Test suite budget"); `make test` clears and
# passes it. `make unit` or `make e2e` alone record nothing unless it is set in the environment.
GX10_TEST_TIMING_DIR ?= $(CURDIR)/.cache/test-timing
TIMING := python -m gx10._dev.timing_report --dir $(GX10_TEST_TIMING_DIR)

# Each stage is its own make, timed; the report is printed in any case. From the start, three
# jobs run at once: lint; unit; the lab images (`make images`, nice'd) then molecule on them. None
# keeps two cores busy alone: lint is one process at a time, unit's tests wait on agents, servers
# and browsers, the build waits on the network and the disk, and molecule's Ansible waits on the
# lab nodes (a converge uses about half a core of the controller). Together they take about 640 s
# here against 865 s one after the other (docs/PERFORMANCE.md). unit's output is shown as it runs,
# lint's and the build's and molecule's (LINT_LOG, ROLES_LOG) when unit has ended and each has.
# e2e, which starts from the lab molecule leaves (left up at the end: .ci/run takes it down, `make
# lab-down` here), runs after all of them passed. A failed stage stops the ones after it; make's
# status is the run's. Nothing is left running after make. The host packages come first.
ROLES_LOG = $(GX10_TEST_TIMING_DIR)/roles.log
LINT_LOG = $(GX10_TEST_TIMING_DIR)/lint.log
test: venv host-deps browser-deps proxy-deps prometheus-tools ## Everything: lint, unit and the lab images then molecule at once; end to end; then the timing report
	rm -f $(GX10_TEST_TIMING_DIR)/*.json
	mkdir -p $(GX10_TEST_TIMING_DIR)
	export GX10_TEST_TIMING_DIR=$(GX10_TEST_TIMING_DIR); \
	stage() { name=$$1; shift; $(TIMING) stage-start $$name; r=0; "$$@" || r=$$?; \
	  $(TIMING) stage-end $$name $$r; return $$r; }; \
	stage lint $(MAKE) --no-print-directory lint >$(LINT_LOG) 2>&1 & lint=$$!; \
	{ stage images nice -n 10 $(MAKE) --no-print-directory images && \
	  stage molecule $(MAKE) --no-print-directory molecule; } >$(ROLES_LOG) 2>&1 & roles=$$!; \
	rc=0; stage unit $(MAKE) --no-print-directory unit || rc=$$?; \
	r=0; wait $$lint || r=$$?; [ $$r -eq 0 ] || rc=$$r; \
	echo "lint (beside unit, the image build and molecule; exit $$r):"; cat $(LINT_LOG); \
	r=0; wait $$roles || r=$$?; [ $$r -eq 0 ] || rc=$$r; \
	echo "lab images, then molecule (beside lint and unit; exit $$r):"; cat $(ROLES_LOG); \
	[ $$rc -ne 0 ] || stage e2e $(MAKE) --no-print-directory e2e || rc=$$?; \
	$(TIMING) print || [ $$rc -ne 0 ] || rc=1; \
	exit $$rc

lint: venv ## yamllint, ansible-lint (production), ruff, mypy, role READMEs against their specs
	yamllint --strict .
	ansible-lint --profile production --offline
	ruff check .
	ruff format --check .
	mypy
	mypy --strict -p ansible_collections.gx10.cluster.plugins.module_utils
	ruff check $(PAIR_AGENT) $(MEMORY_GUARD_TOOL) $(GPU_METRICS) $(GPU_CLOCK_TOOL)
	ruff format --check $(PAIR_AGENT) $(MEMORY_GUARD_TOOL) $(GPU_METRICS) $(GPU_CLOCK_TOOL)
	MYPYPATH=collections/ansible_collections/gx10/cluster/plugins/module_utils \
	  mypy --strict --scripts-are-modules $(PAIR_AGENT)
	mypy --strict --scripts-are-modules $(MEMORY_GUARD_TOOL)
	mypy --strict --scripts-are-modules $(GPU_METRICS)
	mypy --strict --scripts-are-modules $(GPU_CLOCK_TOOL)
	mypy --strict $(ZIPIMPORT_CACHE)
	python -m gx10._dev.role_docs --check

docs: venv ## Regenerate each role README's variable table from meta/argument_specs.yml
	python -m gx10._dev.role_docs

# One worker per CPU (pytest-xdist), each test file on one worker so its module fixtures run once;
# files handed out in collection order, where tests/unit/conftest.py puts the `heavy` ones first.
unit: venv browser-deps proxy-deps prometheus-tools ## Unit tests (plugins, Python; the report in a browser, the gateway behind haproxy, promtool)
	pytest -q -n auto --dist loadfile --no-loadscope-reorder -p gx10._dev.pytest_timing --timing-stage unit

# The role tests as one pipeline on one lab (gx10._dev.role_pipeline): every scenario in stage
# order, its prerequisite stages only where this run has not applied them yet, its setup, then
# its molecule steps (check, converge, idempotence, verify, ...); the first failing step stops
# it. The lab stays up: the e2e stage starts from the state the pipeline leaves (`make lab-down`
# or .ci/run's exit takes it down). One scenario alone, through molecule: `molecule test -s NAME`.
molecule: venv host-deps ## Role tests on the lab, one pipeline in stage order (check, converge, idempotence, verify)
	gx10 lab up
	python -m gx10._dev.role_pipeline

e2e: venv host-deps ## End to end: provision() against the lab
	pytest -q -m "lab and not real_engine" --durations=30 -p gx10._dev.pytest_timing --timing-stage e2e tests/e2e

# The real engine's end-to-end file (issue 25): the lab serving vLLM's CPU build. Not in `make
# test` yet: its image (7 GB), publish and pulls do not fit the suite's budget (docs/PERFORMANCE.md).
e2e-engine: venv host-deps ## End to end with vLLM itself on the lab (gx10 lab up --engine vllm-cpu)
	pytest -q -m real_engine --durations=30 tests/e2e/test_engine.py

clean: ## Remove the venv and caches (the lab stays; see lab-down)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
