# The test command the README gives and .ci/run calls: `make test`.
GO ?= go
# The Go toolchain everything here builds and checks with: go.mod's go line.
# go1.27.3 has the standard library's security fixes 1.26 lacks; the go
# command fetches it from the module proxy when the installed go is older
# (and a machine's GOTOOLCHAIN=local would otherwise stop it).
export GOTOOLCHAIN = go1.27.3
TEST_TIMEOUT ?= 25m
# TEST_P: how many test binaries build and run at once (go test -p); empty
# is go's default, one per core.
TEST_P ?=
# Installs (as root, with apt-get) or names what the tests need, and starts
# the test Redis: scripts/ensure-deps.sh.
DEPS = bash scripts/ensure-deps.sh

.PHONY: test test-short vet lint vulncheck alerts-check mutate bench demo build helm-check

# Packages are built and run in parallel (go test's default -p, one per
# core): no test asserts a latency. The figures the tests log (OTP p99,
# achieved rates) then include the other packages' load; to quote one, run
# its test alone on a quiet machine. Some tests still wait on wall-clock
# budgets (a Retry-After, a stall timeout, a refill); on a machine other
# work keeps busy, make test TEST_P=1 runs one test binary at a time.
# testtimes prints each package's result as it ends, every failed test's
# output, the skipped tests, and the slowest packages and tests.
# go test's own vet pass is off (-vet=off): make vet has just run every
# go vet analyzer on the same packages, tests included.
# TEST_FIRST: the packages that take longest (the end-to-end suite, then
# the gateway's), named before ./... so that go test builds and starts
# them first instead of running them alone at the end (./... is in path
# order, tests/ last); go test runs each package once.
TEST_FIRST ?= ./tests/ ./internal/gateway/
# The alert rules' promtool check and unit tests run once, in go test
# (deploy's TestPromtoolRules, beside the other packages), not before them
# as well: make alerts-check runs them alone.
test: vet
	$(DEPS) redis chromium promtool helm
	$(GO) run ./internal/testtimes -- $(GO) test -race -count=1 -vet=off $(if $(TEST_P),-p $(TEST_P)) -timeout $(TEST_TIMEOUT) -json $(TEST_FIRST) ./...

# Unit tests only (no multi-process end-to-end suite); the alert rules'
# checks in deploy's TestPromtoolRules.
test-short:
	$(DEPS) redis chromium promtool
	$(GO) test -race -count=1 -short ./...

vet:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# golangci-lint with .golangci.yml, installed at the pinned version when
# missing (or another version, or one built with another Go, is on the
# PATH: a linter built with an older Go cannot load this module's code).
GOLANGCI_LINT_VERSION = v2.15.0
GOLANGCI_LINT ?= $(shell $(GO) env GOPATH)/bin/golangci-lint
lint:
	@if ! $(GOLANGCI_LINT) version 2>/dev/null | grep -q "version $(GOLANGCI_LINT_VERSION:v%=%) built with $(GOTOOLCHAIN) "; then \
		echo "installing golangci-lint $(GOLANGCI_LINT_VERSION)"; \
		$(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); \
	fi
	$(GOLANGCI_LINT) run ./...

# govulncheck against a database built from the golang.org/x/vulndb module
# (the public database is not reachable from CI); fails on a finding the
# code reaches.
vulncheck:
	bash scripts/vulncheck.sh

# The alert rules: promtool's syntax check and its unit tests (every alert
# fires when it should and stays quiet when it should not).
alerts-check:
	$(DEPS) promtool
	promtool check rules deploy/prometheus/alerts.yaml
	promtool test rules deploy/prometheus/alerts_test.yaml deploy/prometheus/alerts_day_test.yaml

# Breaks the limiter one line at a time; every mutant must be killed.
mutate:
	$(DEPS) redis
	bash scripts/mutate.sh

# Lints and renders the Helm chart for several value sets, checks its
# replica rules, and runs smsgw check-config on every rendered config.
helm-check:
	bash scripts/helm-check.sh

bench:
	$(DEPS) redis
	$(GO) test -run '^$$' -bench . -benchtime 2s ./internal/...

build:
	$(GO) build -o bin/smsgw ./cmd/smsgw

demo:
	$(GO) run ./cmd/smsgw demo
