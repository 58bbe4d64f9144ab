"""The dynamic shovels' Prometheus metrics (``ottermq_shovel_*``: RabbitMQ 3.10's prometheus plugin
has none for shovels), one series per shovel labelled ``vhost`` and ``shovel``, on ``/metrics`` and
``/metrics/per-object`` alike.

- ``ottermq_shovel_state``: 1 for the shovel's state (label ``state``: ``starting``, ``running``,
  ``terminated``);
- ``ottermq_shovel_messages_forwarded_total``: published to the destination;
- ``ottermq_shovel_messages_acked_total``: acknowledged at the source (confirmed by the destination
  with ``on-confirm``, published with ``on-publish``);
- ``ottermq_shovel_messages_nacked_total``: refused by the destination, handed back to the source;
- ``ottermq_shovel_messages_redelivered_total``: delivered again by the source (after a connection
  dropped mid-move): each one may have reached the destination twice;
- ``ottermq_shovel_restarts_total``: attempts after a failure (``reconnect-delay``).

The counters start when the shovel's parameter is set (a restart through the API keeps them; a
broker restart starts them again).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..shovel import Entry

LABELS = ["vhost", "shovel"]
COUNTERS = (
    ("ottermq_shovel_messages_forwarded", "forwarded", "Messages a shovel published to its destination"),
    ("ottermq_shovel_messages_acked", "acked", "Messages a shovel acknowledged at its source"),
    (
        "ottermq_shovel_messages_nacked",
        "nacked",
        "Messages a shovel's destination refused, handed back to the source",
    ),
    (
        "ottermq_shovel_messages_redelivered",
        "redelivered",
        "Messages a shovel's source delivered again (each may have reached the destination twice)",
    ),
    ("ottermq_shovel_restarts", "restarts", "Times a shovel connected again after a failure"),
)
STATES = ("starting", "running", "terminated")


def shovel_metrics(entries: Iterable[Entry]) -> Iterator[Metric]:
    """The families above for these shovels (``Shovels.status``)."""
    entries = list(entries)
    state = GaugeMetricFamily(
        "ottermq_shovel_state", "A shovel's state (1: the state it is in)", labels=[*LABELS, "state"]
    )
    for e in entries:
        for name in STATES:
            state.add_metric([e.vhost, e.name, name], 1 if e.state == name else 0)
    yield state
    for metric, attribute, text in COUNTERS:
        family = CounterMetricFamily(metric, text, labels=LABELS)
        for e in entries:
            family.add_metric([e.vhost, e.name], getattr(e.counters, attribute))
        yield family
