"""Dynamic shovels, compatible with RabbitMQ 3.10's ``rabbitmq_shovel``: each moves messages from a
queue (or an exchange) of one broker to a queue or exchange of another (or the same), over AMQP
0-9-1 with aiormq.

- ``uri.py``: RabbitMQ's AMQP URIs (``amqp_uri``), ``amqps`` options included;
- ``definition.py``: a shovel's definition validated with RabbitMQ's texts, and read;
- ``tap.py``: the transport under aiormq that keeps message properties byte for byte;
- ``link.py``: one end's connection (the local broker through the internal principal);
- ``headers.py``: forward and timestamp headers, publish properties;
- ``worker.py``: one running shovel, its states and reconnect loop;
- ``engine.py``: the node's shovels: the ``shovel`` runtime-parameter component and the status.

The part sits below ``broker.node``, which owns the runtime parameters and builds ``Shovels``; it
imports nothing of the node.
"""

from __future__ import annotations

from .engine import Entry, Shovels
from .link import LocalBroker
from .worker import Counters

__all__ = ["Counters", "Entry", "LocalBroker", "Shovels"]
