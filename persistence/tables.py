"""The durable store's tables, written once: SQLite's DDL, PostgreSQL's DDL and every column list derive
from ``TABLES``.

Rules:
- A ``Table`` is data: its columns in order, each with a logical type (``text``, ``integer``,
  ``blob``) and whether it may be NULL; its key; whether SQLite keeps a rowid; its secondary indexes.
  ``sqlite_schema`` renders it as SQLite's DDL, ``postgres_dialect`` as PostgreSQL's; ``schema``
  builds the statements' column lists from it (``insert``, ``select``), and the PostgreSQL store its
  ``COPY`` of message rows. No other copy of a table or a column list exists.
- The key is the table's ``PRIMARY KEY``, or, for a rowid table with none, its one ``UNIQUE`` key:
  what ``INSERT OR REPLACE`` replaces on (PostgreSQL's ``ON CONFLICT`` target is derived from it).
- A column's order is the order of every write's params and every read's row (``schema``'s row codecs).
- Versions: ``since`` is the store schema version that added a table (or a column to an existing
  table); ``SCHEMA_VERSION`` is the newest. SQLite's ``PRAGMA user_version`` counts these versions
  (``sqlite_schema.MIGRATIONS[v]`` creates what version ``v`` added); PostgreSQL numbers its own
  versions and says which of these each one brought (``postgres_sql.HISTORY``).
- To change the schema: add a table, or a nullable column at the end of a table, with ``since =
  SCHEMA_VERSION + 1``; both databases then create it (``ALTER TABLE ... ADD COLUMN`` for a column)
  at that version, and PostgreSQL's history needs one more entry naming it (a test fails until it
  has one). Never edit what an existing version created: old files migrate to exactly what a new
  one is created with (``tests/unit/persistence/test_schema_history.py`` keeps the DDL every version
  shipped with and checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Type = Literal["text", "integer", "blob"]


@dataclass(frozen=True)
class Column:
    """A column: its name, logical type, whether it may hold NULL, and the version that added it to
    an existing table (0: created with its table)."""

    name: str
    type: Type
    nullable: bool = False
    since: int = 0


@dataclass(frozen=True)
class Index:
    """A secondary (non-unique) index."""

    name: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    """A table of the store (see the module rules).

    Attributes:
        primary_key: the ``PRIMARY KEY`` columns; a single ``integer`` one of a rowid table is
            SQLite's rowid alias.
        unique: a ``UNIQUE`` key (a rowid table whose key is not its rowid).
        rowid: False for SQLite's ``WITHOUT ROWID`` tables.
    """

    name: str
    since: int
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    unique: tuple[str, ...] = ()
    rowid: bool = True
    indexes: tuple[Index, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The column names, in order."""
        return tuple(c.name for c in self.columns)

    @property
    def key(self) -> tuple[str, ...]:
        """What ``INSERT OR REPLACE`` replaces on: the primary key, else the unique key."""
        return self.primary_key or self.unique

    @property
    def rowid_alias(self) -> str | None:
        """The column that is SQLite's rowid (an ``integer`` primary key of one column), if any."""
        if self.rowid and len(self.primary_key) == 1 and self.column(self.primary_key[0]).type == "integer":
            return self.primary_key[0]
        return None

    def column(self, name: str) -> Column:
        """The column called ``name``.

        Raises:
            KeyError: no such column.
        """
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"table {self.name} has no column {name}")

    def columns_at(self, version: int) -> tuple[Column, ...]:
        """The columns the table has at schema ``version``."""
        return tuple(c for c in self.columns if c.since <= version)


def text(name: str, nullable: bool = False, since: int = 0) -> Column:
    return Column(name, "text", nullable, since)


def integer(name: str, nullable: bool = False, since: int = 0) -> Column:
    return Column(name, "integer", nullable, since)


def blob(name: str, nullable: bool = False, since: int = 0) -> Column:
    return Column(name, "blob", nullable, since)


# -- version 1 ------------------------------------------------------------------------------------
VHOSTS = Table(
    "vhosts",
    1,
    (text("name"), text("description"), text("tags")),  # tags: a JSON array
    primary_key=("name",),
    rowid=False,
)
USERS = Table(
    "users",
    1,
    (text("name"), text("password_hash"), text("hashing_algorithm"), text("tags")),  # tags: JSON array
    primary_key=("name",),
    rowid=False,
)
PERMISSIONS = Table(
    "permissions",
    1,
    (text("user"), text("vhost"), text("configure"), text("write"), text("read")),
    primary_key=("user", "vhost"),
    rowid=False,
)
EXCHANGES = Table(
    "exchanges",
    1,
    (
        text("vhost"),
        text("name"),
        text("type"),
        integer("auto_delete"),
        integer("internal"),
        blob("arguments"),  # the AMQP field table, as encoded
    ),
    primary_key=("vhost", "name"),
    rowid=False,
)
QUEUES = Table(
    "queues",
    1,
    (
        integer("id"),  # allocated by the store, never 0
        text("vhost"),
        text("name"),
        integer("auto_delete"),
        blob("arguments"),
        integer("expires_at", nullable=True),  # the x-expires deadline, epoch ms
    ),
    primary_key=("id",),
    unique=("vhost", "name"),
)
BINDINGS = Table(
    "bindings",
    1,
    (
        text("vhost"),
        text("source"),
        text("destination_kind"),  # 'queue' | 'exchange'
        text("destination"),
        text("routing_key"),
        blob("arguments"),
    ),
    primary_key=("vhost", "source", "destination_kind", "destination", "routing_key", "arguments"),
    rowid=False,
    indexes=(Index("bindings_by_destination", ("vhost", "destination_kind", "destination")),),
)
MESSAGES = Table(
    "messages",
    1,
    (
        integer("id"),  # (queue_id << 44) | seq: key, order and handle (schema.queue_range)
        text("exchange"),
        text("routing_key"),
        blob("props"),  # the content header's property octets, as published
        blob("body"),
        integer("enqueued_at"),  # epoch ms
        integer("deadline", nullable=True),  # epoch ms, NULL: never expires
        text("extra_keys", nullable=True),  # a JSON array of CC/BCC keys, NULL: none
        integer("deliveries", nullable=True),  # NULL: never delivered, else the delivery count
    ),
    primary_key=("id",),
)

# -- version 2: policies and operator policies (issue 15) -------------------------------------------
POLICIES = Table(
    "policies",
    2,
    (
        text("vhost"),
        text("name"),
        integer("operator"),  # 1: an operator policy
        text("pattern"),
        text("apply_to"),
        integer("priority"),
        text("definition"),  # a JSON object
    ),
    primary_key=("vhost", "name", "operator"),
    rowid=False,
)

# -- version 3: vhost and user limits (issue 17) ----------------------------------------------------
LIMITS = Table(
    "limits",
    3,
    (
        text("kind"),  # 'vhost' | 'user'
        text("owner"),
        text("name"),  # max-connections, max-queues, max-channels
        integer("value"),
    ),
    primary_key=("kind", "owner", "name"),
    rowid=False,
)

# -- version 4: delayed messages and persistent deduplication caches (issue 19) ---------------------
DELAYED = Table(
    "delayed",
    4,
    (
        integer("id"),  # assigned by the store: publish order
        text("vhost"),
        text("exchange"),
        integer("due"),  # epoch ms
        integer("delay"),  # ms, as published
        text("routing_key"),
        blob("props"),
        blob("body"),
        text("extra_keys", nullable=True),  # a JSON array of CC/BCC keys, NULL: none
    ),
    primary_key=("id",),
    indexes=(Index("delayed_by_exchange", ("vhost", "exchange")),),
)
DEDUP = Table(
    "dedup",
    4,
    (
        text("vhost"),
        text("kind"),  # 'exchange' | 'queue'
        text("owner"),
        blob("key"),  # the header value with its type tag
        integer("expires_at", nullable=True),  # epoch ms, NULL: until evicted
    ),
    unique=("vhost", "kind", "owner", "key"),  # rowid order: the order the keys were remembered
)

# -- version 5: dead-letter move jobs, until then a JSON file rewritten whole (issue 38) -------------
# A job's ids are a row of their own, written once: the progress updates rewrite only the small row.
MOVE_JOBS = Table(
    "move_jobs",
    5,
    (
        integer("id"),
        text("vhost"),
        text("queue"),
        text("spec"),  # JSON: the selection without ids, the target, the options
        text("state"),
        integer("selected"),
        integer("moved"),
        integer("unroutable"),
        integer("skipped"),
        integer("refused"),
        text("error", nullable=True),
        integer("started"),  # epoch ms
        integer("finished", nullable=True),  # epoch ms, NULL while running or paused
    ),
    primary_key=("id",),
)
MOVE_JOB_IDS = Table(
    "move_job_ids",
    5,
    (integer("job"), blob("ids")),  # ids: 8 bytes per id, big-endian, sorted
    primary_key=("job",),
)

# -- version 6: runtime parameters of components, shovels first (issue 42) ---------------------------
PARAMETERS = Table(
    "parameters",
    6,
    (
        text("vhost"),
        text("component"),  # 'shovel'
        text("name"),
        text("value"),  # the JSON value, as given
    ),
    primary_key=("vhost", "component", "name"),
    rowid=False,
)

TABLES: tuple[Table, ...] = (
    VHOSTS,
    USERS,
    PERMISSIONS,
    EXCHANGES,
    QUEUES,
    BINDINGS,
    MESSAGES,
    POLICIES,
    LIMITS,
    DELAYED,
    DEDUP,
    MOVE_JOBS,
    MOVE_JOB_IDS,
    PARAMETERS,
)
BY_NAME: dict[str, Table] = {t.name: t for t in TABLES}
SCHEMA_VERSION = max(max(t.since, *(c.since for c in t.columns)) for t in TABLES)


def changes(first: int, last: int) -> tuple[list[Table], list[tuple[Table, Column]]]:
    """What versions ``first``..``last`` added: the tables created then (with their columns as of
    ``last``) and the columns added then to tables that existed before ``first``."""
    created = [t for t in TABLES if first <= t.since <= last]
    added = [(t, c) for t in TABLES if t.since < first for c in t.columns if first <= c.since <= last]
    return created, added


def check(tables: tuple[Table, ...] = TABLES) -> None:
    """Refuse a table the rules do not allow (run at import: a mistake fails every test at once).

    Raises:
        ValueError: an unknown key or index column, a key column that may be NULL, a column added
            later that is not nullable, in a key, or not after the table's first columns.
    """
    for t in tables:
        names = set(t.names)
        for cols in (t.primary_key, t.unique, *(i.columns for i in t.indexes)):
            if not set(cols) <= names:
                raise ValueError(f"table {t.name}: {cols} names a column it does not have")
        if not t.key:
            raise ValueError(f"table {t.name} has no key")
        if not t.rowid and not t.primary_key:
            raise ValueError(f"table {t.name}: a WITHOUT ROWID table needs a primary key")
        for c in t.columns:
            if c.name in t.primary_key + t.unique and c.nullable:
                raise ValueError(f"table {t.name}: key column {c.name} may not be NULL")
        later = [c for c in t.columns if c.since > t.since]
        if any(not c.nullable or c.name in t.primary_key + t.unique for c in later):
            raise ValueError(f"table {t.name}: a column added later must be nullable and not a key")
        if [c.since for c in t.columns] != sorted(c.since for c in t.columns):
            raise ValueError(f"table {t.name}: columns added later go after the others, in version order")


check()
