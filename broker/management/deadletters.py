"""Dead letters over the API (ottermq extensions, RabbitMQ has no such endpoints). The work
is in ``broker/dlq_move.py``; see its rules.

- ``GET /api/dead-letters``: queues holding dead-lettered messages (any with an ``x-death`` among
  its first ``SAMPLE`` ready messages), with counts by reason of those sampled.
- ``GET /api/dead-letters/{vhost}/{queue}?reason=&source_queue=&offset=0&limit=100&truncate=``:
  browse in place (nothing is consumed): ``total`` ready messages, ``dead_lettered`` (with
  ``x-death``), ``summary`` (counts by reason x source queue of the most recent death, over all ready
  messages), ``matching`` (after the filters) and one page of ``messages`` with their decoded deaths.
- ``POST /api/dead-letters/{vhost}/{queue}/moves`` body ``{"ids": [...]}`` or ``{"filter":
  {"reason", "source_queue"}}`` or ``{"all": true}``, plus ``target`` (null = the original exchange and
  routing key; or ``{"exchange", "routing_key"}``), ``keep_death_headers`` (false), ``rate`` (msg/s,
  0 = no limit): 201 with the job and its ``Location``.
- ``GET /api/dead-letter-moves``, ``GET``/``PUT {"state": "paused"|"running"}``/``DELETE``
  (cancel) ``/api/dead-letter-moves/{id}``.
- Permissions as for a channel of the user: browsing needs ``read`` on the queue; a move needs
  ``read`` on it and ``write`` on the target exchange, or on every original exchange the selected
  messages name (checked up front). Pausing, resuming and cancelling a move need the same, checked
  again then (on the messages still selected). A user sees the moves of the vhosts it sees.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from ottermq.amqp.errors import FrameError
from ottermq.amqp.props import get_headers
from ottermq.persistence.memory import MemoryStore
from ottermq.vhost.message import Entry

from ..node.dlq_move import (
    SCAN_CHUNK,
    LastDeaths,
    MoveJob,
    MoveJobs,
    deaths_of,
    first_death,
    selection_from_json,
    target_of,
)
from .common import (
    NotFound,
    bad_request,
    broker_of,
    check_permission,
    json_body,
    vhost_or_404,
    visible_vhosts,
)
from .messages import payload_json, properties_json

MOVES_KEY: web.AppKey[MoveJobs] = web.AppKey("dlq_moves", MoveJobs)
SAMPLE = 1000
MAX_LIMIT = 1000
MAX_RATE = 1_000_000  # messages per second a move may be asked for


def moves_of(request: web.Request) -> MoveJobs:
    return request.app[MOVES_KEY]


def setup_moves(app: web.Application, broker: Any) -> None:
    """The app's move jobs: resumed from the data directory's state file when the store is durable."""
    durable = not isinstance(broker.store, MemoryStore)
    state_file = broker.settings.data_dir / "dlq-moves.json" if durable else None
    moves = app[MOVES_KEY] = MoveJobs(broker, state_file)

    async def start(_app: web.Application) -> None:
        moves.resume_saved()

    async def stop(_app: web.Application) -> None:
        await moves.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)


def _int(query: Any, key: str, default: int, low: int, high: int | None = None) -> int:
    raw = query.get(key, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f"{key} must be an integer") from None
    if value < low or (high is not None and value > high):
        raise bad_request(f"{key} must be between {low} and {high}" if high else f"{key} must be >= {low}")
    return value


async def index(request: web.Request) -> web.Response:
    """Queues holding dead-lettered messages, with counts by reason (ottermq extension)."""
    found = []
    last_deaths = LastDeaths()
    for vhost in visible_vhosts(request):
        for queue in list(vhost.queues.values()):
            if not queue.message_count:
                continue
            reasons: dict[str, int] = {}
            sampled = 0
            for entry in queue.ready_entries():
                if sampled >= SAMPLE:
                    break
                sampled += 1
                last = last_deaths(entry.message)
                if last is not None and last[0] is not None:
                    reasons[last[0]] = reasons.get(last[0], 0) + 1
            if reasons:
                found.append(
                    {
                        "vhost": vhost.name,
                        "name": queue.name,
                        "messages_ready": queue.message_count,
                        "dead_lettered": sum(reasons.values()),
                        "reasons": reasons,
                        "sampled": sampled if sampled < queue.message_count else None,
                    }
                )
            await asyncio.sleep(0)  # many queues: let others in between
    found.sort(key=lambda q: (q["vhost"], q["name"]))
    return web.json_response(found)


def _queue(request: web.Request) -> Any:
    vhost = vhost_or_404(request)
    queue = vhost.queues.get(request.match_info["queue"])
    if queue is None:
        raise NotFound()
    return vhost, queue


async def browse(request: web.Request) -> web.Response:
    """A queue's dead letters, read in place: decoded x-death, summary, filters, paging (ottermq)."""
    vhost, queue = _queue(request)
    check_permission(request, vhost, "read", "queue", queue.name)
    query = request.query
    offset = _int(query, "offset", 0, 0)
    limit = _int(query, "limit", 100, 0, MAX_LIMIT)
    truncate = _int(query, "truncate", 0, 0) or None
    reason, source = query.get("reason") or None, query.get("source_queue") or None
    summary: dict[tuple[str, str], int] = {}
    dead = matching = 0
    page: list[dict[str, Any]] = []
    last_deaths = LastDeaths()
    entries = list(queue.ready_entries())  # a snapshot: the scan yields to the loop between chunks
    total = len(entries)
    for i, entry in enumerate(entries):
        if i % SCAN_CHUNK == SCAN_CHUNK - 1:
            await asyncio.sleep(0)
        last = last_deaths(entry.message) or (None, None, None, None)
        if last[0] is not None:
            dead += 1
            key = (last[0] or "", last[1] or "")
            summary[key] = summary.get(key, 0) + 1
        if (reason is not None and last[0] != reason) or (source is not None and last[1] != source):
            continue
        if offset <= matching < offset + limit:
            page.append(_message_json(entry, truncate))
        matching += 1
    return web.json_response(
        {
            "vhost": vhost.name,
            "queue": queue.name,
            "total": total,
            "dead_lettered": dead,
            "matching": matching,
            "summary": [
                {"reason": r, "source_queue": s, "count": n} for (r, s), n in sorted(summary.items())
            ],
            "offset": offset,
            "limit": limit,
            "messages": page,
        }
    )


def _message_json(entry: Entry, truncate: int | None) -> dict[str, Any]:
    message = entry.message
    try:
        headers = get_headers(message.raw_props)  # not kept on the message (memory)
    except FrameError:  # a raw client's malformed table, kept as it came: no deaths to show
        headers = None
    payload, encoding = payload_json(message.body, "auto", truncate)
    return {
        "id": entry.seq,
        "payload": payload,
        "payload_encoding": encoding,
        "payload_bytes": len(message.body),
        "redelivered": entry.redelivered,
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "properties": properties_json(message.raw_props),
        "deaths": deaths_of(headers),
        "first_death": first_death(headers),
    }


async def create_move(request: web.Request) -> web.Response:
    """Start moving dead letters back to their original or a chosen exchange (ottermq extension)."""
    vhost, queue = _queue(request)
    body = await json_body(request)
    try:
        selection = selection_from_json(body)
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    target_spec = body.get("target")
    target: tuple[str, str] | None = None
    if target_spec is not None:
        if (
            not isinstance(target_spec, dict)
            or not isinstance(target_spec.get("exchange", ""), str)
            or not (isinstance(target_spec.get("routing_key", ""), str))
        ):
            raise bad_request('target must be null or {"exchange": string, "routing_key": string}')
        name = target_spec.get("exchange", "")
        name = "" if name == "amq.default" else name
        if name and name not in vhost.exchanges:
            raise bad_request(f"target exchange '{name}' not found in vhost '{vhost.name}'")
        target = (name, target_spec.get("routing_key", ""))
    keep = body.get("keep_death_headers", False)
    rate = body.get("rate", 0) or 0
    if not isinstance(keep, bool):
        raise bad_request("keep_death_headers must be a boolean")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= MAX_RATE:
        raise bad_request(f"rate must be a number from 0 to {MAX_RATE} (messages per second; 0 = no limit)")
    await _check_move(request, vhost, queue.name, selection, target)
    job = moves_of(request).create(vhost.name, queue.name, selection, target, keep, float(rate))
    location = request.path.split("/dead-letters/")[0] + f"/dead-letter-moves/{job.id}"
    return web.json_response(job.as_json(), status=201, headers={"Location": location})


async def _check_move(
    request: web.Request, vhost: Any, queue_name: str, selection: Any, target: tuple[str, str] | None
) -> None:
    """What starting a move needs, and pausing, resuming or cancelling one: ``read`` on the queue,
    ``write`` on the target exchange or on every original exchange of the selected messages.

    Raises:
        HTTPUnauthorized: a permission is missing (``Access refused.``).
    """
    check_permission(request, vhost, "read", "queue", queue_name)
    queue = vhost.queues.get(queue_name)
    if target is not None:
        exchanges = {target[0]}
    else:
        exchanges = await _original_exchanges(queue, selection) if queue is not None else set()
    for exchange in sorted(exchanges):
        check_permission(request, vhost, "write", "exchange", exchange)


async def _original_exchanges(queue: Any, selection: Any) -> set[str]:
    """The exchanges the selected messages would go back to (a chunked scan: see ``browse``)."""
    last_deaths = LastDeaths()
    found: set[str] = set()
    for i, entry in enumerate(list(queue.ready_entries())):
        if i % SCAN_CHUNK == SCAN_CHUNK - 1:
            await asyncio.sleep(0)
        if selection.matches(entry, last_deaths):
            where = target_of(entry.message, None, last_deaths)
            if where is not None:
                found.add(where[0])
    return found


def _visible(request: web.Request, job: MoveJob) -> bool:
    return job.vhost in {v.name for v in visible_vhosts(request)}


def _job(request: web.Request) -> MoveJob:
    job = moves_of(request).jobs.get(request.match_info["id"])
    if job is None or not _visible(request, job):
        raise NotFound()
    return job


async def _controlled_job(request: web.Request) -> MoveJob:
    """The move named by the path, if the user may start it now (see :func:`_check_move`).

    Raises:
        NotFound: no such move, one the user does not see, or its vhost is gone.
        HTTPUnauthorized: a permission the move needs is missing.
    """
    job = _job(request)
    vhost = broker_of(request).vhosts.get(job.vhost)
    if vhost is None:
        raise NotFound()
    await _check_move(request, vhost, job.queue, job.selection, job.target)
    return job


async def list_moves(request: web.Request) -> web.Response:
    """Dead-letter moves and their progress (ottermq extension)."""
    jobs = [j.as_json() for j in moves_of(request).jobs.values() if _visible(request, j)]
    jobs.sort(key=lambda j: int(j["id"]) if j["id"].isdigit() else 0, reverse=True)
    return web.json_response(jobs)


async def get_move(request: web.Request) -> web.Response:
    """One dead-letter move's progress (ottermq extension)."""
    return web.json_response(_job(request).as_json())


async def put_move(request: web.Request) -> web.Response:
    """Pause or resume a dead-letter move: {"state": "paused"|"running"} (ottermq extension)."""
    job = await _controlled_job(request)
    body = await json_body(request)
    state = body.get("state")
    if state not in ("paused", "running"):
        raise bad_request('state must be "paused" or "running"')
    if job.state not in ("paused", "running"):
        raise bad_request(f"the move is {job.state}")
    moves_of(request).set_state(job, state)
    return web.json_response(job.as_json())


async def delete_move(request: web.Request) -> web.Response:
    """Cancel a dead-letter move; what it moved stays moved (ottermq extension)."""
    job = await _controlled_job(request)
    moves_of(request).cancel(job)
    return web.Response(status=204)


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/dead-letters")(index)
    routes.get(f"{prefix}/dead-letters/{{vhost}}/{{queue}}")(browse)
    routes.post(f"{prefix}/dead-letters/{{vhost}}/{{queue}}/moves")(create_move)
    routes.get(f"{prefix}/dead-letter-moves")(list_moves)
    routes.get(f"{prefix}/dead-letter-moves/{{id}}")(get_move)
    routes.put(f"{prefix}/dead-letter-moves/{{id}}")(put_move)
    routes.delete(f"{prefix}/dead-letter-moves/{{id}}")(delete_move)
