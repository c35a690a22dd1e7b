# XCE developer entry points. `make dev` once, then `make test` / `make demo`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: deps dev test lint demo bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,lsf-clients]'
	touch $(STAMP)

# The xce command's native front (native/xce.c) replaces the entry-point script pip writes: it forwards
# each call to a warm CLI server (xce/cli/server.py) instead of starting Python, and owns no option.
# native/xce-launch.c is every job run's shepherd and sandbox (xce/worker/sandbox.py).  Both are started
# once a call or a run, so both are static with musl when musl-gcc is there (`make deps` installs it):
# its start-up costs a fraction of glibc's (the front: 0.55 against 1.15 ms of CPU a call).
# The front is also LSF's commands (bsub, bjobs...: pyproject.toml's console scripts into xce.lsf), linked to
# it over pip's scripts: it sends the server the name it was run by (xce/cli/programs.py).
NATIVE := $(VENV)/.native
NATIVE_CC := $(shell command -v musl-gcc >/dev/null 2>&1 && echo musl-gcc -static || echo $(CC))
LSF_COMMANDS := $(shell sed -n 's/^\([a-z]*\) = "xce\.lsf\..*/\1/p' pyproject.toml)
$(NATIVE): native/xce.c native/xce-launch.c $(STAMP)
	$(NATIVE_CC) -O2 -Wall -Wextra -o $(BIN)/xce native/xce.c
	for p in $(LSF_COMMANDS); do ln -sf xce $(BIN)/$$p; done
	$(NATIVE_CC) -O2 -Wall -Wextra -o $(BIN)/xce-launch native/xce-launch.c
	touch $(NATIVE)

# System packages the tests need (root, Debian): PostgreSQL server binaries, btrfs-progs (the btrfs
# provider's tests make a loop-file btrfs filesystem), venv support, a C compiler and musl (native/), and
# openssl (the transfer tests' HTTPS server gets a self-signed certificate), OpenMPI (openmpi-bin: mpirun with
# blaunch across two hosts, tests/integration/test_multihost.py). rclone and mpi4py come from PyPI.
deps:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		apt-get update -q && (apt-get install -y -q postgresql-15 || apt-get install -y -q postgresql); fi
	@command -v mkfs.btrfs >/dev/null 2>&1 || apt-get install -y -q btrfs-progs || \
		{ apt-get update -q && apt-get install -y -q btrfs-progs; }
	@$(PY) -m venv --help >/dev/null 2>&1 || { apt-get update -q; apt-get install -y -q python3-venv; }
	@command -v $(CC) >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q gcc; }
	@command -v musl-gcc >/dev/null 2>&1 || apt-get install -y -q musl-tools || \
		{ apt-get update -q && apt-get install -y -q musl-tools; }
	@command -v openssl >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q openssl; }
	@command -v mpirun >/dev/null 2>&1 || apt-get install -y -q openmpi-bin || \
		{ apt-get update -q && apt-get install -y -q openmpi-bin; }

dev: $(STAMP) $(NATIVE)

# The suite runs in TEST_JOBS processes, a test module to each at a time (its module-scoped cluster with
# it); its tests mostly wait on real daemons, so more processes than cores pays.  TEST_JOBS=0: one process.
TEST_JOBS ?= 4

# import-linter and mypy first: a broken layer contract or a type error ([tool.importlinter], [tool.mypy]
# in pyproject.toml) fails the run. mypy's cache lives in the venv, beside the build stamp (a few seconds warm).
MYPY := $(BIN)/python -m mypy --cache-dir $(VENV)/.mypy_cache
test: deps $(STAMP) $(NATIVE)
	$(BIN)/lint-imports
	$(MYPY)
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist loadfile

lint: $(STAMP)
	$(BIN)/lint-imports
	$(MYPY)

demo: deps $(STAMP) $(NATIVE)
	$(BIN)/python -m xce.demo

bench: $(STAMP) $(NATIVE)
	$(BIN)/python bench/commit.py

clean:
	rm -rf $(VENV) build dist .pytest_cache .grimp_cache
