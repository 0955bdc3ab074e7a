# Two entry points on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test bench install clean setup-spark

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/streamkit demo
	@echo "streamkit is installed in $(VENV): 'source $(VENV)/bin/activate' puts it on your PATH"

$(VENV)/.installed-spark: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[spark]'
	touch $@

setup-spark: $(VENV)/.installed-spark
	scripts/ensure-java
	scripts/ensure-spark-kafka

test: $(VENV)/.installed-test
	scripts/ensure-java
	scripts/ensure-kafka >/dev/null
	scripts/ensure-kafka-streams >/dev/null
	scripts/ensure-spark-kafka >/dev/null
	scripts/ensure-chromium --optional
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

$(VENV)/.installed-bench: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[bench,bench-bytewax,bench-pathway]'
	touch $@

bench: $(VENV)/.installed-bench
	scripts/ensure-java
	scripts/ensure-kafka >/dev/null
	scripts/ensure-kafka-streams >/dev/null
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .streamkit build *.egg-info
