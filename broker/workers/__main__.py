"""``python -m ottermq.broker.workers INDEX FD [LOG_LEVEL]``: a worker process (started by worker 0)."""

from __future__ import annotations

from .worker import main

if __name__ == "__main__":
    raise SystemExit(main())
