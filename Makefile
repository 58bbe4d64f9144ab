# OtterMQ developer entry points. `make run` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PKGS   := broker amqp vhost ttl dlx persistence spark_jobs
STAMP  := $(VENV)/.installed
# RabbitMQ for `make conformance` (started if nothing answers there)
RABBIT_URL ?= amqp://guest:guest@127.0.0.1:5672/%2F
export PYTHONSAFEPATH := 1

.PHONY: install run-install analytics clients run test test-workers test-postgresql unit e2e screenshots conformance conformance-changed fuzz attack chaos bench lint typecheck clean

# One venv, installed in layers, each with its own stamp (re-installed when pyproject changes or a module
# is added/removed: strict editable installs link files one by one, so new modules need a re-run;
# subpackages such as broker/management count):
#   run-install  the broker alone (`make run`): `pip install -e .`, no extras (under 100 MB)
#   analytics    + the spark and tools extras (`ottermq dlq report|compact|select|replay|watch|export`)
#   install      + dev (`make test`, lint, typecheck): dev,spark,tools,postgresql (over 1 GB: pyspark, ...)
# A wider layer touches the narrower stamps, so `make test` then `make run` re-installs nothing, and
# `make run` then `make test` only adds the extras. Strict editable installs (a link tree that mypy follows,
# see docs/development.md) for all; PIP_INSTALL hides setuptools' "Editable installation" notice, which says that
# build/__editable__.* must not be deleted (`make clean` removes it with the venv).
PKG_DIRS     := $(shell find $(PKGS) -type d -not -name __pycache__)
# The hot-path modules mypyc compiles (amqp/native.py's MODULES, setup.py): an edit re-installs, which
# compiles them again (about a minute); until then they run from their sources (see amqp/native.py).
HOT_PATH     := $(shell sed -n 's/^    "ottermq\.\([a-z_.]*\)",$$/\1/p' amqp/native.py | tr . / | sed 's/$$/.py/')
RUN_STAMP    := $(VENV)/.installed-run
SPARK_STAMP  := $(VENV)/.installed-analytics
PIP_INSTALL  := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install -q
EDITABLE     := --config-settings editable_mode=strict

$(VENV)/.created:
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@touch $@

$(RUN_STAMP): pyproject.toml setup.py amqp/native.py $(HOT_PATH) $(PKG_DIRS) | $(VENV)/.created
	$(PIP_INSTALL) -e . $(EDITABLE)
	@touch $@

$(SPARK_STAMP): pyproject.toml setup.py amqp/native.py $(HOT_PATH) $(PKG_DIRS) | $(VENV)/.created
	$(PIP_INSTALL) -e '.[spark,tools]' $(EDITABLE)
	@touch $@ $(RUN_STAMP)

$(STAMP): pyproject.toml setup.py amqp/native.py $(HOT_PATH) $(PKG_DIRS) | $(VENV)/.created
	$(PIP_INSTALL) -e '.[dev,spark,tools,postgresql]' $(EDITABLE)
	@touch $@ $(SPARK_STAMP) $(RUN_STAMP)

install: $(STAMP)

run-install: $(RUN_STAMP)

analytics: $(SPARK_STAMP)

run: run-install
	$(BIN)/ottermq

# The client programs the e2e suite drives besides pika: amqplib (npm ci from the lockfile) and
# amqp091-go (Debian's golang-go + golang-github-rabbitmq-amqp091-go-dev; apt-get, as root or via sudo),
# RabbitMQ's Java client (Debian's librabbitmq-client-java, compiled against with the JDK's javac), Bunny
# (Debian's ruby-bunny), PHP's php-amqplib, php-amqp and Symfony's AMQP messenger (Debian's packages),
# the .NET RabbitMQ.Client bundled with Mono (Debian's libmono-rabbitmq4.0-cil, compiled against with mcs),
# a C compiler and librabbitmq-dev for the benchmarks' C load generator (tests/bench builds and runs it),
# and RabbitMQ's rabbitmqadmin script (inside Debian's rabbitmq-server package; the server is not started),
# and Debian's chromium for the web UI's browser tests (Playwright drives it; no browser download), and
# the fault harness's nftables and libfaketime (.ci/install-chaos.sh).
# The scripts do nothing when everything is already there.
clients:
	bash .ci/install-node.sh
	bash .ci/install-go.sh
	bash .ci/install-java.sh
	bash .ci/install-ruby.sh
	bash .ci/install-php.sh
	bash .ci/install-dotnet.sh
	bash .ci/install-cgen.sh
	bash .ci/install-rabbitmqadmin.sh
	bash .ci/install-chromium.sh
	bash .ci/install-postgresql.sh
	bash .ci/install-chaos.sh

# `make test` runs the suite in TEST_WORKERS processes (pytest-xdist), a file's tests together in one
# (each with its own session broker): most e2e time is spent waiting on sockets, timers and JVMs, so
# three workers halve the wall time even on two cores. TEST_WORKERS=0 runs it in one process.
# The workers take the longest files first (.ci/pytest/ottermq_schedule.py, a plugin with the measured
# times; --no-loadscope-reorder keeps its order, where xdist's would put the files with fewest tests,
# some of the longest, last). `make conformance` stays in one process: every worker would share the one
# RabbitMQ.
TEST_WORKERS ?= 3
XDIST        := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	-p ottermq_schedule)
PYTEST       := env PYTHONPATH=$(CURDIR)/.ci/pytest $(BIN)/pytest $(XDIST)

# The hot path is compiled by mypyc where a C compiler is (setup.py); the tests of what it is made of run
# a second time on its pure-Python sources (OTTERMQ_PURE_PYTHON=1), as a machine without a compiler runs
# it: the protocol tests (connections and channels) and the unit tests of the packages the compiled
# modules live in or are driven by (amqp, vhost, dlx). The store's, the node's and the CLI's unit tests
# use no more of the hot path than those, and run once.
PURE_TESTS := OTTERMQ_PURE_PYTHON=1 $(PYTEST) tests/protocol tests/unit/amqp tests/unit/vhost \
	tests/unit/dlx tests/unit/ttl

# A throwaway PostgreSQL (.ci/postgres.py: initdb in a temp dir, a free port, stopped at the end) around
# a command, which finds it in TEST_POSTGRES_URL: the store contract tests, the active/standby
# tests (e2e/test_postgres_ha.py) and the PostgreSQL pass below use it.
WITH_PG := $(BIN)/python .ci/postgres.py run --
# The end-to-end files that exercise the store, run again with OTTERMQ_STORE=postgresql (a schema per
# broker process): restarts and crashes, TTL, dead-lettering and moves, delayed messages and dedup,
# policies, limits, definitions and the definitions CLI, quorum queues, a consistent-hash ring recovered
# (text with NUL, which the management API's fuzzer sends, is in the store contract tests).
PG_E2E := $(addprefix e2e/test_,durability.py dlx.py ttl.py ttl_head_expiry.py queue_expiry.py \
	length_limits.py delayed_dedup.py dead_letter_moves.py policies.py limits.py definitions_roundtrip.py \
	management_definitions.py management_health.py ottermq_process.py quorum_queues.py lazy_queues.py \
	consistent_hash.py)

# The end-to-end suite again with two worker processes (docs/workers.md: the suite's vhost / belongs to
# worker 1, so each of its connections is handed over by worker 0), less the files whose cost is in
# their clients' start-up or in the work they repeat rather than in what a second worker changes: the
# single-language client suites (a JVM, Ruby, PHP, .NET or Node each; the mixed-clients, Go and aio-pika
# files still cross the hand-over with several clients), the browser and the documentation snippets, the
# HTTP fuzzer and the adversarial suite (their values take one path either way), PostgreSQL's
# active/standby (one worker there); and the long argument keys' restart test, whose start-up
# definitions file declares nothing in another worker's vhost with two workers (a gap of the workers'
# start-up import, found here and not yet mended).
WORKERS_SKIP := $(addprefix --ignore=e2e/test_,java_client.py ruby_client.py php_clients.py \
	symfony_messenger.py dotnet_client.py node_client.py node_frameworks.py celery_kombu.py dramatiq.py \
	faststream.py flower.py web_ui.py doc_snippets.py http_fuzz.py postgres_ha.py long_argument_keys.py \
	chaos.py chaos_harness.py chaos_workload.py) \
	$(addprefix --ignore=,$(wildcard e2e/test_attack*.py))
WORKERS_E2E := $(WORKERS_SKIP) e2e

# every test, then the end-to-end suite again with two worker processes, then the store's end-to-end
# files on PostgreSQL, then the hot path's tests on its pure-Python sources
test: install clients
	$(WITH_PG) $(PYTEST)
	$(WITH_PG) env OTTERMQ_WORKERS=2 $(PYTEST) $(WORKERS_E2E)
	$(WITH_PG) env OTTERMQ_STORE=postgresql $(PYTEST) $(PG_E2E)
	$(PURE_TESTS)

test-workers: install clients
	$(WITH_PG) env OTTERMQ_WORKERS=2 $(PYTEST) $(WORKERS_E2E)

test-postgresql: install clients
	$(WITH_PG) env OTTERMQ_STORE=postgresql $(PYTEST) $(PG_E2E)

unit: install
	$(PYTEST) tests
	$(PURE_TESTS)

e2e: install clients
	$(PYTEST) e2e

# The web UI's browser tests, saving their screenshots as the README's (docs/screenshots)
screenshots: install clients
	OTTERMQ_SCREENSHOTS=docs/screenshots $(BIN)/pytest e2e/test_web_ui.py

# The adversarial suite's checks run there on its two fixed values and one drawn one per path (make test
# draws three against ottermq): what RabbitMQ answers does not depend on the draw. The application
# frameworks' files (Celery and kombu, Flower, Dramatiq, Symfony Messenger, the Node frameworks) are left
# out: they start a whole application on a client whose own files run here, and what they ask of the
# broker (declare, publish, consume, ack) the other files check against RabbitMQ already;
# CONFORMANCE_ALL=1 runs them too.
CONFORMANCE_SKIP := $(if $(CONFORMANCE_ALL),,$(addprefix --ignore=e2e/test_,celery_kombu.py flower.py \
	dramatiq.py symfony_messenger.py node_frameworks.py))
# A green run records every file's key in e2e/conformance.lock (.ci/conformance.py: the file, the e2e
# helpers and RabbitMQ's version). `make conformance-changed` (CI) runs only the files whose key changed
# since, plus e2e/test_basic.py, and records them: what a test proves about RabbitMQ changes only with
# them, so CI checks every changed test against RabbitMQ without running the unchanged ones again.
conformance: install clients
	bash .ci/rabbitmq.sh "$(RABBIT_URL)"
	AMQP_URL="$(RABBIT_URL)" ATTACK_EXAMPLES=1 $(BIN)/pytest e2e -m "not extension" $(CONFORMANCE_SKIP)
	$(BIN)/python .ci/conformance.py record $(CONFORMANCE_SKIP)

conformance-changed: install clients
	bash .ci/rabbitmq.sh "$(RABBIT_URL)"
	files="$$($(BIN)/python .ci/conformance.py changed $(CONFORMANCE_SKIP))" && echo "conformance: $$files" && \
	AMQP_URL="$(RABBIT_URL)" ATTACK_EXAMPLES=1 $(BIN)/pytest $$files -m "not extension" && \
	$(BIN)/python .ci/conformance.py record $$files

# The management API fuzzer for longer than `make test` runs it (e2e/test_http_fuzz.py: schemathesis
# from the broker's own OpenAPI description plus targeted cases): FUZZ_EXAMPLES per operation and user,
# a new hypothesis seed each run; findings in the test's tmp dir, and in FUZZ_FINDINGS when set.
FUZZ_EXAMPLES ?= 100
fuzz: install
	OTTERMQ_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) OTTERMQ_FUZZ_SEED=random \
	  $(if $(FUZZ_FINDINGS),OTTERMQ_FUZZ_FINDINGS=$(FUZZ_FINDINGS)) $(BIN)/pytest e2e/test_http_fuzz.py -s

# The adversarial suite for longer than `make test` runs it (e2e/test_attack_*.py, issue 38): hostile
# headers and arguments (e2e/hostile.py) down every broker path that reads or rewrites them, checked
# after each case (every confirmed message once, no 5xx, the pinger's round trips under 250 ms), plus
# the issue's stalls. ATTACK_EXAMPLES drawn values per path and test (make test: 3) with a new seed
# each run (ATTACK_SEED=N repeats one); every finding appended to ATTACK_FINDINGS as a JSON line.
ATTACK_EXAMPLES ?= 500
ifndef ATTACK_SEED
ATTACK_SEED     := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
ATTACK_FINDINGS ?= attack-findings.jsonl
attack: install
	@echo "make attack: ATTACK_SEED=$(ATTACK_SEED), $(ATTACK_EXAMPLES) examples, findings in $(ATTACK_FINDINGS)"
	ATTACK_EXAMPLES=$(ATTACK_EXAMPLES) ATTACK_SEED=$(ATTACK_SEED) ATTACK_FINDINGS=$(abspath $(ATTACK_FINDINGS)) \
	  $(PYTEST) e2e/test_attack_headers.py e2e/test_attack_extension.py e2e/test_attack_stalls.py

# The fault runner's long schedule (e2e/test_chaos.py drives e2e/chaos/runner.py; root only: network
# namespaces, nft, tmpfs): an active and a standby broker on PostgreSQL, and a SQLite broker with two
# workers, under random faults of every class (the active cut off from its database both ways or one way,
# from its clients, a slow lossy database link, PostgreSQL killed or restarted, the active paused past its
# lease, wall-clock steps of an hour, a full disk, a killed worker) for CHAOS_MINUTES, holds of 1-30 s and
# random gaps, lease CHAOS_LEASE (5 s); the checker then wants no confirmed message lost, no phantom, no
# split brain. Records, broker logs and report.md in CHAOS_RESULTS; CHAOS_SEED=N repeats a run's draws.
# `make test` runs the short schedule (each class once, about a minute).
CHAOS_MINUTES ?= 60
ifndef CHAOS_RESULTS
CHAOS_RESULTS := chaos-results/$(shell date +%Y%m%d-%H%M%S)
endif
chaos: install
	@echo "make chaos: $(CHAOS_MINUTES) min, results in $(abspath $(CHAOS_RESULTS))"
	@CHAOS_SCHEDULE=long CHAOS_MINUTES=$(CHAOS_MINUTES) CHAOS_RESULTS=$(abspath $(CHAOS_RESULTS)) \
	  $(if $(CHAOS_SEED),CHAOS_SEED=$(CHAOS_SEED)) $(BIN)/pytest e2e/test_chaos.py -s -p no:cacheprovider; \
	  status=$$?; echo "make chaos: report in $(abspath $(CHAOS_RESULTS))/report.md"; exit $$status

# Side by side with RabbitMQ when one answers at RABBIT_URL (interleaved A B A B), else ottermq
# alone, with our Python generator, the independent amqp091-go one (go:*) and the C one on librabbitmq-c
# (c:*; cc and librabbitmq-dev from .ci/install-cgen.sh); then the storage
# benchmark (1M persistent messages: throughput, disk, recovery); then the scale curves
# (benchmarks/scale.py: queues, consumers, connections, backlog; benchmarks/scale.png); then N vhosts
# at once with OTTERMQ_WORKERS=1 and auto (benchmarks/vhosts.py) and the cost of handing a message
# between processes (benchmarks/ipc.py); and how long one client's costly request (a 100 MB persistent
# publish and its delivery, a policy pattern over 500 queues) keeps another client waiting
# (benchmarks/stalls.py); and last the backlog benchmark (benchmarks/backlog.py): BACKLOG_MESSAGES
# persistent 1 KB messages with confirms into one durable lazy queue, held and drained, broker RSS
# throughout (ottermq's paging targets; 0 skips it). At the default 10M it adds about 25 minutes here
# (RabbitMQ's run 17 min; ottermq's 6.5, its publishing stopped at the 8 GiB guard until its bodies go
# to disk) and writes ~12 GB per broker, deleted after each run.
BACKLOG_MESSAGES ?= 10000000
bench: install
	bash .ci/install-cgen.sh
	@if bash .ci/rabbitmq.sh --check "$(RABBIT_URL)"; then \
	  $(BIN)/python benchmarks/run.py --compare "$(RABBIT_URL)"; \
	else \
	  $(BIN)/python benchmarks/run.py; \
	fi
	cd benchmarks && ../$(BIN)/python recovery.py --messages 1000000
	@if bash .ci/rabbitmq.sh --check "$(RABBIT_URL)"; then \
	  $(BIN)/python benchmarks/scale.py --compare "$(RABBIT_URL)"; \
	else \
	  $(BIN)/python benchmarks/scale.py; \
	fi
	@if bash .ci/rabbitmq.sh --check "$(RABBIT_URL)"; then \
	  $(BIN)/python benchmarks/vhosts.py --compare "$(RABBIT_URL)"; \
	else \
	  $(BIN)/python benchmarks/vhosts.py; \
	fi
	$(BIN)/python benchmarks/ipc.py
	@if bash .ci/rabbitmq.sh --check "$(RABBIT_URL)"; then \
	  $(BIN)/python benchmarks/postgres.py --compare "$(RABBIT_URL)"; \
	else \
	  $(BIN)/python benchmarks/postgres.py; \
	fi
	@if bash .ci/rabbitmq.sh --check "$(RABBIT_URL)"; then \
	  $(BIN)/python benchmarks/stalls.py --compare "$(RABBIT_URL)"; \
	else \
	  $(BIN)/python benchmarks/stalls.py; \
	fi
	@if [ "$(BACKLOG_MESSAGES)" = 0 ]; then \
	  echo "make bench: backlog benchmark skipped (BACKLOG_MESSAGES=0)"; \
	elif bash .ci/rabbitmq.sh --check "$(RABBIT_URL)"; then \
	  $(BIN)/python benchmarks/backlog.py --messages $(BACKLOG_MESSAGES) --compare "$(RABBIT_URL)"; \
	else \
	  $(BIN)/python benchmarks/backlog.py --messages $(BACKLOG_MESSAGES); \
	fi

lint: install
	$(BIN)/ruff check $(PKGS) tests e2e benchmarks setup.py .ci
	$(BIN)/ruff format --check $(PKGS) tests e2e benchmarks setup.py .ci

typecheck: install
	$(BIN)/mypy $(foreach p,$(PKGS),-p ottermq.$(p))

# The documentation site (mkdocs.yml, docs/) into site/: the docs extra's packages into the venv (read
# from pyproject, so the package install is left alone), then MkDocs Material with --strict (a warning
# fails the build) and nothing fetched (no social or privacy plugin, no web fonts).
.PHONY: docs
docs: install
	$(BIN)/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"]))' \
	  | $(BIN)/python -m pip install -q -r /dev/stdin
	rm -rf site
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache .mypy_cache .ruff_cache
	find $(PKGS) -name '*.so' -delete  # the compiled modules editable installs put next to the sources
	rm -f amqp/_build_info.py
