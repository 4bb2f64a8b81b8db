# Two commands do everything on a fresh machine (Python 3.11 on PATH):
#   make book   create .venv, install the pinned requirements and the course itself (pip install -e .),
#               cut the site's Chinese font, build the site into _build/html
#   make test   the same environment, then the whole test suite (which also builds the book strictly)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
# nbgrader shells out to `alembic` and kernels are started as `python`: the venv's bin/ must come first.
export PATH := $(BIN):$(PATH)
export MPLBACKEND := Agg

.PHONY: book class-book test notebooks grade-demo bench clean lock sandbox-tools test-tools font-tools font gpu-bundle gpu-check

# The course is installed into the venv in editable mode (pyproject.toml): `solutions`, `autograder` and `course`
# import from anywhere, so neither the book build nor a downloaded page needs PYTHONPATH.
$(VENV)/.installed: requirements.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt -c constraints.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

# Re-pin every transitive dependency after a change to requirements.txt (then run `make test`).
lock:
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	{ echo "# Exact versions of everything requirements.txt pulls in, as last tested (Python 3.11, Linux x86-64)."; \
	  echo "# Regenerate with \`make lock\` after changing requirements.txt. torch is pinned in requirements.txt."; \
	  $(BIN)/python -m pip freeze --exclude-editable | grep -v -i -E '^torch=='; } > constraints.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(VENV)/.installed

# The site serves its own Chinese font, cut at build time from Debian's fonts-noto-cjk (SIL Open Font License
# 1.1; course/fonts.py). As root this installs it; otherwise it says how.
font-tools: $(VENV)/.installed
	@$(BIN)/python scripts/build_font.py --check >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing fonts-noto-cjk (the source of the site's Chinese font)..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-noto-cjk >/dev/null; \
	  else \
	    echo "error: the site's Chinese font is cut from Noto Sans CJK: sudo apt install fonts-noto-cjk" >&2; exit 1; \
	  fi; }

# Cut the font to the characters the pages use (every book build does it too; this prints its size).
font: font-tools
	$(BIN)/python scripts/build_font.py

book: font
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going
	@echo "Site built: open _build/html/index.html"

# The class edition: the same site without the answers to the graded exercises (no solutions/, autograder/ or
# tests/ in its archive; course/editions.py), for an instructor who grades with the course to publish. It reuses
# the execution cache of `make book` (_build/.jupyter_cache), so it runs no page again. guides/instructors.md.
class-book: font
	COURSE_EDITION=class $(BIN)/jupyter-book build . --path-output _build/class --warningiserror --nitpick --keep-going
	@echo "Class edition built: publish _build/class/_build/html (guides/instructors.md, 'Publishing the class edition')"

# The grading sandbox needs bubblewrap (Debian package `bubblewrap`); as root this installs it.
sandbox-tools:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing bubblewrap (the grading sandbox)..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	  else \
	    echo "error: the grading sandbox needs bubblewrap: sudo apt install bubblewrap" >&2; exit 1; \
	  fi; }

# The tests also need Debian's chromium (headless: do the site's formulas typeset?) and postgresql (the server that
# tests/test_distributed.py starts for the gradebook). As root, `make test` installs them; otherwise the tests that
# need them are skipped. bubblewrap stays required (sandbox-tools).
test-tools: sandbox-tools
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing chromium (the browser test of the site)..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "note: no chromium, so the browser test of the formulas is skipped (sudo apt install chromium)"; \
	  fi; }
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing postgresql (the server the PostgreSQL gradebook test starts on its own data directory)..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else \
	    echo "note: no PostgreSQL server binaries, so the PostgreSQL gradebook tests are skipped (sudo apt install postgresql)"; \
	  fi; }

test: font test-tools
	$(BIN)/python -m pytest tests --durations=40

# Regenerate the student notebooks and the demo submissions from the instructor sources.
notebooks: $(VENV)/.installed
	$(BIN)/python -m autograder build

grade-demo: $(VENV)/.installed sandbox-tools
	$(BIN)/python -m autograder grade autograder/demo --workdir grading/demo

# Stock nbgrader autograde, and our grader started warm (the default, with all cores and with one) and cold,
# on the same 36 submissions, four of each chapter, and reruns of one student (scripts/bench_grading.py).
bench: $(VENV)/.installed sandbox-tools
	$(BIN)/python scripts/bench_grading.py -n 36 --no-pool

# The prepared GPU check (scripts/gpu_check.py; guides/instructors.md, "Grading on a GPU"). gpu-bundle runs here,
# with a package index, and writes .gpu-bundle/ (about 40 MiB, ignored by git, carried to the GPU machine);
# gpu-check runs there with the machine's own python3 and torch (no venv, no index).
gpu-bundle: $(VENV)/.installed
	$(BIN)/python scripts/gpu_check.py --make-bundle .gpu-bundle

gpu-check:
	python3 scripts/gpu_check.py --report gpu-check-report.md

clean:
	rm -rf _build grading
