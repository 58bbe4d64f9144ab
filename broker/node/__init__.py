"""Node services: what one broker node holds besides its network listeners.

Authentication and permissions, vhost and user limits, TLS contexts, message statistics, the
operations layer every way in goes through, delayed delivery and deduplication persistence, wiring
of the TTL manager and dead-letter sink, recovery, definitions and dead-letter moves. Nothing here
imports the AMQP server (``ottermq.broker.server``), the management plugin or the command line.
"""
