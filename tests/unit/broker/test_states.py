"""The connection state machine as a table: ``route`` and ``TRANSITIONS`` without a transport."""

from __future__ import annotations

import struct

import pytest
from ottermq.amqp.errors import ChannelError, FrameError, UnexpectedFrame
from ottermq.broker.server.states import TRANSITIONS, State, StateError, Step, check_transition, route
from pamqp import commands as spec
from pamqp import frame as pframe

S = State


def method(frame: object, channel: int = 0) -> tuple[int, int, bytes]:
    data = pframe.marshal(frame, channel)
    return data[0], channel, data[7:-1]


def raw(frame_type: int, channel: int, payload: bytes) -> tuple[int, int, bytes]:
    return frame_type, channel, payload


START_OK = method(spec.Connection.StartOk(mechanism="PLAIN", response="\0guest\0guest"))
TUNE_OK = method(spec.Connection.TuneOk(channel_max=2047, frame_max=131072))
OPEN = method(spec.Connection.Open(virtual_host="/"))
CLOSE = method(spec.Connection.Close(200, "bye", 0, 0))
CLOSE_OK = method(spec.Connection.CloseOk())
SECRET = method(spec.Connection.UpdateSecret(new_secret="s", reason="r"))
HEARTBEAT0 = raw(8, 0, b"")
HEARTBEAT1 = raw(8, 1, b"")
CH_OPEN = method(spec.Channel.Open(), 1)
DECLARE0 = method(spec.Queue.Declare(queue="q"))
BODY0 = raw(3, 0, b"abc")
SHORT0 = raw(1, 0, b"\x00\x0a")
UNKNOWN0 = raw(1, 0, struct.pack(">HH", 99, 10))

# (state, frame, step): the module docstring's table, row by row
CASES = [
    (S.RUNNING, CH_OPEN, Step.CHANNEL),
    (S.RUNNING, HEARTBEAT1, Step.CHANNEL),
    (S.CLOSED, CLOSE, Step.IGNORE),
    (S.AWAIT_HEADER, START_OK, Step.IGNORE),
    (S.CLOSING, CLOSE_OK, Step.CLOSE_OK),
    (S.CLOSING, CLOSE, Step.CLOSE),
    (S.CLOSING, SHORT0, Step.IGNORE),
    (S.CLOSING, CH_OPEN, Step.IGNORE),
    (S.STARTING, HEARTBEAT0, Step.IGNORE),
    (S.RUNNING, HEARTBEAT0, Step.IGNORE),
    (S.STARTING, START_OK, Step.START_OK),
    (S.TUNING, TUNE_OK, Step.TUNE_OK),
    (S.STARTING, TUNE_OK, Step.SILENT),
    (S.STARTING, CLOSE, Step.SILENT),
    (S.STARTING, BODY0, Step.SILENT),
    (S.STARTING, SHORT0, Step.SILENT),
    (S.STARTING, method(spec.Connection.StartOk(), 1), Step.SILENT),
    (S.TUNING, START_OK, Step.SILENT),
    (S.TUNING, OPEN, Step.SILENT),
    (S.TUNING, CH_OPEN, Step.SILENT),
    (S.OPENING, OPEN, Step.OPEN),
    (S.OPENING, SHORT0, Step.ERROR),
    (S.OPENING, UNKNOWN0, Step.ABORT),
    (S.RUNNING, UNKNOWN0, Step.ABORT),
    (S.OPENING, CH_OPEN, Step.ERROR),
    (S.OPENING, HEARTBEAT1, Step.ERROR),
    (S.OPENING, BODY0, Step.ERROR),
    (S.OPENING, CLOSE, Step.ERROR),
    (S.OPENING, SECRET, Step.ERROR),
    (S.RUNNING, CLOSE, Step.CLOSE),
    (S.RUNNING, CLOSE_OK, Step.CLOSE_OK),
    (S.RUNNING, SECRET, Step.UPDATE_SECRET),
    (S.RUNNING, START_OK, Step.ERROR),
    (S.RUNNING, DECLARE0, Step.ERROR),
    (S.RUNNING, BODY0, Step.ERROR),
    (S.RUNNING, SHORT0, Step.ERROR),
]


@pytest.mark.parametrize("state,frame,step", CASES, ids=[f"{s.name}-{i}" for i, (s, *_) in enumerate(CASES)])
def test_route_table(state, frame, step):
    assert route(state, *frame).step is step


@pytest.mark.parametrize(
    "state,frame,error,text,key",
    [
        (S.OPENING, CLOSE, ChannelError, "unexpected method in connection state opening", 0x000A0032),
        (S.RUNNING, DECLARE0, ChannelError, "unexpected method in connection state running", 0x0032000A),
        (S.OPENING, CH_OPEN, UnexpectedFrame, "type 1, all octets = <<0,20,0,10,1,48>>", 0),
        (S.RUNNING, BODY0, UnexpectedFrame, 'type 3, all octets = <<"abc">>', 0),
        (S.RUNNING, SHORT0, FrameError, "type 1, all octets = <<0,10>>: unknown_frame", 0),
    ],
)
def test_route_errors_carry_rabbitmq_text_and_ids(state, frame, error, text, key):
    routed = route(state, *frame)
    assert isinstance(routed.error, error)
    assert routed.error.text == text
    assert routed.key == key


def test_expected_methods_come_decoded():
    routed = route(S.STARTING, *START_OK)
    assert isinstance(routed.method, spec.Connection.StartOk)
    assert routed.method.response == "\0guest\0guest"


def test_every_state_can_close_and_the_handshake_only_moves_forward():
    for state in State:
        assert S.CLOSED in TRANSITIONS[state]
    order = [S.AWAIT_HEADER, S.STARTING, S.TUNING, S.OPENING, S.RUNNING]
    for old, new in zip(order, order[1:], strict=False):
        assert check_transition(old, new) is new
    with pytest.raises(StateError):
        check_transition(S.STARTING, S.RUNNING)
    with pytest.raises(StateError):
        check_transition(S.CLOSED, S.RUNNING)
    with pytest.raises(StateError):
        check_transition(S.TUNING, S.CLOSING)  # nothing is ever sent back while tuning


def test_rabbitmq_state_names():
    assert [s.rabbit_name for s in State] == [
        "pre_init",
        "starting",
        "tuning",
        "opening",
        "running",
        "closing",
        "closed",
    ]
