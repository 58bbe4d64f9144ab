"""``ottermq list|purge|get|publish|close-connection|users|permissions|vhosts|policies|limits``,
``ottermq parameters|shovels`` (``admin_runtime.py``) and ``ottermq definitions export|import --url``: a
small client of the management HTTP API.

It speaks only RabbitMQ's management API (stdlib ``urllib``), so it works against ottermq and against
RabbitMQ with ``rabbitmq_management`` alike. Where to connect comes from ``--url/--user/--password``,
else ``OTTERMQ_ADMIN_URL/_USER/_PASSWORD``, else the broker's own settings (``OTTERMQ_WEB_*``, its
default user; ``config.admin_defaults``). Before the command, one line on stderr says which broker
answered, from ``/api/overview``'s ``product_name``/``product_version`` (``Listing queues of
RabbitMQ 3.10.8 at http://localhost:15672/ (all vhosts)``; ``--quiet`` drops it). A broker that is
not OtterMQ gets a warning, and the commands that change something (``changes``) refuse it unless
``--any-broker`` is given (``api``'s rules). Output on stdout is a plain table, or the API's JSON with
``--format json``. An HTTP error prints ``ottermq COMMAND: STATUS REASON`` on stderr and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from . import admin_runtime
from .api import (
    AdminClient,
    AdminError,
    add_auth_options,
    add_target_options,
    announce,
    client_of,
    origin_of,
    quote,
)

# The columns each ``list`` shows (dotted paths into the API's objects), and whether it takes --vhost.
LISTS: dict[str, tuple[list[str], bool]] = {
    "queues": (["vhost", "name", "messages_ready", "messages_unacknowledged", "consumers"], True),
    "exchanges": (["vhost", "name", "type", "durable", "auto_delete"], True),
    "bindings": (["vhost", "source", "destination", "destination_type", "routing_key"], True),
    "connections": (["name", "user", "vhost", "channels"], False),
    "channels": (["name", "user", "vhost", "consumer_count", "messages_unacknowledged"], False),
    "consumers": (
        ["queue.vhost", "queue.name", "consumer_tag", "channel_details.name", "ack_required"],
        True,
    ),
    "vhosts": (["name", "messages"], False),
    "users": (["name", "tags"], False),
}
# ``ottermq get``'s table; x-death, message_id and headers are computed from ``properties`` (get_row)
GET_COLUMNS = [
    "routing_key",
    "exchange",
    "redelivered",
    "message_count",
    "message_id",
    "x-death",
    "headers",
    "payload_encoding",
    "payload",
]
# headers the broker writes when dead-lettering (RabbitMQ 3.13+ adds x-last-death-*, as ottermq does)
DEATH_HEADER_PREFIXES = ("x-first-death-", "x-last-death-")
ACKMODES = ["ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false"]
# the commands with their own actions (add, ...)
ACCESS = ("users", "permissions", "vhosts", "policies", "limits")
COMMANDS = ("list", "purge", "get", "publish", "close-connection", *ACCESS, *admin_runtime.RUNTIME)


def cell(item: Any, column: str) -> str:
    """The text of a dotted ``column`` of ``item``: missing/None empty, lists comma-joined."""
    value = item
    for key in column.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(cell({"v": v}, "v") for v in value)
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True)
    return str(value)


def format_table(items: Sequence[Any], columns: Sequence[str]) -> str:
    """``items`` as a left-aligned text table under a header and a dashed rule as wide as each
    column (newlines in values become spaces); no items: ``(none)``."""
    if not items:
        return "(none)\n"
    body = [[cell(item, c).replace("\n", " ") for c in columns] for item in items]
    widths = [max(len(row[i]) for row in [list(columns), *body]) for i in range(len(columns))]
    rows = [list(columns), ["-" * w for w in widths], *body]
    return "".join(
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n" for row in rows
    )


def add_parsers(sub: Any, defaults: Mapping[str, str]) -> None:
    """Add the admin subcommands to the ``ottermq`` parser's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    add_target_options(common, defaults)
    common.add_argument("--format", choices=["table", "json"], default="table", help="output format")
    fmt = argparse.ArgumentDefaultsHelpFormatter
    api = " over the management HTTP API (ottermq's or RabbitMQ's)"
    lst = sub.add_parser("list", parents=[common], formatter_class=fmt, help="list objects" + api)
    lst.add_argument("kind", choices=list(LISTS))
    lst.add_argument("--vhost", help="only this vhost (queues, exchanges, bindings, consumers)")
    purge = sub.add_parser("purge", parents=[common], formatter_class=fmt, help="purge a queue" + api)
    purge.add_argument("queue")
    purge.add_argument("--vhost", default="/")
    get = sub.add_parser(
        "get",
        parents=[common],
        formatter_class=fmt,
        help="get messages" + api,
        description="Get messages from a queue. The table shows each message's message_id, x-death (each"
        " death as 'REASON in QUEUE (count N)', most recent first) and its other headers; --format json"
        " shows everything the API returns.",
    )
    get.add_argument("queue")
    get.add_argument("--vhost", default="/")
    get.add_argument("--count", type=int, default=1)
    get.add_argument("--ackmode", choices=ACKMODES, default="ack_requeue_true")
    pub = sub.add_parser("publish", parents=[common], formatter_class=fmt, help="publish a message" + api)
    pub.add_argument("--vhost", default="/")
    pub.add_argument("--exchange", default="", help="empty: the default exchange")
    pub.add_argument("--routing-key", default="")
    pub.add_argument("--payload", required=True)
    close = sub.add_parser(
        "close-connection", parents=[common], formatter_class=fmt, help="close a connection" + api
    )
    close.add_argument("name", help="the connection's name as `ottermq list connections` shows it")
    close.add_argument("--reason", help="reply text the client sees (default: RabbitMQ's)")
    _add_access_parsers(sub, common, fmt, api)
    admin_runtime.add_parsers(sub, common, fmt, api)


def add_connection_options(parser: argparse.ArgumentParser, defaults: Mapping[str, str]) -> None:
    """``--url`` (which also switches ``ottermq definitions`` to the API), ``--user``, ``--password``,
    ``--cacert``, ``--quiet``, ``--vhost``."""
    parser.add_argument(
        "--url",
        help="a running broker's management API, e.g. http://localhost:15672"
        " (without it: the store in OTTERMQ_DATA_DIR)",
    )
    add_auth_options(parser, defaults)
    parser.add_argument("--vhost", help="only this vhost's queues, exchanges and bindings (with --url)")


# What each command says it does (announce), formatted with its arguments (and ``x``: its exchange,
# ``policy``/``limits``: which kind); ``of`` where it reads, ``on`` where it changes something.
DOING = {
    "list": "Listing {kind} of",
    "get": "Getting {count} message(s) from queue '{queue}' of",
    "purge": "Purging queue '{queue}' on",
    "publish": "Publishing to exchange '{x}' on",
    "close-connection": "Closing connection '{name}' on",
    "users list": "Listing users of",
    "users add": "Adding user '{name}' on",
    "users delete": "Deleting user '{name}' on",
    "users passwd": "Changing the password of user '{name}' on",
    "permissions list": "Listing permissions of",
    "permissions add": "Setting permissions of user '{user_name}' on",
    "permissions delete": "Clearing permissions of user '{user_name}' on",
    "vhosts list": "Listing vhosts of",
    "vhosts add": "Adding vhost '{name}' on",
    "vhosts delete": "Deleting vhost '{name}' on",
    "policies list": "Listing {policy} of",
    "policies set": "Setting {policy} '{name}' on",
    "policies clear": "Clearing {policy} '{name}' on",
    "limits list": "Listing {limits} of",
    "limits set": "Setting {limits} of '{owner}' on",
    "limits clear": "Clearing {limits} of '{owner}' on",
    "definitions export": "Exporting definitions of",
    "definitions import": "Importing definitions from {file} into",
    **admin_runtime.DOING,
}


def describe(args: argparse.Namespace) -> tuple[str, str]:
    """What :func:`announce` says for ``args``: ``("Listing queues of", "(all vhosts)")``."""
    action = getattr(args, "action", None)
    key = f"{args.command} {action}" if action else args.command
    names = {
        **vars(args),
        "x": getattr(args, "exchange", "") or "amq.default",
        "policy": "operator policies" if getattr(args, "operator", False) else "policies",
        "limits": "user limits" if getattr(args, "user_limits", False) else "vhost limits",
    }
    if key in ("policies set", "policies clear"):
        names["policy"] = names["policy"].removesuffix("ies") + "y"
    vhost = getattr(args, "vhost", None)
    if vhost:
        scope = f"(vhost {vhost})"
    elif key in (
        "permissions list",
        "policies list",
        "parameters list",
        "shovels list",
        "definitions export",
    ) or (args.command == "list" and LISTS[args.kind][1]):
        scope = "(all vhosts)"
    else:
        scope = ""
    return DOING[key].format(**names), scope


# What only reads; every other command changes the broker (and so refuses one that is not OtterMQ)
READS = frozenset(
    {
        "list",
        "users list",
        "permissions list",
        "vhosts list",
        "policies list",
        "limits list",
        "parameters list",
        "shovels list",
        "definitions export",
    }
)


def changes(args: argparse.Namespace) -> bool:
    """Whether the command changes the broker: everything but the lists, the export and a ``get``
    that puts the messages back (``ack_requeue_true``, ``reject_requeue_true``)."""
    action = getattr(args, "action", None)
    key = f"{args.command} {action}" if action else args.command
    if key == "get":
        return not str(args.ackmode).endswith("_requeue_true")
    return key not in READS


def check_target(client: AdminClient, args: argparse.Namespace) -> None:
    """:func:`announce` what the command does, refusing a broker that is not OtterMQ for a change.

    Raises:
        AdminError: as ``announce``.
    """
    announce(
        client,
        *describe(args),
        quiet=args.quiet,
        changes=changes(args),
        any_broker=args.any_broker,
        origin=origin_of(args),
    )


def _add_access_parsers(sub: Any, common: argparse.ArgumentParser, fmt: Any, api: str) -> None:
    text = "list, add, delete users or change a password"
    users = sub.add_parser("users", formatter_class=fmt, help=text + api)
    users_sub = users.add_subparsers(dest="action", required=True)
    users_sub.add_parser("list", parents=[common], formatter_class=fmt, help="list users")
    add = users_sub.add_parser(
        "add",
        parents=[common],
        formatter_class=fmt,
        help="create or replace a user",
        description="Create or replace a user: with a PASSWORD, or with --no-password for a user who"
        " logs in with a TLS client certificate only (SASL EXTERNAL). An empty password never logs in.",
    )
    add.add_argument("name")
    add.add_argument("new_password", metavar="PASSWORD", nargs="?")
    add.add_argument(
        "--no-password",
        action="store_true",
        help="no password at all (certificate login only; the user's password_hash is empty)",
    )
    add.add_argument(
        "--tags", default="", help="comma-separated: administrator, monitoring, policymaker, management"
    )
    delete = users_sub.add_parser("delete", parents=[common], formatter_class=fmt, help="delete a user")
    delete.add_argument("name")
    passwd = users_sub.add_parser(
        "passwd", parents=[common], formatter_class=fmt, help="set a user's password (its tags are kept)"
    )
    passwd.add_argument("name")
    passwd.add_argument("new_password", metavar="PASSWORD", nargs="?")
    passwd.add_argument(
        "--no-password", action="store_true", help="remove the password (certificate login only)"
    )

    perms = sub.add_parser("permissions", formatter_class=fmt, help="list, set or clear permissions" + api)
    perms_sub = perms.add_subparsers(dest="action", required=True)
    plist = perms_sub.add_parser("list", parents=[common], formatter_class=fmt, help="list permissions")
    plist.add_argument("--vhost", help="only this vhost")
    padd = perms_sub.add_parser(
        "add", parents=[common], formatter_class=fmt, help="set a user's permissions on a vhost"
    )
    padd.add_argument("vhost")
    padd.add_argument("user_name", metavar="USER")
    for kind in ("configure", "write", "read"):
        padd.add_argument(f"--{kind}", default=".*", help=f"{kind} regex")
    pdel = perms_sub.add_parser(
        "delete", parents=[common], formatter_class=fmt, help="clear a user's permissions on a vhost"
    )
    pdel.add_argument("vhost")
    pdel.add_argument("user_name", metavar="USER")

    vhosts = sub.add_parser("vhosts", formatter_class=fmt, help="list, add or delete virtual hosts" + api)
    vhosts_sub = vhosts.add_subparsers(dest="action", required=True)
    vhosts_sub.add_parser("list", parents=[common], formatter_class=fmt, help="list vhosts")
    vadd = vhosts_sub.add_parser("add", parents=[common], formatter_class=fmt, help="create a vhost")
    vadd.add_argument("name")
    vadd.add_argument("--description", default="")
    vdel = vhosts_sub.add_parser(
        "delete", parents=[common], formatter_class=fmt, help="delete a vhost and everything in it"
    )
    vdel.add_argument("name")

    pol = sub.add_parser("policies", formatter_class=fmt, help="list, set or clear (operator) policies" + api)
    pol_sub = pol.add_subparsers(dest="action", required=True)
    plist = pol_sub.add_parser("list", parents=[common], formatter_class=fmt, help="list policies")
    pset = pol_sub.add_parser(
        "set",
        parents=[common],
        formatter_class=fmt,
        help="set a policy, as rabbitmqctl set_policy NAME PATTERN DEFINITION",
    )
    pset.add_argument("name")
    pset.add_argument("pattern", help="regular expression searched in queue/exchange names")
    pset.add_argument("definition", help="JSON object, e.g. '{\"message-ttl\": 60000}'")
    pset.add_argument("--priority", type=int, default=0)
    pset.add_argument("--apply-to", default="all", choices=["all", "queues", "exchanges"])
    pclear = pol_sub.add_parser("clear", parents=[common], formatter_class=fmt, help="delete a policy")
    pclear.add_argument("name")
    for parser in (plist, pset, pclear):
        parser.add_argument(
            "--vhost",
            default="/" if parser is not plist else None,
            help="the vhost" + (" (default: all)" if parser is plist else ""),
        )
        parser.add_argument("--operator", action="store_true", help="operator policies")

    lim = sub.add_parser(
        "limits",
        formatter_class=fmt,
        help="list, set or clear vhost limits (max-connections, max-queues) or, with --user-limits, user"
        " limits (max-connections, max-channels)" + api,
    )
    lim_sub = lim.add_subparsers(dest="action", required=True)
    llist = lim_sub.add_parser("list", parents=[common], formatter_class=fmt, help="list limits")
    lset = lim_sub.add_parser(
        "set",
        parents=[common],
        formatter_class=fmt,
        help="set limits, as rabbitmqctl set_vhost_limits / set_user_limits: OWNER '{\"max-queues\": 10}'",
    )
    lset.add_argument("owner", help="the vhost (or the user, with --user-limits)")
    lset.add_argument("definition", help="JSON object, e.g. '{\"max-connections\": 100}' (-1: no limit)")
    lclear = lim_sub.add_parser("clear", parents=[common], formatter_class=fmt, help="clear limits")
    lclear.add_argument("owner", help="the vhost (or the user, with --user-limits)")
    lclear.add_argument("name", nargs="?", help="one limit (default: all of them)")
    for parser in (llist, lset, lclear):
        parser.add_argument("--user-limits", action="store_true", help="user limits instead of vhost ones")


def run(args: argparse.Namespace, out: Any = None) -> int:
    """Run one admin subcommand; returns the exit code."""
    out = out or sys.stdout
    try:
        if args.command == "users" and args.action in ("add", "passwd"):
            _secret(args)  # a missing or empty PASSWORD is refused before connecting
        client = client_of(args)
        check_target(client, args)
        result, columns = _call(client, args)
    except AdminError as exc:
        print(f"ottermq {args.command}: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        out.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
        return 0
    if args.command == "get" and isinstance(result, list):
        result = [get_row(message) for message in result]
    if isinstance(result, list):
        out.write(format_table(result, columns))
    elif isinstance(result, dict):
        out.write(format_table([result], columns))
    return 0


def get_row(message: Mapping[str, Any]) -> dict[str, Any]:
    """One row of ``ottermq get``'s table: the message, plus from its properties ``message_id``,
    ``x-death`` (each death as ``REASON in QUEUE (count N)``, most recent first, ``; `` between) and
    ``headers`` (the application's: without ``x-death`` and ``x-first-death-*``/``x-last-death-*``)."""
    props = message.get("properties")
    props = props if isinstance(props, Mapping) else {}  # RabbitMQ sends [] when there are none
    headers = props.get("headers")
    headers = headers if isinstance(headers, Mapping) else {}
    deaths = headers.get("x-death")
    deaths = [d for d in deaths if isinstance(d, Mapping)] if isinstance(deaths, list) else []
    own = {k: v for k, v in headers.items() if k != "x-death" and not k.startswith(DEATH_HEADER_PREFIXES)}
    return {
        **message,
        "message_id": props.get("message_id"),
        "x-death": "; ".join(
            f"{d.get('reason')} in {d.get('queue')} (count {d.get('count')})" for d in deaths
        ),
        "headers": own or None,
    }


def _call(client: AdminClient, args: argparse.Namespace) -> tuple[Any, list[str]]:
    command = args.command
    if command == "list":
        columns, per_vhost = LISTS[args.kind]
        path = f"/{args.kind}"
        if per_vhost and args.vhost:
            path += f"/{quote(args.vhost)}"
        return client.request("GET", path), columns
    if command == "purge":
        client.request("DELETE", f"/queues/{quote(args.vhost)}/{quote(args.queue)}/contents")
        return {"queue": args.queue, "purged": True}, ["queue", "purged"]
    if command == "get":
        body = {"count": args.count, "ackmode": args.ackmode, "encoding": "auto", "truncate": 50000}
        path = f"/queues/{quote(args.vhost)}/{quote(args.queue)}/get"
        return client.request("POST", path, body), GET_COLUMNS
    if command == "publish":
        exchange = args.exchange or "amq.default"
        body = {
            "properties": {},
            "routing_key": args.routing_key,
            "payload": args.payload,
            "payload_encoding": "string",
        }
        path = f"/exchanges/{quote(args.vhost)}/{quote(exchange)}/publish"
        return client.request("POST", path, body), ["routed"]
    if command == "close-connection":
        headers = {"X-Reason": args.reason} if args.reason else None
        client.request("DELETE", f"/connections/{quote(args.name)}", headers=headers)
        return {"connection": args.name, "closed": True}, ["connection", "closed"]
    if command in ACCESS:
        return _access(client, command, args)
    if command in admin_runtime.RUNTIME:
        return admin_runtime.call(client, args)
    raise AdminError(f"unknown command {command}")  # pragma: no cover - argparse limits the choices


def _secret(args: argparse.Namespace) -> dict[str, str]:
    """The password part of a user PUT: ``password``, or ``password_hash: ""`` with ``--no-password``
    (a user without a password, as RabbitMQ stores one).

    Raises:
        AdminError: no PASSWORD and no ``--no-password``, both, or an empty PASSWORD (which would
            never log in).
    """
    if args.no_password:
        if args.new_password is not None:
            raise AdminError("give a PASSWORD or --no-password, not both")
        return {"password_hash": ""}
    if args.new_password is None:
        raise AdminError("give a PASSWORD, or --no-password for a user who logs in with a certificate only")
    if not args.new_password:
        raise AdminError(
            "an empty password never logs in; use --no-password for a user who logs in with a"
            " certificate only"
        )
    return {"password": args.new_password}


def _access(client: AdminClient, command: str, args: argparse.Namespace) -> tuple[Any, list[str]]:
    """``users``, ``permissions`` and ``vhosts`` actions."""
    action = args.action
    if command == "users":
        path = f"/users/{quote(args.name)}" if action != "list" else ""
        if action == "list":
            return client.request("GET", "/users"), LISTS["users"][0]
        if action == "add":
            secret = _secret(args)
            tags = [t.strip() for t in args.tags.split(",") if t.strip()]
            client.request("PUT", path, {**secret, "tags": ",".join(tags)})
            return {"user": args.name, "tags": tags}, ["user", "tags"]
        if action == "passwd":  # a PUT replaces the user: send its tags back with the new password
            secret = _secret(args)
            current = client.request("GET", path) or {}
            tags = current.get("tags", [])
            tags = tags if isinstance(tags, list) else [t for t in str(tags).split(",") if t]
            client.request("PUT", path, {**secret, "tags": ",".join(tags)})
            changed = "removed" if args.no_password else "changed"
            return {"user": args.name, "password": changed}, ["user", "password"]
        client.request("DELETE", path)
        return {"user": args.name, "deleted": True}, ["user", "deleted"]
    if command == "permissions":
        columns = ["vhost", "user", "configure", "write", "read"]
        if action == "list":
            path = f"/vhosts/{quote(args.vhost)}/permissions" if args.vhost else "/permissions"
            return client.request("GET", path), columns
        path = f"/permissions/{quote(args.vhost)}/{quote(args.user_name)}"
        if action == "add":
            body = {"configure": args.configure, "write": args.write, "read": args.read}
            client.request("PUT", path, body)
            return {"vhost": args.vhost, "user": args.user_name, **body}, columns
        client.request("DELETE", path)
        return {"vhost": args.vhost, "user": args.user_name, "cleared": True}, ["vhost", "user", "cleared"]
    if command == "policies":
        return _policies(client, args)
    if command == "limits":
        return _limits(client, args)
    if action == "list":
        return client.request("GET", "/vhosts"), LISTS["vhosts"][0]
    path = f"/vhosts/{quote(args.name)}"
    if action == "add":
        client.request("PUT", path, {"description": args.description})
        return {"vhost": args.name, "created": True}, ["vhost", "created"]
    client.request("DELETE", path)
    return {"vhost": args.name, "deleted": True}, ["vhost", "deleted"]


def _policies(client: AdminClient, args: argparse.Namespace) -> tuple[Any, list[str]]:
    """``policies list|set|clear`` (``--operator``: operator policies)."""
    kind = "operator-policies" if args.operator else "policies"
    columns = ["vhost", "name", "pattern", "apply-to", "priority", "definition"]
    if args.action == "list":
        path = f"/{kind}" + (f"/{quote(args.vhost)}" if args.vhost else "")
        return client.request("GET", path), columns
    path = f"/{kind}/{quote(args.vhost)}/{quote(args.name)}"
    if args.action == "clear":
        client.request("DELETE", path)
        return {"vhost": args.vhost, "name": args.name, "cleared": True}, ["vhost", "name", "cleared"]
    try:
        definition = json.loads(args.definition)
    except ValueError as exc:
        raise AdminError(f"DEFINITION is not JSON: {exc}") from None
    body = {
        "pattern": args.pattern,
        "definition": definition,
        "priority": args.priority,
        "apply-to": args.apply_to,
    }
    client.request("PUT", path, body)
    return {"vhost": args.vhost, "name": args.name, **body}, columns


def _limits(client: AdminClient, args: argparse.Namespace) -> tuple[Any, list[str]]:
    """``limits list|set|clear`` (``--user-limits``: user limits)."""
    kind, key = ("user-limits", "user") if args.user_limits else ("vhost-limits", "vhost")
    if args.action == "list":
        return client.request("GET", f"/{kind}"), [key, "value"]
    if args.action == "clear":
        listed: list[dict[str, Any]] = list(client.request("GET", f"/{kind}/{quote(args.owner)}") or [])
        names = [args.name] if args.name else list((listed[0] if listed else {}).get("value") or {})
        for name in names:
            client.request("DELETE", f"/{kind}/{quote(args.owner)}/{quote(name)}")
        return {key: args.owner, "cleared": ",".join(names)}, [key, "cleared"]
    try:
        values = json.loads(args.definition)
    except ValueError as exc:
        raise AdminError(f"DEFINITION is not JSON: {exc}") from None
    if not isinstance(values, dict):
        raise AdminError("DEFINITION must be a JSON object, e.g. '{\"max-connections\": 100}'")
    for name, value in values.items():
        client.request("PUT", f"/{kind}/{quote(args.owner)}/{quote(name)}", {"value": value})
    return {key: args.owner, "value": values}, [key, "value"]


def definitions(action: str, path: str, args: argparse.Namespace, out: Any = None) -> int:
    """``ottermq definitions export|import --url``: through a running broker's API."""
    out = out or sys.stdout
    api_path = "/definitions" + (f"/{quote(args.vhost)}" if args.vhost else "")
    try:
        if args.command == "users" and args.action in ("add", "passwd"):
            _secret(args)  # a missing or empty PASSWORD is refused before connecting
        client = client_of(args)
        check_target(client, args)
        if action == "export":
            text = json.dumps(client.request("GET", api_path), indent=2) + "\n"
            if path == "-":
                out.write(text)
            else:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            return 0
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise AdminError(f"cannot read {path}: {exc}") from None
        answer = client.request("POST", api_path + "?report=true", data)
        if answer is None:  # RabbitMQ: 204, everything imported (it reports nothing more)
            out.write(f"Imported definitions from {path}: nothing was skipped\n")
            return 0
        from ..node.definitions.report import ImportReport  # only here: it loads the broker's model

        lines = ImportReport.from_json(answer).lines()
        out.write(
            f"Imported definitions from {path}: {lines[0]}\n" + "".join(f"{line}\n" for line in lines[1:])
        )
        return 0
    except AdminError as exc:
        print(f"ottermq definitions {action}: {exc}", file=sys.stderr)
        return 1
