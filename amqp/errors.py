"""AMQP exceptions raised by domain code and translated into closes at one boundary.

Soft errors (``ChannelException``) close the channel; hard errors (``ConnectionException``)
close the connection. Domain code never deals with class/method ids: the dispatcher that
catches the exception adds them to ``Channel.Close`` / ``Connection.Close``.

The reply text sent on the wire is ``"<NAME> - <text>"`` as RabbitMQ formats it, e.g.
``NOT_FOUND - no exchange 'x' in vhost '/'``.
"""

from __future__ import annotations


class AMQPError(Exception):
    """Base of all AMQP protocol exceptions.

    Args:
        text: human readable explanation (without the ``NAME - `` prefix).
    """

    reply_code: int = 541
    name: str = "INTERNAL_ERROR"

    def __init__(self, text: str = "") -> None:
        super().__init__(text)
        self.text = text

    @property
    def reply_text(self) -> str:
        """The text RabbitMQ would send: ``NAME - text`` (at most 255 bytes)."""
        full = f"{self.name} - {self.text}" if self.text else self.name
        raw = full.encode("utf-8")
        if len(raw) > 255:
            # RabbitMQ keeps the first 252 bytes and appends "..."
            full = raw[:252].decode("utf-8", "ignore") + "..."
        return full


class ChannelException(AMQPError):
    """Soft error: closes the channel only."""


class ConnectionException(AMQPError):
    """Hard error: closes the whole connection."""


# --- soft (channel) errors --------------------------------------------------------------
class ContentTooLarge(ChannelException):
    reply_code, name = 311, "CONTENT_TOO_LARGE"


class NoRoute(ChannelException):
    reply_code, name = 312, "NO_ROUTE"


class NoConsumers(ChannelException):
    reply_code, name = 313, "NO_CONSUMERS"


class AccessRefused(ChannelException):
    reply_code, name = 403, "ACCESS_REFUSED"


class NotFound(ChannelException):
    reply_code, name = 404, "NOT_FOUND"


class ResourceLocked(ChannelException):
    reply_code, name = 405, "RESOURCE_LOCKED"


class PreconditionFailed(ChannelException):
    reply_code, name = 406, "PRECONDITION_FAILED"


# --- hard (connection) errors -------------------------------------------------------------
class ConnectionForced(ConnectionException):
    reply_code, name = 320, "CONNECTION_FORCED"


class InvalidPath(ConnectionException):
    reply_code, name = 402, "INVALID_PATH"


class ConnectionAccessRefused(ConnectionException):
    """403 raised at connection level (authentication / vhost access)."""

    reply_code, name = 403, "ACCESS_REFUSED"


class FrameError(ConnectionException):
    reply_code, name = 501, "FRAME_ERROR"


class AMQPSyntaxError(ConnectionException):
    reply_code, name = 502, "SYNTAX_ERROR"


class CommandInvalid(ConnectionException):
    reply_code, name = 503, "COMMAND_INVALID"


class ChannelError(ConnectionException):
    reply_code, name = 504, "CHANNEL_ERROR"


class UnexpectedFrame(ConnectionException):
    reply_code, name = 505, "UNEXPECTED_FRAME"


class ResourceError(ConnectionException):
    reply_code, name = 506, "RESOURCE_ERROR"


class NotAllowed(ConnectionException):
    reply_code, name = 530, "NOT_ALLOWED"


class AMQPNotImplemented(ConnectionException):
    reply_code, name = 540, "NOT_IMPLEMENTED"


class InternalError(ConnectionException):
    reply_code, name = 541, "INTERNAL_ERROR"


class ChannelCrashed(InternalError):
    """Where RabbitMQ's channel process crashes: its reader closes the connection with a bare
    ``INTERNAL_ERROR`` (541) and class/method ids 0/0. The text, if any, is the crash's reason as
    Erlang prints it (``{case_clause,{long,5}}``): never sent over AMQP, shown where RabbitMQ's
    management API shows it (a definitions import's 400)."""

    @property
    def reply_text(self) -> str:
        return self.name
