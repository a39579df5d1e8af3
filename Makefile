# The two commands of the README: `make run` and `make test`. Everything else is a helper target.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run quickstart test lint typecheck imports pytest browser services bench clean setup

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: the CPU build; an unpinned torch pulls a multi-GB CUDA build
	# (set TORCH_INDEX to a CPU wheel index on machines that have no local CPU wheel)
	$(BIN)/pip install --quiet "torch==2.13.0" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/collapipe serve $(if $(PORT),--port $(PORT))

quickstart: $(STAMP)
	$(BIN)/collapipe run examples/quickstart.yaml --out runs/quickstart

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

# Debian's chromium for the dashboard tests (Playwright drives it; no browser download)
browser:
	command -v chromium >/dev/null 2>&1 || (apt-get update -q && apt-get install -y -q chromium)

pytest: $(STAMP) browser
	$(BIN)/pytest

test: lint typecheck imports pytest

bench: $(STAMP)
	$(BIN)/python bench/analytic_scale.py

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
