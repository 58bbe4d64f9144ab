"""Erlang terms printed as RabbitMQ prints them, for reply texts that must match byte for byte.

RabbitMQ builds its error texts with ``io_lib:format`` (``~p``, ``~tp``) and sends the resulting
characters as octets. This module owns that formatting for every reply text ottermq copies.

Rules:

* Terms are Python values: :class:`Atom` (printed bare when Erlang would, else quoted), ``bool``
  (``true``/``false``), ``None`` (``undefined``), ``int``, ``float`` (Erlang's shortest round-trip
  text: ``1.0e20``, ``0.1``), ``bytes``/``bytearray``/``memoryview`` and ``str`` (binaries; a
  ``str`` is its UTF-8 octets), :class:`Charlist` (an Erlang string, a list of character codes),
  ``tuple`` and ``list``.
* :func:`format_term` is ``~p`` on one line; :func:`pretty_term` is ``~p`` with io_lib_pretty's
  line breaking (80 columns). Both return Erlang's *characters*: with ``~p`` (latin1) every octet of
  a binary or string is one character (code point < 256); with ``~tp`` (``unicode=True``) a binary
  that is valid UTF-8 shows its decoded characters.
* A binary or string is printed as text (``<<"ab">>``, ``"ab"``) when every character is printable
  Latin-1 (32-126, 160-255, ``\\b \\t \\n \\v \\f \\r \\e``), with ``"``, ``\\`` and those control
  characters escaped; otherwise as its codes (``<<1,2>>``, ``[226,130,172]``). ``~tp`` accepts the
  same characters (RabbitMQ 3.10 prints ``<<"😀">>`` as ``<<240,159,152,128>>``).
* :func:`to_wire` turns Erlang's characters into the reply text: in latin1 mode the characters
  are the octets RabbitMQ sends, so they are decoded as UTF-8 (an octet that is not part of valid
  UTF-8 stays its Latin-1 character: a Python ``str`` cannot carry it raw); in unicode mode the
  characters are sent as UTF-8 already.
* Not covered: maps, pids, refs, funs, improper lists, depth/char limits (``~P``), ``~w``.
"""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = [
    "Atom",
    "Charlist",
    "binary_text",
    "float_text",
    "format_term",
    "indentation",
    "pretty_term",
    "to_wire",
]


class Atom(str):
    """An Erlang atom: ``Atom("no_integer")`` prints ``no_integer``, ``Atom("a b")`` ``'a b'``."""

    __slots__ = ()


class Charlist(str):
    """An Erlang string (a list of character codes): ``Charlist(".5")`` prints ``".5"``."""

    __slots__ = ()


_PRINTABLE = frozenset([*range(32, 127), *range(160, 256), 8, 9, 10, 11, 12, 13, 27])
_ESCAPES = {
    0x22: '\\"',
    0x5C: "\\\\",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
    0x08: "\\b",
    0x0C: "\\f",
    0x1B: "\\e",
}
_STRING_ESCAPES = str.maketrans({chr(code): text for code, text in _ESCAPES.items()})
_ATOM_ESCAPES = str.maketrans(
    {"'": "\\'", **{chr(code): text for code, text in _ESCAPES.items() if code != 0x22}}
)
_BARE_ATOM = re.compile(r"[a-zß-öø-ÿ][a-zA-Z0-9_@À-ÖØ-öø-ÿ]*\Z")
_RESERVED = frozenset(
    "after and andalso band begin bnot bor bsl bsr bxor case catch cond div end fun if let not of "
    "or orelse receive rem try when xor".split()
)
# octets that are not part of valid UTF-8 come back from surrogateescape as U+DC80..U+DCFF
_ESCAPED_OCTETS = {0xDC00 + octet: octet for octet in range(0x80, 0x100)}


def _printable(text: str) -> bool:
    return all(ord(ch) in _PRINTABLE for ch in text)


def _quote(text: str) -> str:
    return '"' + text.translate(_STRING_ESCAPES) + '"'


def _atom(name: str) -> str:
    if _BARE_ATOM.match(name) and name not in _RESERVED:
        return name
    return "'" + name.translate(_ATOM_ESCAPES) + "'"


def _binary_chars(data: bytes, unicode: bool) -> str:
    if unicode:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return data.decode("latin-1")


def float_text(value: float) -> str:
    """Erlang's shortest round-trip text of a float (``1.0e20``, ``0.1``, ``1.0e-7``, ``-0.0``)."""
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0.0"
    if value != value or value in (float("inf"), float("-inf")):
        return repr(value)
    sign, digits_t, exponent = Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digits_t))
    assert isinstance(exponent, int)
    stripped = digits.rstrip("0")
    place = exponent + len(digits) - len(stripped)
    digits = stripped or "0"
    length = len(digits)
    exp = place + length - 1
    exp_text = str(exp)
    exp_cost = len(exp_text) + 2
    if place < 0:
        if exp >= 0:
            text = digits[: length + place] + "." + digits[length + place :]
        elif 2 - place - length <= exp_cost:
            text = "0." + "0" * (-place - length) + digits
        else:
            text = _float_exp(exp_text, digits)
    else:
        dot = 1 if length == 1 else 0
        if exp_cost + dot >= place + 2 and abs(value) < float(1 << 53):
            text = digits + "0" * place + ".0"
        else:
            text = _float_exp(exp_text, digits)
    return ("-" if sign else "") + text


def _float_exp(exp_text: str, digits: str) -> str:
    return digits[0] + "." + (digits[1:] or "0") + "e" + exp_text


def format_term(term: object, *, unicode: bool = False) -> str:
    """``~p`` (``~tp`` with ``unicode``) of a term on one line, as Erlang's characters.

    Raises:
        TypeError: ``term`` is not one of the Python forms listed in the module docstring.
    """
    if isinstance(term, Atom):
        return _atom(term)
    if isinstance(term, Charlist):
        return _quote(term) if _printable(term) else "[" + ",".join(str(ord(ch)) for ch in term) + "]"
    if isinstance(term, bool):
        return "true" if term else "false"
    if isinstance(term, int):
        return str(term)
    if isinstance(term, float):
        return float_text(term)
    if isinstance(term, str | bytes | bytearray | memoryview):
        data = term.encode("utf-8", "surrogateescape") if isinstance(term, str) else bytes(term)
        chars = _binary_chars(data, unicode)
        if chars and _printable(chars):
            return "<<" + _quote(chars) + ">>"
        return "<<" + ",".join(map(str, data)) + ">>"
    if term is None:
        return "undefined"
    if isinstance(term, tuple):
        return "{" + ",".join(format_term(e, unicode=unicode) for e in term) + "}"
    if isinstance(term, list):
        return "[" + ",".join(format_term(e, unicode=unicode) for e in term) + "]"
    raise TypeError(f"not an Erlang term: {term!r}")


def to_wire(chars: str, *, unicode: bool = False) -> str:
    """The reply text RabbitMQ sends for Erlang's output characters ``chars``.

    In latin1 mode each character is an octet (``list_to_binary``): the octets are decoded as UTF-8,
    keeping any octet that is not valid UTF-8 as its Latin-1 character. In unicode mode the
    characters are already the text (``unicode:characters_to_binary``).
    """
    if unicode or chars.isascii():
        return chars
    return chars.encode("latin-1").decode("utf-8", "surrogateescape").translate(_ESCAPED_OCTETS)


def binary_text(data: str | bytes | bytearray | memoryview, *, unicode: bool = False) -> str:
    """``~p`` (``~tp``) of one binary as reply text: ``<<"abc">>``, ``<<0,1>>``, ``<<>>``."""
    return to_wire(format_term(data, unicode=unicode), unicode=unicode)


def indentation(text: str, column: int = 0) -> int:
    """``io_lib_format:indentation/2``: the column after printing ``text`` from ``column``."""
    for ch in text:
        if ch == "\n":
            column = 0
        elif ch == "\t":
            column = (column + 8) // 8 * 8
        else:
            column += 1
    return column


# --- ~p line breaking: a port of the subset of io_lib_pretty:print(Term, Col, 80, -1) ------------
# Intermediate form: (kind, payload, length). Atomic items carry their text; lists and tuples
# carry their element items; a tuple whose first element is an atom is "tagged" (its elements
# line up after the tag); a binary that is not printable text carries its octets' numbers and breaks
# between them (io_lib_pretty's pp_binary), a printable one never breaks. No depth or character limit.


class _NoGood(Exception):
    """io_lib_pretty's ``throw(no_good)``."""


_Item = tuple[int, object, int]
_ATOMIC, _LIST, _TUPLE, _TAGGED, _BINARY = 0, 1, 2, 3, 4
_LL = 80


def _intermediate(term: object) -> _Item:
    if isinstance(term, Charlist) and not _printable(term):
        term = [ord(ch) for ch in term]
    if isinstance(term, list | tuple) and term:
        items = [_intermediate(e) for e in term]
        length = 1 + sum(item[2] + 1 for item in items)
        if isinstance(term, list):
            return _LIST, items, length
        return (_TAGGED if isinstance(term[0], Atom) else _TUPLE), items, length
    text = format_term(term)
    if text.startswith("<<") and text[2:3].isdigit():  # a binary shown as its octets: <<1,2>>
        return _BINARY, text[2:-2].split(","), len(text)
    return _ATOMIC, text, len(text)


def _write(item: _Item) -> str:
    kind, payload, _ = item
    if kind == _ATOMIC:
        return payload  # type: ignore[return-value]
    if kind == _BINARY:
        return "<<" + ",".join(payload) + ">>"  # type: ignore[arg-type]
    inner = ",".join(_write(e) for e in payload)  # type: ignore[attr-defined]
    return f"[{inner}]" if kind == _LIST else f"{{{inner}}}"


def _fits(item: _Item, col: int, m: int, ld: int, w: int) -> bool:
    return item[2] < _LL - col - ld and item[2] + w + ld <= m


def _tail_fits(item: _Item, col: int, m: int, ld1: int, w: int) -> bool:
    if item[0] != _ATOMIC:
        return False
    elen = 1 + item[2]
    if ld1 == 0:
        return elen + 1 < _LL - col and w + elen + 1 <= m
    return elen < _LL - col - ld1 and w + elen + ld1 <= m


def pretty_term(term: object, column: int = 1) -> str:
    """``~p`` of a term printed from ``column`` (1-based), broken over lines as io_lib_pretty does.

    Raises:
        TypeError: ``term`` is not one of the Python forms listed in the module docstring.
    """
    item = _intermediate(term)
    if item[0] == _ATOMIC or item[2] < _LL - column:
        return _write(item)
    m = item[2]
    tind = 1
    for attempt in (-1, 4):
        try:
            tind = _cind(item, column, m, attempt, 0, 0)
            break
        except _NoGood:
            pass
    return _pp(item, column, m, tind, column - 1, 0, 0)


def _pp(item: _Item, col: int, m: int, tind: int, ind: int, ld: int, w: int) -> str:
    if _fits(item, col, m, ld, w):
        return _write(item)
    kind, payload = item[0], item[1]
    if kind == _LIST:
        return "[" + _pp_list(payload, col + 1, m, tind, ind + 1, ld, w + 1) + "]"  # type: ignore[arg-type]
    if kind == _TUPLE:
        return "{" + _pp_list(payload, col + 1, m, tind, ind + 1, ld, w + 1) + "}"  # type: ignore[arg-type]
    if kind == _TAGGED:
        items: list[_Item] = payload  # type: ignore[assignment]
        tag, rest = items[0], items[1:]
        if not rest:
            return "{" + _write(tag) + "}"
        tlen = tag[2]
        tag_ind = tlen + 2
        tcol = col + tag_ind
        if 0 < tind < tag_ind:
            body = _pp_tail(rest, col + tind, tcol, m, tind, ind + tind, ld, w + 1 + tlen)
        else:
            body = "," + _pp_list(rest, tcol, m, tind, ind + tag_ind, ld, w + 2 + tlen)
        return "{" + _write(tag) + body + "}"
    if kind == _BINARY:
        return _pp_binary(payload, col + 2, m, ind + 2, ld, w)  # type: ignore[arg-type]
    return payload  # type: ignore[return-value]


def _pp_binary(octets: list[str], col: int, m: int, ind: int, ld: int, w: int) -> str:
    """io_lib_pretty's ``pp_binary``: as many octets per line as fit in ``n`` columns."""
    n0 = max(8, min(_LL - col, m - 4 - w) - ld)
    n = n0
    out = []
    last = len(octets) - 1
    for i, text in enumerate(octets):
        if i < last:
            width = len(text) + 1
            if n - width < 0:
                out.append("\n" + " " * ind + text + ",")
                n = n0 - width
            else:
                out.append(text + ",")
                n -= width
        elif len(text) > n:
            out.append("\n" + " " * ind + text)
        else:
            out.append(text)
    return "<<" + "".join(out) + ">>"


def _pp_list(items: list[_Item], col0: int, m: int, tind: int, ind: int, ld: int, w: int) -> str:
    first, rest = items[0], items[1:]
    text, width = _pp_element(first, col0, m, tind, ind, 0 if rest else ld + 1, w)
    return text + _pp_tail(rest, col0, col0 + width, m, tind, ind, ld, w + width)


def _pp_tail(items: list[_Item], col0: int, col: int, m: int, tind: int, ind: int, ld: int, w: int) -> str:
    out = []
    last = len(items) - 1
    for i, item in enumerate(items):
        ld1 = ld + 1 if i == last else 0
        if _tail_fits(item, col, m, ld1, w):
            out.append("," + _write(item))
            col += 1 + item[2]
            w += 1 + item[2]
        else:
            text, width = _pp_element(item, col0, m, tind, ind, ld1, 0)
            out.append(",\n" + " " * ind + text)
            col, w = col0 + width, width
    return "".join(out)


def _pp_element(item: _Item, col: int, m: int, tind: int, ind: int, ld: int, w: int) -> tuple[str, int]:
    if item[0] == _ATOMIC and _fits(item, col, m, ld, w):
        return _write(item), item[2]
    return _pp(item, col, m, tind, ind, ld, w), _LL


def _cind(item: _Item, col: int, m: int, ind: int, ld: int, w: int) -> int:
    if _fits(item, col, m, ld, w):
        return ind
    kind, payload = item[0], item[1]
    if kind in (_LIST, _TUPLE):
        return _cind_list(payload, col + 1, m, ind, ld, w + 1)  # type: ignore[arg-type]
    if kind == _TAGGED:
        items: list[_Item] = payload  # type: ignore[assignment]
        if len(items) == 1:
            return ind
        tlen = items[0][2]
        tag_ind = tlen + 2
        tcol = col + tag_ind
        if 0 < ind < tag_ind:
            col1 = col + ind
            if m + col1 <= _LL or col1 <= _LL // 2:
                return _cind_tail(items[1:], col1, tcol, m, ind, ld, w + 1 + tlen)
            raise _NoGood
        if m + tcol < _LL or tcol < _LL // 2:
            return _cind_list(items[1:], tcol, m, ind, ld, w + 2 + tlen)
        raise _NoGood
    return ind


def _cind_list(items: list[_Item], col0: int, m: int, ind: int, ld: int, w: int) -> int:
    rest = items[1:]
    width = _cind_element(items[0], col0, m, ind, 0 if rest else ld + 1, w)
    return _cind_tail(rest, col0, col0 + width, m, ind, ld, w + width)


def _cind_tail(items: list[_Item], col0: int, col: int, m: int, ind: int, ld: int, w: int) -> int:
    last = len(items) - 1
    for i, item in enumerate(items):
        ld1 = ld + 1 if i == last else 0
        if _tail_fits(item, col, m, ld1, w):
            col += 1 + item[2]
            w += 1 + item[2]
        else:
            width = _cind_element(item, col0, m, ind, ld1, 0)
            col, w = col0 + width, width
    return ind


def _cind_element(item: _Item, col: int, m: int, ind: int, ld: int, w: int) -> int:
    if item[0] == _ATOMIC and _fits(item, col, m, ld, w):
        return item[2]
    _cind(item, col, m, ind, ld, w)
    return _LL
