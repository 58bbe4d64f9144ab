"""Every code snippet in README.md and docs/ runs as it is printed (only hosts and ports changed).

A fenced block in Python, Go, shell, JavaScript or JSON must sit right under a ``<!-- snippet: NAME -->``
comment; NAME is either run by a test below (``@runs``) or listed in ``SKIPPED`` with the reason it
cannot run here. Output blocks are fenced as ``text``. A new snippet that is neither fails
``test_every_snippet_is_run_or_skipped``, and so does a name here that no page has any more.

How each kind runs, against private brokers (``broker_process``) on free ports:

* Python: the file as a user would run it, outside this repository (so its ``amqp/`` folder cannot
  shadow py-amqp), with ``localhost:5672`` pointed at the broker; Celery tasks with a real worker.
* Go: built in GOPATH mode against Debian's amqp091-go (``.ci/install-go.sh``), nothing fetched.
* JavaScript: ``node`` with the amqplib that ``e2e/node`` locks (``.ci/install-node.sh``).
* Java, Ruby, PHP, C#: the language's own runner with the client Debian ships (``java`` in source-file
  mode with ``librabbitmq-client-java``, ``ruby`` with ``ruby-bunny``, ``php`` with ``php-amqplib``,
  ``mcs`` and ``mono`` with Mono's RabbitMQ.Client; ``make clients`` installs them).
* Shell: ``bash -euo pipefail`` in a temporary folder with the venv's ``ottermq`` first on ``PATH``
  and ``OTTERMQ_ADMIN_URL`` pointed at the broker's management port; ``make run`` becomes the
  ``ottermq`` it runs.
* JSON: parsed, and checked against what it documents.
"""

from __future__ import annotations

import base64
import contextlib
import glob
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import pytest

from .conftest import _free_port
from .polling import poll_until

pytestmark = pytest.mark.extension

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BIN = Path(sys.executable).parent
NODE_MODULES = ROOT / "e2e" / "node" / "node_modules"
DEBIAN_GOPATH = Path("/usr/share/gocode")
RABBITMQADMIN = (
    "/usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins/rabbitmq_management-*/priv/www/cli/rabbitmqadmin"
)

RUN_LANGUAGES = {"python", "go", "sh", "bash", "js", "json", "java", "ruby", "php", "csharp"}
OTHER_LANGUAGES = {"text"}  # output, file layouts: shown, not run

# Snippets that cannot run in a test, and why. Everything else is run below.
SKIPPED = {
    "sac-declare": "a fragment (the reader's channel and callback); e2e/test_single_active_consumer.py runs"
    " every behaviour the page describes, on both brokers",
    "readme-make": "make test is the suite this test belongs to, and make run serves until stopped",
    "make-run-test": "make test is the suite this test belongs to, and make run serves until stopped",
    "make-targets": "the project's own targets: CI runs lint, typecheck, docs, test and conformance itself,"
    " the others run for minutes (bench, fuzz) or write into the repository (screenshots)",
    "make-bench": "runs for many minutes and compares with a RabbitMQ",
    "definitions-rabbitmq": "needs RabbitMQ's rabbitmqctl; e2e/test_definitions_roundtrip.py runs it under"
    " make conformance",
    "rabbitmqadmin-download": "downloads from a RabbitMQ; the rabbitmqadmin snippet runs Debian's copy",
    "definitions-report": "an import's answer, abridged to two of its skipped items;"
    " e2e/test_definitions_everything.py checks the whole answer to that file",
    "pip-spark": "installs from a package index (make install has the spark extra)",
    "spark-hdfs": "needs an HDFS cluster",
    "spark-submit": "needs a Spark cluster; tests/spark/test_cluster.py runs spark-submit on a local one",
    "migrating-definitions": "addresses a RabbitMQ and an ottermq on other hosts; e2e/test_migration.py makes"
    " the same calls in the same order, against RabbitMQ 3.10.8 under make conformance",
    "migrating-shovels": "as migrating-definitions (e2e/test_migration.py)",
    "migrating-finish": "as migrating-definitions (e2e/test_migration.py)",
    "postgresql-active-standby": "installs from a package index and serves until stopped, on a database host;"
    " e2e/test_postgres_ha.py runs an active and a standby on a throwaway PostgreSQL",
}

RUNNERS: dict[str, str] = {}


def runs(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a test as the one that runs these snippets."""

    def mark(test: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            assert name not in RUNNERS, f"snippet {name} is run by {RUNNERS[name]} already"
            RUNNERS[name] = test.__name__
        return test

    return mark


# --------------------------------------------------------------------------------------------------------
# finding the snippets
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Snippet:
    name: str | None
    page: str
    line: int
    language: str
    code: str


FENCE = re.compile(r"^(?P<indent> *)```(?P<language>[\w-]*)")
MARKER = re.compile(r"^<!-- snippet: (?P<name>[a-z0-9-]+) -->$")


def fenced_blocks(path: Path) -> Iterator[Snippet]:
    lines = path.read_text().splitlines()
    page = str(path.relative_to(ROOT))
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, start = opened["indent"], i
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        code = "\n".join(line[len(indent) :] for line in lines[start + 1 : end]) + "\n"
        marker = MARKER.match(lines[start - 1].strip()) if start else None
        yield Snippet(marker["name"] if marker else None, page, start + 1, opened["language"], code)
        i = end + 1


def all_snippets() -> list[Snippet]:
    return [block for page in PAGES for block in fenced_blocks(page)]


def snippet(name: str) -> str:
    (found,) = [s for s in all_snippets() if s.name == name]
    return found.code


def test_every_snippet_is_run_or_skipped() -> None:
    blocks = all_snippets()
    problems = [
        f"{b.page}:{b.line}: fence a code block as one of {sorted(RUN_LANGUAGES | OTHER_LANGUAGES)}"
        for b in blocks
        if b.language not in RUN_LANGUAGES | OTHER_LANGUAGES
    ]
    problems += [
        f"{b.page}:{b.line}: a {b.language} block needs a <!-- snippet: NAME --> line right above it"
        for b in blocks
        if b.language in RUN_LANGUAGES and b.name is None
    ]
    names = [b.name for b in blocks if b.name is not None]
    problems += [
        f"snippet {n} appears {names.count(n)} times" for n in sorted(set(names)) if names.count(n) > 1
    ]
    unknown = sorted(set(names) - set(RUNNERS) - set(SKIPPED))
    problems += [f"snippet {n}: run it in a test here or add it to SKIPPED with the reason" for n in unknown]
    gone = sorted((set(RUNNERS) | set(SKIPPED)) - set(names))
    problems += [f"{n}: no page has this snippet any more" for n in gone]
    problems += [f"{n}: both run and skipped" for n in sorted(set(RUNNERS) & set(SKIPPED))]
    assert problems == []


def test_docs_name_no_issue_numbers() -> None:
    """User documentation says what is, not which ticket brought it."""
    found = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for page in [*PAGES, ROOT / "CHANGELOG.md"]
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if re.search(r"\bissues? \d+|\(#\d+\)", line, re.I)
    ]
    assert found == []


# --------------------------------------------------------------------------------------------------------
# running them
# --------------------------------------------------------------------------------------------------------
def localize(code: str, b: Any) -> str:
    """Point a snippet's well-known ports at the broker under test (``b`` is a ``BrokerProcess``)."""
    for host in ("localhost", "127.0.0.1"):
        code = code.replace(f"{host}:15672", f"127.0.0.1:{b.web_port}")
        code = code.replace(f"{host}:15692", f"127.0.0.1:{b.prometheus_port}")
        code = code.replace(f"{host}:5672", f"127.0.0.1:{b.port}")
    return code.replace("-P 15672", f"-P {b.web_port}")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment a user's shell would have: ours minus OTTERMQ_* and PYTHONSAFEPATH, the venv first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTTERMQ_") and k != "PYTHONSAFEPATH"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def run_python(code: str, b: Any, cwd: Path, name: str, timeout: float = 60) -> list[str]:
    """A Python snippet as its own file in ``cwd`` (outside the repository); its stdout lines."""
    assert "localhost:5672" in code
    path = cwd / name
    path.write_text(localize(code, b))
    result = subprocess.run(
        [sys.executable, str(path)], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


def run_shell(code: str, b: Any, cwd: Path, timeout: float = 120, **env: str) -> str:
    """A shell snippet with ``bash -euo pipefail``; its stdout."""
    variables = (
        clean_env(OTTERMQ_ADMIN_URL=f"http://127.0.0.1:{b.web_port}", **env) if b else clean_env(**env)
    )
    code = localize(code, b) if b is not None else code
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        cwd=cwd,
        env=variables,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"{code}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    return result.stdout


@contextlib.contextmanager
def make_run(code: str, cwd: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A snippet ending in ``make run``, with ``ottermq`` (what ``make run`` starts) in its place."""
    assert code.rstrip().endswith("make run"), code
    log = cwd / "broker.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            ["bash", "-c", code.replace("make run", "exec ottermq")],
            cwd=cwd,
            env=clean_env(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def wait_for_ports(proc: subprocess.Popen[bytes], log: Path, *ports: int) -> None:
    def listening() -> bool:
        assert proc.poll() is None, log.read_text(errors="replace")
        return all(port_open(p) for p in ports)

    poll_until(listening, timeout=30, what=f"ports {ports}", explain=lambda: log.read_text(errors="replace"))


@contextlib.contextmanager
def celery_worker(tasks_code: str, module: str, b: Any, cwd: Path) -> Iterator[None]:
    """A Celery worker (``--pool=solo``) for ``module`` (a page's tasks file), ready, stopped after."""
    (cwd / f"{module}.py").write_text(localize(tasks_code, b))
    celery = BIN / "celery"
    log_path = cwd / f"{module}-worker.log"
    with open(log_path, "ab") as log:
        worker = subprocess.Popen(
            [
                str(celery) if celery.exists() else (shutil.which("celery") or "celery"),
                "-A",
                module,
                "worker",
                "--pool=solo",
                "--concurrency=1",
                "--loglevel=INFO",
            ],
            cwd=cwd,
            env=clean_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        poll_until(
            lambda: worker.poll() is None and " ready." in log_path.read_text(errors="replace"),
            timeout=60,
            what="the Celery worker",
            explain=lambda: log_path.read_text(errors="replace"),
        )
        yield
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def http_json(url: str, auth: tuple[str, str] = ("guest", "guest"), context: Any = None) -> Any:
    request = urllib.request.Request(url)
    request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        return json.loads(response.read())


def pika_channel(b: Any, **credentials: str) -> tuple[pika.BlockingConnection, Any]:
    params = b.broker.params()
    if credentials:
        params.credentials = pika.PlainCredentials(credentials["user"], credentials["password"])
        params.virtual_host = credentials.get("vhost", "/")
    conn = pika.BlockingConnection(params)
    return conn, conn.channel()


def dead_letters(b: Any, count: int, *, headers: dict[str, Any] | None = None, exchange: str = "") -> None:
    """``count`` messages die of TTL in the queue ``orders`` into ``orders.dlq`` (both declared here)."""
    conn, ch = pika_channel(b)
    try:
        ch.queue_declare("orders.dlq", durable=True)
        ch.queue_declare(
            "orders",
            durable=True,
            arguments={
                "x-message-ttl": 50,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "orders.dlq",
            },
        )
        if exchange:
            ch.exchange_declare(exchange, "direct", durable=True)
            ch.queue_bind("orders", exchange, "orders")
        ch.confirm_delivery()
        for n in range(count):
            props = pika.BasicProperties(delivery_mode=2, message_id=f"m-{n}", headers=headers)
            ch.basic_publish(exchange, "orders", f"order {n}".encode(), props)
        poll_until(
            lambda: ch.queue_declare("orders.dlq", durable=True, passive=True).method.message_count == count,
            timeout=10,
            what=f"{count} dead letters in orders.dlq",
        )
    finally:
        conn.close()


# --------------------------------------------------------------------------------------------------------
# data that documents itself
# --------------------------------------------------------------------------------------------------------
@runs("archive-record")
def test_the_archive_record_has_the_writer_s_keys_in_order() -> None:
    from ottermq.persistence.archive.records import SCHEMA_KEYS

    record = json.loads(snippet("archive-record"))
    assert tuple(record) == tuple(SCHEMA_KEYS)
    assert record["schema"] == 2


# --------------------------------------------------------------------------------------------------------
# clients
# --------------------------------------------------------------------------------------------------------
@runs("readme-pika", "first-program", "clients-pika", "clients-aio-pika", "celery-tasks", "celery-client")
def test_python_client_snippets_one_after_another(broker_process, tmp_path):
    b = broker_process()
    b.start()
    for _ in range(2):  # again: the declarations do not change
        assert run_python(snippet("readme-pika"), b, tmp_path, "readme.py") == [
            "b'hello, otter' expired hello"
        ]
        assert run_python(snippet("first-program"), b, tmp_path, "first.py") == ["b'hello, otter' False"]
        lines = run_python(snippet("clients-pika"), b, tmp_path, "pika_snippet.py")
        assert lines == ["b'order 42' expired pika.orders 1 1000"]
    lines = run_python(snippet("clients-aio-pika"), b, tmp_path, "aio_snippet.py")
    assert lines == ["""b'{"order": 1}' expired aio.orders 500"""]

    with celery_worker(snippet("celery-tasks"), "tasks", b, tmp_path):
        assert run_python(snippet("celery-client"), b, tmp_path, "client.py") == [
            "5",
            "['page', 'info']",
            "tasks.charge [-1] rejected tasks",
        ]


@runs("retry-pika", "retry-celery-tasks", "retry-celery-client")
def test_retry_with_back_off_snippets(broker_process, tmp_path):
    b = broker_process()
    b.start()
    lines = run_python(snippet("retry-pika"), b, tmp_path, "pika_retry.py")
    assert lines == ["b'job 1' True delivery_limit", "b'call back' -300"]
    with celery_worker(snippet("retry-celery-tasks"), "retry_tasks", b, tmp_path):
        lines = run_python(snippet("retry-celery-client"), b, tmp_path, "retry_client.py")
        assert lines == ["called for 7 True"]


@runs("consistent-hash-pika")
def test_the_consistent_hash_snippet(broker_process, tmp_path):
    b = broker_process()
    b.start()
    for _ in range(2):  # again: the declarations and bindings do not change
        lines = run_python(snippet("consistent-hash-pika"), b, tmp_path, "shards.py")
        assert lines == ["[263, 245, 492]", "[0, 10, 0]"]  # what RabbitMQ 3.10.8 with the plugin printed


@runs("node-amqplib")
def test_the_amqplib_snippet(broker_process, tmp_path):
    node = shutil.which("node")
    if node is None or not (NODE_MODULES / "amqplib").is_dir():
        pytest.fail("needs node and e2e/node's amqplib: run `make clients` (or bash .ci/install-node.sh)")
    b = broker_process()
    b.start()
    code = snippet("node-amqplib")
    assert "localhost:5672" in code
    (tmp_path / "dlq.js").write_text(localize(code, b))
    result = subprocess.run(
        [node, "dlq.js"],
        cwd=tmp_path,
        env=clean_env(NODE_PATH=str(NODE_MODULES)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.fullmatch(
        r'\{"id": 1\} expired node\.orders 1 \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z 5000\n', result.stdout
    ), result.stdout


@runs("go-amqp091")
def test_the_amqp091_go_snippet(broker_process, tmp_path):
    go = shutil.which("go") or ("/usr/lib/go/bin/go" if Path("/usr/lib/go/bin/go").exists() else None)
    if go is None or not (DEBIAN_GOPATH / "src/github.com/rabbitmq/amqp091-go/channel.go").exists():
        pytest.fail("needs Debian's golang-go and amqp091-go: run `make clients` (or bash .ci/install-go.sh)")
    b = broker_process()
    b.start()
    code = snippet("go-amqp091")
    assert "localhost:5672" in code
    source = tmp_path / "src" / "docsnippet"
    source.mkdir(parents=True)
    (source / "main.go").write_text(localize(code, b))
    env = clean_env(
        GO111MODULE="off",
        GOFLAGS="",
        GOPATH=f"{tmp_path}{os.pathsep}{DEBIAN_GOPATH}",
        GOPROXY="off",
        GOTOOLCHAIN="local",
        CGO_ENABLED="1" if shutil.which("gcc") else "0",
    )
    if not (env.get("GOCACHE") or env.get("XDG_CACHE_HOME") or env.get("HOME")):
        env["GOCACHE"] = str(tmp_path / "gocache")
    built = subprocess.run(
        [go, "build", "-o", str(tmp_path / "docsnippet"), "docsnippet"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    result = subprocess.run(
        [str(tmp_path / "docsnippet")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(
        r'\{"id": 1\} reason=expired queue=go\.orders count=1 time=\d{4}-.* original-expiration=5000$',
        result.stderr.strip(),
    ), result.stderr


JAVA_JARS = [Path("/usr/share/java/amqp-client.jar"), Path("/usr/share/java/slf4j-api.jar")]
MONO_CLIENT = Path("/usr/lib/mono/4.5/RabbitMQ.Client.dll")
# what each of these snippets prints: its body, then x-death's reason, queue, count and original-expiration
ORDER_DEAD_LETTERED = '{{"id": 1}} expired {}.orders 1 1000'


def needs(*commands: str, files: tuple[Path, ...] = ()) -> list[str]:
    """The commands' paths; fails (never skips) naming ``make clients`` when one or a file is missing."""
    found = [shutil.which(c) for c in commands]
    missing = [c for c, f in zip(commands, found, strict=True) if f is None]
    missing += [str(f) for f in files if not f.exists()]
    if missing:
        pytest.fail(f"needs {', '.join(missing)}: run `make clients`")
    return [f for f in found if f is not None]


def run_program(argv: list[str], cwd: Path, timeout: float = 90) -> str:
    result = subprocess.run(argv, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def host_and_port(code: str, b: Any, before: str, after: str) -> str:
    """A snippet that names the host and port apart (``before`` -> ``after``, ``{port}`` filled in)."""
    assert code.count(before) == 1, before
    return code.replace(before, after.format(port=b.port))


@runs("java-amqp-client")
def test_the_java_snippet(broker_process, tmp_path):
    (java,) = needs("java", files=tuple(JAVA_JARS))
    b = broker_process()
    b.start()
    code = snippet("java-amqp-client")
    assert "localhost:5672" in code
    (tmp_path / "Orders.java").write_text(localize(code, b))
    classpath = ":".join(str(jar) for jar in JAVA_JARS)
    out = run_program([java, "-cp", classpath, "Orders.java"], tmp_path)
    assert out.splitlines() == [ORDER_DEAD_LETTERED.format("java")]


@runs("ruby-bunny")
def test_the_bunny_snippet(broker_process, tmp_path):
    (ruby,) = needs("ruby")
    b = broker_process()
    b.start()
    code = snippet("ruby-bunny")
    assert "localhost:5672" in code
    (tmp_path / "orders.rb").write_text(localize(code, b))
    assert run_program([ruby, "orders.rb"], tmp_path).splitlines() == [ORDER_DEAD_LETTERED.format("ruby")]


@runs("php-amqplib")
def test_the_php_amqplib_snippet(broker_process, tmp_path):
    (php,) = needs("php", files=(Path("/usr/share/php/PhpAmqpLib/autoload.php"),))
    b = broker_process()
    b.start()
    code = host_and_port(snippet("php-amqplib"), b, "'localhost', 5672,", "'127.0.0.1', {port},")
    (tmp_path / "orders.php").write_text(code)
    assert run_program([php, "orders.php"], tmp_path).splitlines() == [ORDER_DEAD_LETTERED.format("php")]


@runs("dotnet-mono")
def test_the_dotnet_snippet(broker_process, tmp_path):
    mcs, mono = needs("mcs", "mono", files=(MONO_CLIENT,))
    b = broker_process()
    b.start()
    code = snippet("dotnet-mono")
    code = host_and_port(
        code, b, 'HostName = "localhost", Port = 5672', 'HostName = "127.0.0.1", Port = {port}'
    )
    (tmp_path / "Orders.cs").write_text(code)
    run_program([mcs, "-nowarn:618", f"-r:{MONO_CLIENT}", "Orders.cs"], tmp_path)
    out = run_program([mono, "Orders.exe"], tmp_path)
    assert out.splitlines() == [ORDER_DEAD_LETTERED.format("dotnet")]


# --------------------------------------------------------------------------------------------------------
# starting the broker
# --------------------------------------------------------------------------------------------------------
@runs("beside-rabbitmq", "readme-beside-rabbitmq")
@pytest.mark.parametrize("name", ["beside-rabbitmq", "readme-beside-rabbitmq"])
def test_beside_a_rabbitmq_all_three_ports_move_for_the_broker_and_the_cli(tmp_path, name):
    """The snippet's ``.env`` (its ports made free ones) moves the broker's three ports, and the admin
    commands run in that folder in another shell, with nothing set in the environment, reach it."""
    ports = {name: _free_port() for name in ("5673", "15673", "15693")}
    code = snippet(name)
    for documented, free in ports.items():
        code, replaced = re.subn(rf"=({documented})\b", f"={free}", code)
        assert replaced == 1, code
    with make_run(code, tmp_path, {}) as proc:
        wait_for_ports(proc, tmp_path / "broker.log", *ports.values())
        overview = http_json(f"http://127.0.0.1:{ports['15673']}/api/overview")
        listening = {(entry["protocol"], entry["port"]) for entry in overview["listeners"]}
        assert {("amqp", ports["5673"]), ("http", ports["15673"])} <= listening
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['15693']}/metrics", timeout=10) as metrics:
            assert b"rabbitmq_identity_info" in metrics.read()
        for command in (["list", "queues"], ["vhosts", "add", "from-the-cli"]):
            done = subprocess.run(
                ["ottermq", *command],
                cwd=tmp_path,
                env=clean_env(),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr
            assert (
                f" OtterMQ {overview['product_version']} at http://localhost:{ports['15673']}/" in done.stderr
            )
            assert "WARNING" not in done.stderr


RABBITMQ_DEFINITIONS = {
    "rabbit_version": "3.10.8",
    "users": [{"name": "orders-app", "password": "pw", "tags": []}],
    "vhosts": [{"name": "/"}],
    "permissions": [{"user": "orders-app", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}],
    "queues": [{"name": "orders", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}],
    "exchanges": [],
    "bindings": [],
}


@runs("definitions-offline", "definitions-at-start")
def test_definitions_snippets(tmp_path):
    offline = tmp_path / "offline"
    offline.mkdir()
    (offline / "defs.json").write_text(json.dumps(RABBITMQ_DEFINITIONS))
    run_shell(snippet("definitions-offline"), None, offline)
    ours = json.loads((offline / "ours.json").read_text())
    assert [q["name"] for q in ours["queues"]] == ["orders"]
    assert "orders-app" in [u["name"] for u in ours["users"]]

    at_start = tmp_path / "at-start"
    at_start.mkdir()
    (at_start / "defs.json").write_text(json.dumps(RABBITMQ_DEFINITIONS))
    amqp, web, prometheus = _free_port(), _free_port(), _free_port()
    env = {
        "OTTERMQ_BROKER_HOST": "127.0.0.1",
        "OTTERMQ_BROKER_PORT": str(amqp),
        "OTTERMQ_WEB_PORT": str(web),
        "OTTERMQ_PROMETHEUS_PORT": str(prometheus),
    }
    with make_run(snippet("definitions-at-start"), at_start, env) as proc:
        wait_for_ports(proc, at_start / "broker.log", amqp, web)
        params = pika.ConnectionParameters(
            "127.0.0.1", amqp, credentials=pika.PlainCredentials("orders-app", "pw")
        )  # the file's user, with the file's permissions, finds the file's queue
        conn = pika.BlockingConnection(params)
        conn.channel().queue_declare("orders", durable=True, passive=True)
        conn.close()


@runs("tls-settings")
def test_the_tls_settings_as_a_dot_env_file(tmp_path):
    from .tls_certs import CA

    ca = CA(tmp_path / "ca")
    server = ca.issue("localhost", server=True)
    dotenv = snippet("tls-settings")
    for documented, real in {
        "/etc/ottermq/server.pem": server.cert,
        "/etc/ottermq/server.key": server.key,
        "/etc/ottermq/ca.pem": ca.cert_file,
    }.items():
        assert documented in dotenv
        dotenv = dotenv.replace(documented, str(real))
    (tmp_path / ".env").write_text(dotenv)
    amqps, https, metrics = _free_port(), _free_port(), _free_port()
    env = {  # the ports moved off RabbitMQ's; the environment wins over .env
        "OTTERMQ_SSL_PORT": str(amqps),
        "OTTERMQ_WEB_SSL_PORT": str(https),
        "OTTERMQ_PROMETHEUS_SSL_PORT": str(metrics),
        "OTTERMQ_BROKER_HOST": "127.0.0.1",
    }
    with make_run("make run", tmp_path, env) as proc:
        wait_for_ports(proc, tmp_path / "broker.log", amqps, https, metrics)
        context = ssl.create_default_context(cafile=str(ca.cert_file))
        params = pika.ConnectionParameters(
            "127.0.0.1",
            amqps,
            ssl_options=pika.SSLOptions(context, "localhost"),
            credentials=pika.PlainCredentials("guest", "guest"),
        )
        pika.BlockingConnection(params).close()
        overview = http_json(f"https://localhost:{https}/api/overview", context=context)
        assert ("amqp/ssl", amqps) in {(entry["protocol"], entry["port"]) for entry in overview["listeners"]}
        protocols = {entry["protocol"] for entry in overview["listeners"]}
        assert "amqp" not in protocols  # OTTERMQ_BROKER_PORT=0
        assert not {"http", "http/prometheus"} & protocols  # OTTERMQ_WEB_PORT=0, OTTERMQ_PROMETHEUS_PORT=0
        with urllib.request.urlopen(f"https://localhost:{metrics}/metrics", timeout=10, context=context) as r:
            assert b"rabbitmq_identity_info" in r.read()


# --------------------------------------------------------------------------------------------------------
# the command line
# --------------------------------------------------------------------------------------------------------
@runs("admin-cli")
def test_the_admin_commands(broker_process, tmp_path):
    b = broker_process()
    b.start()
    conn, ch = pika_channel(b)
    ch.exchange_declare("orders", "direct")
    ch.queue_declare("orders.eu")
    ch.queue_bind("orders.eu", "orders", "eu")
    conn.close()
    out = run_shell(snippet("admin-cli"), b, tmp_path)
    assert "routed" in out and "true" in out
    assert json.loads((tmp_path / "backup.json").read_text())["vhosts"]
    conn, _ = pika_channel(b, user="alice", password="n3w-s3cret", vhost="orders")
    conn.close()


@runs("policies-cli")
def test_the_policies_commands(broker_process, tmp_path):
    b = broker_process()
    b.start()
    out = run_shell(snippet("policies-cli"), b, tmp_path)
    assert "orders-ttl" in out and "cap" in out
    assert [p["name"] for p in http_json(f"{b.broker.management_url}/api/policies")] == []
    assert [p["name"] for p in http_json(f"{b.broker.management_url}/api/operator-policies")] == ["cap"]


@runs("change-password-live")
def test_changing_a_password_live(broker_process, tmp_path):
    b = broker_process()
    b.start()
    conn, _ = pika_channel(b)  # an open connection survives the change
    run_shell(snippet("change-password-live"), b, tmp_path)
    assert conn.is_open
    conn.close()
    conn, _ = pika_channel(b, user="guest", password="new-secret")
    conn.close()


@runs("change-password-offline")
def test_changing_a_password_with_the_broker_stopped(broker_process, tmp_path, monkeypatch):
    monkeypatch.setenv("OTTERMQ_STORE", "sqlite")  # the snippet's store is the data dir's
    b = broker_process(data_dir=tmp_path / "data")
    b.start()
    assert b.stop() == 0
    run_shell(snippet("change-password-offline"), None, tmp_path)
    b.start()
    conn, _ = pika_channel(b, user="guest", password="new-secret")
    conn.close()


@runs("users-permissions", "limits")
def test_users_permissions_and_limits(broker_process, tmp_path):
    b = broker_process()
    b.start()
    run_shell(snippet("users-permissions") + snippet("limits"), b, tmp_path)
    conn, ch = pika_channel(b, user="orders-svc", password="pw", vhost="/orders")
    ch.queue_declare("orders.new")
    conn.close()
    admin = ("admin", "s3cret")
    users = {u["name"]: u for u in http_json(f"{b.broker.management_url}/api/users", admin)}
    assert "guest" not in users
    assert users["billing-svc"]["password_hash"] == ""  # no password: certificate login only
    limits = http_json(f"{b.broker.management_url}/api/vhost-limits/%2Forders", admin)
    assert limits[0]["value"] == {"max-connections": 200, "max-queues": 1000}
    limits = http_json(f"{b.broker.management_url}/api/user-limits/orders-svc", admin)
    assert limits[0]["value"] == {"max-channels": 64}


@runs("shovels-cli", "shovels-curl")
def test_the_shovels_commands(broker_process, tmp_path):
    b = broker_process()
    b.start()
    conn, ch = pika_channel(b)
    ch.queue_declare("orders", durable=True)
    ch.basic_publish("", "orders", b"order 1")
    try:
        out = run_shell(snippet("shovels-cli") + snippet("shovels-curl"), b, tmp_path)

        def moved() -> bool:
            return ch.queue_declare("orders.archive", passive=True).method.message_count == 1

        poll_until(moved, timeout=20, what="the order moved to orders.archive")
    finally:
        conn.close()
    assert "orders-to-archive" in out and '"name":"orders-out"' in out.replace(" ", "")
    value = http_json(f"{b.broker.management_url}/api/parameters/shovel/%2F/orders-out")["value"]
    assert value["dest-uri"] == "amqp://shovel:s3cret@backup.example:5672/%2F"


@runs("metrics-curl", "metrics-detailed")
def test_the_metrics_commands(broker_process, tmp_path):
    b = broker_process()
    b.start()
    conn, ch = pika_channel(b)
    ch.queue_declare("orders")
    ch.basic_publish("", "orders", b"x")
    try:
        out = run_shell(snippet("metrics-curl"), b, tmp_path)
        detailed = run_shell(snippet("metrics-detailed"), b, tmp_path)
    finally:
        conn.close()
    assert "rabbitmq_connections 1" in out.replace(".0", "")
    assert 'queue="orders"' in out
    assert 'rabbitmq_detailed_queue_messages_ready{queue="orders",vhost="/"} 1' in detailed.replace(".0", "")


@runs("rabbitmqadmin")
def test_rabbitmqadmin(broker_process, tmp_path):
    found = sorted(glob.glob(RABBITMQADMIN))
    script = os.environ.get("RABBITMQADMIN") or (found[-1] if found else None)
    if script is None:
        pytest.fail("no rabbitmqadmin: run `make clients` (or bash .ci/install-rabbitmqadmin.sh)")
    shutil.copy(script, tmp_path / "rabbitmqadmin")
    b = broker_process()
    b.start()
    out = run_shell(snippet("rabbitmqadmin"), b, tmp_path)
    assert json.loads(out.splitlines()[-1]) == [{"messages": 0, "name": "orders.eu"}]


# --------------------------------------------------------------------------------------------------------
# dead letters
# --------------------------------------------------------------------------------------------------------
@runs("dlq-move", "dlq-export")
def test_dead_letter_moves_and_export(broker_process, tmp_path):
    b = broker_process()
    b.start()
    dead_letters(b, 5)
    conn, ch = pika_channel(b)
    ch.exchange_declare("orders.retry", "direct", durable=True)
    ch.queue_declare("orders.retry.eu", durable=True)
    ch.queue_bind("orders.retry.eu", "orders.retry", "eu")
    conn.close()
    out = run_shell(snippet("dlq-move"), b, tmp_path)
    assert "done: moved 5" in out  # back to orders, where they expire again, into orders.dlq

    conn, ch = pika_channel(b)
    assert ch.queue_declare("orders.retry.eu", durable=True, passive=True).method.message_count == 5
    conn.close()

    dead_letters(b, 3)  # orders.dlq holds 3 again
    run_shell(snippet("dlq-export"), b, tmp_path)
    lines = [json.loads(line) for path in (tmp_path / "archive").rglob("*.jsonl") for line in path.open()]
    assert len(lines) == 6  # browsed once, then drained: each of the 3 twice
    assert {record["reason"] for record in lines} == {"expired"}
    conn, ch = pika_channel(b)
    assert ch.queue_declare("orders.dlq", durable=True, passive=True).method.message_count == 0
    conn.close()


@pytest.mark.spark
@runs("spark-local")
def test_the_spark_jobs_on_one_machine(broker_process, tmp_path):
    archive = tmp_path / "archive"
    b = broker_process(
        {
            "OTTERMQ_DLX_ARCHIVE_DIR": str(archive),
            "OTTERMQ_DLX_ARCHIVE_BODY_BYTES": "65536",
            "OTTERMQ_DLX_ARCHIVE_IDLE_CLOSE": "0.2",
        }
    )
    b.start()
    dead_letters(b, 20, headers={"tenant": "acme"}, exchange="orders")
    poll_until(lambda: list(archive.rglob("*.jsonl")), timeout=10, what="a closed archive file")
    run_shell(snippet("spark-local"), b, tmp_path, timeout=600)
    summary = json.loads((tmp_path / "dl-report" / "summary.json").read_text())
    assert "20" in json.dumps(summary)
    assert list((tmp_path / "archive.parquet").rglob("*.parquet"))
    assert (tmp_path / "replay-set" / "manifest.json").exists()
    conn, ch = pika_channel(b)  # the replayed messages went through orders once more, and died again
    poll_until(
        lambda: ch.queue_declare("orders.dlq", durable=True, passive=True).method.message_count == 40,
        timeout=10,
        what="the 20 replayed messages dead-lettered again",
    )
    conn.close()
