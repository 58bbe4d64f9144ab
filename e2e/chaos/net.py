"""Network namespaces for the fault harness: hosts on one private bridge, partitions and packet loss with nft.

Layout of a :class:`Topology` (nothing is added to the root namespace)::

    otc<pid>-<seq>            the hub namespace: bridge ``br0`` and one veth end ``v<i>`` per host
    otc<pid>-<seq>-<name>     one namespace per host: ``lo`` up, ``eth0`` (the other veth end) with
                              10.213.<k>.<i+1>/24

``k`` is reserved with an ``flock`` on ``/run/otc-chaos/net-<k>.lock`` held for the topology's life, so two
runs at once never share a subnet (an ``flock`` dies with its process: a killed run frees its ``k``).

Faults live in the host's own namespace, in one nft table (``netdev chaos``) with an ``ingress`` and an
``egress`` chain on its ``eth0``: :meth:`Host.block` drops silently (no RST, no ICMP: connects time out,
established connections stall and retransmit), :meth:`Host.loss` drops a random share of packets
(``numgen random``), :meth:`Host.heal` deletes the table. Egress, not the ``output`` hook: a packet dropped
in ``output`` fails the sender's ``sendto`` with EPERM (UDP, ICMP); one dropped at the device's egress is
lost as on a wire, the sender sees nothing. Loopback is never touched; ARP is not IP and passes.
``direction`` is seen from the host: ``"in"`` drops what it receives from the peer, ``"out"`` what it sends
to the peer, so ``a.block(b.ip, "in")`` is the asymmetric partition "a can send to b but hears nothing
from b".

Processes: :meth:`Host.popen` and :meth:`Host.run` run through ``ip netns exec`` (optionally under a
:class:`~clock.Clock`); :meth:`Host.socket` makes a socket inside the namespace from the calling process
(``setns`` in a short-lived thread), so a test or runner can talk to the hosts without a helper process.

Clean-up: :meth:`Topology.close` (also registered with :mod:`atexit`) kills every process still inside its
namespaces, then deletes them. :func:`cleanup_stale` (called by every new ``Topology``) does the same for
namespaces of this family whose ``<pid>`` is no longer running, left by a run killed with SIGKILL.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import ipaddress
import itertools
import logging
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from .clock import Clock

log = logging.getLogger(__name__)

T = TypeVar("T")
Direction = Literal["both", "in", "out"]

FAMILY = "otc"  # every namespace name of this module starts with otc<pid>-
STALE_NAME = re.compile(rf"^{FAMILY}(\d+)-\d+(?:-[a-z0-9]+)?$")
HOST_NAME = re.compile(r"^[a-z0-9]{1,16}$")
LOCK_DIR = Path("/run/otc-chaos")
NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
TABLE = "netdev chaos"
DEVICE = "eth0"
MAX_HOSTS = 250

Socket = socket.socket  # the class; inside Host, ``socket`` names the method
_sequence = itertools.count()
_libc = ctypes.CDLL(None, use_errno=True)


class NetError(RuntimeError):
    """An ``ip``/``nft`` command failed; the message holds the command and its output."""


def _ip(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS`` (``nft`` through ``ip netns exec``) in the calling process's namespaces.

    Raises:
        NetError: the command failed and ``check`` is true.
    """
    done = subprocess.run(["ip", *args], input=stdin, capture_output=True, text=True, check=False)
    if check and done.returncode:
        raise NetError(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def list_namespaces() -> list[str]:
    """The names of the named network namespaces (``ip netns list``)."""
    out = _ip("netns", "list").stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def namespace_pids(ns: str) -> list[int]:
    """The processes inside namespace ``ns`` (``ip netns pids``); empty when it does not exist."""
    done = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def delete_namespace(ns: str, timeout: float = 5.0) -> None:
    """Kill every process inside ``ns`` (SIGKILL), wait until they are gone, then delete the namespace.

    A namespace with processes left in it would outlive ``ip netns del`` (unnamed, holding its links).
    """
    deadline = time.monotonic() + timeout
    while True:
        pids = namespace_pids(ns)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            log.warning("processes %s still in namespace %s after SIGKILL", pids, ns)
            break
        time.sleep(0.01)
    _ip("netns", "del", ns, check=False)


def cleanup_stale() -> list[str]:
    """Delete the namespaces of this family (``otc<pid>-...``) whose creating process is gone, and the
    subnet lock files nobody holds.

    Returns:
        The namespace names deleted.
    """
    removed = []
    for ns in list_namespaces():
        match = STALE_NAME.match(ns)
        if match and not _pid_alive(int(match.group(1))):
            log.info("removing stale namespace %s", ns)
            delete_namespace(ns)
            removed.append(ns)
    for path in LOCK_DIR.glob("net-*.lock"):
        with contextlib.suppress(OSError), open(path, "ab") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while a live run holds it
            path.unlink()  # a run that opened it meanwhile sees another inode and tries again
    return removed


def in_namespace(ns: str, fn: Callable[[], T]) -> T:
    """``fn()`` called in a thread that has joined network namespace ``ns``; its value or exception.

    Sockets keep the namespace they were made in, so ``in_namespace(ns, socket.socket)`` is a socket of
    ``ns`` usable from any thread.

    Raises:
        OSError: the namespace cannot be joined.
    """
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            fd = os.open(NETNS_DIR / ns, os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({ns}): {os.strerror(err)}")
            finally:
                os.close(fd)
            result["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=run, name=f"netns-{ns}")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]  # type: ignore[no-any-return]


def _peer_ip(peer: str | Host | None) -> str | None:
    if peer is None:
        return None
    ip = peer.ip if isinstance(peer, Host) else peer
    ipaddress.IPv4Address(ip)  # refuse anything else before it reaches nft
    return ip


class Host:
    """One machine of a :class:`Topology`: its own network namespace, joined to the hub's bridge.

    Attributes:
        name: the host's name in the topology.
        ns: its network namespace's name.
        ip: its IPv4 address on the bridge.
    """

    def __init__(self, name: str, ns: str, ip: str) -> None:
        self.name = name
        self.ns = ns
        self.ip = ip
        self._table = False

    def __repr__(self) -> str:
        return f"Host({self.name!r}, ns={self.ns!r}, ip={self.ip!r})"

    # ---- processes -----------------------------------------------------------------------------------
    def command(self, argv: Sequence[str | os.PathLike[str]], clock: Clock | None = None) -> list[str]:
        """``argv`` prefixed to run inside this namespace (and under ``clock``'s libfaketime)."""
        inner = [os.fspath(a) for a in argv]
        if clock is not None:
            inner = clock.command(inner)
        return ["ip", "netns", "exec", self.ns, *inner]

    def popen(
        self,
        argv: Sequence[str | os.PathLike[str]],
        env: Mapping[str, str] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
        clock: Clock | None = None,
        **kwargs: Any,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside this host's namespace; ``proc.pid`` is the program itself (``ip`` execs).

        Args:
            argv: the program and its arguments.
            env: its environment (default: this process's).
            stdout: as for :class:`subprocess.Popen`.
            stderr: as for :class:`subprocess.Popen`.
            clock: run it under this clock's libfaketime (its wall clock follows ``clock.jump``).
            kwargs: passed on to :class:`subprocess.Popen` (``stdin``, ``cwd``, ``start_new_session``...).
        """
        proc = subprocess.Popen(
            self.command(argv, clock),
            env=dict(env) if env is not None else None,
            stdout=stdout,
            stderr=stderr,
            **kwargs,
        )
        if clock is not None:
            clock.track(proc.pid)
        return proc

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        check: bool = True,
        *,
        timeout: float | None = 60,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        clock: Clock | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside this namespace to completion, its output captured as text.

        Raises:
            subprocess.CalledProcessError: it failed and ``check`` is true (``stderr`` holds its output).
            subprocess.TimeoutExpired: it ran longer than ``timeout`` seconds.
        """
        done = subprocess.run(
            self.command(argv, clock),
            input=input,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
            env=dict(env) if env is not None else None,
        )
        if check and done.returncode:
            raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
        return done

    def pids(self) -> list[int]:
        """The processes running inside this host's namespace."""
        return namespace_pids(self.ns)

    # ---- sockets from the calling process ------------------------------------------------------------
    def socket(self, family: int = socket.AF_INET, type: int = socket.SOCK_STREAM) -> Socket:
        """A new socket living in this host's namespace (usable from any thread of this process)."""
        return in_namespace(self.ns, lambda: socket.socket(family, type))

    def connect(self, address: tuple[str, int], timeout: float | None = 5.0) -> Socket:
        """A TCP connection from this host to ``address``; the socket keeps ``timeout``.

        Raises:
            OSError: the connection failed (``TimeoutError`` when silently dropped).
        """
        sock = self.socket()
        try:
            sock.settimeout(timeout)
            sock.connect(address)
        except BaseException:
            sock.close()
            raise
        return sock

    def listen(self, port: int = 0, ip: str | None = None, backlog: int = 64) -> Socket:
        """A listening TCP socket on ``ip:port`` of this host (default: its bridge address, any free port)."""
        return in_namespace(
            self.ns, lambda: socket.create_server((ip or self.ip, port), backlog=backlog, reuse_port=False)
        )

    # ---- faults --------------------------------------------------------------------------------------
    def _nft(self, script: str) -> None:
        done = _ip("netns", "exec", self.ns, "nft", "-f", "-", stdin=script, check=False)
        if done.returncode:
            raise NetError(f"nft in {self.ns} failed: {done.stderr.strip()}\nscript:\n{script}")

    def _add_rules(self, peer: str | Host | None, direction: Direction, verdict: str) -> None:
        if direction not in ("both", "in", "out"):
            raise ValueError(f"direction must be 'both', 'in' or 'out', not {direction!r}")
        ip = _peer_ip(peer)
        lines = [
            f"add table {TABLE}",
            f'add chain {TABLE} in {{ type filter hook ingress device "{DEVICE}" priority 0; }}',
            f'add chain {TABLE} out {{ type filter hook egress device "{DEVICE}" priority 0; }}',
        ]
        if direction in ("both", "in"):
            match = f"ip saddr {ip}" if ip else "meta protocol ip"
            lines.append(f"add rule {TABLE} in {match} {verdict}")
        if direction in ("both", "out"):
            match = f"ip daddr {ip}" if ip else "meta protocol ip"
            lines.append(f"add rule {TABLE} out {match} {verdict}")
        self._nft("\n".join(lines) + "\n")
        self._table = True

    def block(self, peer: str | Host | None = None, direction: Direction = "both") -> None:
        """Drop (silently, no RST) the packets exchanged with ``peer`` (an IP or a Host; None: every peer).

        Args:
            peer: the other end; ``None`` isolates this host from everyone (loopback keeps working).
            direction: ``"in"``: what this host receives from the peer; ``"out"``: what it sends;
                ``"both"``: a full partition.

        Raises:
            ValueError: a bad direction or peer address.
            NetError: nft refused the rules.
        """
        self._add_rules(peer, direction, "drop")
        log.info("%s: block %s (%s)", self.name, peer or "everyone", direction)

    def loss(self, peer: str | Host | None, percent: float, direction: Direction = "both") -> None:
        """Drop a random ``percent`` of the packets exchanged with ``peer`` (per packet, ``numgen random``).

        TCP still gets through, retransmitting; with ``direction="both"`` each way loses ``percent``.

        Raises:
            ValueError: ``percent`` outside 0..100, a bad direction or peer address.
            NetError: nft refused the rules.
        """
        if not 0 <= percent <= 100:
            raise ValueError(f"percent must be within 0..100, not {percent}")
        per_10k = round(percent * 100)
        self._add_rules(peer, direction, f"numgen random mod 10000 < {per_10k} drop")
        log.info("%s: %s%% loss with %s (%s)", self.name, percent, peer or "everyone", direction)

    def heal(self) -> None:
        """Remove every fault rule of this host (its whole ``netdev chaos`` table)."""
        if self._table:
            self._nft(f"delete table {TABLE}\n")
            self._table = False
            log.info("%s: healed", self.name)

    def rules(self) -> str:
        """The host's fault rules as nft lists them (empty when there are none)."""
        if not self._table:
            return ""
        return _ip("netns", "exec", self.ns, "nft", "list", "table", *TABLE.split()).stdout


class Topology:
    """A hub namespace with a bridge and one namespace per host; a context manager.

    Args:
        hosts: names of hosts to create now (more with :meth:`host`).
        subnet: the /24 to use (default: 10.213.<k>.0/24 with a ``k`` no other live run holds).
    """

    def __init__(self, hosts: Iterable[str] = (), *, subnet: str | None = None) -> None:
        cleanup_stale()
        self.prefix = f"{FAMILY}{os.getpid()}-{next(_sequence)}"
        self.hub = self.prefix
        self._lock: IO[bytes] | None = None
        self._lock_path: Path | None = None
        self.hosts: dict[str, Host] = {}
        self._namespaces: list[str] = []
        self._closed = False
        atexit.register(self.close)
        try:
            self.subnet = ipaddress.IPv4Network(subnet) if subnet else self._reserve_subnet()
            if self.subnet.prefixlen > 24:
                raise ValueError(f"subnet {self.subnet} is smaller than a /24")
            self._add_namespace(self.hub)
            _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.hub, "link", "set", "br0", "up")
            for name in hosts:
                self.host(name)
        except BaseException:
            self.close()
            raise
        log.info("topology %s on %s", self.prefix, self.subnet)

    def __enter__(self) -> Topology:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reserve_subnet(self) -> ipaddress.IPv4Network:
        LOCK_DIR.mkdir(mode=0o755, exist_ok=True)
        start = os.getpid() % 254
        for i in range(254):
            k = (start + i) % 254 + 1
            path = LOCK_DIR / f"net-{k}.lock"
            handle = open(path, "ab")  # held open (locked) for the topology's life
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # unlinked by its previous holder between our open and our lock
                handle.close()
                continue
            self._lock, self._lock_path = handle, path
            return ipaddress.IPv4Network(f"10.213.{k}.0/24")
        raise NetError("every 10.213.<k>.0/24 is held by another run")

    def _add_namespace(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._namespaces.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def host(self, name: str) -> Host:
        """The host called ``name``, created (namespace, veth pair, address) on first use.

        Raises:
            ValueError: a name that is not 1-16 lower-case letters/digits, or too many hosts.
            NetError: ``ip`` failed.
        """
        if name in self.hosts:
            return self.hosts[name]
        if self._closed:
            raise RuntimeError("topology is closed")
        if not HOST_NAME.match(name):
            raise ValueError(f"host name {name!r}: 1-16 lower-case letters or digits")
        index = len(self.hosts)
        if index >= min(MAX_HOSTS, self.subnet.num_addresses - 2):
            raise ValueError("too many hosts for the subnet")
        ns = f"{self.prefix}-{name}"
        ip = str(self.subnet.network_address + index + 1)
        self._add_namespace(ns)
        veth = f"v{index}"
        _ip("-n", self.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("-n", self.hub, "link", "set", veth, "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{ip}/{self.subnet.prefixlen}", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        host = Host(name, ns, ip)
        self.hosts[name] = host
        return host

    def partition(self, *groups: Iterable[str | Host]) -> None:
        """Cut every host of one group off from every host of the other groups (both directions)."""
        resolved = [[self._resolve(h) for h in group] for group in groups]
        for i, group in enumerate(resolved):
            for other in resolved[i + 1 :]:
                for a in group:
                    for b in other:
                        a.block(b, "both")
                        b.block(a, "both")

    def heal(self) -> None:
        """Remove every fault rule of every host."""
        for host in self.hosts.values():
            host.heal()

    def _resolve(self, host: str | Host) -> Host:
        return host if isinstance(host, Host) else self.hosts[host]

    @property
    def namespaces(self) -> list[str]:
        """Every namespace this topology made (hub first)."""
        return list(self._namespaces)

    def close(self) -> None:
        """Kill the processes left in this topology's namespaces and delete them (idempotent)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        for ns in reversed(self._namespaces):
            delete_namespace(ns)
        self._namespaces.clear()
        if self._lock is not None and self._lock_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self._lock_path.unlink()
            self._lock.close()
            self._lock = None
        log.info("topology %s closed", self.prefix)
