"""``GET``/``POST /api/definitions`` and ``/api/definitions/{vhost}``: RabbitMQ's definitions JSON of the
running broker, exported and imported live (administrators only, as RabbitMQ).

Rules:

1. Export reads the running broker, not the store: users, vhosts and permissions as the API shows
   them; every queue but exclusive ones and every exchange but the default and ``amq.*`` ones,
   durable or not (with their ``durable`` flag), as RabbitMQ 3.10 exports them; bindings but the
   default exchange's; policies, and operator policies as ``operator_policy`` parameters.
   ``/{vhost}`` gives that vhost's queues, exchanges and bindings without ``vhost`` fields, its
   policies and parameters with them (as RabbitMQ's), and no users, vhosts or permissions.
   ``?download=<file>`` adds ``Content-Disposition: attachment`` as RabbitMQ's.
2. Import takes a JSON body, or a ``multipart/form-data`` upload in the field ``file`` (RabbitMQ's web UI),
   checks it whole with the parser ``ottermq definitions import`` uses (``broker/node/definitions``), then
   applies it with the one applier (``broker/node/definitions/apply.py``), through the operations the other
   write endpoints use: users are created or replaced, vhosts created, permissions set, policies set (and
   applied), missing exchanges and queues declared with their ``durable`` flag (durable ones reach the
   store as a client's declare would), bindings made when both ends exist. Existing exchanges and queues
   are left unchanged, as RabbitMQ's import does. An unreadable body is 400 ``failed_to_parse_json``,
   invalid definitions 400 with the parser's reason, and nothing is applied. ``/{vhost}`` imports queues,
   exchanges, bindings, policies and parameters into that vhost (their ``vhost`` fields are ignored).
3. The answer (``node/definitions/report.py``): 204 without a body, as RabbitMQ's, when every item was
   applied or left as it was; 200 with the report (``{"applied": {...}, "unchanged": {...},
   "skipped": [{"section": ..., "reason": ...}, ...]}``) when something was skipped, or when the query
   asks for it (``?report=true``, an ottermq extension). rabbitmqadmin and RabbitMQ's web UI take any 2xx
   as success. The report is also kept on the request (``REPORT``) for the workers' forwarder, which
   adds the other workers' reports to it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import aiohttp
import aiohttp.http_exceptions
from aiohttp import web
from ottermq.vhost.policy import PolicyError
from ottermq.vhost.vhost import PREDECLARED

from .. import VERSION, node_name
from ..node.auth import AuthError
from ..node.definitions import DefinitionsError, ImportReport, definitions_from_json
from ..node.definitions.export import parameter_json, policies_to_json, vhost_limit_parameters
from ..node.limits import LimitError
from ..node.operations import policy_record as record_of
from ..node.parameters import ParameterError
from .bindings import vhost_bindings
from .common import (
    amqp_errors,
    bad_request,
    broker_of,
    json_value,
    parse_json,
    require_administrator,
    vhost_or_404,
)
from .node_metrics import cluster_permanent_id
from .overview import RABBITMQ_API_VERSION
from .permissions import permission_json
from .users import user_json

if TYPE_CHECKING:
    from ottermq.vhost.vhost import VHost

    from ..node.view import NodeView

log = logging.getLogger(__name__)

RESERVED_EXCHANGES = frozenset(name for name, _type, _internal in PREDECLARED)
TOPOLOGY = ("queues", "exchanges", "bindings", "policies", "parameters")
REPORT = "ottermq.definitions_report"  # request key: the import's ImportReport (rule 3)


def topology(vhost: VHost, with_vhost: bool) -> dict[str, list[dict[str, Any]]]:
    """``vhost``'s queues, exchanges and bindings as definitions (``vhost`` fields if ``with_vhost``)."""
    where = {"vhost": vhost.name} if with_vhost else {}
    queues = [
        {
            "name": q.name,
            **where,
            "durable": q.durable,
            "auto_delete": q.auto_delete,
            "arguments": json_value(q.args.raw or {}),
        }
        for name, q in sorted(vhost.queues.items())
        if not q.exclusive
    ]
    exchanges = [
        {
            "name": x.name,
            **where,
            "type": x.type,
            "durable": x.durable,
            "auto_delete": x.auto_delete,
            "internal": x.internal,
            "arguments": json_value(x.arguments),
        }
        for name, x in sorted(vhost.exchanges.items())
        if name and name not in RESERVED_EXCHANGES
    ]
    exclusive = {name for name, q in vhost.queues.items() if q.exclusive}
    bindings = []
    for b in vhost_bindings(vhost):
        if not b["source"] or (b["destination_type"] == "queue" and b["destination"] in exclusive):
            continue
        item = {key: value for key, value in b.items() if key != "properties_key"}
        if not with_vhost:
            del item["vhost"]
        bindings.append(item)
    return {"queues": queues, "exchanges": exchanges, "bindings": bindings}


def live_policies(vhosts: list[VHost]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(policies, parameters)`` of these vhosts in RabbitMQ's export shapes."""
    records = [
        record_of(p)
        for v in vhosts
        for registry in (v.policies, v.operator_policies)
        for _, p in sorted(registry.items())
    ]
    return policies_to_json(records)


def export(broker: NodeView, only: VHost | None = None) -> dict[str, Any]:
    """The running broker's definitions, node-wide or of the vhost ``only`` (rule 1)."""
    if only is not None:
        policies, parameters = live_policies([only])
        parameters += [parameter_json(p) for p in broker.ops.parameters.records() if p.vhost == only.name]
        scoped = topology(only, False)
        head = {"rabbit_version": RABBITMQ_API_VERSION, "parameters": parameters, "policies": policies}
        return {**head, **scoped}
    auth = broker.auth
    body: dict[str, Any] = {
        "rabbit_version": RABBITMQ_API_VERSION,
        "rabbitmq_version": RABBITMQ_API_VERSION,
        "product_name": "OtterMQ",
        "product_version": VERSION,
        "users": [user_json(auth.users[name], broker.limits.of("user", name)) for name in sorted(auth.users)],
        "vhosts": [
            {
                "name": v.name,
                "limits": [list(kv) for kv in broker.limits.of("vhost", v.name).items()],
                "metadata": {"description": v.description, "tags": list(v.tags)},
            }
            for _name, v in sorted(auth.vhosts.items())
        ],
        "permissions": [permission_json(auth.permissions[key]) for key in sorted(auth.permissions)],
        "topic_permissions": [],
        "global_parameters": [{"name": "internal_cluster_id", "value": cluster_permanent_id(node_name())}],
        "queues": [],
        "exchanges": [],
        "bindings": [],
    }
    body["policies"], body["parameters"] = live_policies([v for _, v in sorted(broker.vhosts.items())])
    body["parameters"] += vhost_limit_parameters(broker.limits.records())
    body["parameters"] += [parameter_json(p) for p in broker.ops.parameters.records()]
    for _name, vhost in sorted(broker.vhosts.items()):
        if not broker.cluster.owns(vhost.name):  # another worker's: it exports them
            continue
        for key, items in topology(vhost, True).items():
            body[key] += items
    return body


async def get_definitions(request: web.Request) -> web.Response:
    require_administrator(request)
    only = vhost_or_404(request) if "vhost" in request.match_info else None
    headers = {}
    download = request.query.get("download")
    if download:
        if not download.isprintable() or '"' in download:  # a header cannot carry it
            raise bad_request("download must be a printable file name")
        headers["Content-Disposition"] = f"attachment; filename={download}"
    return web.json_response(export(broker_of(request), only), headers=headers)


async def _body(request: web.Request) -> dict[str, Any]:
    """The definitions sent: a JSON body, or the ``file`` field of a multipart upload."""
    try:
        if request.content_type == "multipart/form-data":
            form = await request.post()
            upload = form.get("file")
            raw = upload.file.read() if isinstance(upload, web.FileField) else str(upload or "").encode()
        else:
            raw = await request.read()
    except (ValueError, aiohttp.ClientError, aiohttp.http_exceptions.HttpProcessingError):
        raise bad_request("failed_to_parse_json") from None
    data = parse_json(raw, detail=False)
    if not isinstance(data, dict):
        raise bad_request("failed_to_parse_json")
    return data


def _for_vhost(data: dict[str, Any], vhost: str) -> dict[str, Any]:
    """Only the topology of ``data``, every item placed in ``vhost``."""
    scoped: dict[str, Any] = {}
    for key in TOPOLOGY:
        items = data.get(key) or []
        if not isinstance(items, list):
            raise bad_request(f"{key} must be a list")
        scoped[key] = [{**item, "vhost": vhost} if isinstance(item, dict) else item for item in items]
    return scoped


def _durable(data: dict[str, Any], key: str) -> dict[tuple[str, str], bool]:
    """``(vhost, name) -> durable`` of the ``queues`` or ``exchanges`` sent (absent means durable)."""
    flags: dict[tuple[str, str], bool] = {}
    for item in data.get(key) or []:
        if isinstance(item, dict):
            durable = item.get("durable", True) not in (False, "false")
            flags[(str(item.get("vhost")), str(item.get("name")))] = durable
    return flags


async def post_definitions(request: web.Request) -> web.Response:
    require_administrator(request)
    broker = broker_of(request)
    data = await _body(request)
    if "vhost" in request.match_info:
        data = _for_vhost(data, vhost_or_404(request).name)
    report = ImportReport()
    try:
        defs = definitions_from_json(data, transient=True, report=report)  # first: checks every section
        exchanges, queues = _durable(data, "exchanges"), _durable(data, "queues")

        def durable(kind: str, vhost: str, name: str) -> bool:
            return (exchanges if kind == "exchange" else queues).get((vhost, name), True)

        await broker.ops.prepare_definitions(broker.owned_vhost, defs)  # policy patterns: off the loop
        with amqp_errors():
            broker.apply_definitions(defs, durable, report)
    except (DefinitionsError, AuthError, PolicyError, LimitError, ParameterError) as exc:
        raise bad_request(str(exc)) from None
    request[REPORT] = report
    return report_response(report, wants_report(request))


def wants_report(request: web.Request) -> bool:
    """``?report=true``: the report even when nothing was skipped (rule 3)."""
    return request.query.get("report", "").lower() in ("true", "1", "yes")


def report_response(report: ImportReport, always: bool = False) -> web.Response:
    """Rule 3's answer."""
    if report.complete and not always:
        return web.Response(status=204)
    return web.json_response(report.to_json())


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/definitions")(get_definitions)
    routes.post(f"{prefix}/definitions")(post_definitions)
    routes.get(f"{prefix}/definitions/{{vhost}}")(get_definitions)
    routes.post(f"{prefix}/definitions/{{vhost}}")(post_definitions)
