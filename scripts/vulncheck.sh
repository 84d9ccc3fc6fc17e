#!/usr/bin/env bash
# vulncheck: govulncheck over the module (symbol level: a finding is a
# vulnerable function the code can reach, in a dependency or the standard
# library of the toolchain in use), against a vulnerability database built
# here from the golang.org/x/vulndb module. CI machines reach the Go module
# proxy but not the public vulnerability database, and the module carries
# the same reports (data/osv, one OSV file per entry): its cmd/indexdb
# writes them out as the database layout govulncheck's -db file:// reads
# (index/db.json, index/modules.json, index/vulns.json, ID/<id>.json).
#
# Exits non-zero when govulncheck reports a reachable finding (its exit
# status 3) or cannot run. Findings in imported code that is never called
# are listed by govulncheck -show verbose but do not fail.
#
#   scripts/vulncheck.sh            (or: make vulncheck)
#   VULNDB_VERSION=... VULN_VERSION=... scripts/vulncheck.sh
#
# The database is cached per vulndb version under
# ${TMPDIR:-/tmp}/smsgw-vulndb-<version>/. Move VULNDB_VERSION forward (the
# module proxy's newest: `go list -m -versions golang.org/x/vulndb` lists
# none, as it has only pseudo-versions; `go list -m golang.org/x/vulndb@master`
# names the newest) to check against newer reports.
set -euo pipefail
# go.mod's toolchain, fetched from the module proxy when the installed go is older.
export GOTOOLCHAIN=go1.27.3

VULNDB_VERSION=${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}
VULN_VERSION=${VULN_VERSION:-v1.9.0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DB=${TMPDIR:-/tmp}/smsgw-vulndb-$VULNDB_VERSION/db

if [ ! -f "$DB/index/db.json" ]; then
	echo "vulncheck: building the vulnerability database from golang.org/x/vulndb@$VULNDB_VERSION"
	work=$(mktemp -d "${TMPDIR:-/tmp}/vulndb.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	# The module's files, from the module cache (read-only there).
	src=$(cd "$work" && go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -d "$src/data/osv" ] || { echo "vulncheck: golang.org/x/vulndb@$VULNDB_VERSION has no data/osv" >&2; exit 1; }
	(cd "$work" && go run "golang.org/x/vulndb/cmd/indexdb@$VULNDB_VERSION" -vulns "$src/data/osv" -out "$work/db")
	mkdir -p "$(dirname "$DB")"
	rm -rf "$DB"
	mv "$work/db" "$DB"
	echo "vulncheck: $(find "$DB/ID" -name "*.json" | wc -l) entries in $DB"
fi

cd "$ROOT"
go version
go run "golang.org/x/vuln/cmd/govulncheck@$VULN_VERSION" -db "file://$DB" ./...
