"""``ottermq parameters list|set|clear`` and ``ottermq shovels list|restart|delete``: runtime
parameters and dynamic shovels over the management HTTP API (ottermq's or RabbitMQ's).

``parameters set COMPONENT NAME VALUE`` takes the JSON ``rabbitmqctl set_parameter`` takes, unchanged
(``ottermq parameters set shovel my-shovel '{"src-uri": "amqp://", ...}' --vhost /``); it answers
with RabbitMQ's reason when the value is refused (``Validation failed``... one line per problem).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .api import AdminClient, AdminError, quote

RUNTIME = ("parameters", "shovels")
DOING = {
    "parameters list": "Listing runtime parameters of",
    "parameters set": "Setting runtime parameter '{name}' of component '{component}' on",
    "parameters clear": "Clearing runtime parameter '{name}' of component '{component}' on",
    "shovels list": "Listing shovels of",
    "shovels restart": "Restarting shovel '{name}' on",
    "shovels delete": "Deleting shovel '{name}' on",
}
PARAMETER_COLUMNS = ["vhost", "component", "name", "value"]
SHOVEL_COLUMNS = ["vhost", "name", "state", "src_uri", "src_queue", "dest_uri", "dest_queue", "reason"]


def add_parsers(sub: Any, common: argparse.ArgumentParser, fmt: Any, api: str) -> None:
    """The ``parameters`` and ``shovels`` subcommands."""
    params = sub.add_parser(
        "parameters", formatter_class=fmt, help="list, set or clear runtime parameters" + api
    )
    params_sub = params.add_subparsers(dest="action", required=True)
    plist = params_sub.add_parser(
        "list", parents=[common], formatter_class=fmt, help="list runtime parameters"
    )
    plist.add_argument("component", nargs="?", help="only this component's (e.g. shovel)")
    pset = params_sub.add_parser(
        "set",
        parents=[common],
        formatter_class=fmt,
        help="set a runtime parameter, as rabbitmqctl set_parameter COMPONENT NAME VALUE",
    )
    pset.add_argument("component", help="e.g. shovel")
    pset.add_argument("name")
    pset.add_argument("value", help='the JSON value, e.g. \'{"src-uri": "amqp://", ...}\'')
    pclear = params_sub.add_parser(
        "clear", parents=[common], formatter_class=fmt, help="clear a runtime parameter"
    )
    pclear.add_argument("component")
    pclear.add_argument("name")
    for parser in (plist, pset, pclear):
        parser.add_argument(
            "--vhost",
            default="/" if parser is not plist else None,
            help="the vhost" + (" (default: all)" if parser is plist else ""),
        )
    shovels = sub.add_parser(
        "shovels", formatter_class=fmt, help="list, restart or delete dynamic shovels" + api
    )
    shovels_sub = shovels.add_subparsers(dest="action", required=True)
    slist = shovels_sub.add_parser("list", parents=[common], formatter_class=fmt, help="the shovels' status")
    slist.add_argument("--vhost", help="only this vhost's (default: all)")
    for action, text in (("restart", "restart a shovel"), ("delete", "delete a shovel and its parameter")):
        parser = shovels_sub.add_parser(action, parents=[common], formatter_class=fmt, help=text)
        parser.add_argument("name")
        parser.add_argument("--vhost", default="/")


def call(client: AdminClient, args: argparse.Namespace) -> tuple[Any, list[str]]:
    """Run a ``parameters`` or ``shovels`` subcommand; returns what to print and its columns."""
    action = args.action
    if args.command == "shovels":
        if action == "list":
            path = "/shovels" + (f"/{quote(args.vhost)}" if args.vhost else "")
            return client.request("GET", path), SHOVEL_COLUMNS
        path = f"/shovels/vhost/{quote(args.vhost)}/{quote(args.name)}"
        client.request("DELETE", path + ("/restart" if action == "restart" else ""))
        done = "restarted" if action == "restart" else "deleted"
        return {"vhost": args.vhost, "name": args.name, done: True}, ["vhost", "name", done]
    if action == "list":
        path = "/parameters"
        if args.component:
            path += f"/{quote(args.component)}" + (f"/{quote(args.vhost)}" if args.vhost else "")
        elif args.vhost:
            return [
                p for p in client.request("GET", path) or [] if p.get("vhost") == args.vhost
            ], PARAMETER_COLUMNS
        return client.request("GET", path), PARAMETER_COLUMNS
    path = f"/parameters/{quote(args.component)}/{quote(args.vhost)}/{quote(args.name)}"
    if action == "clear":
        client.request("DELETE", path)
        return {"vhost": args.vhost, "component": args.component, "name": args.name, "cleared": True}, [
            "vhost",
            "component",
            "name",
            "cleared",
        ]
    try:
        value = json.loads(args.value)
    except ValueError as exc:
        raise AdminError(f"VALUE is not JSON: {exc}") from None
    body = {"vhost": args.vhost, "component": args.component, "name": args.name, "value": value}
    client.request("PUT", path, body)
    return body, PARAMETER_COLUMNS
