"""Restoring stores from changelogs on Apache Kafka through the restore reader's own Fetch
requests (streamkit/transport/kafka/changelog_fetch.py) and RocksDB writes without the
write-ahead log (issue 36): aborted transactions stay out, a checkpoint inside a record batch
is honoured, compressed batches decode, and a worker killed in the middle of a restore leaves
a store whose checkpoint it holds, which the next start restores to the changelog's end."""
from __future__ import annotations

import asyncio
import glob
import json
import signal
import textwrap
from typing import Dict, List, Optional, Tuple

import pytest

from streamkit.state.restore import restore_task_stores
from streamkit.state.rocksdb import RocksDBBytesStore
from streamkit.state.task_stores import open_task_stores
from streamkit.stores import StoreSpec
from streamkit.serdes import Json
from streamkit.transport.factory import open_transport

from .broker import KafkaTestBroker, run_sync
from .workers import KafkaApp

Changelog = List[Tuple[int, bytes, Optional[bytes]]]  # offset, key, value


async def _create(broker: KafkaTestBroker, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(**broker.client_config())
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        await admin.close()


async def _read_all(broker: KafkaTestBroker, topic: str, end: int) -> Changelog:
    """Every committed record of partition 0 of ``topic`` below ``end``."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(**broker.client_config(isolation_level="read_committed", enable_auto_commit=False))
    await consumer.start()
    out: Changelog = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        while await consumer.position(tp) < end:
            for record in (await consumer.getmany(tp, timeout_ms=1000)).get(tp, []):
                out.append((record.offset, record.key, record.value))
    finally:
        await consumer.stop()
    return out


def _restore(broker: KafkaTestBroker, app_id: str, state_dir: str, checkpoint: Optional[int] = None,
             ) -> Tuple[Dict[bytes, bytes], int, Optional[int], int]:
    """Restore store ``s`` of task 0_0 of ``app_id`` into RocksDB (from ``checkpoint`` if given):
    (its entries, records replayed, its checkpoint, the changelog's end)."""
    stores = open_task_stores([StoreSpec("s", key_serde=Json(), value_serde=Json())], app_id=app_id,
                              task_id="0_0", partition=0, backend="rocksdb", state_dir=state_dir)
    transport = open_transport(broker.url, kafka_config=broker.streamkit_settings())
    try:
        persistent = stores.open_stores[0].buffer.persistent
        if checkpoint is not None:
            persistent.apply({}, checkpoint)

        async def restore() -> Dict[str, int]:
            reader = transport.reader(read_committed=True)
            try:
                return await restore_task_stores("0_0", stores, reader, transport.admin, show_progress=False)
            finally:
                await reader.aclose()

        report = asyncio.run(restore())
        end = transport.admin.partition_offsets(f"{app_id}-s-changelog", 0).end
        return dict(persistent.range(None, None)), report["s"], persistent.changelog_offset(), end
    finally:
        stores.close()
        transport.close()


def test_restore_leaves_out_aborted_transactions(transactional_kafka, tmp_path, unique_name) -> None:
    from aiokafka import AIOKafkaProducer

    app_id = unique_name("restore-aborted")
    topic = f"{app_id}-s-changelog"
    run_sync(lambda: _create(transactional_kafka, topic))

    async def produce() -> None:
        plain = AIOKafkaProducer(**transactional_kafka.client_config())
        txn = AIOKafkaProducer(**transactional_kafka.client_config(transactional_id=f"{app_id}-txn"))
        await plain.start()
        await txn.start()
        try:
            async with txn.transaction():  # committed
                for i in range(100):
                    await txn.send(topic, key=b"k%d" % i, value=b"a%d" % i, partition=0)
            await txn.begin_transaction()  # aborted: overwrites, new keys and a delete
            for i in range(50):
                await txn.send(topic, key=b"k%d" % i, value=b"ABORTED", partition=0)
            for i in range(10):
                await txn.send(topic, key=b"x%d" % i, value=b"ABORTED", partition=0)
            await txn.send(topic, key=b"k99", value=None, partition=0)
            await txn.abort_transaction()
            for i in range(50, 60):  # outside any transaction
                await (await plain.send(topic, key=b"k%d" % i, value=b"p%d" % i, partition=0))
            async with txn.transaction():  # committed, ends with its commit marker
                for i in range(10):
                    await txn.send(topic, key=b"k%d" % i, value=b"c%d" % i, partition=0)
        finally:
            await txn.stop()
            await plain.stop()

    run_sync(produce)
    entries, replayed, checkpoint, end = _restore(transactional_kafka, app_id, str(tmp_path / "state"))

    expected = {b"k%d" % i: b"a%d" % i for i in range(100)}
    expected.update({b"k%d" % i: b"p%d" % i for i in range(50, 60)})
    expected.update({b"k%d" % i: b"c%d" % i for i in range(10)})
    assert entries == expected
    assert replayed == 120  # the committed records, never the aborted ones or the markers
    assert checkpoint == end  # past the last commit marker


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_restore_from_a_checkpoint_inside_a_record_batch(kafka, tmp_path, unique_name, compression) -> None:
    """Records below the checkpoint are not applied, though the broker returns the whole
    batch holding it; a changelog of several fetches' worth (pipelined) is read to its end."""
    from aiokafka import AIOKafkaProducer

    app_id = unique_name("restore-mid-batch")
    topic = f"{app_id}-s-changelog"
    run_sync(lambda: _create(kafka, topic))
    records, checkpoint = 40_000, 11_500
    pad = b"." * 200  # about 9 MB in all: several restore fetches

    def key(i: int) -> bytes:
        return b"early%d" % i if i < 12_000 else b"k%d" % (i % 1000)

    async def produce() -> None:
        producer = AIOKafkaProducer(**kafka.client_config(compression_type=compression, max_batch_size=1 << 20,
                                                          linger_ms=50, max_request_size=1 << 21))
        await producer.start()
        try:
            sent = [await producer.send(topic, key=key(i), value=b"%d" % i + pad, partition=0)
                    for i in range(records)]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()

    run_sync(produce)
    entries, replayed, restored_to, end = _restore(kafka, app_id, str(tmp_path / "state"), checkpoint)

    assert end == records
    expected: Dict[bytes, bytes] = {}
    for i in range(checkpoint, records):
        expected[key(i)] = b"%d" % i + pad
    assert entries == expected
    assert replayed == records - checkpoint
    assert restored_to == end


KILLED_RESTORE_APP = textwrap.dedent("""
    from datetime import timedelta
    import streamkit as sk
    import streamkit.state.restore as restore

    restore.BULK_RESTORE_RECORDS = 0  # this small restore without the write-ahead log too
    restore.SETTLE_EVERY = 0.0  # a durable checkpoint after every fetched chunk (default: every 10 s)

    app = sk.App({app_id!r}, caching=False, commit_interval=timedelta(milliseconds=200))
    events = app.topic({source!r}, partitions=1)

    @app.topology
    def build(b):
        b.stream(events).group_by_key().reduce(lambda old, new: new, name="latest")
""")


def test_a_worker_killed_mid_restore_keeps_a_true_checkpoint(kafka, tmp_path, unique_name) -> None:
    """The worker is SIGKILLed after its 3rd restored chunk, written without RocksDB's
    write-ahead log and not settled: the store's checkpoint is the one settled after the 2nd
    (never past what the files hold), and the next worker restores it to the changelog's end."""
    app = KafkaApp(kafka, tmp_path, unique_name("killed-restore"))
    (tmp_path / f"{app.module}.py").write_text(KILLED_RESTORE_APP.format(app_id=app.app_id, source=app.source))
    app.create_topics()
    # At least 8,000 changelog records of 2 kB (commits keep each key's last update only):
    # a restore fetch reads about 2,000 of them.
    pad = "x" * 2000
    lines = [json.dumps({"user": f"u{n % 8000}", "n": n, "pad": pad}) for n in range(12_000)]
    produced = app.cli("produce", app.source, "--key-field", "user", stdin="\n".join(lines) + "\n", timeout=180)
    assert produced.returncode == 0, produced.stderr[-3000:]
    app.run_until_idle("first")

    changelog = f"{app.app_id}-latest-changelog"
    transport = open_transport(kafka.url, kafka_config=kafka.streamkit_settings())
    try:
        end = transport.admin.partition_offsets(changelog, 0).end
    finally:
        transport.close()
    records = run_sync(lambda: _read_all(kafka, changelog, end))
    assert len(records) >= 8_000

    killed = app.worker(state="second", log=tmp_path / "killed.log", STREAMKIT_CRASH_AT="restore.batch:3")
    try:
        assert killed.wait(timeout=180) == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-3000:]
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait()
    (path,) = glob.glob(str(tmp_path / "second" / "*" / "latest"))
    store = RocksDBBytesStore(path)
    try:
        held = dict(store.range(None, None))
        checkpoint = store.changelog_offset()
    finally:
        store.close()
    assert checkpoint is not None and 0 < checkpoint < end, checkpoint
    for key in {key for _, key, _ in records}:
        history = [(offset, value) for offset, key_, value in records if key_ == key]
        below = [i for i, (offset, _) in enumerate(history) if offset < checkpoint]
        if below:  # the value the checkpoint claims, or a later one (replayed past it)
            assert held.get(key) in [value for _, value in history[below[-1]:]], (key, checkpoint)

    app.run_until_idle("second")
    store = RocksDBBytesStore(path)
    try:
        restored = dict(store.range(None, None))
        assert store.changelog_offset() == end
    finally:
        store.close()
    assert restored == {key: value for _, key, value in records}


def _restore_through_a_cut(broker: KafkaTestBroker, proxy, app_id: str, state_dir: str, *,
                           heal_after: Optional[float]) -> Tuple[Dict[bytes, bytes], Optional[int], int]:
    """Restore store ``s`` of task 0_0 of ``app_id`` through ``proxy``, cutting the proxy once
    the first chunk is in (and healing it ``heal_after`` s later, if given): (the entries
    restored, the store's checkpoint, the changelog's end). Raises what the restore raises."""
    import threading

    stores = open_task_stores([StoreSpec("s", key_serde=Json(), value_serde=Json())], app_id=app_id,
                              task_id="0_0", partition=0, backend="rocksdb", state_dir=state_dir)
    transport = open_transport(broker.url, kafka_config=broker.streamkit_settings())
    end = transport.admin.partition_offsets(f"{app_id}-s-changelog", 0).end
    cut = threading.Event()

    def progress(done: int, total: int) -> None:
        if done and not cut.is_set():
            cut.set()
            proxy.cut()
            if heal_after is not None:
                threading.Timer(heal_after, proxy.restore).start()

    try:
        persistent = stores.open_stores[0].buffer.persistent

        async def restore() -> Dict[str, int]:
            reader = transport.reader(read_committed=True)
            try:
                return await restore_task_stores("0_0", stores, reader, transport.admin, show_progress=False,
                                                 progress=progress)
            finally:
                await reader.aclose()

        try:
            asyncio.run(restore())
        finally:
            entries, checkpoint = dict(persistent.range(None, None)), persistent.changelog_offset()
        assert cut.is_set(), "the restore finished before the cut: make the changelog longer"
        return entries, checkpoint, end
    finally:
        proxy.restore()
        stores.close()
        transport.close()


def _changelog_of_many_fetches(broker: KafkaTestBroker, topic: str, records: int = 60_000) -> Dict[bytes, bytes]:
    """``records`` 300-byte records (several restore fetches) in partition 0; the last value per key."""
    from aiokafka import AIOKafkaProducer

    run_sync(lambda: _create(broker, topic))
    pad = b"." * 300

    async def produce() -> None:
        producer = AIOKafkaProducer(**broker.client_config(max_batch_size=1 << 20, linger_ms=50,
                                                           max_request_size=1 << 21))
        await producer.start()
        try:
            await asyncio.gather(*[await producer.send(topic, key=b"k%d" % (i % 5000), value=b"%d" % i + pad,
                                                       partition=0) for i in range(records)])
        finally:
            await producer.stop()

    run_sync(produce)
    return {b"k%d" % (i % 5000): b"%d" % i + pad for i in range(records)}


def test_a_restore_waits_out_a_broker_it_cannot_reach_and_never_stops_below_the_end(
        kafka_behind_proxy, tmp_path, unique_name, caplog) -> None:
    """The connection is cut after the first restored chunk for 5 s (longer than the 2 s after
    which a restore used to checkpoint where it stood and start the task on part of its state):
    the restore says it is waiting, then reads on to the changelog's end."""
    broker, proxy = kafka_behind_proxy
    app_id = unique_name("restore-cut")
    expected = _changelog_of_many_fetches(broker, f"{app_id}-s-changelog")
    with caplog.at_level("WARNING", logger="streamkit.state.restore"):
        entries, checkpoint, end = _restore_through_a_cut(broker, proxy, app_id, str(tmp_path / "state"),
                                                          heal_after=5.0)
    assert entries == expected
    assert checkpoint == end
    assert any("nothing could be read at offset" in r.getMessage() and "waiting" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_a_restore_that_cannot_read_on_fails_naming_the_store_and_offsets(
        kafka_behind_proxy, tmp_path, unique_name, monkeypatch) -> None:
    """Cut for good: after the stall timeout (5 minutes; 4 s here) the restore fails with the
    store, the changelog partition, the offset it reached and the end, and the store's
    checkpoint is one it holds (below the end), so a restart resumes from there."""
    import streamkit.state.restore as restore_module
    from streamkit.errors import StreamkitError

    monkeypatch.setattr(restore_module, "STALLED_RESTORE_TIMEOUT", 4.0)
    broker, proxy = kafka_behind_proxy
    app_id = unique_name("restore-gone")
    expected = _changelog_of_many_fetches(broker, f"{app_id}-s-changelog")
    with pytest.raises(StreamkitError) as raised:
        _restore_through_a_cut(broker, proxy, app_id, str(tmp_path / "state"), heal_after=None)
    message = str(raised.value)
    assert f"{app_id}-s-changelog[0]" in message and "restoring store s" in message
    assert "below the end 60000" in message and "does not start on a store restored in part" in message
    # what a restart finds: a checkpoint below the end, holding nothing past it
    stores = open_task_stores([StoreSpec("s", key_serde=Json(), value_serde=Json())], app_id=app_id,
                              task_id="0_0", partition=0, backend="rocksdb", state_dir=str(tmp_path / "state"))
    try:
        checkpoint = stores.open_stores[0].buffer.persistent.changelog_offset()
        assert checkpoint is None or checkpoint < 60_000
    finally:
        stores.close()
    assert len(expected) == 5000


def test_global_tables_load_to_the_end_through_a_cut_connection(kafka_behind_proxy, unique_name,
                                                                  caplog) -> None:
    """Loading a global table used to stop after 2 s with nothing readable and start the tasks
    on a part of the table; through a 5 s cut it now waits, says so, and loads every row."""
    import threading

    import streamkit as sk
    from streamkit.runtime.task.global_tables import GlobalTables
    from streamkit.topology.serde_binding import bind_serdes

    broker, proxy = kafka_behind_proxy
    topic = unique_name("gt-cut")
    expected = _changelog_of_many_fetches(broker, topic)
    app = sk.App(unique_name("gt-app"))
    pages = app.topic(topic, key_serde=sk.serdes.Bytes(), value_serde=sk.serdes.Bytes())
    app.topology(lambda b: b.stream("views").join(b.global_table(pages, name="pages"), key_selector=lambda k, v: k,
                                                   joiner=lambda v, p: p).to("out"))
    topology = bind_serdes(app.build(), "memory://gt-cut")
    transport = open_transport(broker.url, kafka_config=broker.streamkit_settings())
    cut = threading.Event()
    try:
        async def load() -> Tuple[GlobalTables, int]:
            reader = transport.reader(read_committed=True)
            tables = GlobalTables(topology, backend="memory", state_dir=None, consumer=reader)
            update = tables.update

            async def update_then_cut(max_wait: float = 0.0) -> int:
                applied = await update(max_wait)
                if applied and not cut.is_set():
                    cut.set()
                    proxy.cut()
                    threading.Timer(5.0, proxy.restore).start()
                return applied

            tables.update = update_then_cut  # type: ignore[method-assign]
            try:
                return tables, await tables.load(transport.admin, {topic: 1})
            finally:
                await reader.aclose()

        with caplog.at_level("WARNING", logger="streamkit"):
            tables, applied = asyncio.run(load())
        store = tables.stores["pages"]
        assert cut.is_set() and applied == 60_000
        assert {key: store.get(key) for key in expected} == expected  # Bytes serdes: the raw rows
        assert any("loading the global tables: nothing could be read" in r.getMessage() for r in caplog.records)
        tables.close()
    finally:
        proxy.restore()
        transport.close()
