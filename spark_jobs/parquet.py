"""Write a report table (rows collected on the driver) as a Parquet file in plain Python.

The report's tables are small (a few to some ten thousand rows) and are collected on the driver
anyway; handing each back to Spark to write it cost one Spark job per table (planning, a task, the
output committer: ~0.15 s each on a warm JVM, more on a cold one, 17 of them per report). This
module writes the same directory layout Spark does (``<name>.parquet/part-00000-<uuid>-c000.parquet``
and ``_SUCCESS``) with one row group, one uncompressed ``PLAIN`` data page per column, definition
and repetition levels in the RLE encoding, and Spark's schema in the footer (the
``org.apache.spark.sql.parquet.row.metadata`` key Spark itself writes), so ``spark.read.parquet``
gives back the same rows and the same types as from a file Spark wrote.

Column types: ``string``, ``bigint``, ``int``, ``double``, ``boolean`` and ``array`` of one of
those (Spark's three-level ``LIST`` layout). Local paths only: other URIs are written by Spark.
"""

from __future__ import annotations

import os
import shutil
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructType,
)

__all__ = ["SUPPORTED_TYPES", "encode_table", "supports", "write_table"]

#: Spark types this writer handles (and arrays of them).
SUPPORTED_TYPES = (StringType, LongType, IntegerType, DoubleType, BooleanType)

# Parquet physical types, repetitions, converted types, encodings (parquet.thrift)
_BOOLEAN, _INT32, _INT64, _DOUBLE, _BYTE_ARRAY = 0, 1, 2, 5, 6
_REQUIRED, _OPTIONAL, _REPEATED = 0, 1, 2
_UTF8, _LIST = 0, 3
_PLAIN, _RLE = 0, 3

# Thrift compact protocol type ids
_T_I32, _T_I64, _T_BINARY, _T_LIST, _T_STRUCT = 5, 6, 8, 9, 12

#: The footer key under which Spark keeps a file's Spark schema (read back in place of the Parquet one).
_SPARK_SCHEMA_KEY = "org.apache.spark.sql.parquet.row.metadata"

Field = tuple[int, int, Any]  # (field id, compact type, value)


def _varint(n: int, out: bytearray) -> None:
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _value(kind: int, value: Any, out: bytearray) -> None:
    if kind in (_T_I32, _T_I64):
        _varint(_zigzag(value), out)
    elif kind == _T_BINARY:
        data = value.encode() if isinstance(value, str) else value
        _varint(len(data), out)
        out += data
    elif kind == _T_STRUCT:
        _struct(value, out)
    elif kind == _T_LIST:
        element, items = value
        if len(items) < 15:
            out.append(len(items) << 4 | element)
        else:
            out.append(0xF0 | element)
            _varint(len(items), out)
        for item in items:
            _value(element, item, out)
    else:  # pragma: no cover - only the types above are written
        raise ValueError(f"thrift type {kind}")


def _struct(fields: Sequence[Field], out: bytearray) -> None:
    """A Thrift struct in the compact protocol (fields in increasing id order, None values left out)."""
    last = 0
    for fid, kind, value in fields:
        if value is None:
            continue
        if 0 < fid - last <= 15:
            out.append((fid - last) << 4 | kind)
        else:
            out.append(kind)
            _varint(_zigzag(fid), out)
        last = fid
        _value(kind, value, out)
    out.append(0)


def _rle(levels: Sequence[int], max_level: int) -> bytes:
    """Levels in the RLE/bit-packing hybrid (RLE runs only), with the v1 page's 4-byte length prefix."""
    width = (max_level.bit_length() + 7) // 8
    out = bytearray()
    i, n = 0, len(levels)
    while i < n:
        j = i
        while j < n and levels[j] == levels[i]:
            j += 1
        _varint((j - i) << 1, out)
        out += levels[i].to_bytes(width, "little")
        i = j
    return struct.pack("<I", len(out)) + bytes(out)


@dataclass(frozen=True)
class _Leaf:
    physical: int
    plain: Callable[[list[Any]], bytes]
    converted: int | None


def _plain_bytes(values: list[Any]) -> bytes:
    out = bytearray()
    for v in values:
        data = v.encode() if isinstance(v, str) else bytes(v)
        out += struct.pack("<I", len(data))
        out += data
    return bytes(out)


def _plain_bools(values: list[Any]) -> bytes:
    out = bytearray((len(values) + 7) // 8)
    for i, v in enumerate(values):
        if v:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def _leaf(data_type: DataType) -> _Leaf:
    if isinstance(data_type, StringType):
        return _Leaf(_BYTE_ARRAY, _plain_bytes, _UTF8)
    if isinstance(data_type, LongType):
        return _Leaf(_INT64, lambda v: struct.pack(f"<{len(v)}q", *v), None)
    if isinstance(data_type, IntegerType):
        return _Leaf(_INT32, lambda v: struct.pack(f"<{len(v)}i", *v), None)
    if isinstance(data_type, DoubleType):
        return _Leaf(_DOUBLE, lambda v: struct.pack(f"<{len(v)}d", *v), None)
    if isinstance(data_type, BooleanType):
        return _Leaf(_BOOLEAN, _plain_bools, None)
    raise TypeError(f"no Parquet writer for {data_type.simpleString()}")


def supports(schema: StructType) -> bool:
    """Whether :func:`write_table` can write a table of ``schema``."""
    for f in schema.fields:
        t = f.dataType.elementType if isinstance(f.dataType, ArrayType) else f.dataType
        if not isinstance(t, SUPPORTED_TYPES):
            return False
    return True


def _repetition(nullable: bool) -> int:
    return _OPTIONAL if nullable else _REQUIRED


def _schema_elements(schema: StructType) -> list[list[Field]]:
    elements: list[list[Field]] = [[(4, _T_BINARY, "spark_schema"), (5, _T_I32, len(schema.fields))]]
    for f in schema.fields:
        if isinstance(f.dataType, ArrayType):
            leaf = _leaf(f.dataType.elementType)
            elements += [
                [
                    (3, _T_I32, _repetition(f.nullable)),
                    (4, _T_BINARY, f.name),
                    (5, _T_I32, 1),
                    (6, _T_I32, _LIST),
                ],
                [(3, _T_I32, _REPEATED), (4, _T_BINARY, "list"), (5, _T_I32, 1)],
                [
                    (1, _T_I32, leaf.physical),
                    (3, _T_I32, _repetition(f.dataType.containsNull)),
                    (4, _T_BINARY, "element"),
                    (6, _T_I32, leaf.converted),
                ],
            ]
        else:
            leaf = _leaf(f.dataType)
            elements.append(
                [
                    (1, _T_I32, leaf.physical),
                    (3, _T_I32, _repetition(f.nullable)),
                    (4, _T_BINARY, f.name),
                    (6, _T_I32, leaf.converted),
                ]
            )
    return elements


def _column(
    values: list[Any], data_type: DataType, nullable: bool
) -> tuple[list[int], list[int], int, int, list[Any], _Leaf, list[str]]:
    """Repetition levels, definition levels, their maxima, the non-null leaf values, the leaf, its path."""
    base = 1 if nullable else 0
    if not isinstance(data_type, ArrayType):
        defs = [0 if v is None else 1 for v in values] if nullable else []
        present = [v for v in values if v is not None]
        if not nullable and len(present) != len(values):
            raise ValueError("null in a non-nullable column")
        return [], defs, 0, base, present, _leaf(data_type), []
    element_nullable = data_type.containsNull
    max_def = base + 1 + (1 if element_nullable else 0)
    reps: list[int] = []
    defs = []
    present = []
    for items in values:
        if items is None:
            if not nullable:
                raise ValueError("null in a non-nullable column")
            reps.append(0)
            defs.append(0)
            continue
        if not items:
            reps.append(0)
            defs.append(base)
            continue
        for j, item in enumerate(items):
            reps.append(0 if j == 0 else 1)
            if item is None:
                if not element_nullable:
                    raise ValueError("null in an array of non-nullable elements")
                defs.append(base + 1)
            else:
                defs.append(max_def)
                present.append(item)
    return reps, defs, 1, max_def, present, _leaf(data_type.elementType), ["list", "element"]


def encode_table(rows: Sequence[Sequence[Any]], schema: StructType) -> bytes:
    """The bytes of one Parquet file holding ``rows`` (values in ``schema``'s order).

    Raises:
        TypeError: a column type this writer does not handle (see :func:`supports`).
        ValueError: a null in a non-nullable column.
    """
    out = bytearray(b"PAR1")
    chunks: list[list[Field]] = []
    total = 0
    for index, f in enumerate(schema.fields):
        reps, defs, max_rep, max_def, present, leaf, sub = _column(
            [row[index] for row in rows], f.dataType, f.nullable
        )
        page = bytearray()
        if max_rep:
            page += _rle(reps, max_rep)
        if max_def:
            page += _rle(defs, max_def)
        page += leaf.plain(present)
        entries = len(defs) if max_def else len(present)
        header = bytearray()
        _struct(
            [
                (1, _T_I32, 0),  # DATA_PAGE
                (2, _T_I32, len(page)),
                (3, _T_I32, len(page)),
                (
                    5,
                    _T_STRUCT,
                    [
                        (1, _T_I32, entries),
                        (2, _T_I32, _PLAIN),
                        (3, _T_I32, _RLE),
                        (4, _T_I32, _RLE),
                    ],
                ),
            ],
            header,
        )
        offset = len(out)
        out += header
        out += page
        size = len(header) + len(page)
        total += size
        meta: list[Field] = [
            (1, _T_I32, leaf.physical),
            (2, _T_LIST, (_T_I32, [_PLAIN, _RLE])),
            (3, _T_LIST, (_T_BINARY, [f.name, *sub])),
            (4, _T_I32, 0),  # UNCOMPRESSED
            (5, _T_I64, entries),
            (6, _T_I64, size),
            (7, _T_I64, size),
            (9, _T_I64, offset),
        ]
        chunks.append([(2, _T_I64, offset), (3, _T_STRUCT, meta)])
    row_groups: list[list[Field]] = []
    if rows:
        first = chunks[0][0][2] if chunks else len(out)
        row_groups.append(
            [
                (1, _T_LIST, (_T_STRUCT, chunks)),
                (2, _T_I64, total),
                (3, _T_I64, len(rows)),
                (5, _T_I64, first),
                (6, _T_I64, total),
            ]
        )
    footer = bytearray()
    _struct(
        [
            (1, _T_I32, 1),
            (2, _T_LIST, (_T_STRUCT, _schema_elements(schema))),
            (3, _T_I64, len(rows)),
            (4, _T_LIST, (_T_STRUCT, row_groups)),
            (
                5,
                _T_LIST,
                (_T_STRUCT, [[(1, _T_BINARY, _SPARK_SCHEMA_KEY), (2, _T_BINARY, schema.json())]]),
            ),
        ],
        footer,
    )
    if not rows:  # no row group: the column chunks written above are not referenced; drop them
        out = bytearray(b"PAR1")
    out += footer
    out += struct.pack("<I", len(footer))
    out += b"PAR1"
    return bytes(out)


def write_table(directory: Path, rows: Sequence[Sequence[Any]], schema: StructType) -> None:
    """Replace ``directory`` with a Spark-style Parquet output of ``rows``: one part file and ``_SUCCESS``.

    Raises:
        TypeError: a column type this writer does not handle (see :func:`supports`).
        ValueError: a null in a non-nullable column.
        OSError: the directory cannot be written.
    """
    data = encode_table(rows, schema)
    staging = directory.with_name(f".{directory.name}.{uuid.uuid4().hex}.tmp")
    staging.mkdir(parents=True)
    try:
        (staging / f"part-00000-{uuid.uuid4()}-c000.parquet").write_bytes(data)
        (staging / "_SUCCESS").write_bytes(b"")
        if directory.is_dir() and not directory.is_symlink():
            shutil.rmtree(directory)
        elif directory.exists() or directory.is_symlink():
            directory.unlink()
        os.replace(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
