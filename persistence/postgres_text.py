"""Text as PostgreSQL stores it: its ``text`` cannot hold the NUL character, SQLite's can (a queue name,
a routing key, which the management API's fuzzer sends).

Rules:
- Text is written with NUL as ESC ``"0"`` and ESC as ESC ESC, ESC being U+FFFF (a noncharacter), and
  read back the other way (``escape``, ``unescape``): what the store gives back is what it was given.
- ``params`` escapes an op's params before it runs (the statements whose params hold no text skip
  it, and a message insert only looks at its exchange and routing key: the hot path); the reads
  unescape their rows (``text_out``).
"""

from __future__ import annotations

import re
from typing import Any

from . import schema as s

NUL, ESC = "\x00", "\uffff"
_ESCAPED = re.compile("\uffff(.)", re.S)


def escape(text: str) -> str:
    """``text`` as PostgreSQL stores it (see the module rules)."""
    return text.replace(ESC, ESC + ESC).replace(NUL, ESC + "0") if NUL in text or ESC in text else text


def unescape(text: str) -> str:
    """The text ``escape`` stored."""
    return _ESCAPED.sub(lambda m: NUL if m.group(1) == "0" else m.group(1), text) if ESC in text else text


def text_in(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row with every text escaped."""
    return tuple(escape(v) if type(v) is str else v for v in row)


def text_out(row: Any) -> tuple[Any, ...]:
    """A row read back with every text unescaped."""
    return tuple(unescape(v) if type(v) is str else v for v in row)


def _message_in(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """An INSERT_MESSAGE row (the hot path: only its exchange and routing key are free text; its CC/BCC
    keys are JSON, which escapes NUL itself)."""
    exchange, key = row[1], row[2]
    if NUL in exchange or ESC in exchange or NUL in key or ESC in key:
        return (row[0], escape(exchange), escape(key), *row[3:])
    return row


_NO_TEXT = frozenset(
    {
        s.DELETE_MESSAGE,
        s.MARK_DELIVERED,
        s.DELETE_MESSAGES,
        s.TOUCH_QUEUE,
        s.DELETE_QUEUE,
        s.PUT_MOVE_JOB_IDS,
        s.DELETE_MOVE_JOB,
        s.DELETE_MOVE_JOB_IDS,
    }
)


def params(statement: str, values: tuple[Any, ...]) -> tuple[Any, ...]:
    """An op's params with their text escaped."""
    if statement == s.INSERT_MESSAGE:
        return _message_in(values)
    if statement in _NO_TEXT:
        return values
    return text_in(values)
