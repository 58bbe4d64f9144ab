"""Headers-exchange matching with RabbitMQ 3.10's rules.

Rules (checked against RabbitMQ 3.10.8, see ``tests/unit/vhost/test_headers.py``):
- ``x-match`` is ``all`` (the default when absent), ``any``, ``all-with-x`` or ``any-with-x``. Any
  other value, or a value that is not a longstr, is refused at bind time with 406.
- The ``x-match`` key itself is never matched. Other binding keys starting with ``x-`` are ignored
  unless the mode is ``all-with-x`` / ``any-with-x``; message headers only matter through the
  binding's keys.
- A binding value of AMQP void (``None``) matches on the header's presence, whatever its value.
- ``all``: every considered binding key must be present with an equal value, so a binding with no
  considered keys matches every message, with or without headers. ``any``: at least one must be;
  a binding with no considered keys matches nothing.
- Values compare with Erlang ``==`` (``values.erl_equal``): the AMQP integer widths do not
  matter and ``1`` equals ``1.0`` and the timestamp 1, but ``1`` never equals ``"1"`` or ``true``,
  ``"1"`` equals the byte array ``b"1"``, and decimals only equal decimals of the same scale.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ottermq.amqp.errors import PreconditionFailed

from .values import amqp_type_name, erl_equal, erl_term, longstr_text

__all__ = ["X_MATCH_MODES", "HeadersMatcher", "headers_match", "validate_binding_args"]

X_MATCH_MODES = ("all", "any", "all-with-x", "any-with-x")


def validate_binding_args(args: Mapping[str, Any] | None) -> None:
    """Check a headers-exchange binding's ``x-match`` as RabbitMQ does at ``queue.bind``.

    Raises:
        PreconditionFailed: ``Invalid x-match field value <<"foo">>; expected all, any,
            all-with-x, or any-with-x`` or ``Invalid x-match field type signedint (value 1);
            expected longstr``.
    """
    if not args or "x-match" not in args:
        return
    value = args["x-match"]
    type_name = amqp_type_name(value)
    if type_name == "longstr":
        if longstr_text(value) not in X_MATCH_MODES:
            raise PreconditionFailed(
                f"Invalid x-match field value {erl_term(value, unicode=True)}; "
                "expected all, any, all-with-x, or any-with-x"
            )
        return
    raise PreconditionFailed(
        f"Invalid x-match field type {type_name} (value {erl_term(value, unicode=True)}); expected longstr"
    )


class HeadersMatcher:
    """One binding's arguments, preprocessed for repeated matching."""

    __slots__ = ("match_all", "pairs")

    def __init__(self, binding_args: Mapping[str, Any] | None) -> None:
        args = binding_args or {}
        mode = args.get("x-match")
        # RabbitMQ treats an unknown or non-string x-match as "all" (legacy, before validation)
        with_x = mode in ("all-with-x", "any-with-x")
        self.match_all: bool = mode not in ("any", "any-with-x")
        # (key, value, how): how is _PRESENCE for void values, else the value's type when a
        # same-type == is exactly Erlang's ==, else None (use erl_equal)
        self.pairs: tuple[tuple[str, Any, Any], ...] = tuple(
            (key, value, _PRESENCE if value is None else (type(value) if type(value) in _PLAIN else None))
            for key, value in args.items()
            if key != "x-match" and (with_x or not key.startswith("x-"))
        )

    def matches(self, headers: Mapping[str, Any] | None) -> bool:
        """Whether a message with ``headers`` (None = no headers property) matches."""
        if headers is None:
            headers = _NO_HEADERS
        if self.match_all:
            for key, value, how in self.pairs:
                found = headers.get(key, _MISSING)
                if found is _MISSING:
                    return False
                if how is _PRESENCE:
                    continue
                if how is type(found):
                    if found != value:
                        return False
                elif not erl_equal(value, found):
                    return False
            return True
        for key, value, how in self.pairs:
            found = headers.get(key, _MISSING)
            if found is not _MISSING and (
                how is _PRESENCE or (found == value if how is type(found) else erl_equal(value, found))
            ):
                return True
        return False


_PLAIN = frozenset({str, int, bytes, bool, float})
_PRESENCE: Any = object()
_MISSING: Any = object()
_NO_HEADERS: Mapping[str, Any] = {}


def headers_match(binding_args: Mapping[str, Any] | None, headers: Mapping[str, Any] | None) -> bool:
    """Whether a message with ``headers`` matches a binding with ``binding_args``."""
    return HeadersMatcher(binding_args).matches(headers)
