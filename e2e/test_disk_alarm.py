"""The disk free alarm (issue 17): below ``OTTERMQ_DISK_FREE_LIMIT`` of free space where the data
directory is, publishers are blocked as for the memory alarm, and every place that shows alarms says so.
A private broker with a limit no disk can meet raises it at once (clearing it is covered by the
protocol test with a fake free-space probe). Extension tests: RabbitMQ's limit is not set per test."""

from __future__ import annotations

import time
import urllib.request

import pika
import pytest

from .test_management_write import call

pytestmark = pytest.mark.extension


def test_disk_alarm_blocks_publishers_and_is_shown_everywhere(broker_process):
    process = broker_process({"OTTERMQ_DISK_FREE_LIMIT": "1000000TB"})
    broker = process.start()
    # pika reads connection.blocked while it opens (before a callback can be added); with a
    # blocked-connection timeout it then gives up on the blocked connection: proof it was blocked
    connection = pika.BlockingConnection(broker.params(blocked_connection_timeout=1))
    channel = connection.channel()
    channel.queue_declare("disk.q")
    channel.basic_publish("", "disk.q", b"held back")
    with pytest.raises(pika.exceptions.ConnectionBlockedTimeout):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            connection.process_data_events(0.1)
    status, _, body = call(broker, "/api/health/checks/alarms")
    assert status == 503 and body["alarms"] == [{"node": body["alarms"][0]["node"], "resource": "disk"}]
    node = call(broker, "/api/nodes")[2][0]
    assert node["disk_free_alarm"] is True and node["disk_free_limit"] == 10**18
    with urllib.request.urlopen(broker.prometheus_url + "/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert "rabbitmq_alarms_free_disk_space_watermark 1.0" in metrics
    assert "rabbitmq_disk_space_available_limit_bytes 1e+18" in metrics
    assert "disk alarm:" in process.log_tail() and "blocking publishers" in process.log_tail()
    # non-publishing connections go on working while the alarm lasts (as in RabbitMQ); the publish
    # that made the first one a publisher went through before it stopped being read (RabbitMQ too)
    other = pika.BlockingConnection(broker.params(blocked_connection_timeout=None))
    assert other.channel().queue_declare("disk.q", passive=True).method.message_count == 1
    other.close()  # never published, so never blocked: it closes normally
