#!/usr/bin/env bash
# Runs the package's tests against another node-redis (`redis`) version than the lock file's:
#   scripts/test-peer.sh 5.0.0 [test files...]
# in a copy of this folder (so node_modules here stays as `npm ci` made it), with the
# repository's built module and conformance runner. Used to check the lowest version the
# peer range allows (see README.md, "Requirements"); needs the npm registry.
set -euo pipefail
version=$1; shift
here=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$here/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/dlock-node-peer-XXXXXX")
trap 'rm -rf "$work"' EXIT
tar -C "$here" --exclude=node_modules --exclude=dist -cf - . | tar -C "$work" -xf -
cd "$work"
npm ci --no-audit --no-fund --loglevel=error
npm install --no-save --no-audit --no-fund --loglevel=error "redis@$version"
echo "redis (node-redis) $(node -p "require('redis/package.json').version"), @redis/client $(node -p "require('@redis/client/package.json').version")"
npm run --silent build
npm run --silent typecheck
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(test/*.test.mjs)
DLOCK_REPO="$repo" node --test --test-concurrency=1 "${files[@]}"
