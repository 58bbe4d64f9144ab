"""Micro-benchmark of ``amqp.props.quick_props`` (called on every publish) and the property walks.

``.venv/bin/python benchmarks/props_micro.py`` prints the best of 7 timeit runs, in ns per call,
for realistic property octets: none, delivery-mode only, headers + expiration, all 14 fields.
"""

from __future__ import annotations

import datetime
import timeit

from ottermq.amqp import props
from pamqp import commands

ALL = commands.Basic.Properties(
    content_type="application/json",
    content_encoding="gzip",
    headers={"x-match": "all", "n": 1, "trace": "abc"},
    delivery_mode=2,
    priority=7,
    correlation_id="5f1c0b6e-0d7a-4b8e-9f3e-1a2b3c4d5e6f",
    reply_to="amq.rabbitmq.reply-to",
    expiration="60000",
    message_id="msg-000123",
    timestamp=datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC),
    message_type="order.created",
    user_id="guest",
    app_id="shop",
)
_all = ALL.marshal()
CASES = {
    "none": b"\x00\x00",
    "delivery_mode": commands.Basic.Properties(delivery_mode=2).marshal(),
    "headers+expiration": commands.Basic.Properties(
        headers={"trace": "abc", "n": 1}, expiration="5000"
    ).marshal(),
    "all 14": _all[:1] + bytes([_all[1] | 0x04]) + _all[2:] + b"\x07cluster",
}


def main() -> None:
    """Print ns/call of each walk over each case."""
    funcs = {
        "quick_props": props.quick_props,
        "get_headers": props.get_headers,
        "split_props": props.split_props,
    }
    for fname, func in funcs.items():
        for name, raw in CASES.items():
            func(raw)
            n = 200_000
            best = min(timeit.repeat(lambda f=func, r=raw: f(r), number=n, repeat=7))  # type: ignore[misc]
            print(f"{fname:12} {name:20} {best / n * 1e9:7.0f} ns")


if __name__ == "__main__":
    main()
