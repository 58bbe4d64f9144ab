"""Several worker processes sharing the virtual hosts (``OTTERMQ_WORKERS``).

Worker 0 is the broker process started by ``ottermq``: it accepts every AMQP connection, does its
handshake, serves the management API and Prometheus, holds the metadata (users, vhosts,
permissions, policies, limits) and owns some vhosts itself. Workers 1..N-1 are processes it starts
and restarts (``supervisor``); each owns other vhosts (``ownership``) and gets their connections
from worker 0 once ``connection.open`` names the vhost (``worker``). See docs/workers.md.
"""
