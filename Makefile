# `make run` and `make test` are the front door: both create .venv when it is missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/llmwh serve

test: $(STAMP)
	$(BIN)/ruff check warehouse tests benchmarks
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check warehouse tests benchmarks
	$(BIN)/ruff format --check warehouse tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/insert_requests.py

clean:
	rm -rf $(VENV) llmwh-data .pytest_cache .ruff_cache
