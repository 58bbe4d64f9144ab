# OtterMQ developer entry points. `make run` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PKGS   := broker amqp vhost ttl dlx persistence spark_jobs
STAMP  := $(VENV)/.installed
# RabbitMQ for `make conformance` (started if nothing answers there)
RABBIT_URL ?= amqp://guest:guest@127.0.0.1:5672/%2F
export PYTHONSAFEPATH := 1

.PHONY: install run-install analytics clients run test test-workers test-postgresql unit e2e screenshots conformance conformance-changed fuzz attack chaos bench bench-hotpath lint typecheck clean

# One venv, installed in layers, each with its own stamp (re-installed when pyproject changes or a module
# is added/removed: strict editable installs link files one by one, so new modules need a re-run;
# subpackages such as broker/management count):
#   run-install  the broker alone (`make run`): `pip install -e .`, no extras (under 100 MB), plus the
#                extras named in EXTRAS: `make run EXTRAS=postgresql` (the asyncpg driver),
#                `EXTRAS=postgresql,tools`; any of pyproject's optional-dependencies
#   analytics    + the spark and tools extras (`ottermq dlq report|compact|select|replay|watch|export`)
#   install      + dev (`make test`, lint, typecheck): dev,spark,tools,postgresql (over 1 GB: pyspark, ...)
# A wider layer touches the narrower stamps, so `make test` then `make run` re-installs nothing, and
# `make run` then `make test` only adds the extras. Strict editable installs (a link tree that mypy follows,
# see docs/development.md) for all; PIP_INSTALL hides setuptools' "Editable installation" notice, which says that
# build/__editable__.* must not be deleted (`make clean` removes it with the venv).
# One compile per clone: setup.py keeps the compiled hot path in build/hot-path/ (by a hash of its
# sources), so every layer after the first, in any order, copies it instead of compiling again.
# `make docs` needs none of these: only the docs extra's two packages in the venv.
PKG_DIRS     := $(shell find $(PKGS) -type d -not -name __pycache__)
# The hot-path modules mypyc compiles (amqp/native.py's MODULES, setup.py): an edit re-installs, which
# compiles them again (about a minute on two cores); until then they run from their sources (see amqp/native.py).
HOT_PATH     := $(shell sed -n 's/^    "ottermq\.\([a-z_.]*\)",$$/\1/p' amqp/native.py | tr . / | sed 's/$$/.py/')
EXTRAS       ?=
comma        := ,
RUN_STAMP    := $(VENV)/.installed-run$(if $(EXTRAS),-$(subst $(comma),-,$(EXTRAS)))
SPARK_STAMP  := $(VENV)/.installed-analytics
PIP_INSTALL  := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install -q
EDITABLE     := --config-settings editable_mode=strict
INSTALL_DEPS := pyproject.toml setup.py amqp/native.py $(HOT_PATH) $(PKG_DIRS)

$(VENV)/.created:
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@touch $@

$(RUN_STAMP): $(INSTALL_DEPS) | $(VENV)/.created
	$(PIP_INSTALL) -e '.$(if $(EXTRAS),[$(EXTRAS)])' $(EDITABLE)
	@touch $@

$(SPARK_STAMP): $(INSTALL_DEPS) | $(VENV)/.created
	$(PIP_INSTALL) -e '.[spark,tools]' $(EDITABLE)
	@touch $@ $(RUN_STAMP)

$(STAMP): $(INSTALL_DEPS) | $(VENV)/.created
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
# three workers halve the wall time even on two cores. Four were faster still (the two-worker pass, A B
# A B: 267 and 247 s with three, 253 and 201 s with four) but made the loop-stall checks flaky (a fresh
# `make test` on a quiet machine failed test_front_door's catastrophic-regex case once): three until
# those checks hold with four. TEST_WORKERS=0 runs it in one process.
# The workers take the longest files first (.ci/pytest/ottermq_schedule.py, a plugin with the measured
# times; --no-loadscope-reorder keeps its order, where xdist's would put the files with fewest tests,
# some of the longest, last). `make conformance` stays in one process: every worker would share the one
# RabbitMQ.
TEST_WORKERS ?= 3
XDIST        := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	-p ottermq_schedule)
PYTEST       := env PYTHONPATH=$(CURDIR)/.ci/pytest $(BIN)/pytest $(XDIST)

# What `make test` runs: every test once (the first pass), then three passes again under what differs in
# production, each on the files that exercise what differs (not the whole suite again):
#
# 1. Two worker processes (docs/workers.md; the suite's vhost / belongs to worker 1, so worker 0 hands
#    over each of its connections): the files where a second process changes what happens, by group:
#    - the hand-over itself: worker 0 reads the handshake and the owner replays it, checking the login,
#      the vhost's limits and the permissions again (connection, handshake, login_matrix);
#    - clients on a handed-over socket: publish, consume, confirms, QoS with pika, aio-pika, amqp091-go
#      and the three libraries of one message (basic, aio_pika, go_client, mixed_clients);
#    - the management API as one broker: lists joined across workers, then sorted and paged, a vhost's
#      objects asked of its owner, totals added up, connections, channels and dead-letter moves looked
#      up in every worker, message reads and values passed over the internal API (management_api,
#      management_write, management_stats, management_health, management_fidelity,
#      management_hostile_headers, queue_access, front_door, dead_letter_moves);
#    - metadata that worker 0 holds and pushes to every worker before answering: users, permissions,
#      policies, limits, definitions, through the API and the admin CLI (permissions, policies, limits,
#      management_definitions, admin_cli), and a definitions import whose answer joins every worker's
#      report of what it applied and skipped (definitions_everything);
#    - TLS, which worker 0 keeps and relays to the owner (tls); Prometheus and alarms added up across
#      workers (prometheus, disk_alarm);
#    - processes: restarts and kill -9 of every worker, each recovering its own store (durability),
#      settings reaching the workers and SIGTERM/SIGINT stopping them all (ottermq_process), each
#      worker's dead-letter archive writer in the one directory (archive);
#    - the start-up definitions file (OTTERMQ_DEFINITIONS_FILE), whose exchanges, queues and bindings
#      each vhost's owner declares, kept across restarts (long_argument_keys);
#    - shovels, which run in worker 0 and connect to the vhost's owner through worker 0's listener as
#      the internal principal whose secret worker 0 hands out, their parameters worker 0's alone
#      (shovels, shovel_interop, shovel_crash).
#    Not again: the files whose broker work happens inside the owner exactly as in one process (queue
#    types, TTL, dead-lettering, delays, paging, the clients' own suites, the browser, snippets, fuzzer,
#    adversarial suite, chaos), test_workers.py (it sets OTTERMQ_WORKERS=2 itself: its first run is
#    this run) and PostgreSQL's active/standby (one worker there).
WORKERS_E2E := $(addprefix e2e/test_,connection.py handshake.py login_matrix.py \
	basic.py aio_pika.py go_client.py mixed_clients.py \
	management_api.py management_write.py management_stats.py management_health.py \
	management_fidelity.py management_hostile_headers.py queue_access.py front_door.py dead_letter_moves.py \
	permissions.py policies.py limits.py management_definitions.py admin_cli.py definitions_everything.py \
	tls.py prometheus.py disk_alarm.py \
	durability.py ottermq_process.py archive.py long_argument_keys.py shovels.py shovel_interop.py \
	shovel_crash.py)
#
# 2. The store on PostgreSQL (OTTERMQ_STORE=postgresql, a schema per broker process, in a throwaway
#    server: WITH_PG below): the end-to-end files that write to the store and read it back: restarts and
#    crashes (with TTL and dead-lettering across them), delayed messages and dedup, dead-letter moves,
#    policies and limits that survive a restart, definitions, quorum and lazy queues, a consistent-hash
#    ring recovered, shovel parameters kept across a restart and a kill -9 (shovels, shovel_crash).
#    Not again: the files whose queues are not durable, so the store sees nothing of them
#    (dlx, ttl, ttl_head_expiry, queue_expiry, length_limits: no row but the first start's user, vhost
#    and permission, counted in pg_stat_user_tables), nor management_health and ottermq_process (start-up
#    and settings: one queue and one message in 13 brokers; every broker of this pass starts on
#    PostgreSQL), nor definitions_roundtrip (it needs rabbitmqctl; management_definitions stores the same
#    definitions). The store contract tests (tests/unit/persistence) run every store operation on both
#    stores in the first pass, text with NUL, which the management API's fuzzer sends, included.
PG_E2E := $(addprefix e2e/test_,durability.py delayed_dedup.py dead_letter_moves.py policies.py limits.py \
	management_definitions.py quorum_queues.py lazy_queues.py consistent_hash.py shovels.py shovel_crash.py)
#
# 3. The hot path on its pure-Python sources (OTTERMQ_PURE_PYTHON=1), as a machine without a C compiler
#    runs it (mypyc compiles amqp/native.py's MODULES where one is; see setup.py): the unit and protocol
#    tests that call functions of those modules (measured with a profiler under OTTERMQ_PURE_PYTHON=1):
#    every protocol test (connections and channels are compiled), the unit tests of amqp, vhost and dlx,
#    and the broker's and the store's unit tests that reach compiled functions no other test file calls
#    (Queue.scan, Queue.peek_in_memory, PriorityReady.shrink, QuorumReady.__iter__, published_message:
#    definitions, delay_service, message_rendering, move_jobs, recovery, hook). Not again: the modules
#    marked hot_path (-m "not hot_path"), whose tests ran as [installed] and [source] in the first pass
#    (tests/conftest.py), nor the files that call no compiled function (the codecs of amqp that are not
#    compiled, argument, policy, pattern and topic parsing, the TTL managers).
#    tests/unit/amqp/test_native.py proves the pass runs the sources.
PURE_TESTS := OTTERMQ_PURE_PYTHON=1 $(PYTEST) -m "not hot_path" tests/protocol tests/unit/amqp tests/unit/vhost \
	tests/unit/dlx tests/unit/persistence/test_hook.py $(addprefix tests/unit/broker/test_,definitions.py \
	delay_service.py message_rendering.py move_jobs.py recovery.py) \
	$(addprefix --ignore=tests/unit/amqp/test_,erlang.py legacy.py table.py) \
	$(addprefix --ignore=tests/unit/vhost/test_,arguments.py bounds.py headers.py patterns.py policy.py topic.py)

# A throwaway PostgreSQL (.ci/postgres.py: initdb in a temp dir, a free port, stopped at the end) around
# a command, which finds it in TEST_POSTGRES_URL: the store contract tests, the active/standby
# tests (e2e/test_postgres_ha.py) and the PostgreSQL pass use it.
WITH_PG := $(BIN)/python .ci/postgres.py run --

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
bench: install bench-hotpath
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

# The hot path's A/B, first in `make bench` (benchmarks/hotpath.py --instructions --compiled): the
# instructions one more message costs in each scenario (publish, noack, ack-each, confirms, fanout10,
# persistent), counted by valgrind's callgrind in this tree (its tracked files as they are now, edits
# included; a new file once `git add`ed) and in HOTPATH_BASE (a commit: main by default; give the commit before a change to see what
# it costs), each built as `make install` builds it (mypyc). A count does not move with the machine's
# load, so a 2% difference shows on a shared machine (a ratio above 1.02 is a regression to explain);
# about 25 minutes on two cores. `benchmarks/hotpath.py --help` has the timed variant.
HOTPATH_BASE ?= main
HOTPATH_DIR  := $(shell mktemp -u /tmp/ottermq-hotpath-XXXXXX)
bench-hotpath: install
	@command -v valgrind >/dev/null 2>&1 || { echo "make bench-hotpath: needs valgrind (apt-get install valgrind)"; exit 1; }
	mkdir -p $(HOTPATH_DIR)/base $(HOTPATH_DIR)/head
	git archive "$(HOTPATH_BASE)" | tar -x -C $(HOTPATH_DIR)/base
	rev="$$(git stash create)"; git archive "$${rev:-HEAD}" | tar -x -C $(HOTPATH_DIR)/head
	$(BIN)/python benchmarks/hotpath.py --instructions --compiled --messages 2000 \
	  --ottermq-src $(HOTPATH_DIR)/base --ottermq-src $(HOTPATH_DIR)/head; status=$$?; rm -rf $(HOTPATH_DIR); exit $$status

lint: install
	$(BIN)/ruff check $(PKGS) tests e2e benchmarks setup.py .ci
	$(BIN)/ruff format --check $(PKGS) tests e2e benchmarks setup.py .ci

typecheck: install
	$(BIN)/mypy $(foreach p,$(PKGS),-p ottermq.$(p))

# The documentation site (mkdocs.yml, docs/) into site/: the docs extra's packages into the venv (read
# from pyproject; the site is built from docs/ alone, so the broker itself is not installed for it: no
# compile, a few MB), then MkDocs Material with --strict (a warning fails the build) and nothing fetched
# (no social or privacy plugin, no web fonts).
.PHONY: docs
docs: $(VENV)/.installed-docs
	rm -rf site
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

$(VENV)/.installed-docs: pyproject.toml | $(VENV)/.created
	$(BIN)/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"]))' \
	  | $(BIN)/python -m pip install -q -r /dev/stdin
	@touch $@

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache .mypy_cache .ruff_cache
	find $(PKGS) -name '*.so' -delete  # the compiled modules editable installs put next to the sources
	rm -f amqp/_build_info.py
