"""The AMQP connection state machine, without I/O (in the manner of h11's ``_state.py``).

Rules.

States (RabbitMQ's names for them appear in its error texts)::

    AWAIT_HEADER  (pre_init)  nothing read yet: the 8-byte protocol header must come first
    STARTING      (starting)  Connection.Start sent, awaiting Start-Ok (the login)
    TUNING        (tuning)    Connection.Tune sent, awaiting Tune-Ok
    OPENING       (opening)   awaiting Connection.Open (the virtual host)
    RUNNING       (running)   Open-Ok sent: channels, heartbeats
    CLOSING       (closing)   we sent Connection.Close: only Close-Ok (or Close) is read
    CLOSED        (closed)    nothing is read any more; the socket is closed or about to be

Transitions (``TRANSITIONS``; anything else is a bug and raises ``StateError``)::

    AWAIT_HEADER -> STARTING   a good protocol header
    STARTING     -> TUNING     Start-Ok with accepted credentials
    TUNING       -> OPENING    Tune-Ok within our limits
    OPENING      -> RUNNING    Open of an existing vhost the user may use
    STARTING, OPENING, RUNNING -> CLOSING
                               we send Connection.Close (a refused login with the client's
                               ``authentication_failure_close`` capability, an error, a shutdown)
    every state  -> CLOSED     the client's Close answered (RUNNING, CLOSING), its Close-Ok
                               (CLOSING), a silent close, an abort, the socket lost

What a frame means in each state (``route``); the first matching row wins::

    state          frame                                   step
    RUNNING        any frame on channel N > 0              CHANNEL (the channel's own rules)
    CLOSED         anything                                IGNORE
    CLOSING        Close-Ok on channel 0                   CLOSE_OK
    CLOSING        Close on channel 0                      CLOSE
    CLOSING        anything else (even malformed)          IGNORE
    any            heartbeat on channel 0                  IGNORE
    STARTING       Start-Ok on channel 0                   START_OK
    TUNING         Tune-Ok on channel 0                    TUNE_OK
    STARTING, TUNING  anything else                        SILENT   (RabbitMQ sends nothing: it
                                                                    stops reading and drops the
                                                                    socket after 3 s)
    OPENING, RUNNING  method frame under 4 octets          ERROR 501 unknown_frame, class/method 0/0
    OPENING, RUNNING  unknown class/method id              ABORT    (RabbitMQ's reader crashes:
                                                                    the socket drops, no Close)
    OPENING        frame on channel N > 0                  ERROR 505 ``type T, all octets = ...``, 0/0
    OPENING, RUNNING  non-method frame on channel 0        ERROR 505 ``type T, all octets = ...``, 0/0
    OPENING        Open                                    OPEN
    RUNNING        Close / Close-Ok / Update-Secret        CLOSE / CLOSE_OK / UPDATE_SECRET
    OPENING, RUNNING  any other method on channel 0        ERROR 504 ``unexpected method in
                                                                    connection state <state>``

An ERROR step carries the exception and the class/method key for the Connection.Close; the
connection turns every error into a close in one place (``AMQPConnection._fail``): silently while
STARTING or TUNING, with Connection.Close while OPENING or RUNNING.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ottermq.amqp import fastpath
from ottermq.amqp.errors import AMQPError, ChannelError, FrameError, UnexpectedFrame
from ottermq.amqp.fastpath import FRAME_HEARTBEAT, FRAME_METHOD
from ottermq.amqp.reader import frame_error, payload_snippet
from pamqp import commands as spec
from pamqp.base import Frame

KNOWN_METHODS = frozenset(spec.INDEX_MAPPING)
CONNECTION_CLOSE = spec.Connection.Close.index
CONNECTION_CLOSE_OK = spec.Connection.CloseOk.index


class State(enum.IntEnum):
    """Connection states, in handshake order (comparisons like ``state < RUNNING`` are meaningful)."""

    AWAIT_HEADER = 0
    STARTING = 1
    TUNING = 2
    OPENING = 3
    RUNNING = 4
    CLOSING = 5
    CLOSED = 6

    @property
    def rabbit_name(self) -> str:
        """The name RabbitMQ uses in ``unexpected method in connection state <name>``."""
        return _RABBIT_NAMES[self]


_RABBIT_NAMES = {
    State.AWAIT_HEADER: "pre_init",
    State.STARTING: "starting",
    State.TUNING: "tuning",
    State.OPENING: "opening",
    State.RUNNING: "running",
    State.CLOSING: "closing",
    State.CLOSED: "closed",
}

TRANSITIONS: dict[State, frozenset[State]] = {
    State.AWAIT_HEADER: frozenset({State.STARTING, State.CLOSED}),
    State.STARTING: frozenset({State.TUNING, State.CLOSING, State.CLOSED}),
    State.TUNING: frozenset({State.OPENING, State.CLOSED}),
    State.OPENING: frozenset({State.RUNNING, State.CLOSING, State.CLOSED}),
    State.RUNNING: frozenset({State.CLOSING, State.CLOSED}),
    State.CLOSING: frozenset({State.CLOSED}),
    State.CLOSED: frozenset({State.CLOSED}),
}


class StateError(RuntimeError):
    """A transition the table does not allow: a bug in the connection, never the client's doing."""


def check_transition(old: State, new: State) -> State:
    """Return ``new`` if the table allows ``old -> new``.

    Raises:
        StateError: the transition is not in ``TRANSITIONS``.
    """
    if new not in TRANSITIONS[old]:
        raise StateError(f"connection state {old.name} -> {new.name} is not allowed")
    return new


class Step(enum.Enum):
    """What the connection must do with one frame."""

    CHANNEL = "channel"  # hand it to the channel's state (or open the channel)
    IGNORE = "ignore"
    START_OK = "start_ok"
    TUNE_OK = "tune_ok"
    OPEN = "open"
    CLOSE = "close"  # the client's Connection.Close: answer Close-Ok
    CLOSE_OK = "close_ok"
    UPDATE_SECRET = "update_secret"
    SILENT = "silent"  # drop the socket after RabbitMQ's delay, sending nothing
    ERROR = "error"  # close with ``Routed.error`` (silently before OPENING)
    ABORT = "abort"  # drop the socket at once, sending nothing


@dataclass(frozen=True, slots=True)
class Routed:
    """The outcome of ``route``: the step, the decoded method it needs, or the error to close with."""

    step: Step
    method: Frame | None = None
    error: AMQPError | None = None
    key: int = 0  # class/method ids for the close (0 = none, as RabbitMQ's reader reports)
    reason: str = ""  # why (SILENT, ABORT), for the log


_CHANNEL = Routed(Step.CHANNEL)
_IGNORE = Routed(Step.IGNORE)
_CLOSE_OK = Routed(Step.CLOSE_OK)
_EXPECTED = {
    State.STARTING: (spec.Connection.StartOk, Step.START_OK),
    State.TUNING: (spec.Connection.TuneOk, Step.TUNE_OK),
    State.OPENING: (spec.Connection.Open, Step.OPEN),
}
_RUNNING_METHODS: dict[type[Frame], Step] = {
    spec.Connection.Close: Step.CLOSE,
    spec.Connection.CloseOk: Step.CLOSE_OK,
    spec.Connection.UpdateSecret: Step.UPDATE_SECRET,
}


def route(state: State, frame_type: int, channel: int, payload: bytes) -> Routed:
    """Decide what one frame means in ``state`` (the table in the module docstring)."""
    if state is State.RUNNING and channel:
        return _CHANNEL
    if state is State.CLOSED or state is State.AWAIT_HEADER:
        return _IGNORE
    if state is State.CLOSING:
        if channel == 0 and frame_type == FRAME_METHOD and len(payload) >= 4:
            key = fastpath.method_key(payload)
            if key == CONNECTION_CLOSE_OK:
                return _CLOSE_OK
            if key == CONNECTION_CLOSE:
                return Routed(Step.CLOSE)
        return _IGNORE
    if frame_type == FRAME_HEARTBEAT and channel == 0:
        return _IGNORE
    if state is State.STARTING or state is State.TUNING:
        return _route_login(state, frame_type, channel, payload)
    # OPENING or RUNNING
    if frame_type == FRAME_METHOD and len(payload) < 4:
        return Routed(Step.ERROR, error=frame_error(frame_type, payload, "unknown_frame"))
    if channel:  # OPENING: RabbitMQ's reader takes no channel frames yet
        return Routed(Step.ERROR, error=UnexpectedFrame(payload_snippet(frame_type, payload)))
    if frame_type != FRAME_METHOD:
        return Routed(Step.ERROR, error=UnexpectedFrame(payload_snippet(frame_type, payload)))
    key = fastpath.method_key(payload)
    if key not in KNOWN_METHODS:
        return Routed(Step.ABORT, reason=f"unknown method id: class {key >> 16}, method {key & 0xFFFF}")
    try:
        method = fastpath.decode_method(payload)
    except FrameError as exc:
        return Routed(Step.ERROR, error=exc, key=key)
    if state is State.OPENING:
        if isinstance(method, spec.Connection.Open):
            return Routed(Step.OPEN, method, key=key)
    else:
        step = _RUNNING_METHODS.get(type(method))
        if step is not None:
            return Routed(step, method, key=key)
    unexpected = ChannelError(f"unexpected method in connection state {state.rabbit_name}")
    return Routed(Step.ERROR, error=unexpected, key=key)


def _route_login(state: State, frame_type: int, channel: int, payload: bytes) -> Routed:
    """STARTING / TUNING: the one expected method, or a silent close."""
    if channel != 0 or frame_type != FRAME_METHOD or len(payload) < 4:
        return Routed(Step.SILENT, reason=f"unexpected frame {payload_snippet(frame_type, payload)}")
    try:
        method = fastpath.decode_method(payload)
    except FrameError as exc:
        return Routed(Step.SILENT, reason=exc.text)
    expected, step = _EXPECTED[state]
    if isinstance(method, expected):
        return Routed(step, method, key=fastpath.method_key(payload))
    reason = f"unexpected method {method.name} in connection state {state.rabbit_name}"
    return Routed(Step.SILENT, reason=reason)
