"""ottermq.persistence: the ``Store`` contract, ``SQLiteStore`` (durable) and ``MemoryStore``."""

from __future__ import annotations

from .memory import MemoryStore
from .sqlite import SQLiteStore
from .store import (
    BindingRecord,
    CommitCallback,
    Definitions,
    ExchangeRecord,
    LimitRecord,
    MessageRecord,
    PermissionRecord,
    PolicyRecord,
    QueueRecord,
    Store,
    StoreError,
    UserRecord,
    VHostRecord,
)

__all__ = [
    "BindingRecord",
    "CommitCallback",
    "Definitions",
    "ExchangeRecord",
    "MemoryStore",
    "MessageRecord",
    "PermissionRecord",
    "LimitRecord",
    "PolicyRecord",
    "QueueRecord",
    "SQLiteStore",
    "Store",
    "StoreError",
    "UserRecord",
    "VHostRecord",
]
