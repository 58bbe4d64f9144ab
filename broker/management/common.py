"""Helpers shared by the management resource modules: JSON errors, field values, visibility.

RabbitMQ's texts (checked against RabbitMQ 3.10.8's management plugin):

- missing object or unknown path: ``404 {"error":"Object Not Found","reason":"Not Found"}``
- no credentials: ``401`` with an empty body; bad credentials: ``401
  {"error":"not_authorized","reason":"Login failed"}``; a user without a management tag: ``401
  {"error":"not_authorised","reason":"Not management user"}`` (British spelling, as RabbitMQ); all
  with ``WWW-Authenticate: Basic realm="RabbitMQ Management"``
- a method the path does not have: ``405`` with an empty body and ``Allow: HEAD, GET, OPTIONS``
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from aiohttp import web
from ottermq.amqp.errors import AMQPError
from ottermq.amqp.table import MAX_DEPTH, RawField
from ottermq.vhost.patterns import PatternError, PatternTimeout, compile_pattern

if TYPE_CHECKING:
    from ottermq.persistence.store import UserRecord
    from ottermq.vhost.vhost import VHost

    from ..node.auth import Permission, ResourceKind
    from ..node.view import NodeView
    from .rates import RateSampler

BROKER_KEY: web.AppKey[NodeView] = web.AppKey("broker")
SAMPLER_KEY: web.AppKey[RateSampler] = web.AppKey("sampler")
PREFIX_KEY: web.AppKey[str] = web.AppKey("prefix", str)  # OTTERMQ_WEB_API_PATH without a trailing /
USER_KEY = "ottermq.user"  # the authenticated UserRecord, set on each request by the auth middleware

REALM = 'Basic realm="RabbitMQ Management"'
MANAGEMENT_TAGS = frozenset({"administrator", "monitoring", "policymaker", "management"})
SEE_ALL_TAGS = frozenset({"administrator", "monitoring"})  # see every vhost's objects


def json_error(status: int, error: str, reason: str, *, challenge: bool = False) -> web.Response:
    """RabbitMQ's JSON error body ``{"error": ..., "reason": ...}`` with ``status``."""
    headers = {"WWW-Authenticate": REALM} if challenge else None
    body = json.dumps({"error": error, "reason": reason}, separators=(",", ":"))  # RabbitMQ's bytes
    return web.json_response(text=body, status=status, headers=headers)


class NotFound(web.HTTPException):
    """A named object (vhost, queue, exchange) does not exist: RabbitMQ's JSON 404."""

    status_code = 404

    def __init__(self) -> None:
        super().__init__(
            text='{"error":"Object Not Found","reason":"Not Found"}', content_type="application/json"
        )


def broker_of(request: web.Request) -> NodeView:
    return request.app[BROKER_KEY]


def sampler_of(request: web.Request) -> RateSampler:
    return request.app[SAMPLER_KEY]


def user_of(request: web.Request) -> UserRecord:
    user: UserRecord = request[USER_KEY]
    return user


def visible_vhosts(request: web.Request) -> list[VHost]:
    """The vhosts the user may see listed (``/api/vhosts``, the overview): all for
    administrator/monitoring, else those it has permissions in (RabbitMQ's
    ``rabbit_mgmt_util:list_visible_vhosts``)."""
    broker = broker_of(request)
    user = user_of(request)
    sees_all = not SEE_ALL_TAGS.isdisjoint(user.tags)
    return [
        vhost
        for name, vhost in sorted(broker.vhosts.items())
        if sees_all or (user.name, name) in broker.auth.permissions
    ]


def vhost_or_404(request: web.Request) -> VHost:
    """The vhost named by the ``vhost`` path segment (``%2F`` for ``/``), if the user may use it: an
    administrator any, anyone else (monitoring included) one it has permissions in (RabbitMQ's
    ``is_authorized_vhost``, checked before the object itself: a missing queue in such a vhost is
    401 too).

    Raises:
        NotFound: no such vhost.
        HTTPUnauthorized: the vhost exists and the user may not use it (``User not authorised to
            access virtual host``).
    """
    name = request.match_info["vhost"]
    vhost = broker_of(request).vhosts.get(name)
    if vhost is None:
        raise NotFound()
    if not may_use_vhost(request, name):
        raise not_authorised("User not authorised to access virtual host")
    return vhost


def may_use_vhost(request: web.Request, name: str) -> bool:
    """Whether the API user may use vhost ``name``'s objects: an administrator any, anyone else
    (monitoring included) one it has permissions in (RabbitMQ's ``is_authorized_vhost``)."""
    user = user_of(request)
    return "administrator" in user.tags or (user.name, name) in broker_of(request).auth.permissions


def selected_vhosts(request: web.Request, owned_only: bool = True) -> list[VHost]:
    """One vhost when the path names one (see :func:`vhost_or_404`), else the vhosts whose queues,
    exchanges and bindings the user may list: every vhost for an administrator, else those it has
    permissions in, monitoring users included (RabbitMQ's ``rabbit_mgmt_util:filter_vhost``)."""
    if "vhost" in request.match_info:
        return [vhost_or_404(request)]
    broker = broker_of(request)
    vhosts = sorted(broker.vhosts.items())
    owns = broker.cluster.owns if owned_only else (lambda _name: True)  # another worker's, with several
    return [vhost for name, vhost in vhosts if owns(name) and may_use_vhost(request, name)]


MAX_SHOWN_DEPTH = MAX_DEPTH + 2  # tables and arrays shown nested (a decoded header nests at most MAX_DEPTH)


def json_value(value: object, depth: int = 0) -> Any:
    """An AMQP field value as RabbitMQ's management API shows it (longstr bytes as text,
    timestamps as epoch seconds, decimals as numbers, tables and arrays recursively).

    Total: what cannot be shown as JSON is shown as a text saying so, never an exception. A table or
    array the codec kept unread (``RawField``, deeper than its ``MAX_DEPTH``; RabbitMQ shows any
    depth) or nested past ``MAX_SHOWN_DEPTH`` is ``"(table nested too deep to show: N octets)"``; a
    non-finite float is its name (``"NaN"``, ``"Infinity"``); a value of another type its ``str``.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _float_name(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, Decimal):
        return float(value) if value.is_finite() else str(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, RawField):
        return f"({value.kind} nested too deep to show: {len(value.raw)} octets)"
    if isinstance(value, Mapping | list | tuple) and depth >= MAX_SHOWN_DEPTH:
        return f"({'table' if isinstance(value, Mapping) else 'array'} nested too deep to show)"
    if isinstance(value, Mapping):
        return {str(k): json_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, Iterable):
        return [json_value(v, depth + 1) for v in value]
    try:
        return str(value)
    except Exception:  # an object whose str() fails: its type still says something
        return f"({type(value).__name__} value)"


def _float_name(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _path_value(item: Any, path: list[str]) -> Any:
    for key in path:
        if not isinstance(item, dict) or key not in item:
            return None
        item = item[key]
    return item


def _pick(item: Any, paths: list[list[str]]) -> Any:
    """``item`` cut down to these dotted column paths (missing ones are left out)."""
    if not isinstance(item, dict):
        return item
    out: dict[str, Any] = {}
    for path in paths:
        value, target = item, out
        for i, key in enumerate(path):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
            if i == len(path) - 1:
                target[key] = value
            else:
                target = target.setdefault(key, {})
    return out


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (2, 0)
    if isinstance(value, bool | int | float):
        return (0, value)
    return (1, value if isinstance(value, str) else json.dumps(value, sort_keys=True))


def shape(body: Any, query: Mapping[str, str], paginated: bool = False) -> Any:
    """A GET answer shaped by RabbitMQ's query parameters (``rabbit_mgmt_util``): ``sort`` (a dotted
    field) and ``sort_reverse=true`` order a list; ``columns=a,b.c`` keeps only those (dotted) fields
    of each item, or of a single object. With ``page`` on a list that RabbitMQ paginates
    (``paginated``), the answer is a page (see :func:`page_of`). Other bodies pass through unchanged.

    Raises:
        HTTPBadRequest: bad pagination parameters (RabbitMQ's texts).
    """
    if paginated and isinstance(body, list) and "page" in query:
        return page_of(body, query)
    if isinstance(body, list):
        body = _ordered(body, query)
    columns = [c for c in query.get("columns", "").split(",") if c]
    if columns:
        paths = [c.split(".") for c in columns]
        body = [_pick(item, paths) for item in body] if isinstance(body, list) else _pick(body, paths)
    return body


def _ordered(items: list[Any], query: Mapping[str, str]) -> list[Any]:
    sort = query.get("sort")
    if sort:
        path = sort.split(".")
        items = sorted(items, key=lambda item: _sort_key(_path_value(item, path)))
    if query.get("sort_reverse", "false").lower() == "true":
        items = list(reversed(items))
    return items


PAGE_SIZE = 100  # RabbitMQ's default page_size
MAX_PAGE_SIZE = 500


def _page_numbers(query: Mapping[str, str]) -> tuple[int, int]:
    try:
        page = int(query["page"])
        size = int(query["page_size"]) if "page_size" in query else None
    except ValueError:
        raise bad_request("Pagination parameters are invalid") from None
    if page < 1 or (size is not None and not 1 <= size <= MAX_PAGE_SIZE):
        shown = "undefined" if size is None else size
        reason = f"Invalid pagination parameters: page number {page}, page size {shown}"
        raise bad_request(reason, "invalid_pagination_parameters")
    return page, PAGE_SIZE if size is None else size


def _name_filter(query: Mapping[str, str]) -> Callable[[Any], bool]:
    """``name`` as a case-insensitive substring, or a case-insensitive regular expression searched
    for with ``use_regex=true``; no ``name`` keeps everything."""
    name = query.get("name", "")
    if not name:
        return lambda item: True
    if query.get("use_regex", "false").lower() == "true":
        try:
            pattern = compile_pattern(name, ignore_case=True)
        except PatternError:
            raise bad_request("Pagination parameters are invalid") from None

        def keep(item: Any) -> bool:
            try:
                return pattern.search(str(_path_value(item, ["name"]) or ""))
            except PatternTimeout as exc:  # bounded: a PCRE-only pattern out of time is refused
                raise bad_request(str(exc)) from None

        return keep
    lowered = name.lower()
    return lambda item: lowered in str(_path_value(item, ["name"]) or "").lower()


def page_of(items: list[Any], query: Mapping[str, str]) -> dict[str, Any]:
    """One page of ``items``, as RabbitMQ's paginated lists: filtered by ``name`` (see
    :func:`_name_filter`), sorted, cut to ``page`` (from 1) of ``page_size`` (default 100, at most
    500), then ``columns`` applied to each item.

    Raises:
        HTTPBadRequest: a page that is not a positive integer, a size outside 1..500, an invalid
            regular expression, or a page past the last (``page_out_of_range``).
    """
    page, size = _page_numbers(query)
    keep = _name_filter(query)
    filtered = _ordered([item for item in items if keep(item)], query)
    start = (page - 1) * size
    if page > 1 and start >= len(filtered):
        reason = f"Page out of range, page: {page} page size: {size}, len: {len(filtered)}"
        raise bad_request(reason, "page_out_of_range")
    chosen = filtered[start : start + size]
    columns = [c for c in query.get("columns", "").split(",") if c]
    if columns:
        paths = [c.split(".") for c in columns]
        chosen = [_pick(item, paths) for item in chosen]
    return {
        "filtered_count": len(filtered),
        "item_count": len(chosen),
        "items": chosen,
        "page": page,
        "page_count": -(-len(filtered) // size),
        "page_size": size,
        "total_count": len(items),
    }


def sort_by_name(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """RabbitMQ lists sort by vhost, then name."""
    return sorted(items, key=lambda item: (str(item.get("vhost", "")), str(item.get("name", ""))))


# -- the write side ------------------------------------------------------------------------------


def bad_request(reason: str | list[object], error: str = "bad_request") -> web.HTTPException:
    """RabbitMQ's ``400 {"error":"bad_request","reason":...}`` (or another ``error``)."""
    return web.HTTPBadRequest(
        text=json.dumps({"error": error, "reason": reason}, separators=(",", ":")),
        content_type="application/json",
    )


def not_authorised(reason: str) -> web.HTTPException:
    """RabbitMQ's ``401 {"error":"not_authorised","reason":...}`` with the realm."""
    return web.HTTPUnauthorized(
        text=json.dumps({"error": "not_authorised", "reason": reason}),
        content_type="application/json",
        headers={"WWW-Authenticate": REALM},
    )


def vhost_not_found() -> web.HTTPException:
    """RabbitMQ's ``404 {"error":"not_found","reason":"vhost_not_found"}`` (a PUT of a vhost's policy
    or limit where the vhost does not exist)."""
    body = json.dumps({"error": "not_found", "reason": "vhost_not_found"}, separators=(",", ":"))
    return web.HTTPNotFound(text=body, content_type="application/json")


def require_administrator(request: web.Request) -> None:
    """Raises:
    HTTPUnauthorized: the user lacks the administrator tag (``Not administrator user``)."""
    if "administrator" not in user_of(request).tags:
        raise not_authorised("Not administrator user")


def require_monitor(request: web.Request) -> None:
    """Raises:
    HTTPUnauthorized: the user has neither the administrator nor the monitoring tag (``Not monitor
    user``)."""
    if SEE_ALL_TAGS.isdisjoint(user_of(request).tags):
        raise not_authorised("Not monitor user")


MAX_JSON_DEPTH = 64  # objects and arrays a request body may nest (a definitions file needs ~5)


def parse_json(raw: bytes | str, detail: bool = True) -> Any:
    """A request body's JSON, refused (400) when it is not valid JSON, nests deeper than
    ``MAX_JSON_DEPTH`` or holds a string that is not Unicode text (a lone surrogate escape such as
    ``"\\ud800"``, which no name, header or password can be encoded from).

    Raises:
        HTTPBadRequest: as above (``failed_to_parse_json``).
    """
    try:
        value = json.loads(raw)
    except RecursionError:
        raise bad_request("failed_to_parse_json: nested too deep") from None
    except ValueError as exc:  # RabbitMQ's definitions import says no more (``detail=False``)
        raise bad_request(f"failed_to_parse_json: {exc}" if detail else "failed_to_parse_json") from None
    stack = [(value, 0)]
    while stack:  # iterative: the check itself must not recurse
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise bad_request(f"failed_to_parse_json: nested more than {MAX_JSON_DEPTH} levels")
            if isinstance(item, dict):
                for key, child in item.items():
                    _check_text(key)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
    return value


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise bad_request("failed_to_parse_json: a string is not valid Unicode (lone surrogate)") from None


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object (an empty body is ``{}``).

    Raises:
        HTTPBadRequest: the body is not a JSON object.
    """
    raw = await request.read()
    if not raw.strip():
        return {}
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise bad_request("not_json_object")
    return body


def flag(body: Mapping[str, Any], key: str, default: bool) -> bool:
    """A boolean body field; RabbitMQ also accepts the strings ``"true"``/``"false"``.

    Raises:
        HTTPBadRequest: not a boolean.
    """
    value = body.get(key, default)
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return bool(value == "true")
    raise bad_request(f"{key} must be a boolean")


def arguments(body: Mapping[str, Any]) -> dict[str, Any]:
    """The ``arguments`` body field (an object; absent or ``null`` means none).

    Raises:
        HTTPBadRequest: not an object.
    """
    value = body.get("arguments") or {}
    if not isinstance(value, dict):
        raise bad_request("arguments must be an object")
    return value


@contextlib.contextmanager
def amqp_errors() -> Iterator[None]:
    """Translate what a channel operation raises as RabbitMQ's management ``direct_request``
    does: NOT_FOUND -> 404, ACCESS_REFUSED/NOT_ALLOWED -> 401 ``Access refused.``, any other
    AMQP error -> 400 ``bad_request`` with the error's explanation."""
    try:
        yield
    except AMQPError as exc:
        if exc.reply_code == 404:
            raise NotFound() from None
        if exc.reply_code in (403, 530):
            raise not_authorised("Access refused.") from None
        raise bad_request(exc.text) from None


def check_permission(
    request: web.Request, vhost: VHost, permission: Permission, kind: ResourceKind, name: str
) -> None:
    """The API user's permission on a resource, as for a channel of that user.

    Raises:
        HTTPUnauthorized: refused (RabbitMQ's ``Access refused.``).
    """
    with amqp_errors():
        broker_of(request).ops.allow(user_of(request), vhost, permission, kind, name)
