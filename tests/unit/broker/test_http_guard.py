"""HTTP hardening, in process: the cross-site rule (a table), the end-of-head detector, the listener's
header timeout and connection cap on real sockets with short limits, the archive's symlink rule, and
the ``OTTERMQ_WEB_*`` settings that drive them."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from ottermq.broker.config import Settings, load_settings
from ottermq.broker.management.app import cross_site
from ottermq.broker.management.archive import inside, list_archive
from ottermq.broker.management.listener import OVER_CAPACITY, REQUEST_TIMEOUT, HTTPListener, head_complete


def headers(**items: str) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict({k.replace("_", "-"): v for k, v in items.items()}))


# -- cross_site -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "given", "scheme", "host", "refused"),
    [
        # rule 1: reads are never refused
        ("GET", {"Sec_Fetch_Site": "cross-site", "Origin": "http://evil.example"}, "http", "mq:15672", False),
        ("HEAD", {"Origin": "null"}, "http", "mq:15672", False),
        ("OPTIONS", {"Sec_Fetch_Site": "cross-site"}, "http", "mq:15672", False),
        # rule 2: Sec-Fetch-Site decides alone
        ("PUT", {"Sec_Fetch_Site": "cross-site"}, "http", "mq:15672", True),
        ("POST", {"Sec_Fetch_Site": "same-site"}, "http", "mq:15672", True),
        ("DELETE", {"Sec_Fetch_Site": "Cross-Site "}, "http", "mq:15672", True),
        ("PATCH", {"Sec_Fetch_Site": "something-new"}, "http", "mq:15672", True),
        ("PUT", {"Sec_Fetch_Site": "same-origin"}, "http", "mq:15672", False),
        ("POST", {"Sec_Fetch_Site": "none"}, "http", "mq:15672", False),
        # same-origin page behind a TLS-terminating proxy: Origin https, the broker sees http
        (
            "PUT",
            {"Sec_Fetch_Site": "same-origin", "Origin": "https://mq.example"},
            "http",
            "mq.example",
            False,
        ),
        # rule 3: Origin against the request's own scheme://host:port
        ("PUT", {"Origin": "http://mq:15672"}, "http", "mq:15672", False),
        ("PUT", {"Origin": "HTTP://MQ:15672"}, "http", "mq:15672", False),
        ("PUT", {"Origin": "http://mq"}, "http", "mq:80", False),  # default port filled in
        ("PUT", {"Origin": "https://mq:443"}, "https", "mq", False),
        ("PUT", {"Origin": "http://[::1]:15672"}, "http", "[::1]:15672", False),
        ("PUT", {"Origin": "http://evil.example"}, "http", "mq:15672", True),
        ("PUT", {"Origin": "http://mq:8080"}, "http", "mq:15672", True),  # another port
        ("PUT", {"Origin": "https://mq:15672"}, "http", "mq:15672", True),  # another scheme
        ("POST", {"Origin": "http://sub.mq:15672"}, "http", "mq:15672", True),
        ("DELETE", {"Origin": "null"}, "http", "mq:15672", True),
        ("PUT", {"Origin": "garbage"}, "http", "mq:15672", True),
        # rule 4: no browser headers (curl, rabbitmqadmin, the CLI, Flower)
        ("PUT", {}, "http", "mq:15672", False),
        ("DELETE", {"User_Agent": "curl/8"}, "https", "mq", False),
    ],
)
def test_cross_site_rules(method: str, given: dict[str, str], scheme: str, host: str, refused: bool) -> None:
    assert cross_site(method, headers(**given), scheme, host) is refused


# -- head_complete --------------------------------------------------------------------------------------
def test_head_complete_finds_the_blank_line_across_chunks() -> None:
    head = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    for cut in range(1, len(head)):
        done, tail = head_complete(b"", head[:cut])
        assert not done
        assert head_complete(tail, head[cut:])[0], cut


@pytest.mark.parametrize(
    ("data", "done"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n", False),
        (b"GET / HTTP/1.1\nHost: x\n\n", True),
        (b"", False),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody", True),
    ],
)
def test_head_complete(data: bytes, done: bool) -> None:
    assert head_complete(b"", data)[0] is done


# -- the listener on real sockets ------------------------------------------------------------------------
def _broker(**settings: Any) -> Any:
    base = {
        "web_host": "127.0.0.1",
        "web_header_timeout": 0.3,
        "web_idle_timeout": 0.3,
        "web_max_connections": 2,
    }
    return SimpleNamespace(settings=Settings(_env_file=None, **{**base, **settings}))  # type: ignore[call-arg]


def _app(_broker: Any) -> web.Application:
    async def hello(_request: web.Request) -> web.Response:
        return web.Response(text="hi")

    app = web.Application()
    app.router.add_get("/", hello)
    return app


async def _with_listener(broker: Any, body: Any) -> Any:
    listener = HTTPListener(broker, 0, "/", "test", _app)
    listener.bind()
    await listener.start()
    try:
        return await body(listener, listener.addresses()[0][1])
    finally:
        await listener.stop()


async def _read_all(reader: asyncio.StreamReader, timeout: float = 5) -> bytes:
    try:
        return await asyncio.wait_for(reader.read(), timeout)
    except ConnectionResetError:
        return b""


def test_silent_and_slow_clients_are_closed_after_the_header_timeout() -> None:
    async def body(listener: HTTPListener, port: int) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        silent = await asyncio.open_connection("127.0.0.1", port)
        half = await asyncio.open_connection("127.0.0.1", port)
        half[1].write(b"GET / HTTP/1.1\r\nHost: x\r\n")
        assert await _read_all(silent[0]) == b""
        assert await _read_all(half[0]) == REQUEST_TIMEOUT
        assert 0.25 <= loop.time() - started < 3
        for _reader, writer in (silent, half):
            writer.close()
        await asyncio.sleep(0)  # the closes reach the protocol
        assert listener.open_connections == 0

    asyncio.run(_with_listener(_broker(web_max_connections=10), body))


def test_a_head_in_time_is_served_and_the_idle_connection_closed_later() -> None:
    async def body(listener: HTTPListener, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")
        await asyncio.sleep(0.1)
        writer.write(b"\r\n")  # complete within 0.3 s
        answer = await _read_all(reader)  # served, then closed after 0.3 s idle
        assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"hi")
        writer.close()

    asyncio.run(_with_listener(_broker(), body))


def test_the_cap_refuses_one_more_and_frees_places_on_close() -> None:
    async def body(listener: HTTPListener, port: int) -> None:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        over = await asyncio.open_connection("127.0.0.1", port)
        assert await _read_all(over[0]) == OVER_CAPACITY
        over[1].close()
        assert listener.open_connections == 2
        for reader, writer in held:
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert (await _read_all(reader)).startswith(b"HTTP/1.1 200 OK")
            writer.close()
        for _ in range(100):
            if listener.open_connections == 0:
                break
            await asyncio.sleep(0.01)
        assert listener.open_connections == 0
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await _read_all(reader)).startswith(b"HTTP/1.1 200 OK")
        writer.close()

    asyncio.run(_with_listener(_broker(web_header_timeout=5, web_idle_timeout=5), body))


def test_one_address_cannot_take_every_place() -> None:
    """Half-open sockets from 127.0.0.1 fill its share (2 of 10); another address is still served, the
    share frees as they close, and 0 lifts the per-address cap."""

    async def body(listener: HTTPListener, port: int) -> None:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        over = await asyncio.open_connection("127.0.0.1", port)
        assert await _read_all(over[0]) == OVER_CAPACITY
        over[1].close()
        assert listener.by_address == {"127.0.0.1": 2}
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await _read_all(reader)).startswith(b"HTTP/1.1 200 OK")
        writer.close()
        for _reader, held_writer in held:
            held_writer.close()
        for _ in range(100):
            if not listener.by_address:
                break
            await asyncio.sleep(0.01)
        assert (listener.by_address, listener.open_connections) == ({}, 0)
        again = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        reader, writer = again[-1]
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await _read_all(reader)).startswith(b"HTTP/1.1 200 OK")
        for _reader, again_writer in again:
            again_writer.close()

    broker = _broker(web_max_connections=10, web_max_connections_per_address=2, web_header_timeout=5)
    asyncio.run(_with_listener(broker, body))

    async def uncapped(listener: HTTPListener, port: int) -> None:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(5)]
        await asyncio.sleep(0.05)
        assert listener.by_address == {"127.0.0.1": 5}
        for _reader, writer in held:
            writer.close()

    asyncio.run(_with_listener(_broker(web_max_connections=10, web_max_connections_per_address=0), uncapped))


def test_answers_the_listener_writes_itself_carry_the_api_headers() -> None:
    for answer in (OVER_CAPACITY, REQUEST_TIMEOUT):
        head = answer.split(b"\r\n\r\n")[0].lower()
        assert b"cache-control: no-store" in head and b"x-content-type-options: nosniff" in head
        assert b"connection: close" in head


# -- settings -------------------------------------------------------------------------------------------
def test_web_limits_defaults_and_durations(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("OTTERMQ_"):
            monkeypatch.delenv(key)
    settings = load_settings(_env_file=None)
    assert (settings.web_header_timeout, settings.web_idle_timeout, settings.web_max_connections) == (
        10,
        15,
        256,
    )
    assert settings.web_max_connections_per_address == 32
    monkeypatch.setenv("OTTERMQ_WEB_HEADER_TIMEOUT", "500ms")
    monkeypatch.setenv("OTTERMQ_WEB_IDLE_TIMEOUT", "1m")
    settings = load_settings(_env_file=None)
    assert (settings.web_header_timeout, settings.web_idle_timeout) == (0.5, 60)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OTTERMQ_WEB_HEADER_TIMEOUT", "0"),
        ("OTTERMQ_WEB_IDLE_TIMEOUT", "soon"),
        ("OTTERMQ_WEB_MAX_CONNECTIONS", "0"),
        ("OTTERMQ_WEB_MAX_CONNECTIONS_PER_ADDRESS", "-1"),
    ],
)
def test_bad_web_limits_stop_startup(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit, match=name):
        load_settings(_env_file=None)


# -- archive symlinks -----------------------------------------------------------------------------------
def test_links_out_of_the_archive_are_not_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "archive", tmp_path / "secret"
    hour = root / "2024-01-02" / "03"
    hour.mkdir(parents=True)
    outside.mkdir()
    (outside / "x.jsonl").write_text("{}\n{}\n")
    (hour / "deadletters-1.jsonl").write_text("{}\n")
    (hour / "leak.jsonl").symlink_to(outside / "x.jsonl")
    (hour / "alias.jsonl").symlink_to(hour / "deadletters-1.jsonl")  # within: followed
    (root / "2024-01-02" / "04").symlink_to(outside, target_is_directory=True)
    assert inside(root, hour / "deadletters-1.jsonl") and inside(root, hour / "alias.jsonl")
    assert not inside(root, hour / "leak.jsonl") and not inside(root, root / "2024-01-02" / "04")
    assert not inside(root, hour / "missing.jsonl")
    listed = list_archive(root)
    assert [h["hour"] for h in listed] == ["2024-01-02/03"]
    assert sorted(f["name"] for f in listed[0]["files"]) == ["alias.jsonl", "deadletters-1.jsonl"]


def test_the_archive_folder_itself_may_be_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "2024-01-02" / "03").mkdir(parents=True)
    (real / "2024-01-02" / "03" / "a.jsonl").write_text("{}\n")
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    assert [f["name"] for f in list_archive(link)[0]["files"]] == ["a.jsonl"]
