# TorchFuser: `make demo` and `make test` each set up everything they need on a fresh machine.
VENV        := .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.torchfuser-installed
TORCH       := torch==2.13.0
DEB_PACKAGES := pocl-opencl-icd ocl-icd-libopencl1 graphviz chromium

.PHONY: setup system-packages demo test bench clean

setup: system-packages $(STAMP)

# Debian packages: installed when missing and we are root; otherwise the exact apt line is printed.
system-packages:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "torchfuser needs Debian packages that are missing; run:"; \
	    echo "  sudo apt-get update && sudo apt-get install -y$$missing"; \
	  fi; \
	fi

# torch 2.13.0 first (a CPU wheel lies on these machines; anything else would fetch a CUDA build).
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

demo: setup
	$(PY) -m torchfuser demo

# The view's unit tests (vitest, in labextension/), then everything else, browser tests included (pytest).
test: setup
	cd labextension && PATH="$(CURDIR)/$(VENV)/bin:$$PATH" jlpm test
	$(PY) -m pytest -q --durations=15

bench: setup
	$(PY) -m torchfuser.bench

clean:
	rm -rf $(VENV) build dist *.egg-info
