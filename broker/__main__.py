"""``python -m ottermq.broker``: the ``ottermq`` command (``ottermq.broker.cli.main``)."""

from __future__ import annotations

from .cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
