# Front door of the assignment package. `make help` lists every target.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help check docs setup sandbox-tools pythons test test-course demo bench mutants pictures handout fixtures notebooks clean gradescope autolab prairielearn reference-model course platform-check

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

setup: $(STAMP) sandbox-tools ## create .venv, install the pinned requirements and bubblewrap (when root)

# Namespaces need bubblewrap and setpriv (util-linux) and root; elsewhere autograder/isolation/
# falls back to rlimits + Landlock, and results record which level graded them.
sandbox-tools:
	@if [ "$$(id -u)" != 0 ]; then \
		echo "sandbox: not root, so namespaces are unavailable; grading uses the Landlock fallback (rlimits + Landlock)"; \
	elif command -v bwrap >/dev/null 2>&1 && command -v setpriv >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap util-linux >/dev/null \
		|| echo "sandbox: could not install bubblewrap, so namespaces are unavailable; grading uses the Landlock fallback"; \
	else echo "sandbox: bubblewrap/setpriv missing and no apt-get, so namespaces are unavailable; grading uses the Landlock fallback"; fi

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

# The student loop under the other Pythons students bring (tests/test_student_platforms.py): each of
# OTHER_PYTHONS that pyenv (or PATH) has gets .venv-py<version> with what notebook 1, its checks and
# `make handin` need (uv installs it in seconds); one that is absent is skipped, and said.
OTHER_PYTHONS := 3.10 3.12 3.13
STUDENT_NUMPY_PART := "numpy>=2.2,<2.5" otter-grader==7.0.0 nbformat psutil "tomli; python_version < '3.11'"
pythons: $(STAMP) ## environments for the tests under Python 3.10, 3.12 and 3.13 (numpy part of the student loop)
	@for v in $(OTHER_PYTHONS); do \
		exe=$$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$v.*/bin/python$$v 2>/dev/null | sort -V | tail -n 1); \
		[ -n "$$exe" ] || exe=$$(command -v python$$v || true); \
		if [ -z "$$exe" ]; then echo "pythons: no Python $$v here (pyenv or PATH), so its tests are skipped"; continue; fi; \
		[ -f .venv-py$$v/.installed ] && continue; \
		$(VENV)/bin/uv venv -q --allow-existing -p "$$exe" .venv-py$$v \
		&& $(VENV)/bin/uv pip install -q -p .venv-py$$v/bin/python $(STUDENT_NUMPY_PART) \
		&& touch .venv-py$$v/.installed \
		|| echo "pythons: could not set up Python $$v ($$exe), so its tests are skipped"; \
	done

# One pytest worker per core plus one (at most 8; many tests wait on a sandbox time limit), a test file per worker,
# the longest files first (tests/conftest.py's LONGEST_FIRST; xdist would otherwise reorder them by test count).
# Each test file's time goes to build/test_times.jsonl, and their sum to docs/data/suite.json (the figures page's).
TIMES := $(CURDIR)/build/test_times.jsonl
test: setup pythons ## lint (ruff), then run the project's test suite; its time into docs/data/suite.json
	$(PY) -m ruff check .
	mkdir -p build && rm -f $(TIMES)
	TEST_FILE_TIMES=$(TIMES) $(PY) -m pytest -q -n $$(( $$(nproc) + 1 > 8 ? 8 : $$(nproc) + 1 )) --dist loadfile \
		--no-loadscope-reorder --durations=30 tests
	$(PY) -m autograder.tools.measured suite $(TIMES)

# tests/test_own_corpus.py as an instructor's course runs: `make course CORPUS=...` with no other option trains the
# reference from scratch (make test's course is a warm start; it checks what this one would train).
test-course: setup ## the test course with make course's defaults: the reference trained from scratch
	OWN_COURSE=defaults $(PY) -m pytest -q -p no:cacheprovider tests/test_own_corpus.py

# The fast lane for the edit-test loop: lint and the tests that need no container, attack, other Python,
# class run or training (a test file says what it needs by its markers, pytest.ini).
check: setup ## lint (ruff), then the fast lane of the test suite (make test runs everything)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n 2 -m "not (slow or attacks or container or pythons)" -p no:cacheprovider tests

demo: setup handout ## grade the reference solution and the blank handout with hidden cases
	$(PY) -m autograder.tools.demo

docs: setup ## build the manual (docs/) into build/docs/ with MkDocs, strictly: a broken link or anchor fails
	$(PY) -m mkdocs build --strict --quiet --site-dir build/docs

# The figures page (docs/figures.md, made by autograder/tools/docs_figures.py) reads docs/data/*.json: commit them.
bench: setup ## time grading next to otter run: a table, and its figures into build/bench.json and docs/data/bench.json
	$(PY) -m autograder.tools.bench
	mkdir -p docs/data && cp build/bench.json docs/data/bench.json

mutants: setup ## grade every single-point mutant of the reference attention.py and of the notebooks' graded functions against independent oracles, and which question's check each first fails (hours) -> build/mutants*.json, docs/data/mutants.json
	$(PY) -m autograder.tools.mutants
	$(PY) -m autograder.tools.mutants_notebooks
	$(PY) -m autograder.tools.mutants_checks
	$(PY) -m autograder.tools.measured mutants build/mutants.json build/mutants_notebooks.json

pictures: setup ## the manual's pictures of real runs: a student's python autograder.py, the class report in Chromium
	$(PY) -m autograder.tools.docs_pictures

handout: setup ## regenerate handout/ from solutions/ and public fixtures
	$(PY) -m autograder.tools.handout

fixtures: setup ## regenerate fixtures/ (attention and notebook cases, LM corpus; CORPUS=path for your own text, ORACLE=model:path; SEED=N rotates hidden cases) and their manifest
	$(PY) -m autograder.fixturegen --out fixtures $(if $(CORPUS),--corpus $(CORPUS)) $(if $(ORACLE),--oracle $(ORACLE)) $(if $(SEED),--seed $(SEED))

course: setup ## the whole LM course for a corpus: fixtures, reference model (reused when unchanged), thresholds; CORPUS=path [ORACLE=model:path STEPS=N TRAIN_SEED=N CONFIG=k=v,... INIT=ckpt RETRAIN=1 REPEATS=N FIXTURES=dir RUBRIC=path]
	$(PY) -m autograder.reference.course $(if $(CORPUS),--corpus $(CORPUS)) $(if $(ORACLE),--oracle $(ORACLE)) \
		$(if $(STEPS),--steps $(STEPS)) $(if $(TRAIN_SEED),--seed $(TRAIN_SEED)) $(if $(CONFIG),--config $(CONFIG)) \
		$(if $(INIT),--init $(INIT)) $(if $(RETRAIN),--retrain) $(if $(REPEATS),--repeats $(REPEATS)) \
		$(if $(FIXTURES),--fixtures $(FIXTURES)) $(if $(RUBRIC),--rubric $(RUBRIC))

notebooks: setup ## re-run the solution notebooks in place so their outputs and plots render
	$(PY) -m autograder.tools.notebooks --execute

reference-model: setup ## train the reference LM on 2 threads (minutes) -> fixtures/lm/reference_model.pt + its predictions
	$(PY) -m autograder.reference.train --lm-dir fixtures/lm
	$(PY) -m autograder.fixturegen --out fixtures --manifest-only

gradescope: setup ## build build/gradescope/autograder.zip (setup.sh, run_autograder, grader, hidden cases)
	$(PY) -m autograder.platforms.package gradescope

autolab: setup ## build build/autolab/ (autograde.tar, autograde-Makefile, the image's Dockerfile); TORCH_WHEEL=<CPU wheel> AUTODRIVER=<Tango's autodriver> for the image
	$(PY) -m autograder.platforms.package autolab $(if $(TORCH_WHEEL),--torch-wheel $(TORCH_WHEEL)) $(if $(AUTODRIVER),--autodriver $(AUTODRIVER))

prairielearn: setup ## build build/prairielearn/ (course/: the question and serverFilesCourse/; image/: its Dockerfile); TORCH_WHEEL=<CPU wheel> IMAGE=<registry name>
	$(PY) -m autograder.platforms.package prairielearn $(if $(TORCH_WHEEL),--torch-wheel $(TORCH_WHEEL)) $(if $(IMAGE),--image $(IMAGE))

platform-check: setup ## (root, minutes) Gradescope's setup.sh, Autolab's and PrairieLearn's Dockerfiles in a fresh Debian 12 root, then grade reference, partial and broken handins there
	$(PY) -m autograder.platforms.check

clean: ## remove build outputs (keeps .venv, grades/ and every student's work)
	rm -rf build .pytest_cache
