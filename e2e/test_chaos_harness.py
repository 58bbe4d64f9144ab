"""The fault harness's own tests (``e2e/chaos/``): namespaces, partitions, loss, the delaying proxy,
PostgreSQL killed with SIGKILL, a full disk and a stepped wall clock.

Needs root, ``ip netns`` and ``nft``; skipped without them, except under ``CI=true`` where it fails.
Nothing here talks to a broker. Every resource is made by a fixture and released even when a test fails.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .chaos import net
from .chaos.clock import Clock
from .chaos.disk import SmallDisk
from .chaos.net import Host, Topology
from .chaos.pg import PgServer
from .chaos.proxy import ProxyControl, proxy_command
from .polling import poll_until

pytestmark = pytest.mark.extension

PYTHON = sys.executable


def _netns_problem() -> str | None:
    """Why network namespaces cannot be used here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, nft, mount)"
    for tool in ("ip", "nft", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = f"{net.FAMILY}{os.getpid()}-999"
    try:
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
        if made.returncode:
            return f"ip netns add failed: {made.stderr.strip()}"
        nft = subprocess.run(
            ["ip", "netns", "exec", probe, "nft", "list", "ruleset"],
            capture_output=True,
            text=True,
            check=False,
        )
        if nft.returncode:
            return f"nft in a namespace failed: {nft.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


@pytest.fixture(scope="module", autouse=True)
def _netns_usable() -> None:
    reason = _netns_problem()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the chaos harness cannot run: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def topo(_netns_usable: None) -> Iterator[Topology]:
    with Topology(["a", "b", "c"]) as topology:
        yield topology


@pytest.fixture(autouse=True)
def _healed(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "topo" in request.fixturenames:
        request.getfixturevalue("topo").heal()


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A temp directory the postgres user can reach (pytest's tmp_path is 0700 all the way up)."""
    path = Path(tempfile.mkdtemp(prefix="otc-test-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[Any]]]:
    """Processes a test starts; killed afterwards."""
    started: list[subprocess.Popen[Any]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _pair(client: Host, server: Host, port: int) -> tuple[socket.socket, socket.socket, socket.socket]:
    """A TCP connection client -> server:port: (listener, client end, server end)."""
    listener = server.listen(port)
    conn = client.connect((server.ip, port), timeout=2)
    accepted, _ = listener.accept()
    return listener, conn, accepted


def _silent(sock: socket.socket, seconds: float) -> None:
    """Nothing arrives on ``sock`` within ``seconds``, and it is neither reset nor closed."""
    sock.settimeout(seconds)
    with pytest.raises(TimeoutError):
        data = sock.recv(100)
        pytest.fail(f"expected silence, got {data!r}")


# ---- net ------------------------------------------------------------------------------------------------
def test_hosts_reach_each_other(topo: Topology) -> None:
    a, b = topo.host("a"), topo.host("b")
    listener, conn, accepted = _pair(a, b, 7000)
    with listener, conn, accepted:
        conn.sendall(b"hello")
        assert accepted.recv(5) == b"hello"
        # a process inside a's namespace reaches b too, and sees only lo and eth0
        script = f"import socket; s = socket.create_connection(('{b.ip}', 7000), timeout=2); s.sendall(b'hi')"
        a.run([PYTHON, "-c", script])
        second, _ = listener.accept()
        with second:
            second.settimeout(2)
            assert second.recv(2) == b"hi"
        links = a.run(["ip", "-o", "link"]).stdout
        assert [line.split(":")[1].strip().split("@")[0] for line in links.splitlines()] == ["lo", "eth0"]


def test_block_is_silent_and_heal_restores(topo: Topology) -> None:
    a, b = topo.host("a"), topo.host("b")
    listener, conn, accepted = _pair(a, b, 7001)
    with listener, conn, accepted:
        a.block(b)
        assert "drop" in a.rules()
        with pytest.raises(TimeoutError):  # a SYN dropped: no RST, no ICMP, the connect times out
            a.connect((b.ip, 7001), timeout=0.4)
        conn.sendall(b"during")  # queued and retransmitted, no error
        _silent(accepted, 0.3)
        accepted.sendall(b"back")
        _silent(conn, 0.2)
        a.heal()
        assert a.rules() == ""
        accepted.settimeout(5)
        conn.settimeout(5)
        assert accepted.recv(6) == b"during"  # the retransmission gets through
        assert conn.recv(4) == b"back"
        with a.connect((b.ip, 7001), timeout=2):
            pass


def _udp_count(sender: Host, receiver: Host, count: int, wait: float) -> int:
    """Send ``count`` UDP datagrams sender -> receiver; how many arrived within ``wait`` s of the last."""
    rx = receiver.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = sender.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with rx, tx:
        rx.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 8 << 20)
        rx.bind((receiver.ip, 0))
        for i in range(count):
            tx.sendto(b"%d" % i, rx.getsockname())
        got = 0
        rx.settimeout(wait)
        with contextlib.suppress(TimeoutError):
            while got < count:
                rx.recv(64)
                got += 1
        return got


def test_one_way_block_is_one_way(topo: Topology) -> None:
    a, b = topo.host("a"), topo.host("b")
    a.block(b.ip, direction="in")  # a can send to b, hears nothing from b
    assert _udp_count(a, b, 5, 0.3) == 5
    assert _udp_count(b, a, 5, 0.3) == 0
    a.heal()
    a.block(b, direction="out")  # a hears b, b hears nothing from a
    assert _udp_count(b, a, 5, 0.3) == 5
    assert _udp_count(a, b, 5, 0.3) == 0
    c = topo.host("c")
    assert _udp_count(a, c, 5, 0.3) == 5  # only the b path is cut


def test_loss_drops_some_and_tcp_survives(topo: Topology) -> None:
    a, b = topo.host("a"), topo.host("b")
    a.loss(b, 30, direction="in")
    received = _udp_count(b, a, 1000, 0.3)
    assert 600 <= received <= 800, received  # ~30% of 1000 lost (binomial sd ~15)
    a.heal()

    listener, conn, accepted = _pair(a, b, 7002)
    with listener, conn, accepted:
        conn.settimeout(20)
        accepted.settimeout(20)

        def round_trip() -> None:
            conn.sendall(b"x" * 100)
            data = b""
            while len(data) < 100:
                data += accepted.recv(100 - len(data))
            accepted.sendall(data)
            back = b""
            while len(back) < 100:
                back += conn.recv(100 - len(back))

        started = time.monotonic()
        for _ in range(5):
            round_trip()
        clean = time.monotonic() - started
        a.loss(b, 30)  # 30% each way
        started, rounds = time.monotonic(), 0
        while rounds < 5 or (time.monotonic() - started < 0.2 and rounds < 40):
            round_trip()
            rounds += 1
        lossy = time.monotonic() - started
        assert clean < 0.1, clean
        assert lossy > 0.2, (rounds, lossy)  # at least one retransmission timeout


def test_close_leaves_nothing_and_stale_runs_are_removed(_netns_usable: None) -> None:
    links_before = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    with Topology(["x", "y"]) as topology:
        names = topology.namespaces
        assert set(names) <= set(net.list_namespaces())
        host = topology.host("x")
        sleeper = host.popen(["sleep", "60"])
        deadline = time.monotonic() + 10  # `ip netns exec` enters the namespace, then becomes sleep
        while sleeper.pid not in host.pids() and time.monotonic() < deadline:
            time.sleep(0.02)
    assert sleeper.wait(timeout=5) == -signal.SIGKILL  # processes left inside are killed
    assert not set(names) & set(net.list_namespaces())
    assert subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout == links_before

    # a run killed with SIGKILL leaves its namespaces; the next Topology (cleanup_stale) removes them
    child = f"""
import importlib.util, os, signal, sys
spec = importlib.util.spec_from_file_location("otc_net", {str(Path(net.__file__))!r})
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
topology = mod.Topology(["z"])
topology.host("z").popen(["sleep", "60"], stdout=-3, stderr=-3)  # DEVNULL: run() waits for EOF
print(topology.subnet, " ".join(topology.namespaces), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    killed = subprocess.run([PYTHON, "-c", child], capture_output=True, text=True, timeout=30)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    subnet, *stale = killed.stdout.split()
    assert len(stale) == 2
    net.cleanup_stale()  # (another run's Topology may have done it already: this is run-safe)
    assert not set(stale) & set(net.list_namespaces())
    assert not (net.LOCK_DIR / f"net-{subnet.split('.')[2]}.lock").exists()


# ---- proxy ----------------------------------------------------------------------------------------------
class EchoServer:
    """Echo on a listening socket, one thread per connection, in this process."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.listener.accept()
                self.conns.append(conn)
                threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := conn.recv(65536):
                conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)  # EOF answered with EOF

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self.thread.join(timeout=5)


def _ping(sock: socket.socket, timeout: float = 5) -> float:
    """One echo round trip on ``sock``, in seconds."""
    sock.settimeout(timeout)
    started = time.monotonic()
    sock.sendall(b"ping\n")
    data = b""
    while len(data) < 5:
        chunk = sock.recv(5 - len(data))
        assert chunk, "connection closed"
        data += chunk
    return time.monotonic() - started


@pytest.fixture
def proxied(
    topo: Topology, workdir: Path, processes: list[subprocess.Popen[Any]]
) -> Iterator[tuple[ProxyControl, tuple[str, int]]]:
    """An echo server on b's 127.0.0.1:7100 behind a proxy on b's bridge address; (control, address)."""
    b = topo.host("b")
    echo = EchoServer(b.listen(7100, ip="127.0.0.1"))
    control = ProxyControl(workdir / "proxy.json", delay=0.1)
    ready = workdir / "proxy.ready"
    argv = proxy_command(f"{b.ip}:7101", "127.0.0.1:7100", control.path, ready=ready)
    log = workdir / "proxy.log"
    with open(log, "wb") as stderr:
        processes.append(b.popen(argv, stderr=stderr))
    poll_until(ready.exists, timeout=10, what="the proxy listening", explain=log.read_text)
    try:
        yield control, (b.ip, 7101)
    finally:
        echo.close()


def test_proxy_delays_and_follows_its_control_file(
    topo: Topology, proxied: tuple[ProxyControl, tuple[str, int]]
) -> None:
    control, address = proxied
    a = topo.host("a")
    with a.connect(address) as conn:
        rtt = min(_ping(conn) for _ in range(3))
        assert 0.19 <= rtt <= 0.3, rtt  # 100 ms each way

        changed = time.monotonic()
        control.set(delay=0.0)
        while True:  # a ping started 0.3 s after the change must not see the old delay
            started = time.monotonic()
            if _ping(conn) < 0.05:
                break
            assert started - changed < 0.3, "delay 0 not applied within 0.3 s"
        with a.connect(address) as fresh:
            assert _ping(fresh) < 0.05

        changed = time.monotonic()
        control.set(delay=0.05)
        while True:
            started = time.monotonic()
            if _ping(conn) > 0.09:
                break
            assert started - changed < 0.3, "delay 0.05 not applied within 0.3 s"

        control.set(delay=0.05, loss=1.0, rto=0.15)  # every chunk "retransmitted" once
        poll_until(lambda: _ping(conn) > 0.35, timeout=2, what="the retransmission delay")
        assert 0.38 <= _ping(conn) <= 0.6


def test_proxy_cut_stalls_without_closing(
    topo: Topology, proxied: tuple[ProxyControl, tuple[str, int]]
) -> None:
    control, address = proxied
    control.set(delay=0.0)
    a = topo.host("a")
    with a.connect(address) as conn:
        poll_until(lambda: _ping(conn) < 0.05, timeout=2, what="delay 0")
        changed = time.monotonic()
        control.set(cut=True)
        while True:  # ping until one is not answered: the cut has been applied
            conn.sendall(b"ping\n")
            conn.settimeout(0.25)
            try:
                assert conn.recv(5) == b"ping\n"
            except TimeoutError:
                break
            assert time.monotonic() - changed < 0.3, "cut not applied within 0.3 s"
        _silent(conn, 0.3)  # no data, no EOF, no reset
        with a.connect(address) as during:  # accepted, but nothing gets through
            during.sendall(b"ping\n")
            _silent(during, 0.2)
            lifted = time.monotonic()
            control.set(cut=False)
            conn.settimeout(2)
            during.settimeout(2)
            assert conn.recv(5) == b"ping\n"
            assert during.recv(5) == b"ping\n"
            assert time.monotonic() - lifted < 0.4
        assert _ping(conn) < 0.05


def test_proxy_streams_in_order_and_forwards_eof(
    topo: Topology, proxied: tuple[ProxyControl, tuple[str, int]]
) -> None:
    control, address = proxied
    control.set(delay=0.01)
    payload = os.urandom(4 << 20)  # more than the proxy buffers: its reads wait for its writes
    with topo.host("a").connect(address, timeout=10) as conn:
        sender = threading.Thread(target=lambda: (conn.sendall(payload), conn.shutdown(socket.SHUT_WR)))
        sender.start()
        received = bytearray()
        while chunk := conn.recv(1 << 20):  # the echo server closes after the EOF the proxy passed on
            received += chunk
        sender.join(timeout=10)
    assert received == payload


# ---- PostgreSQL -----------------------------------------------------------------------------------------
PG_CLIENT = """
import asyncio, sys
import asyncpg

async def main(url, action):
    conn = await asyncpg.connect(url, timeout=10)
    try:
        if action == "write":
            await conn.execute("create table if not exists kept (v text)")
            await conn.execute("insert into kept values ('committed')")
        print(await conn.fetchval("select string_agg(v, ',') from kept"))
    finally:
        await conn.close()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest.fixture
def pg(topo: Topology, workdir: Path) -> Iterator[PgServer]:
    server = PgServer(topo.host("c"), data_dir=workdir / "pg")
    try:
        yield server
    finally:
        server.close()


def test_postgres_survives_kill9(topo: Topology, pg: PgServer) -> None:
    pg.start()
    a = topo.host("a")
    assert a.run([PYTHON, "-c", PG_CLIENT, pg.url(), "write"]).stdout.strip() == "committed"
    local = pg.url(via=("127.0.0.1", pg.port))  # inside the server's own namespace
    assert pg.host.run([PYTHON, "-c", PG_CLIENT, local, "read"]).stdout.strip() == "committed"
    cluster = pg.pids()
    assert pg.postmaster_pid() in cluster and len(cluster) > 1

    killed = pg.kill9()
    assert pg.postmaster_pid() in killed and len(killed) > 1
    assert pg.pids() == [] and not pg.running
    pg.start()  # crash recovery replays the WAL
    pg.restart()  # a clean stop and start
    assert a.run([PYTHON, "-c", PG_CLIENT, pg.url(), "read"]).stdout.strip() == "committed"
    pg.stop()
    assert pg.pids() == []


# ---- disk -----------------------------------------------------------------------------------------------
def test_small_disk_fills_and_frees(workdir: Path) -> None:
    mount = workdir / "disk"
    disk = SmallDisk(mount, 4)
    try:
        assert any(line.split()[1] == str(mount) for line in Path("/proc/mounts").read_text().splitlines())
        written = disk.fill()
        assert 3 << 20 <= written <= 4 << 20 and disk.available() == 0
        with pytest.raises(OSError) as full:
            (mount / "more").write_bytes(b"x")
        assert full.value.errno == errno.ENOSPC
        disk.free()
        (mount / "more").write_bytes(b"x" * 4096)
        assert disk.available() > 3 << 20
        disk.fill(leave=1 << 20)
        assert disk.available() == 1 << 20
    finally:
        disk.close()
    assert str(mount) not in Path("/proc/mounts").read_text()
    assert not mount.exists()


# ---- clock ----------------------------------------------------------------------------------------------
CLOCK_PROBE = """
import asyncio, json, sqlite3, threading, time
import uvloop

async def main():
    loop = asyncio.get_running_loop()
    db = sqlite3.connect(":memory:")
    ticks = 0
    def tick():
        nonlocal ticks
        ticks += 1
    while True:
        loop.call_later(0.01, tick)
        await asyncio.sleep(0.05)
        time.sleep(0.001)  # clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME): the libfaketime fix
        await asyncio.to_thread(threading.Event().wait, 0.001)
        sql = db.execute("select strftime('%s', 'now')").fetchone()[0]
        line = {"wall": time.time(), "mono": time.monotonic(), "loop": loop.time(), "ticks": ticks}
        print(json.dumps(dict(line, sql=sql)), flush=True)

uvloop.run(main())
"""


def test_clock_steps_wall_time_only(
    topo: Topology, workdir: Path, processes: list[subprocess.Popen[Any]]
) -> None:
    lines: list[dict[str, Any]] = []
    with Clock(workdir / "clock") as clock:
        proc = topo.host("a").popen(
            [PYTHON, "-c", CLOCK_PROBE], clock=clock, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        processes.append(proc)

        def read() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = json.loads(raw)
                line["real"] = time.time()  # this process is not on the clock
                lines.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()

        def skew() -> float:
            return float(lines[-1]["wall"] - lines[-1]["real"]) if lines else float("nan")

        def stderr() -> str:
            return "" if proc.poll() is None else proc.stderr.read().decode()  # type: ignore[union-attr]

        poll_until(lambda: abs(skew()) < 1, timeout=10, what="the probe's first lines", explain=stderr)
        clock.jump(3600)
        poll_until(lambda: 3599 < skew() < 3601, timeout=3, what="a +1 h step", explain=stderr)
        assert int(lines[-1]["sql"]) - lines[-1]["real"] > 3590  # sqlite's clock follows
        clock.jump(-7200)
        poll_until(lambda: -3601 < skew() < -3599, timeout=3, what="a -1 h step", explain=stderr)
        after = len(lines)
        poll_until(lambda: len(lines) >= after + 5, timeout=3, what="timers still firing", explain=stderr)

        for before, now in zip(lines, lines[1:], strict=False):
            assert 0 < now["mono"] - before["mono"] < 5, (before, now)  # monotonic never jumps
            assert 0 < now["loop"] - before["loop"] < 5, (before, now)
            assert now["ticks"] == before["ticks"] + 1
        proc.kill()
        proc.wait(timeout=5)
        leftovers = [Path(f"/dev/shm/faketime_shm_{proc.pid}"), Path(f"/dev/shm/sem.faketime_sem_{proc.pid}")]
    assert not any(p.exists() for p in leftovers)  # Clock.close removed what kill -9 left
    assert not (workdir / "clock").exists()
