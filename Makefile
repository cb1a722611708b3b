# Front door of the assignment package. `make help` lists every target.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help setup test demo bench handout fixtures notebooks clean gradescope autolab reference-model

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

setup: $(STAMP) ## create .venv and install the pinned requirements

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

test: setup ## run the project's test suite
	$(PY) -m pytest -q tests

demo: setup handout ## grade the reference solution and the blank handout with hidden cases
	$(PY) -m autograder.build.demo

bench: setup ## print speed figures (local and hidden grading times, ratios to otter)
	$(PY) -m autograder.build.bench

handout: setup ## regenerate handout/ from solutions/ and public fixtures
	$(PY) -m autograder.build.handout

fixtures: setup ## regenerate fixtures/ (attention and notebook cases, LM corpus; CORPUS=path for your own text) and their manifest
	$(PY) -m autograder.fixturegen --out fixtures $(if $(CORPUS),--corpus $(CORPUS))

notebooks: setup ## re-run the solution notebooks in place so their outputs and plots render
	$(PY) -m autograder.build.notebooks --execute

reference-model: setup ## train the reference LM on 2 threads (minutes) -> fixtures/lm/reference_model.pt + its predictions
	$(PY) -m autograder.reference.train --lm-dir fixtures/lm
	$(PY) -m autograder.fixturegen --out fixtures --manifest-only

gradescope: setup ## build build/gradescope/autograder.zip (setup.sh, run_autograder, grader, hidden cases)
	$(PY) -m autograder.platforms.package gradescope

autolab: setup ## build build/autolab/autograde.tar and autograde-Makefile
	$(PY) -m autograder.platforms.package autolab

clean: ## remove build outputs (keeps .venv, grades/ and every student's work)
	rm -rf build .pytest_cache
