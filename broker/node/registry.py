"""The open connections of one process, and the counts that outlive them.

Rules:
- The AMQP server adds a connection when it is made and discards it once it is gone; everyone else
  only iterates (``ConnectionHandle``: snapshots and a few commands, never per message).
- A closing channel's message counters are kept (``retire``) so node and vhost totals
  (``message_stats``) never go down; ``churn`` counts connections and channels opened and closed.
- Connection and channel limits count every worker's: this process's connections and channels
  plus what its ``cluster`` reports of the others'.
"""

from __future__ import annotations

from collections.abc import Iterator

from ottermq.amqp.errors import NotAllowed

from .cluster import Cluster, SingleProcess
from .info import ConnectionHandle
from .limits import Limits
from .stats import Churn, MessageStats


class ConnectionRegistry:
    """This process's open AMQP connections (see the module rules).

    Args:
        limits: the vhost and user limits the connection and channel checks read.
    """

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.cluster: Cluster = SingleProcess()  # Node.join replaces it
        self._open: set[ConnectionHandle] = set()
        self.churn = Churn()
        # message counters of closed channels, node-wide and per vhost (broker/node/stats.py)
        self.retired = MessageStats()
        self.retired_by_vhost: dict[str, MessageStats] = {}

    # -- the set -----------------------------------------------------------------------------
    def add(self, conn: ConnectionHandle) -> None:
        self._open.add(conn)

    def discard(self, conn: ConnectionHandle) -> None:
        self._open.discard(conn)

    def __iter__(self) -> Iterator[ConnectionHandle]:
        return iter(self._open)

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, conn: object) -> bool:
        return conn in self._open

    # -- commands to many --------------------------------------------------------------------
    def close_vhost(self, name: str) -> None:
        """Close the connections to vhost ``name`` with 320 (RabbitMQ's text: it is being deleted)."""
        for conn in list(self._open):
            if conn.vhost_name == name:
                conn.force_close("vhost deleted", f"vhost '{name}' is deleted")

    def close_user(self, name: str) -> None:
        """Close ``name``'s connections with 320 (RabbitMQ 3.10's text: the user is deleted)."""
        for conn in list(self._open):
            if conn.username == name:
                conn.force_close("user deleted", f"user '{name}' is deleted")

    def block(self, reason: str | None) -> None:
        """An alarm went on or off: block publishers with ``reason``, or unblock them (None)."""
        for conn in list(self._open):
            conn.set_blocked(reason is not None, reason or "")

    # -- message counts ----------------------------------------------------------------------
    def retire(self, vhost: str, stats: MessageStats) -> None:
        """Keep a closing channel's counts in the node's and its vhost's totals."""
        self.retired.add(stats)
        retired = self.retired_by_vhost.get(vhost)
        if retired is None:
            retired = self.retired_by_vhost[vhost] = MessageStats()
        retired.add(stats)

    def message_stats(self, vhost: str | None = None) -> MessageStats:
        """Message counts since start-up, node-wide or of one vhost: closed channels' and open ones'."""
        if vhost is None:
            retired = self.retired
            conns: set[ConnectionHandle] = self._open
        else:
            retired = self.retired_by_vhost.get(vhost, MessageStats())
            conns = {c for c in self._open if c.vhost_name == vhost}
        return MessageStats.total([retired, *(stats for c in conns for stats in c.channel_stats())])

    # -- limits ------------------------------------------------------------------------------
    def check_limits(self, conn: ConnectionHandle, vhost: str) -> None:
        """``connection.open``: the vhost's, then the user's connection limit (broker/node/limits.py).

        Raises:
            NotAllowed: a limit is reached (530, RabbitMQ's texts).
        """
        opened = [
            (c.vhost_name, c.username) for c in self._open if c is not conn and c.vhost_name is not None
        ]
        opened += self.cluster.connections_elsewhere()
        limit = self.limits.limit("vhost", vhost, "max-connections")
        if limit is not None and sum(1 for v, _u in opened if v == vhost) >= limit:
            raise NotAllowed(
                f"access to vhost '{vhost}' refused for user '{conn.username}': connection limit"
                f" ({limit}) is reached"
            )
        limit = self.limits.limit("user", conn.username, "max-connections")
        if limit is not None and sum(1 for _v, u in opened if u == conn.username) >= limit:
            raise NotAllowed(
                f"connection refused for user '{conn.username}': user connection limit ({limit}) is reached"
            )

    def user_channels(self, username: str) -> int:
        """Channels open on ``username``'s connections (the ``max-channels`` limit counts them all),
        in every worker: the other workers' as worker 0 last reported them (a few milliseconds old)."""
        here = sum(c.channel_count() for c in self._open if c.username == username)
        return here + self.cluster.channels_elsewhere(username)

    def limited_user_channels(self) -> dict[str, int]:
        """This worker's open channels per user that has a ``max-channels`` limit (0s included)."""
        users = self.limits.by_kind["user"]
        counts = {name: 0 for name in users if self.limits.limit("user", name, "max-channels") is not None}
        for c in self._open:
            if c.username in counts:
                counts[c.username] += c.channel_count()
        return counts

    def channels_changed(self, username: str) -> None:
        """A channel of ``username`` opened or closed here: with several workers, and a ``max-channels``
        limit on that user, the other workers are told (coalesced by the callee)."""
        if self.limits.limit("user", username, "max-channels") is not None:
            self.cluster.channels_changed()
