"""SQL text as tokens, so that a statement can be rewritten without touching what is inside a string
literal, a quoted identifier or a comment (``postgres_dialect.translate``).

Rules:
- ``tokenize`` splits the whole text; the tokens' texts joined give it back exactly (``untokenize``).
- Kinds: ``SPACE``; ``COMMENT`` (``-- ...`` to the end of the line, ``/* ... */``); ``STRING``
  (``'...'``, ``''`` inside); ``BLOB`` (``x'...'``); ``QUOTED`` (an identifier: ``"..."`` with ``""``
  inside, or SQLite's ``[...]`` and backquotes); ``PARAM`` (``?``, ``?NNN``, ``:name``, ``@name``,
  ``$name``); ``NUMBER``; ``WORD`` (a keyword or a bare identifier: which one is the reader's
  business); ``OP`` (an operator or punctuation, ``||`` ``<=`` ``::`` ... as one token).
- A string, quoted identifier or block comment left open is refused (``ValueError``), never guessed.
"""

from __future__ import annotations

import re
from typing import NamedTuple

SPACE = "space"
COMMENT = "comment"
STRING = "string"
BLOB = "blob"
QUOTED = "quoted"
PARAM = "param"
NUMBER = "number"
WORD = "word"
OP = "op"

# one alternative per kind, tried in this order at each position (a scanner, matched from the
# current position only: the text is never searched or substituted as a whole)
_SCANNER = re.compile(
    rf"""
    (?P<{SPACE}>\s+)
  | (?P<{COMMENT}>--[^\n]*|/\*.*?\*/)
  | (?P<{BLOB}>[xX]'[^']*')
  | (?P<{STRING}>'(?:[^']|'')*')
  | (?P<{QUOTED}>"(?:[^"]|"")*"|\[[^\]]*\]|`(?:[^`]|``)*`)
  | (?P<{PARAM}>\?\d*|[:@$][^\W\d]\w*)
  | (?P<{NUMBER}>0[xX][0-9a-fA-F]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<{WORD}>[^\W\d]\w*)
  | (?P<{OP}>\|\||<<|>>|<=|>=|==|!=|<>|::|->>|->|[^\s'"`\[])
    """,
    re.VERBOSE | re.DOTALL,
)
_OPENERS = {"'": "string literal", '"': "quoted identifier", "[": "quoted identifier"}
_OPENERS["`"] = _OPENERS['"']


class Token(NamedTuple):
    """One token: its kind (the module's constants) and its text, as written."""

    kind: str
    text: str


def tokenize(sql: str) -> list[Token]:
    """The tokens of ``sql``, in order (see the module rules).

    Raises:
        ValueError: a string literal, quoted identifier or block comment is not closed.
    """
    tokens: list[Token] = []
    pos = 0
    while pos < len(sql):
        if sql.startswith("/*", pos) and "*/" not in sql[pos + 2 :]:
            raise ValueError(f"unterminated comment at offset {pos}: {sql[pos : pos + 20]!r}")
        match = _SCANNER.match(sql, pos)
        if match is None or match.lastgroup is None:
            what = _OPENERS.get(sql[pos], "text")
            raise ValueError(f"unterminated {what} at offset {pos}: {sql[pos : pos + 20]!r}")
        tokens.append(Token(match.lastgroup, match.group()))
        pos = match.end()
    return tokens


def untokenize(tokens: list[Token]) -> str:
    """The text of ``tokens``."""
    return "".join(token.text for token in tokens)


def significant(tokens: list[Token]) -> list[int]:
    """The indexes of the tokens that are neither space nor comment."""
    return [i for i, token in enumerate(tokens) if token.kind not in (SPACE, COMMENT)]


def identifier(token: Token) -> str | None:
    """The name a ``WORD`` or ``QUOTED`` token stands for (quotes removed), else None."""
    if token.kind == WORD:
        return token.text
    if token.kind == QUOTED:
        quote = token.text[0]
        inner = token.text[1:-1]
        return inner if quote == "[" else inner.replace(quote * 2, quote)
    return None


def keyword(token: Token) -> str:
    """A ``WORD`` token's text in upper case (``""`` for any other token)."""
    return token.text.upper() if token.kind == WORD else ""
