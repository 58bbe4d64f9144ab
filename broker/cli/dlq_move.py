"""``ottermq dlq move``: send dead letters back through a running broker's management API.

The move runs in the broker (``POST /api/dead-letters/{vhost}/{queue}/moves``, see
``broker/node/dlq_move.py``); this command starts it, shows its progress on stderr and prints the final
count (``done: moved N, unroutable U, skipped S``, then ``, refused R`` when some messages could not be
moved) on stdout. Exit status 0 when the move is done,
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
from .api import AdminError, add_target_options, announce, client_of, origin_of, quote


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
    add_target_options(parser, defaults)
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
    line = f"{job['state']}: moved {job['moved']}, unroutable {job['unroutable']}, skipped {job['skipped']}"
    return line + (f", refused {job['refused']}" if job.get("refused") else "")


def progress(job: dict[str, Any]) -> str:
    """The progress line of a running or paused move. Until the broker has counted the selection
    (``selected`` is 0 and nothing is done yet) it says so instead of ``0 of 0``."""
    done = job["moved"] + job["unroutable"] + job["skipped"] + job.get("refused", 0)
    if not job["selected"] and not done:
        return f"{job['state']}: selecting messages..."
    return f"{job['state']}: {done} of {job['selected']}"


def main(argv: Sequence[str] | None = None, poll: float = 0.5) -> int:
    args = build_parser().parse_args(argv)
    shown = 0  # length of the progress line on stderr
    try:
        body = request_body(args)
        client = client_of(args)
        doing = f"Moving dead letters from queue '{args.queue}' on"
        announce(
            client,
            doing,
            f"(vhost {args.vhost})",
            quiet=args.quiet,
            changes=True,
            any_broker=args.any_broker,
            origin=origin_of(args),
        )
        job = client.request("POST", f"/dead-letters/{quote(args.vhost)}/{quote(args.queue)}/moves", body)
        while job["state"] in ("running", "paused"):
            line = progress(job)
            print(f"\r{line.ljust(shown)}", end="", file=sys.stderr, flush=True)
            shown = max(shown, len(line))
            time.sleep(poll)
            job = client.request("GET", f"/dead-letter-moves/{quote(job['id'])}")
    except (AdminError, ValueError) as exc:
        print(("\n" if shown else "") + f"ottermq dlq move: {exc}", file=sys.stderr)
        return 1
    if shown:
        print(file=sys.stderr)
    if job.get("error"):
        print(f"ottermq dlq move: {job['error']}", file=sys.stderr)
    print(summary(job))
    return 0 if job["state"] == "done" else 1
