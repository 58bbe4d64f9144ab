"""Dead letters over the API (ottermq extensions, RabbitMQ has no such endpoints). The work is in
``node/dlq_move.py`` (messages) and ``node/move_jobs.py`` (jobs); see their rules.

- ``GET /api/dead-letters``: queues holding dead-lettered messages (any with an ``x-death`` among
  its first ``SAMPLE`` ready messages), with counts by reason of those sampled; only the queues the
  user may browse.
- ``GET /api/dead-letters/{vhost}/{queue}?reason=&source_queue=&offset=0&limit=100&truncate=``:
  browse in place (nothing is consumed): ``total`` ready messages, ``dead_lettered`` (with
  ``x-death``), ``summary`` (counts by reason x source queue of the most recent death, over all ready
  messages), ``matching`` (after the filters) and one page of ``messages`` with their decoded deaths.
- ``POST /api/dead-letters/{vhost}/{queue}/moves`` body ``{"ids": [...]}`` (at most
  ``OTTERMQ_DLQ_MOVE_MAX_IDS``) or ``{"filter": {"reason", "source_queue"}}`` or ``{"all": true}``,
  plus ``target`` (null = the original exchange and routing key; or ``{"exchange", "routing_key"}``),
  ``keep_death_headers`` (false), ``rate`` (msg/s, 0 = no limit): 201 with the job and its
  ``Location``; 400 beyond the bounds (ids, ``OTTERMQ_DLQ_MOVE_MAX_JOBS``).
- ``GET /api/dead-letter-moves``, ``GET``/``PUT {"state": "paused"|"running"}``/``DELETE`` (cancel)
  ``/api/dead-letter-moves/{id}``: an ids selection shows as ``ids_count``; only the ``GET`` of one job
  lists its ``ids`` too.
- Every access to the queue is the operations layer's (``Operations.access_queue``: ``browse`` or
  ``move``): read permission, then existence, then exclusivity, answered as RabbitMQ's HTTP ``/get``
  answers them (``messages.queue_errors``: 401, 404, 400 ``405 RESOURCE_LOCKED``). A move also needs
  ``write`` on the target exchange, or on every original exchange the selected messages name
  (checked up front). Pausing, resuming and cancelling a move need the same, checked again then (on
  the messages still selected). A user sees the moves of the vhosts it sees.
- Scans (browse, the original exchanges of a move, the index) take turns with the move jobs
  (``MoveJobs.turns``): one slice at a time, however many requests there are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web
from ottermq.amqp.errors import AMQPError, FrameError
from ottermq.amqp.props import get_headers
from ottermq.persistence.memory import MemoryStore
from ottermq.vhost.message import Entry

from ..node.dlq_move import LastDeaths, Selection, deaths_of, first_death, selection_from_json, target_of
from ..node.move_jobs import LEGACY_FILE, MoveJob, MoveJobs, TooManyJobs
from .common import (
    NotFound,
    bad_request,
    broker_of,
    parse_json,
    user_of,
    vhost_or_404,
    visible_vhosts,
)
from .messages import payload_json, properties_json, queue_errors

MOVES_KEY: web.AppKey[MoveJobs] = web.AppKey("dlq_moves", MoveJobs)
SAMPLE = 1000
MAX_LIMIT = 1000
MAX_RATE = 1_000_000  # messages per second a move may be asked for
ID_CHARS = 24  # the most JSON characters one id takes in a request (19 digits, a comma, spaces)
SLACK = 64 * 1024  # what a move request holds besides its ids

if TYPE_CHECKING:
    from ..node.view import NodeView


def moves_of(request: web.Request) -> MoveJobs:
    return request.app[MOVES_KEY]


def setup_moves(app: web.Application, broker: NodeView) -> None:
    """The app's move jobs, kept in the store (a durable store's data directory may still hold an
    older ottermq's ``dlq-moves.json``: it is read into the store once)."""
    durable = not isinstance(broker.store, MemoryStore)
    legacy = broker.settings.data_dir / LEGACY_FILE if durable else None
    moves = app[MOVES_KEY] = MoveJobs(broker, legacy)

    async def start(_app: web.Application) -> None:
        await moves.load()

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
    ops, user = broker_of(request).ops, user_of(request)
    queues = [(v, q) for v in visible_vhosts(request) for q in list(v.queues.values()) if q.message_count]

    def sample(item: tuple[Any, Any]) -> None:
        vhost, queue = item
        try:
            ops.check_queue_access(user, vhost, queue.name, "browse")
        except AMQPError:
            return
        reasons: dict[str, int] = {}
        sampled = 0
        for entry in queue.ready_entries():  # synchronous: nothing changes meanwhile
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

    await moves_of(request).turns.each(queues, sample)
    found.sort(key=lambda q: (q["vhost"], q["name"]))
    return web.json_response(found)


def _queue(request: web.Request, access: Any) -> Any:
    """The vhost and queue of the path, checked by the operations layer for ``access``.

    Raises:
        HTTPNotFound, HTTPUnauthorized, HTTPBadRequest: as RabbitMQ's ``/get`` answers.
    """
    vhost = vhost_or_404(request)
    with queue_errors():
        queue = broker_of(request).ops.access_queue(
            user_of(request), vhost, request.match_info["queue"], access
        )
    return vhost, queue


async def browse(request: web.Request) -> web.Response:
    """A queue's dead letters, read in place: decoded x-death, summary, filters, paging (ottermq)."""
    vhost, queue = _queue(request, "browse")
    query = request.query
    offset = _int(query, "offset", 0, 0)
    limit = _int(query, "limit", 100, 0, MAX_LIMIT)
    truncate = _int(query, "truncate", 0, 0) or None
    reason, source = query.get("reason") or None, query.get("source_queue") or None
    summary: dict[tuple[str, str], int] = {}
    counts = {"dead": 0, "matching": 0, "total": 0}
    page: list[dict[str, Any]] = []
    last_deaths = LastDeaths()
    entries = queue.scan()  # a snapshot of memory, paged ones read as it goes: it takes turns with other work

    def look(entry: Entry) -> None:
        counts["total"] += 1
        last = last_deaths(entry.message) or (None, None, None, None)
        if last[0] is not None:
            counts["dead"] += 1
            key = (last[0] or "", last[1] or "")
            summary[key] = summary.get(key, 0) + 1
        if (reason is not None and last[0] != reason) or (source is not None and last[1] != source):
            return
        if offset <= counts["matching"] < offset + limit:
            page.append(_message_json(entry, truncate))
        counts["matching"] += 1

    await moves_of(request).turns.each(entries, look)
    return web.json_response(
        {
            "vhost": vhost.name,
            "queue": queue.name,
            "total": counts["total"],
            "dead_lettered": counts["dead"],
            "matching": counts["matching"],
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


async def _move_body(request: web.Request, max_ids: int) -> dict[str, Any]:
    """The request's JSON object; a body longer than ``max_ids`` ids can take is refused before it
    is parsed (parsing is the one step of a request that runs on the loop whole).

    Raises:
        HTTPBadRequest: too long, not JSON, not an object.
    """
    raw = await request.read()
    limit = max_ids * ID_CHARS + SLACK
    if len(raw) > limit:
        raise bad_request(
            f"a move request is at most {limit} bytes: it selects at most {max_ids} ids "
            "(OTTERMQ_DLQ_MOVE_MAX_IDS); move by filter or all"
        )
    body = parse_json(raw) if raw.strip() else {}
    if not isinstance(body, dict):
        raise bad_request("not_json_object")
    return body


async def create_move(request: web.Request) -> web.Response:
    """Start moving dead letters back to their original or a chosen exchange (ottermq extension)."""
    vhost, queue = _queue(request, "move")
    moves = moves_of(request)
    try:
        moves.check_room()  # before the work of reading the request (and again when it starts)
    except TooManyJobs as exc:
        raise bad_request(str(exc)) from None
    max_ids = broker_of(request).settings.dlq_move_max_ids
    body = await _move_body(request, max_ids)
    try:
        selection = selection_from_json(body, max_ids)
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
    try:
        job = moves.create(vhost.name, queue.name, selection, target, keep, float(rate))
    except TooManyJobs as exc:
        raise bad_request(str(exc)) from None
    location = request.path.split("/dead-letters/")[0] + f"/dead-letter-moves/{job.id}"
    return web.json_response(job.as_json(ids=False), status=201, headers={"Location": location})


async def _check_move(
    request: web.Request, vhost: Any, queue_name: str, selection: Selection, target: tuple[str, str] | None
) -> None:
    """What starting a move needs, and pausing, resuming or cancelling one: the queue access
    (``move``; a queue deleted since is fine), ``write`` on the target exchange or on every original
    exchange of the selected messages.

    Raises:
        HTTPUnauthorized, HTTPBadRequest: a permission is missing, the queue is locked.
    """
    ops, user = broker_of(request).ops, user_of(request)
    with queue_errors():
        ops.check_queue_access(user, vhost, queue_name, "move")
    queue = vhost.queues.get(queue_name)
    if target is not None:
        exchanges = {target[0]}
    else:
        exchanges = await _original_exchanges(request, queue, selection) if queue is not None else set()
    with queue_errors():
        for exchange in sorted(exchanges):
            ops.allow(user, vhost, "write", "exchange", exchange)


async def _original_exchanges(request: web.Request, queue: Any, selection: Selection) -> set[str]:
    """The exchanges the selected messages would go back to (a scan that takes turns)."""
    last_deaths = LastDeaths()
    match = selection.matcher(last_deaths)
    found: set[str] = set()

    def look(entry: Entry) -> None:
        if match(entry):
            where = target_of(entry.message, None, last_deaths)
            if where is not None:
                found.add(where[0])

    await moves_of(request).turns.each(queue.scan(), look)
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
        HTTPUnauthorized, HTTPBadRequest: a permission the move needs is missing, the queue is locked.
    """
    job = _job(request)
    vhost = broker_of(request).vhosts.get(job.vhost)
    if vhost is None:
        raise NotFound()
    await _check_move(request, vhost, job.queue, job.selection, job.target)
    return job


async def list_moves(request: web.Request) -> web.Response:
    """Dead-letter moves and their progress (ottermq extension)."""
    jobs = [j.as_json(ids=False) for j in moves_of(request).jobs.values() if _visible(request, j)]
    jobs.sort(key=lambda j: int(j["id"]) if j["id"].isdigit() else 0, reverse=True)
    return web.json_response(jobs)


async def get_move(request: web.Request) -> web.Response:
    """One dead-letter move's progress (ottermq extension)."""
    return web.json_response(_job(request).as_json())


async def put_move(request: web.Request) -> web.Response:
    """Pause or resume a dead-letter move: {"state": "paused"|"running"} (ottermq extension)."""
    job = await _controlled_job(request)
    body = await _move_body(request, 0)
    state = body.get("state")
    if state not in ("paused", "running"):
        raise bad_request('state must be "paused" or "running"')
    if job.state not in ("paused", "running"):
        raise bad_request(f"the move is {job.state}")
    moves = moves_of(request)
    moves.set_state(job, state)
    await moves.settled(job)  # paused: what the answer counts is final until it resumes
    return web.json_response(job.as_json(ids=False))


async def delete_move(request: web.Request) -> web.Response:
    """Cancel a dead-letter move; what it moved stays moved (ottermq extension)."""
    job = await _controlled_job(request)
    moves = moves_of(request)
    moves.cancel(job)
    await moves.settled(job)
    return web.Response(status=204)


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/dead-letters")(index)
    routes.get(f"{prefix}/dead-letters/{{vhost}}/{{queue}}")(browse)
    routes.post(f"{prefix}/dead-letters/{{vhost}}/{{queue}}/moves")(create_move)
    routes.get(f"{prefix}/dead-letter-moves")(list_moves)
    routes.get(f"{prefix}/dead-letter-moves/{{id}}")(get_move)
    routes.put(f"{prefix}/dead-letter-moves/{{id}}")(put_move)
    routes.delete(f"{prefix}/dead-letter-moves/{{id}}")(delete_move)
