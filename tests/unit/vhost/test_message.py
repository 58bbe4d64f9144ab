"""Sender-selected distribution (CC/BCC headers) on a ``Message``: pure, no broker."""

from __future__ import annotations

import pytest
from ottermq.amqp.errors import PreconditionFailed
from ottermq.amqp.props import get_headers
from ottermq.amqp.table import Long, encode_table
from ottermq.vhost.message import Message, sender_selected


def message(headers: dict[str, object]) -> Message:
    raw = b"\x20\x00" + encode_table(headers)  # property flags: headers only
    return Message("x", "rk", raw, b"body")


def test_message_without_cc_or_bcc_is_unchanged():
    m = message({"a": 1})
    assert sender_selected(m) == (m, None)


def test_cc_and_bcc_strings_become_routing_keys_and_bcc_is_stripped():
    selected, keys = sender_selected(message({"CC": ["c1", "c2"], "BCC": ["b1"], "n": Long(7)}))
    assert keys == ["c1", "c2", "b1"] and selected.extra_keys == ("c1", "c2", "b1")
    assert get_headers(selected.raw_props) == {"CC": ["c1", "c2"], "n": 7}


def test_non_string_array_elements_are_ignored():
    _, keys = sender_selected(message({"CC": [Long(1), "c", {"t": 1}, ["n"]], "BCC": []}))
    assert keys == ["c"]


@pytest.mark.parametrize(
    "headers, text",
    [
        ({"CC": "a"}, 'invalid message: {unacceptable_type_in_header,"CC",longstr}'),
        ({"BCC": "a"}, 'invalid message: {unacceptable_type_in_header,"BCC",longstr}'),
        ({"CC": Long(1)}, 'invalid message: {unacceptable_type_in_header,"CC",signedint}'),
        ({"CC": {"a": "b"}}, 'invalid message: {unacceptable_type_in_header,"CC",table}'),
        ({"CC": None}, 'invalid message: {unacceptable_type_in_header,"CC",void}'),
        ({"BCC": Long(1), "CC": "a"}, 'invalid message: {unacceptable_type_in_header,"CC",longstr}'),
        ({"CC": ["a"], "BCC": True}, 'invalid message: {unacceptable_type_in_header,"BCC",bool}'),
    ],
)
def test_cc_or_bcc_that_is_not_an_array_is_precondition_failed(headers, text):
    with pytest.raises(PreconditionFailed) as info:
        sender_selected(message(headers))
    assert str(info.value).endswith(text)
