"""``rabbitmq_process_max_tcp_sockets``: RabbitMQ 3.10's socket share of the file-descriptor limit."""

from __future__ import annotations

import pytest
from ottermq.broker.management.node_metrics import max_tcp_sockets


@pytest.mark.parametrize(
    ("fds", "sockets"),
    [
        (1024, 832),  # RabbitMQ 3.10.8 at 1024 fds: file_handle_cache has 927 handles, 832 sockets
        (65536, 58893),
        (100, 0),  # max(2, 3) handles: trunc(0.7) sockets
        (0, 0),  # never negative
    ],
)
def test_socket_limit_follows_file_handle_cache(fds: int, sockets: int) -> None:
    assert max_tcp_sockets(fds) == sockets
