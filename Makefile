# tracekit: `make demo` and `make test` each set up their own virtual environment.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# The torch build to install for collecting. The default is the CPU build; on a
# GPU machine pass the one for your CUDA/ROCm, e.g. `make demo TORCH_SPEC=torch`.
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test bench samples clean venv

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[collect,test]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tracekit summary sample_traces/tiny-bs1.pt.trace.json.gz

# pytest exits 5 when it collected no tests: treat that as a failure, never green.
test: $(STAMP)
	@$(PY) -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc

bench: $(STAMP)
	$(PY) benchmarks/bench_read.py

clean:
	rm -rf $(VENV) reports/*.html reports/*.json reports/*.md .pytest_cache
