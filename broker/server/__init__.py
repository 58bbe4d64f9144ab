"""The AMQP 0-9-1 server: connections (handshake state machine, heartbeats, flow), channels
(consumers and deliveries, publishing and confirms, topology methods), direct reply-to and the
consumer timeout. It uses the node's services (``ottermq.broker.node``) and nothing above it.
"""
