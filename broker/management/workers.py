"""One management API over several workers (``OTTERMQ_WORKERS`` > 1), served by worker 0.

Rules (after the login, which worker 0 checks; the workers check the same header again):
- A change to metadata (users, vhosts, permissions, policies, limits, parameters, definitions
  without a vhost) is made by worker 0, then sent to every worker (``WorkerPool.sync``) before it
  is answered. ``POST /definitions`` also goes to every other worker, which declares the exchanges,
  queues and bindings of the vhosts it owns; the answer is worker 0's import report with theirs
  added (what they applied and skipped).
- A request about one vhost's objects (a path with a ``{vhost}`` that is not metadata) is answered
  by the vhost's owner: worker 0 passes it on as it came and returns the answer as it is.
- The lists of every vhost (queues, exchanges, bindings, connections, channels, consumers) are
  each worker's list joined, then sorted and paginated as one; ``/vhosts`` takes each vhost's
  entry from its owner; ``/overview`` and ``/nodes`` add the workers' counts and rates up;
  ``/definitions`` joins the workers' exchanges, queues and bindings to worker 0's metadata.
- One connection or channel by name is looked for in each worker in turn.
- The dynamic shovels run in worker 0 (``broker/shovel``): ``/shovels`` is worker 0's alone.
- A worker that is down (being started again) answers nothing: its vhosts' objects are missing
  from the lists and a request about one of them is ``503`` (RabbitMQ's JSON error body).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import hdrs, web
from yarl import URL

from ..node.definitions import ImportReport
from ..node.definitions.export import parameter_json
from .common import json_error
from .definitions import REPORT, report_response, wants_report

if TYPE_CHECKING:
    from ..node.info import WorkerPool
    from ..node.view import NodeView

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# paths (under the API prefix) whose changes are metadata: worker 0 makes them and syncs the workers
METADATA: tuple[str, ...] = (
    "/users",
    "/permissions",
    "/topic-permissions",
    "/policies",
    "/operator-policies",
)
METADATA += ("/vhost-limits", "/user-limits", "/parameters", "/global-parameters", "/vhosts", "/definitions")
# lists joined from every worker
JOINED = frozenset({"/queues", "/exchanges", "/bindings", "/connections", "/channels", "/consumers"})
JOINED |= {"/dead-letters", "/dead-letter-moves"}
WORKER_0 = ("/shovels",)  # answered by worker 0 alone, a {vhost} in the path or not
BY_NAME = ("/connections/{name}", "/channels/{name}", "/dead-letter-moves/{id}")
SUMMED = frozenset({"/overview", "/nodes", "/nodes/{name}"})
_SHAPING = frozenset(
    {"columns", "sort", "sort_reverse", "page", "page_size", "name", "use_regex", "pagination"}
)
_FORWARDED_HEADERS = (hdrs.AUTHORIZATION, hdrs.CONTENT_TYPE, hdrs.ACCEPT, "X-Reason")
_TIMEOUT = aiohttp.ClientTimeout(total=60)


class Forwarder:
    """Worker 0's client of the other workers' management APIs."""

    def __init__(self, node: NodeView, pool: WorkerPool, prefix: str) -> None:
        self.node = node
        self.pool = pool
        self.prefix = prefix
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=_TIMEOUT)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def dispatch(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        template = resource.canonical[len(self.prefix) :] if resource is not None else ""
        method = request.method
        if template.startswith(METADATA) and not (
            template.startswith("/vhosts/{vhost}/") and method == "GET"
        ):
            if template.startswith("/definitions/{vhost}") or (
                template == "/vhosts/{vhost}" and method == "GET"
            ):
                response = await self._by_owner(request, handler)
                if template.startswith("/definitions/{vhost}") and method == "GET":
                    return self._with_parameters(response, request.match_info["vhost"])
                return response
            response = await handler(request)
            if method not in ("GET", "HEAD") and 200 <= response.status < 300:
                await self.pool.sync()  # first: the workers must know a new vhost is theirs
                if template == "/definitions" and method == "POST":
                    return await self._import_everywhere(request, response)
            elif method == "GET" and template in ("/vhosts", "/definitions"):
                return await self._joined(request, response, template)
            return response
        if template.startswith(WORKER_0):
            return await handler(request)
        if "vhost" in request.match_info:
            return await self._by_owner(request, handler)
        if method == "GET" and template in JOINED:
            return await self._joined(request, await handler(request), template)
        if method == "GET" and template in SUMMED:
            return await self._summed(request, await handler(request))
        if template in BY_NAME or template.startswith(BY_NAME):  # worker 0's, or the first that has it
            missing: web.HTTPException | None = None
            try:
                response = await handler(request)
                if response.status != 404:
                    return response
            except web.HTTPException as exc:
                if exc.status != 404:
                    raise
                missing = exc
            for index in range(1, self.pool.count):
                forwarded = await self._forward(request, index, strip=True)
                if forwarded is not None and forwarded.status != 404:
                    return forwarded
            if missing is not None:
                raise missing
            return response
        return await handler(request)

    # -- one worker -------------------------------------------------------------------------------
    async def _by_owner(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        name = request.match_info["vhost"]
        if name not in self.node.vhosts:
            return await handler(request)  # 404 as one process answers it
        index = self.pool.owner(name)
        if index == 0:
            return await handler(request)
        forwarded = await self._forward(request, index, strip=True)  # shaped here, once
        if forwarded is None:
            return json_error(503, "service_unavailable", f"vhost {name} is down")
        return forwarded

    async def _forward(
        self, request: web.Request, index: int, strip: bool = False, extra: tuple[tuple[str, str], ...] = ()
    ) -> web.Response | None:
        """``request`` as worker ``index`` answers it (with the ``extra`` query parameters); None
        while it is down."""
        port = self.pool.web_port(index)
        if port is None:
            return None
        query = [(k, v) for k, v in request.query.items() if not (strip and k in _SHAPING)]
        query += [(k, v) for k, v in extra if k not in request.query]
        headers = {k: v for k in _FORWARDED_HEADERS if (v := request.headers.get(k)) is not None}
        body = await request.read() if request.body_exists else None  # read once, kept by aiohttp
        url = URL(f"http://127.0.0.1:{port}{request.rel_url.raw_path}", encoded=True)  # %2F stays
        try:
            async with self.session().request(
                request.method, url, params=query, headers=headers, data=body, allow_redirects=False
            ) as answer:
                payload = await answer.read()
                kept = {
                    k: v
                    for k, v in answer.headers.items()
                    if k
                    in (
                        hdrs.CONTENT_TYPE,
                        hdrs.WWW_AUTHENTICATE,
                        hdrs.ALLOW,
                        hdrs.CONTENT_DISPOSITION,
                        hdrs.LOCATION,
                    )
                }
                return web.Response(status=answer.status, body=payload, headers=kept)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("worker %d's management API: %s", index, exc)
            return None

    async def _import_everywhere(
        self, request: web.Request, response: web.StreamResponse
    ) -> web.StreamResponse:
        """``POST /definitions`` made by worker 0 (``response``), then by every other worker for the
        vhosts it owns; the answer is worker 0's report with theirs added (``definitions.py`` rule 3)."""
        report = request.get(REPORT)
        for index in range(1, self.pool.count):
            answer = await self._forward(request, index, extra=(("report", "true"),))
            if answer is None or not 200 <= answer.status < 300:
                log.error(
                    "worker %d refused %s %s: %s %r",
                    index,
                    request.method,
                    request.path,
                    "down" if answer is None else answer.status,
                    None if answer is None else answer.body,
                )
            elif isinstance(report, ImportReport) and isinstance(answer.body, bytes):
                report.add_topology(ImportReport.from_json(json.loads(answer.body)))
        if not isinstance(report, ImportReport):
            return response
        return report_response(report, wants_report(request))

    def _with_parameters(self, response: web.StreamResponse, vhost: str) -> web.StreamResponse:
        """Another worker's export of ``vhost`` with worker 0's shovel parameters of that vhost in it
        (the parameters are worker 0's alone)."""
        body = self._body(response)
        if body is None or self.pool.owner(vhost) == 0:
            return response
        body["parameters"] = body.get("parameters", []) + [
            parameter_json(p) for p in self.node.ops.parameters.records() if p.vhost == vhost
        ]
        return _like(response, body)

    # -- every worker -----------------------------------------------------------------------------
    async def _others(self, request: web.Request) -> list[Any]:
        bodies = []
        for index in range(1, self.pool.count):
            answer = await self._forward(request, index, strip=True)
            if answer is not None and answer.status == 200 and isinstance(answer.body, bytes):
                bodies.append(json.loads(answer.body))
        return bodies

    @staticmethod
    def _body(response: web.StreamResponse) -> Any:
        if isinstance(response, web.Response) and response.status == 200 and isinstance(response.body, bytes):
            return json.loads(response.body)
        return None

    async def _joined(
        self, request: web.Request, response: web.StreamResponse, template: str
    ) -> web.StreamResponse:
        mine = self._body(response)
        if mine is None:
            return response
        others = await self._others(request)
        if template == "/vhosts":  # every worker lists every vhost: the owner's entry counts
            entries = {item["name"]: item for item in mine}
            answers = [mine, *others]
            for item in mine:
                owner = self.pool.owner(item["name"])
                if owner < len(answers):
                    theirs = {o["name"]: o for o in answers[owner]}
                    entries[item["name"]] = theirs.get(item["name"], item)
            return _like(response, list(entries.values()))
        if template == "/definitions":
            for other in others:
                for key in ("exchanges", "queues", "bindings"):
                    mine[key] += other.get(key, [])
            return _like(response, mine)
        joined = list(mine)
        for other in others:
            joined += other
        if template == "/dead-letter-moves":  # newest first, as one worker lists them
            joined.sort(key=lambda job: int(job["id"]) if str(job["id"]).isdigit() else 0, reverse=True)
        return _like(response, joined)

    async def _summed(self, request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
        mine = self._body(response)
        if mine is None:
            return response
        for other in await self._others(request):
            mine = add_answers(mine, other)
        return web.json_response(mine)


def _like(response: web.StreamResponse, body: Any) -> web.Response:
    """``body`` as JSON with ``response``'s own headers (a download's ``Content-Disposition``)."""
    kept = {k: v for k, v in response.headers.items() if k == hdrs.CONTENT_DISPOSITION}
    return web.json_response(body, headers=kept)


# What adds up across workers: the overview's sections, a node's use of resources and its churn
OVERVIEW_SUMMED = frozenset(
    {"object_totals", "queue_totals", "message_stats", "churn_rates", "dead_letter_stats"}
)
NODE_SUMMED = frozenset({"mem_used", "fd_used", "sockets_used", "proc_used", "run_queue"})
NODE_SUMMED |= {f"{what}_{event}" for what in ("connection", "channel") for event in ("created", "closed")}
NODE_SUMMED |= {"queue_declared", "queue_created", "queue_deleted"}


def add_answers(mine: Any, other: Any) -> Any:
    """``other``'s counts added to ``mine`` (an overview, a node, or a list of nodes)."""
    if isinstance(mine, list) and isinstance(other, list):
        return [add_answers(a, b) for a, b in zip(mine, other, strict=False)]
    if not isinstance(mine, dict) or not isinstance(other, dict):
        return mine
    summed = OVERVIEW_SUMMED if "object_totals" in mine else NODE_SUMMED
    out = dict(mine)
    for key, value in mine.items():
        base = key.removesuffix("_details")
        if (key in summed or base in summed) and key in other:
            out[key] = _add(value, other[key])
    return out


def _add(mine: Any, other: Any) -> Any:
    """Counts and rates of two answers of the same shape added up; anything else is worker 0's."""
    if isinstance(mine, dict) and isinstance(other, dict):
        return {k: _add(v, other[k]) if k in other else v for k, v in mine.items()}
    if isinstance(mine, list) and isinstance(other, list) and len(mine) == len(other):
        if all(isinstance(x, dict) for x in mine):
            return [_add(a, b) for a, b in zip(mine, other, strict=True)]
        return mine
    if isinstance(mine, bool) or isinstance(other, bool):
        return mine
    if isinstance(mine, int | float) and isinstance(other, int | float):
        return mine + other
    return mine
