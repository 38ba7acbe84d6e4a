# tracekit: `make demo` and `make test` each set up their own virtual environment.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# The torch build to install for collecting. The default is the CPU build; on a
# GPU machine pass the one for your CUDA/ROCm, e.g. `make demo TORCH_SPEC=torch`.
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo demo-samples test bench samples clean venv fuzz docs

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[collect,test]"
	touch $(STAMP)

venv: $(STAMP)

# Collect the built-in tiny Llama on this machine (GPU if present), then report it.
demo: $(STAMP)
	$(VENV)/bin/tracekit collect --force -o reports/demo
	$(VENV)/bin/tracekit report reports/demo.pt.trace.json.gz -o reports/demo.html --force

# The same report from a committed sample trace, without collecting.
demo-samples: $(STAMP)
	$(VENV)/bin/tracekit report sample_traces/tiny-bs8.pt.trace.json.gz -o reports/tiny-bs8.html --force

# pytest exits 5 when it collected no tests: treat that as a failure, never green.
test: $(STAMP)
	@$(PY) -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc

# The documentation site (mkdocs.yml, docs/), built strictly: a warning or a broken link fails it.
# The `docs` extra comes with the venv (the `test` extra holds it: tests/test_docs.py builds the site).
# NO_MKDOCS_2_WARNING silences the Material theme's end-of-life banner, which is not a build warning.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site

FUZZ_SECONDS ?= 300
fuzz: $(STAMP)
	$(PY) benchmarks/fuzz.py --seconds $(FUZZ_SECONDS)

bench: $(STAMP)
	$(PY) benchmarks/bench_read.py
	$(PY) benchmarks/bench_analysis.py
	$(PY) benchmarks/bench_report.py
	$(PY) benchmarks/bench_batch.py

samples: $(STAMP)
	TRACEKIT=$(VENV)/bin/tracekit sample_traces/regenerate.sh

clean:
	rm -rf $(VENV) reports/*.html reports/*.json reports/*.md .pytest_cache site
