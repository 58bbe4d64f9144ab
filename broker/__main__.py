"""``ottermq`` command line: run the broker (default) or a tool subcommand."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from .config import load_settings


def _run_server() -> int:
    settings = load_settings()
    logging.basicConfig(
        level=getattr(logging, settings.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from ottermq.persistence.store import StoreError

    from .server import serve

    try:
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
            asyncio.run(serve(settings))
        else:
            uvloop.run(serve(settings))
    except StoreError as exc:
        logging.getLogger("ottermq").error("cannot start: %s", exc)
        return 1
    return 0


def _definitions(action: str, path: str) -> int:
    """Export or import RabbitMQ definitions JSON on the store in ``OTTERMQ_DATA_DIR``."""
    import json

    from ottermq.persistence.store import StoreError

    from .definitions import (
        DefinitionsError,
        definitions_to_json,
        export_definitions,
        import_definitions,
        load_definitions_file,
    )
    from .server import VERSION, lock_data_dir, open_store

    settings = load_settings()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")

    async def run() -> None:
        store = open_store(settings)
        await store.open()
        try:
            if action == "export":
                data = definitions_to_json(await export_definitions(store), VERSION)
                text = json.dumps(data, indent=2, sort_keys=True) + "\n"
                if path == "-":
                    sys.stdout.write(text)
                else:
                    with open(path, "w", encoding="utf-8") as f:
                        f.write(text)
            else:
                await import_definitions(store, load_definitions_file(path))
        finally:
            await store.close()

    try:
        if settings.store == "sqlite":
            lock_data_dir(settings.data_dir)
        asyncio.run(run())
    except StoreError as exc:
        print(
            f"ottermq definitions {action}: {exc} (stop the broker first, or load a file at start-up "
            "with OTTERMQ_DEFINITIONS_FILE)",
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
        from . import dlq_cli

        return dlq_cli.main(["export", *rest])
    jobs = importlib.import_module("ottermq.spark_jobs.cli")  # never imported by the broker itself
    entry = getattr(jobs, f"{action}_main")
    return int(entry(rest))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ottermq`` console script and ``python -m ottermq.broker``."""
    parser = argparse.ArgumentParser(prog="ottermq", description="OtterMQ AMQP 0.9.1 broker")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("serve", help="run the broker (default)")
    defs = sub.add_parser(
        "definitions", help="export/import RabbitMQ definitions JSON (users, vhosts, permissions, topology)"
    )
    defs_sub = defs.add_subparsers(dest="action", required=True)
    export = defs_sub.add_parser("export", help="write the stored definitions as RabbitMQ JSON")
    export.add_argument("file", nargs="?", default="-", help="output file (default: stdout)")
    imp = defs_sub.add_parser("import", help="load a RabbitMQ definitions JSON file into the store")
    imp.add_argument("file")
    dlq = sub.add_parser(
        "dlq",
        help="dead letters: export a queue to the archive format, analyse or replay an archive",
        description="export: read any AMQP queue into archive JSON Lines (broker.dlq_cli); "
        "report/compact/select/replay: Spark jobs on an archive (needs the 'spark' extra)",
    )
    dlq.add_argument("action", choices=["export", "report", "compact", "select", "replay"])
    dlq.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the action (see ACTION --help)")
    args = parser.parse_args(argv)
    if args.command in (None, "serve"):
        return _run_server()
    if args.command == "dlq":
        return _dlq(args.action, args.args)
    if args.command == "definitions":
        return _definitions(args.action, args.file)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
