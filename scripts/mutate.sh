#!/usr/bin/env bash
# Mutation testing of the limiter (make mutate): applies every mutant of the
# "mutation list" in internal/limiter/limiter_test.go through go test -overlay
# (the working tree is never touched), prints KILLED or SURVIVED for each and
# fails when any survived. Needs Redis on 127.0.0.1:6379 and redis-server on
# PATH (the cluster mutant starts a cluster).
set -euo pipefail
# go.mod's toolchain, fetched from the module proxy when the installed go is older.
export GOTOOLCHAIN=go1.27.3
cd "$(dirname "$0")/.."
exec go run ./internal/limiter/mutate "$@"
