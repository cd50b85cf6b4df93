# The two commands: `make run` and `make test`. Both install what is missing first.
SHELL := /bin/bash
.DEFAULT_GOAL := help

APT_PACKAGES := libpq-dev libssl-dev libcurl4-openssl-dev libnghttp2-dev libmicrohttpd-dev libmagic-dev libvips-dev libjansson-dev libargon2-dev libsystemd-dev pkg-config postgresql
# The push tests' peers: APNs and FCM mocks (python3-h2), nghttpd for the HTTP/2 client's tests, h2load for the benchmark;
# the mail tests' SMTP server (python3-aiosmtpd); python3-venv for moto's S3 server (PyPI, scripts/test-s3.sh).
TEST_PACKAGES := python3-h2 python3-cryptography openssl curl nghttp2-server nghttp2-client python3-aiosmtpd python3-venv python3-jsonschema
SWIFT ?= swift
SWIFT_BUILD_FLAGS ?=

.PHONY: help deps test-deps install-packages build run test test-ha deb test-deb bench-deps bench bench-release bench-baseline bench-gate bench-planted fuzz test-client clean

help:
	@echo "make run    build and run the tier on an embedded PostgreSQL in .inbox/postgres"
	@echo "make test   start a throwaway PostgreSQL, build, run every test, stop it"
	@echo "make test-ha  the tier on two nodes while a Patroni cluster loses its primary (about 3 minutes)"
	@echo "make deb    the Debian package, in .build/packages (release build, Swift runtime linked in)"
	@echo "make test-deb  builds the package, installs, runs, upgrades and purges it on this machine (root or sudo)"
	@echo "make bench  run the benchmarks (figures in docs/benchmarks.md)"
	@echo "make bench-release   every benchmark for the report, then the gate against the baseline's own build"
	@echo "make bench-baseline  the plan's run, writing a new Benchmarks/baseline.json to commit with the release"
	@echo "make bench-gate      only the gate: this build against the baseline's, path by path"
	@echo "make bench-planted   proves the gate: slowdowns planted one path at a time (about two hours)"
	@echo "make fuzz   schemathesis against a live server from its /openapi.json, at most 10 minutes"
	@echo "make test-client  a client generated from /openapi.json (openapi-python-client) walks the app guide's path"
	@echo "make deps   install the Debian packages the build needs"

# Installs only what is missing, so a machine that has everything never touches apt.
deps:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(APT_PACKAGES)"
	@command -v $(SWIFT) >/dev/null || { echo "make: the Swift toolchain is not on PATH (swift.org/install)"; exit 1; }

test-deps: deps
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(TEST_PACKAGES)"

install-packages:
	@missing=""; for p in $(PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

build: deps
	@scripts/build-commit.sh
	$(SWIFT) build $(SWIFT_BUILD_FLAGS) --product inbox

run: build
	$(SWIFT) run $(SWIFT_BUILD_FLAGS) inbox run

# The timed suites (a role stops within a second; a flood of connections is cut within its
# deadline; the HTTP/2 client fails fast, shuts down promptly and times out; an unknown address
# costs a sign-in as long as a wrong password; a statement past the API's timeout is a 503 within
# seconds; slow upload sources are refused at once past their slots; a lost session is opened
# again within its backoff; a reader held back by an open transaction reads soon after it ends;
# a projector reads a write after a quiet moment at once, and gathers the commits of a busy one;
# the systemd watchdog pings at half its interval)
# run after the rest,
# one at a time, so that they time the tier rather than a two-core machine busy with other suites.
TIMED_SUITES := PromptShutdown|SystemdNotifyTests|ConnectionFlood|HTTP2ClientPromptness|SignInTiming|RequestTimeoutTests|UploadRoutesTests|LeasedLoopTests|GapSafetyTests|ProjectorReadIntervalTests

# The database is stopped and removed whether the tests pass or fail; the exit code is the tests'.
# Every answer the tests' clients get is kept (INBOX_TEST_ANSWERS_DIR, a few of each route and
# status) and checked at the end against the official JSON:API 1.0 schema and the OpenAPI
# document's schema of its operation and status (scripts/check-answers.py); every operation of
# the document must have had a successful answer.
test: test-deps
	@scripts/build-commit.sh
	$(SWIFT) build --build-tests
	@dir=$$(scripts/test-postgres.sh start) || exit 1; \
	s3=$$(scripts/test-s3.sh start) || { scripts/test-postgres.sh stop "$$dir"; exit 1; }; \
	answers=$$(mktemp -d /tmp/inbox-answers.XXXXXX); \
	trap 'scripts/test-postgres.sh stop "$$dir"; scripts/test-s3.sh stop "$${s3#* }"; rm -rf "$$answers"' EXIT; \
	echo "test database: $$dir; test object store: $${s3% *}"; \
	export INBOX_TEST_DATABASE_URL="postgres:///postgres?host=$$dir&user=inbox" INBOX_MIGRATIONS_DIR="$(CURDIR)/sql" INBOX_TEST_S3_URL="$${s3% *}" INBOX_TEST_ANSWERS_DIR="$$answers"; \
	$(SWIFT) test --skip-build --disable-xctest --skip '$(TIMED_SUITES)' && \
	for suite in $$(echo '$(TIMED_SUITES)' | tr '|' ' '); do \
	  echo "a timed suite, on its own: $$suite"; \
	  $(SWIFT) test --skip-build --disable-xctest --filter "$$suite" || exit 1; \
	done && \
	/usr/bin/python3 scripts/check-answers.py --require-success --ignore-prefix /v1/test/ "$$answers"

# PostgreSQL failover (docs/operations.md): Debian's etcd and Patroni run three PostgreSQL servers on
# loopback, two `inbox run` nodes take traffic, and the primary is switched over, crashed and lost.
# Tests/Failover/failover.py makes the checks; its figures go to .build/failover-report.json.
HA_PACKAGES := patroni etcd-server python3-psycopg2
test-ha: test-deps
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(HA_PACKAGES)"
	@scripts/build-commit.sh
	$(SWIFT) build --product inbox
	/usr/bin/python3 Tests/Failover/failover.py --inbox .build/debug/inbox --report .build/failover-report.json

# The Debian package (docs/operations.md, "Installing the package"): dpkg-shlibdeps names its
# dependencies, dpkg-deb builds it.
DEB_PACKAGES := dpkg-dev binutils adduser systemd
deb: deps
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DEB_PACKAGES)"
	scripts/build-deb.sh

# Installs the package on this machine with dpkg, runs it as the inbox user against a throwaway
# PostgreSQL, upgrades it over itself, and removes and purges it (scripts/test-deb.sh).
test-deb: deps
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DEB_PACKAGES)"
	scripts/test-deb.sh

# wrk (the HTTP load generator of `inbox-bench http`), nghttpd and h2load (`inbox-bench fanout`),
# and Postfix's smtp-source and smtp-sink (`inbox-bench mail`'s ceiling), only for the benchmarks.
# Postfix is preseeded "No configuration": no main.cf is written, so no mail server starts.
bench-deps:
	@$(MAKE) --no-print-directory install-packages PACKAGES="wrk nghttp2-server nghttp2-client"
	@if [ ! -x /usr/sbin/smtp-source ]; then \
	  echo "installing: postfix (its smtp-source and smtp-sink; no mail server is configured)"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  echo "postfix postfix/main_mailer_type select No configuration" | $$SUDO debconf-set-selections && \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postfix >/dev/null; \
	fi

bench: deps bench-deps
	$(SWIFT) build -c release --product inbox-bench
	INBOX_MIGRATIONS_DIR="$(CURDIR)/sql" .build/release/inbox-bench $(BENCH_ARGS)

# Every benchmark at the release plan's scale (about 12 minutes on 2 cores) for the report
# (bench-results/release/index.html), then the gate: the candidate against the baseline's own
# binary (scripts/baseline-binary.sh builds it from the baseline's commit), A B A B, ten paths
# (about 6 minutes). Exits non-zero naming the path that fell. RELEASE_ARGS go to `inbox-bench release`.
BASELINE ?= Benchmarks/baseline.json
bench-release: deps bench-deps
	$(SWIFT) build -c release --product inbox-bench
	baseline=$$(SWIFT=$(SWIFT) scripts/baseline-binary.sh $(BASELINE)) && \
	INBOX_MIGRATIONS_DIR="$(CURDIR)/sql" .build/release/inbox-bench release --baseline $(BASELINE) --baseline-binary "$$baseline" $(RELEASE_ARGS)

# The plan's run alone, writing its figures and commit as the new baseline (commit it with the
# release): the next gates run this commit's binary.
bench-baseline: deps bench-deps
	$(SWIFT) build -c release --product inbox-bench
	INBOX_MIGRATIONS_DIR="$(CURDIR)/sql" .build/release/inbox-bench release --baseline $(BASELINE) --write-baseline $(BASELINE) $(RELEASE_ARGS)

# The gate alone (about 6 minutes); GATE_ARGS go to `inbox-bench gate` (--paths append,mail).
bench-gate: deps bench-deps
	$(SWIFT) build -c release --product inbox-bench
	baseline=$$(SWIFT=$(SWIFT) scripts/baseline-binary.sh $(BASELINE)) && \
	INBOX_MIGRATIONS_DIR="$(CURDIR)/sql" .build/release/inbox-bench gate --baseline-binary "$$baseline" $(GATE_ARGS)

# Proves the gate (docs/benchmarks.md, "Does the gate catch a slowdown?"): a build with a slowdown
# planted in one path at a time (-DPLANTED_SLOWDOWN, its own .build/planted) judged against this
# one, PLANTED_RUNS times per path, and this build against itself as often. About two hours at 10.
PLANTED_RUNS ?= 10
bench-planted: deps bench-deps
	$(SWIFT) build -c release --product inbox-bench
	$(SWIFT) build -c release --product inbox-bench --scratch-path .build/planted -Xswiftc -DPLANTED_SLOWDOWN
	RUNS=$(PLANTED_RUNS) scripts/bench-planted.sh .build/release/inbox-bench .build/planted/release/inbox-bench bench-results/planted

# schemathesis (PyPI, into .build/fuzz-venv when missing) against `inbox serve` on a throwaway
# PostgreSQL, driven by /openapi.json: FUZZ_SECONDS (600) and FUZZ_EXAMPLES per operation (25);
# FUZZ_ARGS go to `schemathesis run`. Not part of `make test`.
fuzz: build
	scripts/fuzz.sh $(FUZZ_ARGS)

# openapi-python-client (PyPI, into .build/client-venv when missing) generates a client from a live
# `inbox run`'s /openapi.json into .build/client, and Tests/Client/app_guide_path.py walks the app
# guide's path through it: sign in, a device, the bell, a thread and its reply, the shop reading
# it (scripts/client-test.sh). An operation of the path the generator skips fails it.
test-client: build
	scripts/client-test.sh

clean:
	rm -rf .build
