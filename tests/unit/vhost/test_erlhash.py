"""Erlang's phash2 and the consistent-hash plugin's jump hash (``vhost/erlhash.py``). Every expected
value was read back from the RabbitMQ 3.10.8 node (OTP 25) with ``rabbitmqctl eval``:
``erlang:phash2(Term)`` for the terms, and for the buckets the plugin's own recursion
``JF(-1, 0, N, rand:seed_s(exs1024, {K, K, K}))`` with ``trunc((B + 1) / R)`` per draw."""

from __future__ import annotations

import struct

import pytest
from ottermq.vhost.erlhash import (
    PHASH2_UNDEFINED,
    atom_hash,
    jump_consistent_hash,
    phash2_binary,
    phash2_field,
)


def S(data: bytes) -> bytes:
    return b"S" + struct.pack(">I", len(data)) + data


def F(*entries: tuple[bytes, bytes]) -> bytes:
    body = b"".join(bytes([len(key)]) + key + value for key, value in entries)
    return b"F" + struct.pack(">I", len(body)) + body


def A(*items: bytes) -> bytes:
    body = b"".join(items)
    return b"A" + struct.pack(">I", len(body)) + body


def I(n: int) -> bytes:  # noqa: E743
    return b"I" + struct.pack(">i", n)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 13708901),
        (b"a", 112802447),
        (b"abcd", 132321803),
        (b"abcde", 101564595),
        (b"abcdefgh", 72227102),
        (b"abcdefghi", 74573224),
        (b"abcdefghijk", 96993671),
        (b"abcdefghijkl", 15432855),  # one whole 12-byte block
        (b"abcdefghijklm", 11441572),
        (bytes(range(256)), 3064723),
        ("é€😀".encode(), 62667937),
        (b"abc", 98228475),
    ],
)
def test_phash2_of_binaries(data: bytes, expected: int) -> None:
    assert phash2_binary(data) == expected


def test_phash2_of_undefined_and_atom_hashes() -> None:
    assert PHASH2_UNDEFINED == 45914356  # what a message without the header or property hashes to
    assert atom_hash("undefined") & (2**27 - 1) == PHASH2_UNDEFINED


@pytest.mark.parametrize(
    ("term", "raw", "expected"),
    [
        ("{longstr,<<>>}", S(b""), 116351706),
        ('{longstr,<<"abc">>}', S(b"abc"), 101716503),
        ("{longstr,<<36 bytes>>}", S(b"abcdefghijklmnopqrstuvwxyz0123456789"), 91749609),
        ("{binary,<<0,1,2,255>>}", b"x" + struct.pack(">I", 4) + b"\x00\x01\x02\xff", 56148992),
        ("{byte,-5}", b"b" + struct.pack(">b", -5), 100886737),
        ("{unsignedbyte,200}", b"B\xc8", 88973546),
        ("{short,-300}", b"s" + struct.pack(">h", -300), 38839696),
        ("{unsignedshort,65535}", b"u\xff\xff", 74347635),
        ("{signedint,-2147483648}", I(-(2**31)), 18235318),
        ("{signedint,134217727}", I(2**27 - 1), 17240753),  # the last small one hashed in two rounds
        ("{signedint,134217728}", I(2**27), 127254635),
        ("{signedint,-134217728}", I(-(2**27)), 65405468),
        ("{signedint,-134217729}", I(-(2**27) - 1), 11977661),
        ("{unsignedint,4294967295}", b"i" + struct.pack(">I", 2**32 - 1), 24982162),
        ("{long,-2^63}", b"l" + struct.pack(">q", -(2**63)), 112631110),
        ("{long,2^63-1}", b"l" + struct.pack(">q", 2**63 - 1), 120433834),
        ("{long,2^59} ('L')", b"L" + struct.pack(">q", 2**59), 50235308),  # a bignum in Erlang
        ("{timestamp,2^64-1}", b"T" + struct.pack(">Q", 2**64 - 1), 132064098),
        ("{timestamp,1700000000}", b"T" + struct.pack(">Q", 1700000000), 59280699),
        ("{double,1.5}", b"d" + struct.pack(">d", 1.5), 115320697),
        ("{double,-0.0}", b"d" + struct.pack(">d", -0.0), 28702447),  # as 0.0
        ("{double,0.0}", b"d" + struct.pack(">d", 0.0), 28702447),
        ("{double,1.0e300}", b"d" + struct.pack(">d", 1e300), 39779000),
        ("{float,0.1}", b"f" + struct.pack(">f", 0.1), 73266083),  # the 32-bit value as a double
        ("{bool,true}", b"t\x01", 32030443),
        ("{bool,false}", b"t\x00", 54145719),
        ("{decimal,{2,12345}}", b"D\x02" + struct.pack(">I", 12345), 108016153),
        ("{void,undefined}", b"V", 27077197),
        ("{array,[]}", A(), 86211673),
        ("{table,[]}", F(), 80606520),
        ("nested array", A(S(b"a"), I(1), A(b"t\x01")), 12933045),
        ("table, nested, key twice", F((b"k", S(b"v")), (b"n", F((b"x", b"V"))), (b"k", I(2))), 60044480),
        ("{table,[{<<>>,array,[]}]}", F((b"", A())), 107525661),
    ],
)
def test_phash2_of_header_values(term: str, raw: bytes, expected: int) -> None:
    assert phash2_field(raw, 0, len(raw)) == expected
    padded = b"??" + raw + b"??"  # a value inside a larger buffer
    assert phash2_field(padded, 2, 2 + len(raw)) == expected


def test_phash2_of_deep_nesting_needs_no_recursion() -> None:
    raw = b"V"
    for _ in range(5000):
        raw = A(raw)
    assert 0 <= phash2_field(raw, 0, len(raw)) < 2**27


@pytest.mark.parametrize(
    "raw",
    [
        b"S\x00\x00\x00\x05abc",  # longer than what is there
        b"Z",  # no such type
        b"I\x00\x01",  # truncated integer
        A(b"S\x00\x00\x00\x09abc"),  # an element past its array's end
        b"F\x00\x00\x00\x02\x05k",  # a key past its table's end
        b"",
    ],
)
def test_malformed_values_raise_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        phash2_field(raw, 0, len(raw))


def test_a_value_may_not_run_past_end() -> None:
    raw = I(5) + b"rest"
    with pytest.raises(ValueError):
        phash2_field(raw, 0, 3)


BUCKETS = [2, 3, 4, 5, 10, 100, 100000, 12345678901234, 10**40]
JUMPS = {
    0: [0, 0, 3, 4, 4, 47, 64444, 9767685188858, 9155957330838462889534668634316334956544],
    1: [0, 2, 3, 3, 3, 29, 856, 1363674348224, 7660386643154102584455269024971035246592],
    12345: [0, 0, 0, 0, 0, 61, 82620, 7549691880932, 7461000798738654522598794672808178745344],
    98228475: [1, 1, 1, 4, 5, 88, 90791, 8176952747916, 9488369802603075167030552059853471219712],
    134217727: [0, 2, 2, 2, 6, 74, 46231, 12073372216629, 2103950856800367922090495493139282788352],
}


@pytest.mark.parametrize("key", sorted(JUMPS))
def test_jump_consistent_hash_matches_the_plugin(key: int) -> None:
    assert [jump_consistent_hash(key, n) for n in BUCKETS] == JUMPS[key]
    assert jump_consistent_hash(key, 1) == 0


def test_jump_consistent_hash_is_consistent_and_spread() -> None:
    """Adding a bucket moves about 1/(n+1) of the keys, all of them to the new bucket."""
    keys = range(0, 2**27, 2**27 // 5000)
    before = [jump_consistent_hash(k, 10) for k in keys]
    after = [jump_consistent_hash(k, 11) for k in keys]
    moved = [b for a, b in zip(before, after, strict=True) if a != b]
    assert set(moved) <= {10}
    assert 0.06 < len(moved) / len(before) < 0.12
    counts = [before.count(b) for b in range(10)]
    assert all(abs(c - len(before) / 10) < len(before) / 10 * 0.15 for c in counts)
