"""ottermq.amqp: sans-IO AMQP 0.9.1 frame codec (pamqp + stdlib only)."""

if __name__ == "amqp":  # pragma: no cover - guard against shadowing py-amqp
    raise ImportError(
        "ottermq's codec was imported as top-level 'amqp', which would shadow py-amqp. "
        "Import it as 'ottermq.amqp' and run pytest (not 'python -m pytest') or set PYTHONSAFEPATH=1."
    )

from . import native
from .native import compiled

native.install()  # before any compiled module is imported: OTTERMQ_PURE_PYTHON=1 loads their sources

__all__ = ["compiled"]
