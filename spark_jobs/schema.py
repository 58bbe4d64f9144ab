"""The dead-letter archive's record schema, versions 1 and 2 (the contract with the broker's writer).

The broker appends one JSON object per dead letter to
``<archive>/YYYY-MM-DD/HH/deadletters-*.jsonl`` (UTC; a file still being written ends in
``.jsonl.part`` and is never read). Every field is always present; ``null`` where the text below
allows it:

=====================  ================================================================
field                  meaning
=====================  ================================================================
schema                 ``2`` (or ``1``: no ``limit*`` fields); anything else is counted as unsupported
time_ms                epoch milliseconds of the death
reason                 ``expired`` | ``rejected`` | ``maxlen`` | ``delivery_limit``
vhost, queue           where the message died
exchange               the exchange it had been published to (``""`` = default exchange)
routing_keys           its routing keys (publish key plus ``CC``/``BCC``)
dlx, dlx_routing_key   the queue's dead-letter exchange and key, or null
policy                 the policy that set the queue's dead-letter exchange or message TTL, or null
                       (both from its arguments; records written before policies existed lack it)
outcome                ``routed`` (re-published to the DLX) | ``dropped``
drop_reason            null | ``dlx_disabled`` | ``no_dlx`` | ``dlx_missing`` | ``no_route`` | ``cycle``
death_count            the ``x-death`` count for this (queue, reason) after this death
original_expiration    the message's ``expiration`` property (ms, as a string) or null
enqueued_ms            epoch ms at which it entered ``queue``, or null
message_id,            basic properties, or null
correlation_id,
content_type
headers                typed JSON: ``{"key": {"t": TAG, "v": VALUE}}`` (see below), or null
body_size              body length in bytes
body_b64               the body in base64 (possibly cut, see ``body_truncated``), or null
body_truncated         true when ``body_b64`` holds only a prefix of the body
limit                  (schema 2) the limit that killed it: ``message-ttl`` (the queue's TTL),
                       ``expiration`` (the message's own), ``max-length``, ``max-length-bytes``,
                       ``delivery-limit``; null for ``rejected`` (and where none is known)
limit_value            (schema 2) that limit's value in force: ms, messages, bytes or deliveries
limit_source           (schema 2) ``argument``, ``policy``, ``operator-policy`` or ``message``
=====================  ================================================================

Schema-1 lines lack the three ``limit*`` fields and Parquet compacted from them lacks the
columns: both read as null, and the report then falls back to ``reason``.

Typed header values keep their AMQP field type: ``t`` bool; ``b B s u I i l`` integers;
``f d`` floats; ``D`` a decimal string; ``S`` a string; ``T`` epoch seconds; ``F`` an object of
typed values; ``A`` a list of typed values; ``x`` base64; ``V`` null.

Spark reads ``headers`` into a *string* column holding the raw JSON of the object (the JSON
reader keeps the text of an object when the schema says string); :func:`headers_map` parses it
on demand into ``map<string, struct<t: string, v: string>>`` where ``v`` is the value's JSON
text (``"42"``, ``"abc"``, ``"true"``, ``{...}`` for tables).
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

__all__ = [
    "ARCHIVE_SCHEMA",
    "CORRUPT_COLUMN",
    "DROP_REASONS",
    "FIELDS",
    "HEADERS_MAP_TYPE",
    "LIMITS",
    "LIMIT_SOURCES",
    "OUTCOMES",
    "REASONS",
    "SCHEMA_VERSION",
    "SCHEMA_VERSIONS",
    "day_label",
    "headers_map",
    "hour_label",
]

SCHEMA_VERSION: Final = 2
#: The record schemas the jobs read (a schema-1 line is a schema-2 one with null ``limit*`` fields).
SCHEMA_VERSIONS: Final = (1, 2)
LIMITS: Final = ("message-ttl", "expiration", "max-length", "max-length-bytes", "delivery-limit")
LIMIT_SOURCES: Final = ("argument", "policy", "operator-policy", "message")

REASONS: Final = ("expired", "rejected", "maxlen", "delivery_limit")
OUTCOMES: Final = ("routed", "dropped")
DROP_REASONS: Final = ("dlx_disabled", "no_dlx", "dlx_missing", "no_route", "cycle")

HOUR_MS: Final = 3_600_000
DAY_MS: Final = 86_400_000

#: Name of the column the JSON reader fills with lines it cannot parse.
CORRUPT_COLUMN: Final = "_corrupt_record"

ARCHIVE_SCHEMA: Final = StructType(
    [
        StructField("schema", IntegerType()),
        StructField("time_ms", LongType()),
        StructField("reason", StringType()),
        StructField("vhost", StringType()),
        StructField("queue", StringType()),
        StructField("exchange", StringType()),
        StructField("routing_keys", ArrayType(StringType())),
        StructField("dlx", StringType()),
        StructField("dlx_routing_key", StringType()),
        StructField("policy", StringType()),
        StructField("outcome", StringType()),
        StructField("drop_reason", StringType()),
        StructField("death_count", LongType()),
        StructField("original_expiration", StringType()),
        StructField("enqueued_ms", LongType()),
        StructField("message_id", StringType()),
        StructField("correlation_id", StringType()),
        StructField("content_type", StringType()),
        StructField("headers", StringType()),
        StructField("body_size", LongType()),
        StructField("body_b64", StringType()),
        StructField("body_truncated", BooleanType()),
        StructField("limit", StringType()),
        StructField("limit_value", LongType()),
        StructField("limit_source", StringType()),
    ]
)

#: Field names in schema order.
FIELDS: Final = tuple(ARCHIVE_SCHEMA.fieldNames())

#: ``headers`` parsed one level deep: each value's tag and the JSON text of its value.
HEADERS_MAP_TYPE: Final = "map<string, struct<t: string, v: string>>"


def headers_map(column: str | Column = "headers") -> Column:
    """Parse the raw ``headers`` JSON into :data:`HEADERS_MAP_TYPE` (null stays null)."""
    col = F.col(column) if isinstance(column, str) else column
    return F.from_json(col, HEADERS_MAP_TYPE)


def _utc_date(time_ms: Column) -> Column:
    # Epoch arithmetic rather than timestamps, so the session time zone plays no part.
    return F.date_add(F.to_date(F.lit("1970-01-01")), F.floor(time_ms / DAY_MS).cast("int"))


def hour_label(time_ms: Column) -> Column:
    """``YYYY-MM-DDTHH:00Z`` of an epoch-ms column, in UTC whatever the session time zone."""
    hour = F.floor(F.pmod(time_ms, F.lit(DAY_MS)) / HOUR_MS).cast("int")
    return F.concat(day_label(time_ms), F.lit("T"), F.lpad(hour.cast("string"), 2, "0"), F.lit(":00Z"))


def day_label(time_ms: Column) -> Column:
    """``YYYY-MM-DD`` (UTC) of an epoch-ms column."""
    return _utc_date(time_ms).cast("string")
