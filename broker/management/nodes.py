"""``GET /api/nodes`` and ``/api/nodes/{name}``: this node, with RabbitMQ 3.10's field names.

Rules:

1. One node, named as ``/api/overview`` names it (``ottermq@<host>``); another name is 404. Users
   need the ``monitoring`` or ``administrator`` tag (401 ``Not monitor user``).
2. Values are read from the process when asked: resident memory (``mem_used``, RabbitMQ's ``rss``
   strategy), the memory alarm's limit and state, open and allowed file descriptors, sockets (AMQP
   connections), free disk space of the data directory, uptime in milliseconds.
3. ``disk_free_limit`` and ``disk_free_alarm`` are the disk alarm's (``OTTERMQ_DISK_FREE_LIMIT``);
   Erlang-only fields (process counts, reductions, Mnesia, garbage collection) are left out.
4. ``connection_created`` and the other churn counts carry the sampler's rates, as on RabbitMQ.
"""

from __future__ import annotations

import os
import time
from typing import Any

from aiohttp import web

from .. import node_name
from ..node.alarms import process_rss
from ..node.sasl import MECHANISMS
from .common import NotFound, broker_of, require_monitor, sampler_of
from .node_metrics import disk_free, max_fds, open_fds
from .overview import exchange_types
from .rates import CHURN, churn_counts, churn_key, with_rates

SASL_TEXTS = {"PLAIN": "SASL PLAIN authentication mechanism", "AMQPLAIN": "QPid AMQPLAIN mechanism"}


def node_json(request: web.Request) -> dict[str, Any]:
    broker = broker_of(request)
    settings = broker.settings
    fds = max_fds()
    plugins = []
    if settings.enable_web_api:
        plugins.append("rabbitmq_management")
    if settings.enable_prometheus:
        plugins.append("rabbitmq_prometheus")
    contexts = [
        {"description": "RabbitMQ Management", "path": "/", "port": str(port)}
        for _ip, port in broker.listings.web_addresses()
    ]
    contexts += [  # RabbitMQ writes the protocol as the Erlang term it is ('http/prometheus')
        {"description": "RabbitMQ Prometheus", "path": "/", "port": str(port), "protocol": f"'{protocol}'"}
        for protocol, _ip, port in broker.listings.prometheus()
    ]
    churn = with_rates(CHURN, churn_counts(broker), sampler_of(request).rates(churn_key(), len(CHURN)))
    return {
        "name": node_name(),
        "type": "disc",
        "running": True,
        "os_pid": str(os.getpid()),
        "uptime": int((time.time() - broker.started_at) * 1000),
        "processors": os.cpu_count() or 1,
        "rates_mode": "basic",
        "mem_used": process_rss() or 0,
        "mem_limit": broker.alarms.memory_limit,
        "mem_alarm": broker.alarms.memory,
        "mem_calculation_strategy": "rss",
        "disk_free": disk_free(broker) or 0,
        "disk_free_limit": broker.alarms.disk_free_limit,
        "disk_free_alarm": broker.alarms.disk,
        "fd_used": open_fds() or 0,
        "fd_total": fds,
        "sockets_used": len(broker.connections),
        "sockets_total": fds,
        "partitions": [],
        "cluster_links": [],
        "db_dir": str(settings.data_dir),
        "config_files": [],
        "log_files": ["<stdout>"],
        "enabled_plugins": plugins,
        "exchange_types": exchange_types(),
        "auth_mechanisms": [
            {"name": m, "description": SASL_TEXTS.get(m, m), "enabled": True} for m in MECHANISMS
        ],
        "applications": [],
        "contexts": contexts,
        **churn,
    }


async def list_nodes(request: web.Request) -> web.Response:
    require_monitor(request)
    return web.json_response([node_json(request)])


async def get_node(request: web.Request) -> web.Response:
    require_monitor(request)
    if request.match_info["name"] != node_name():
        raise NotFound()
    return web.json_response(node_json(request))


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/nodes")(list_nodes)
    routes.get(f"{prefix}/nodes/{{name}}")(get_node)
