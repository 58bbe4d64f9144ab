"""ottermq.broker."""

import socket

VERSION = "0.1.0"  # as pyproject.toml's version; the server reports it in connection.start


def node_name() -> str:
    """This node's name, RabbitMQ-style ``name@host`` (also its cluster name)."""
    return f"ottermq@{socket.gethostname().split('.')[0]}"
