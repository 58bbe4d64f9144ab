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


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ottermq`` console script and ``python -m ottermq.broker``."""
    parser = argparse.ArgumentParser(prog="ottermq", description="OtterMQ AMQP 0.9.1 broker")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("serve", help="run the broker (default)")
    args = parser.parse_args(argv)
    if args.command in (None, "serve"):
        return _run_server()
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
