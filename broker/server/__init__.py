"""The AMQP 0-9-1 server: connections (handshake state machine, heartbeats, flow), channels
(consumers and deliveries, publishing and confirms, topology methods), direct reply-to and the
consumer timeout. It uses the node's services (``ottermq.broker.node``) and nothing above it.

Inside, imports go one way (``tests/unit/architecture`` checks it): ``listener`` -> ``connection``
-> ``channel`` -> its parts ``consumers``, ``publisher``, ``topology`` -> the leaves (``interfaces``,
whose Protocols let the parts and the connection use each other without importing each other,
``output``, ``flow``, ``endpoints``, ``handshake``, ``states``, ``confirms``, ``reply_to``).
"""

from ottermq.amqp import native

native.install()  # compiled modules or their sources, before the first of them is imported
