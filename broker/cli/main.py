"""``ottermq`` command line: run the broker (default) or a tool subcommand."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from .. import VERSION
from ..config import admin_defaults, load_settings, settings_help, unknown_variables


def _run_server() -> int:
    settings = load_settings()
    logging.basicConfig(
        level=getattr(logging, settings.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # aiosqlite logs every call it hands its thread at DEBUG: that would drown LOG_LEVEL=DEBUG.
    logging.getLogger("aiosqlite").setLevel(max(logging.WARNING, logging.root.level))
    log = logging.getLogger("ottermq")
    for warning in unknown_variables():
        log.warning("%s", warning)
    from ..node.startup import StartupError
    from ..runtime import EXIT_LEADERSHIP_LOST, LeadershipLost, serve
    from ..workers.supervisor import Supervisor

    extend = Supervisor if settings.workers > 1 else None
    try:
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
            asyncio.run(serve(settings, extend))
        else:
            uvloop.run(serve(settings, extend))
    except StartupError as exc:
        log.error("cannot start: %s", exc)
        return 1
    except LeadershipLost as exc:
        log.error("%s", exc)
        return EXIT_LEADERSHIP_LOST
    return 0


def _definitions(action: str, path: str) -> int:
    """Export or import RabbitMQ definitions JSON on the store in ``OTTERMQ_DATA_DIR``."""
    import json

    from ottermq.persistence.postgres_conn import IO_ERRORS
    from ottermq.persistence.store import Store, StoreError

    from ..node.definitions import DefinitionsError, definitions_to_json, load_definitions_file, report
    from ..node.node import Node
    from ..node.startup import StartupError, lock_data_dir
    from ..node.wiring import make_lease, open_store

    settings = load_settings()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    logging.getLogger(report.__name__).setLevel(logging.ERROR)  # skipped items: in the printed report
    store_name = "PostgreSQL" if settings.store == "postgresql" else str(settings.data_dir)

    async def run() -> None:
        lease = make_lease(settings)  # PostgreSQL: the CLI works only while no broker is active
        if lease is None:
            await run_on(open_store(settings))
            return
        try:
            if not await lease.try_acquire():
                raise StoreError(f"a broker is active on PostgreSQL schema {lease.schema!r} (it is in use)")
            await run_on(open_store(settings, lease))
        except StoreError:
            raise
        except IO_ERRORS as exc:
            raise StoreError(f"PostgreSQL: {exc}") from exc
        finally:
            await lease.release()

    async def run_on(store: Store) -> None:
        if action == "export":
            await store.open()
            try:
                data = definitions_to_json(await store.load_definitions(), VERSION)
            finally:
                await store.close()
            text = json.dumps(data, indent=2, sort_keys=True) + "\n"
            if path == "-":
                sys.stdout.write(text)
            else:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            return
        # the store's node, opened as a start-up opens it, and the file applied by the one applier
        definitions = load_definitions_file(path)
        node = Node(settings, asyncio.get_running_loop(), store)
        try:
            await node.open(definitions.definitions, report=definitions.report)
        finally:
            node.stop()
            await node.close()
        lines = definitions.report.lines()  # the answer: what was applied, what was skipped and why
        print(f"Imported definitions from {path} into {store_name}: {lines[0]}")
        for line in lines[1:]:
            print(line)

    try:
        if settings.store == "sqlite":
            lock_data_dir(settings.data_dir)
        asyncio.run(run())
    except (StoreError, StartupError) as exc:
        print(
            f"ottermq definitions {action}: {exc} (for a running broker use --url, e.g. --url "
            "http://localhost:15672; or stop the broker first, or load a file at start-up with "
            "OTTERMQ_DEFINITIONS_FILE)",
            file=sys.stderr,
        )
        return 1
    except (DefinitionsError, OSError, ValueError) as exc:
        print(f"ottermq definitions {action}: {exc}", file=sys.stderr)
        return 1
    return 0


def _dlq(action: str, rest: list[str]) -> int:
    """Dispatch ``ottermq dlq ACTION``; the Spark jobs are imported only when asked for."""
    import importlib

    if action == "export":
        from . import dlq

        return dlq.main(["export", *rest])
    if action == "move":
        from . import dlq_move

        return dlq_move.main(rest)
    jobs = importlib.import_module("ottermq.spark_jobs.cli")  # never imported by the broker itself
    entry = getattr(jobs, f"{action}_main")
    return int(entry(rest))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ottermq`` console script and ``python -m ottermq.broker``."""
    fmt = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(
        prog="ottermq", description="OtterMQ AMQP 0.9.1 broker", formatter_class=fmt
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser(
        "serve",
        help="run the broker (default)",
        description="Run the broker. Settings come from the environment and ./.env (see .env.example);"
        " a bad value stops start-up naming the variable.",
        epilog="settings (NAME=default):\n" + settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    stopped = (
        "Without --url it works on the store in OTTERMQ_DATA_DIR, so the broker using that directory"
        " must be stopped (the data dir is locked while it runs); with --url it goes through a running"
        " broker's management API (GET/POST /api/definitions, applied live)."
    )
    defs = sub.add_parser(
        "definitions",
        help="export/import RabbitMQ definitions JSON (users, vhosts, permissions, topology)",
        description="Export or import RabbitMQ definitions JSON. " + stopped,
        formatter_class=fmt,
    )
    defs_sub = defs.add_subparsers(dest="action", required=True)
    export = defs_sub.add_parser(
        "export",
        help="write the stored definitions as RabbitMQ JSON",
        description="Write the stored definitions as RabbitMQ JSON. " + stopped,
        formatter_class=fmt,
    )
    export.add_argument("file", nargs="?", default="-", help="output file; - is stdout")
    from . import admin as admin_cli  # stdlib only: cheap to import

    defaults = admin_defaults()  # reads the settings (environment, ./.env): once
    admin_cli.add_connection_options(export, defaults)
    imp = defs_sub.add_parser(
        "import",
        help="load a RabbitMQ definitions JSON file into the store",
        description="Load a RabbitMQ definitions JSON file into the store: users (with their"
        " passwords), vhosts and permissions are created or replaced; durable exchanges, queues and"
        " bindings are added (existing ones are left unchanged); policies, operator policies"
        " (operator_policy parameters) and shovel parameters are created or replaced. What it cannot"
        " import is skipped"
        " (non-durable queues and exchanges, amq.* names and the default exchange, streams, exchange"
        " types of plugins it lacks, bindings of skipped entities, federation parameters,"
        " global parameters, topic permissions): the output counts what was applied and names each"
        " skipped item with the reason (docs/definitions.md). "
        + stopped
        + " To load a file at every start instead, set OTTERMQ_DEFINITIONS_FILE.",
        formatter_class=fmt,
    )
    imp.add_argument("file", help="RabbitMQ definitions JSON (rabbitmqctl export_definitions)")
    admin_cli.add_connection_options(imp, defaults)
    dlq = sub.add_parser(
        "dlq",
        help="dead letters: send them back, export a queue to the archive format, analyse or replay an"
        " archive",
        description="move: send a queue's dead letters back to their original (or a chosen) exchange,"
        " run by a running broker (management API); export: read any AMQP queue into archive JSON Lines"
        " (broker.cli.dlq; the broker keeps running); report/compact/select/replay: Spark jobs on an"
        " archive, watch: a streaming job over a live one (need the 'spark' extra)",
        formatter_class=fmt,
    )
    dlq.add_argument("action", choices=["move", "export", "report", "compact", "select", "replay", "watch"])
    dlq.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the action (see ACTION --help)")
    admin_cli.add_parsers(sub, defaults)
    args = parser.parse_args(argv)
    if args.command in admin_cli.COMMANDS:
        return admin_cli.run(args)
    if args.command in (None, "serve"):
        return _run_server()
    if args.command == "dlq":
        return _dlq(args.action, args.args)
    if args.command == "definitions":
        if args.url:  # a running broker, through its management API
            return admin_cli.definitions(args.action, args.file, args)
        return _definitions(args.action, args.file)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
