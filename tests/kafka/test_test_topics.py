"""tests/kafka/topics.py: the topics Kafka tests create keep records stamped with old event
times (``retention.ms=-1``), and an app's topics are created as its worker would create
them, so the worker finds them all and creates none with the broker's defaults."""
from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Dict

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

import streamkit as sk
from streamkit.runtime.worker.topics import prepare_topics

from .topics import create_app_topics, create_test_topic, kafka_transport, kept


def described_configs(kafka, topic: str) -> Dict[str, str]:
    """The topic's configs as the broker describes them, defaults included (Tansu returns
    those given at creation, flagged as defaults, which streamkit's admin leaves out)."""
    async def describe():
        admin = AIOKafkaAdminClient(**kafka.client_config())
        await admin.start()
        try:
            [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        finally:
            await admin.close()
        return {entry[0]: entry[1] for entry in response.resources[0][4]}
    return asyncio.run(describe())


def _windowed_app(name: str) -> sk.App:
    app = sk.App(name, deserialization_error_handler="dead_letter")
    events = app.topic(f"{name}-events", partitions=3)

    @app.topology
    def build(b):
        (b.stream(events, timestamp=lambda k, v: v["ts"])
          .group_by(lambda k, v: v["page"])
          .windowed_by(sk.TumblingWindows(size=timedelta(seconds=10), grace=timedelta(seconds=5)))
          .count(name="per-10s", late_records_topic=f"{name}-late")
          .to_stream().to(f"{name}-finals"))
    return app


def test_kept_adds_no_retention_where_the_config_has_its_own() -> None:
    assert kept(None) == {"retention.ms": "-1"}
    assert kept({"cleanup.policy": "compact"}) == {"cleanup.policy": "compact"}
    assert kept({"cleanup.policy": "compact,delete", "retention.ms": "90000"}) == \
        {"cleanup.policy": "compact,delete", "retention.ms": "90000"}
    assert kept({"retention.ms": "60000"}) == {"retention.ms": "60000"}
    assert kept({"segment.ms": "1000"}) == {"segment.ms": "1000", "retention.ms": "-1"}


def test_an_apps_topics_are_created_as_its_worker_would_and_keep_their_records(kafka, unique_name) -> None:
    name = unique_name("topics")
    app = _windowed_app(name)
    counts = create_app_topics(kafka, app)
    topology = app.build()
    with kafka_transport(kafka) as transport:
        metas = {topic: transport.admin.topic(topic) for topic in counts}
        # the worker's own topic setup now finds every topic: it creates none
        calls = []

        class Recording:
            def __getattr__(self, attr):
                return getattr(transport.admin, attr)

            def create_topic(self, topic, *args, **kwargs):
                calls.append(topic)
        assert prepare_topics(topology, Recording(), with_dlq=True) == counts
        # (it asks for the DLQ each start, with exist_ok: a no-op once it exists)
        new = [topic for topic in calls if transport.admin.topic(topic) is None]
    assert new == [] and set(calls) <= {f"{name}-dlq"}
    assert {f"{name}-events", f"{name}-finals", f"{name}-late", f"{name}-dlq"} <= set(counts)
    assert counts[f"{name}-events"] == 3 and counts[f"{name}-finals"] == 3
    assert all(meta is not None and meta.partitions == counts[topic] for topic, meta in metas.items())
    changelogs = 0
    for topic in counts:
        config = described_configs(kafka, topic)
        own = topology.topics[topic].config if topic in topology.topics else {}
        if own.get("cleanup.policy"):
            changelogs += 1  # internal changelogs: exactly the config streamkit gives them
            assert {key: config.get(key) for key in own} == dict(own), (topic, config)
        else:
            assert config.get("retention.ms") == "-1", (topic, config)
            assert "compact" not in config.get("cleanup.policy", "delete"), (topic, config)
    assert changelogs == 1


def test_create_test_topic_keeps_records(kafka, unique_name) -> None:
    topic = unique_name("kept")
    with kafka_transport(kafka) as transport:
        create_test_topic(transport.admin, topic, 2)
        meta = transport.admin.topic(topic)
    assert meta.partitions == 2 and described_configs(kafka, topic).get("retention.ms") == "-1"
