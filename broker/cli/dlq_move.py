"""``ottermq dlq move``: send dead letters back through a running broker's management API.

The move runs in the broker (``POST /api/dead-letters/{vhost}/{queue}/moves``, see
``broker/dlq_move.py``); this command starts it, shows its progress on stderr and prints the final
count (``done: moved N, unroutable U, skipped S``) on stdout. Exit status 0 when the move is done,
1 when it failed, was cancelled or could not start. Interrupting the command (Ctrl-C) does not stop
the move: it goes on in the broker (``ottermq list`` its progress at ``/api/dead-letter-moves``).
Stdlib only, like the other admin commands.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..config import admin_defaults
from .admin import AdminClient, AdminError, quote


def build_parser() -> argparse.ArgumentParser:
    defaults = admin_defaults()
    parser = argparse.ArgumentParser(
        prog="ottermq dlq move",
        description="Move dead-lettered messages from QUEUE back to their original exchange and routing"
        " key (from x-death), or to a chosen one. Without --ids/--reason/--source-queue, --all is needed.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("vhost", help="the queue's virtual host (/ for the default)")
    parser.add_argument("queue", help="the queue holding the dead letters")
    parser.add_argument("--ids", help="comma-separated message ids (as the API and web UI show them)")
    parser.add_argument("--reason", help="only messages whose most recent death has this reason")
    parser.add_argument("--source-queue", help="only messages that most recently died in this queue")
    parser.add_argument("--all", action="store_true", help="every message in the queue")
    parser.add_argument("--to-exchange", help="send them here, not to their original exchange ('' = default)")
    parser.add_argument("--routing-key", default="", help="with --to-exchange")
    parser.add_argument("--keep-death-headers", action="store_true", help="keep x-death, x-*-death-* headers")
    parser.add_argument("--rate", type=float, default=0, help="messages per second (0 = no limit)")
    parser.add_argument("--url", default=defaults["url"], help="management API (OTTERMQ_ADMIN_URL)")
    parser.add_argument("--user", default=defaults["user"], help="API user (OTTERMQ_ADMIN_USER)")
    parser.add_argument("--password", default=defaults["password"], help="(OTTERMQ_ADMIN_PASSWORD)")
    return parser


def request_body(args: argparse.Namespace) -> dict[str, Any]:
    """The move's JSON body from the command line.

    Raises:
        ValueError: no selection, or ids that are not integers.
    """
    body: dict[str, Any] = {"keep_death_headers": args.keep_death_headers, "rate": args.rate}
    if args.ids:
        try:
            body["ids"] = [int(i) for i in args.ids.split(",") if i.strip()]
        except ValueError:
            raise ValueError("--ids takes comma-separated integers") from None
    elif args.reason or args.source_queue:
        body["filter"] = {"reason": args.reason, "source_queue": args.source_queue}
    elif args.all:
        body["all"] = True
    else:
        raise ValueError("say which messages: --ids, --reason/--source-queue, or --all")
    body["target"] = (
        None if args.to_exchange is None else {"exchange": args.to_exchange, "routing_key": args.routing_key}
    )
    return body


def summary(job: dict[str, Any]) -> str:
    return f"{job['state']}: moved {job['moved']}, unroutable {job['unroutable']}, skipped {job['skipped']}"


def main(argv: Sequence[str] | None = None, poll: float = 0.5) -> int:
    args = build_parser().parse_args(argv)
    client = AdminClient(args.url, args.user, args.password)
    try:
        body = request_body(args)
        job = client.request("POST", f"/dead-letters/{quote(args.vhost)}/{quote(args.queue)}/moves", body)
        while job["state"] in ("running", "paused"):
            done = job["moved"] + job["unroutable"] + job["skipped"]
            print(f"\r{job['state']}: {done} of {job['selected']}", end="", file=sys.stderr, flush=True)
            time.sleep(poll)
            job = client.request("GET", f"/dead-letter-moves/{quote(job['id'])}")
    except (AdminError, ValueError) as exc:
        print(f"ottermq dlq move: {exc}", file=sys.stderr)
        return 1
    print(file=sys.stderr)
    if job.get("error"):
        print(f"ottermq dlq move: {job['error']}", file=sys.stderr)
    print(summary(job))
    return 0 if job["state"] == "done" else 1
