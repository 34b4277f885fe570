#!/usr/bin/env bash
# The real Redisson against the module (java/, Maven, JUnit 5): the whole java/ suite once per
# Redisson version, each test with useScriptCache false and true.
#   REDISSON_VERSIONS="3.23.5 4.7.0"   the versions (default: those `make test` runs)
#   DLOCK_SERVER=/path/redis-server    the server binary (default redis-server on PATH)
#   JAVA_TESTS=WakeUpTest              one test class (surefire's -Dtest)
#   DLOCK_REDISSON=lua                 the module loaded as `redisson lua` (default: its default,
#                                      native) wherever a test does not name the mode itself
# Maven downloads Redisson and the plugins into ~/.m2 on the first run (-B -q: no progress
# output). One line per version, then `N passed, N failed` over all of them. Exit status:
# non-zero when any version failed.
set -u
cd "$(dirname "$0")/.."
VERSIONS=${REDISSON_VERSIONS:-3.23.5 4.7.0}
SERVER=${DLOCK_SERVER:-redis-server}
MODULE=$PWD/target/release/libdlock.so
command -v mvn >/dev/null || { echo "test-java: mvn is missing (make setup installs maven)" >&2; exit 1; }
[ -f "$MODULE" ] || { echo "test-java: $MODULE is not built (make build)" >&2; exit 1; }

total_passed=0 total_failed=0 status=0
for v in $VERSIONS; do
	start=$(date +%s)
	rm -rf java/target/surefire-reports
	# Maven 3.8 prints colour resets even in batch mode: stripped, and blank lines dropped.
	(cd java && mvn -q -B -Dstyle.color=never -Dredisson.version="$v" -Ddlock.server="$SERVER" \
		-Ddlock.module="$MODULE" ${JAVA_TESTS:+-Dtest="$JAVA_TESTS"} test) 2>&1 |
		sed -u 's/\x1b\[[0-9;]*m//g' | grep --line-buffered -v '^[[:space:]]*$'
	rc=${PIPESTATUS[0]}
	# Surefire's reports: tests, failures and errors per class.
	read -r tests failures skipped < <(cat java/target/surefire-reports/TEST-*.xml 2>/dev/null |
		grep -o '<testsuite [^>]*>' |
		awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "=\""); v = kv[2] + 0;
			if (kv[1] == "tests") t += v; if (kv[1] == "failures" || kv[1] == "errors") f += v;
			if (kv[1] == "skipped") s += v } }
			END { print t + 0, f + 0, s + 0 }')
	[ "$rc" = 0 ] || { status=1; [ "$failures" -gt 0 ] || failures=1; }
	passed=$((tests - failures - skipped))
	total_passed=$((total_passed + passed)) total_failed=$((total_failed + failures))
	echo "java: Redisson $v${DLOCK_REDISSON:+ (redisson $DLOCK_REDISSON)}: $passed passed, $failures failed ($(($(date +%s) - start)) s, $("$SERVER" --version | head -1 | cut -d' ' -f1-3))"
done
echo "java: $total_passed passed, $total_failed failed"
exit $status
