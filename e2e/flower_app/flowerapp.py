"""The Celery app Celery Flower runs with in ``e2e/test_flower.py``: no tasks, just the broker and the two
task queues whose depths Flower's broker view shows (with no worker online, Flower lists the app's
``task_default_queue`` and ``task_queues``)."""

from __future__ import annotations

import os

from celery import Celery
from kombu import Queue

app = Celery("flowerapp", broker=os.environ["E2E_FLOWER_BROKER_URL"])
app.conf.task_default_queue = os.environ["E2E_FLOWER_QUEUE_A"]
app.conf.task_queues = [Queue(os.environ["E2E_FLOWER_QUEUE_A"]), Queue(os.environ["E2E_FLOWER_QUEUE_B"])]
