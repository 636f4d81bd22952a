# `make run` and `make test` are the front door: both create .venv when it is missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast lint bench clean system-deps overview-png

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/llmwh serve --demo

# A pytest worker per core and one more (tests/conftest.py: much of the suite waits on
# real processes), each with its own embedded server; a module's tests stay on one
# worker, so a module fixture (a Prometheus, a shared store) starts once. Modules go
# out in the order tests/conftest.py collects them (slow ones first), not xdist's
# default of the modules with the most tests first, which left kill -9 (4 tests, 4
# minutes) to the end.
test: $(STAMP) system-deps
	$(BIN)/ruff check warehouse tests benchmarks fuzz
	$(BIN)/ruff format --check warehouse tests benchmarks fuzz
	$(BIN)/mypy
	$(BIN)/python -m pytest -n auto --dist loadscope --no-loadscope-reorder

# Unit tests only: no server, no system packages.
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests/unit

lint: $(STAMP)
	$(BIN)/ruff check warehouse tests benchmarks fuzz
	$(BIN)/ruff format --check warehouse tests benchmarks fuzz
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/insert_requests.py

# The README's picture of the overview page, taken of `llmwh serve --demo` in headless
# Chromium (about a minute: the demo backfills its hours first).
overview-png: $(STAMP) system-deps
	$(BIN)/python benchmarks/overview_png.py --out docs/overview.png

# Real remote-write senders and readers for the integration tests: Debian's prometheus
# and victoria-metrics (vmagent); and Debian's chromium, headless, which opens the SLA
# report and the overview page. Installed when missing and we are root; otherwise the
# tests that need them say so and skip.
system-deps:
	@if ! command -v prometheus >/dev/null || ! command -v vmagent >/dev/null \
			|| ! command -v chromium >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing prometheus, victoria-metrics and chromium (Debian packages)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
				--no-install-recommends prometheus victoria-metrics chromium >/dev/null; \
		else \
			echo "prometheus/vmagent/chromium missing and not root: their tests will be skipped"; \
		fi; \
	fi

clean:
	rm -rf $(VENV) llmwh-data .pytest_cache .ruff_cache
