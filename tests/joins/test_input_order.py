"""A task with several inputs processes their records in timestamp order, whatever the
fetches returned, so a stream-table join sees the table as of each record's time."""
from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

import streamkit as sk
from streamkit.runtime.ordering.task_inputs import TaskInputs
from streamkit.transport.base import TopicPartition
from streamkit.broker import EmbeddedBroker
from streamkit.transport.embedded.transport import MAX_RECORDS_PER_FETCH, EmbeddedTransport

TABLE, STREAM = TopicPartition("table", 0), TopicPartition("stream", 0)


def _records(*timestamps: int):
    return [(offset, ts, None, None, None) for offset, ts in enumerate(timestamps)]


def _order(runs):
    return [(tp.topic, record[1]) for tp, records in runs for record in records]


def test_records_of_two_inputs_run_by_timestamp_ties_to_the_first_listed() -> None:
    inputs = TaskInputs([TABLE, STREAM])
    inputs.add(TABLE, _records(1, 5, 9), 0.0)
    inputs.add(STREAM, _records(2, 5, 6, 10), 0.0)
    runs = inputs.release(0.0, 0.0, lambda tp: False)
    assert _order(runs) == [("table", 1), ("stream", 2), ("table", 5), ("stream", 5), ("stream", 6),
                            ("table", 9), ("stream", 10)]
    assert inputs.pending() == 0


def test_an_input_with_unread_records_is_waited_for_as_long_as_the_broker_has_more() -> None:
    inputs = TaskInputs([TABLE, STREAM])
    inputs.add(TABLE, _records(1, 2), 0.0)
    inputs.add(STREAM, _records(1, 3, 4), 0.0)
    # the table runs dry at 2 while the broker has more of it: stop there
    assert _order(inputs.release(0.0, 0.0, lambda tp: tp == TABLE)) == [("table", 1), ("stream", 1),
                                                                          ("table", 2)]
    assert _order(inputs.release(0.1, 0.0, lambda tp: tp == TABLE)) == []  # still waiting
    inputs.add(TABLE, _records(3), 0.0)  # the rest of the table arrived: nothing unread any more
    assert _order(inputs.release(0.2, 0.0, lambda tp: False)) == [("table", 3), ("stream", 3), ("stream", 4)]
    # however long the table has unread records, the stream does not go past it
    inputs.add(STREAM, _records(7), 0.0)
    assert _order(inputs.release(500.0, 0.0, lambda tp: True)) == []
    # caught up (nothing unread) and max_task_idle 0: the stream goes ahead
    assert _order(inputs.release(500.1, 0.0, lambda tp: False)) == [("stream", 7)]


def test_max_task_idle_waits_for_an_input_without_records_then_goes_ahead() -> None:
    inputs = TaskInputs([TABLE, STREAM])
    inputs.add(STREAM, _records(1, 2), 0.0)
    assert inputs.release(10.0, 2.0, lambda tp: False) == []
    assert inputs.release(11.9, 2.0, lambda tp: False) == []
    assert _order(inputs.release(12.0, 2.0, lambda tp: False)) == [("stream", 1), ("stream", 2)]


def test_without_waiting_an_empty_input_does_not_hold_the_others() -> None:
    inputs = TaskInputs([TABLE, STREAM])
    inputs.add(STREAM, _records(1, 2), 0.0)
    assert _order(inputs.release(0.0, 0.0, lambda tp: False)) == [("stream", 1), ("stream", 2)]


def test_a_stream_table_join_sees_the_table_as_of_each_records_time(tmp_path: Path) -> None:
    """The table changes every ms for longer than one fetch returns; each stream record
    must join the value the table had at its timestamp, as a replay in timestamp order
    gives, not the value the table reached when its fetch happened to end."""
    n = 3 * MAX_RECORDS_PER_FETCH
    url = f"embedded://{tmp_path / 'broker'}"
    transport = EmbeddedTransport(str(tmp_path / "broker"))
    transport.admin.create_topic("prices", 1)
    transport.admin.create_topic("trades", 1)
    prices = [(b"p", orjson.dumps(i), 2 * i, None) for i in range(n)]  # price i from ts 2i
    trades = [(b"p", orjson.dumps(i), 2 * i + 1, None) for i in range(n)]  # trade at 2i+1 sees price i

    async def produce() -> None:
        producer = transport.producer()
        await producer.send([("prices", 0, prices), ("trades", 0, trades)])
        await producer.flush()
    asyncio.run(produce())
    transport.close()

    app = sk.App("ordered-join", store_backend="memory")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream("trades").join(b.table("prices"), lambda trade, price: [trade, price]).to("priced")
    app.run(broker=url, until_idle=1.0)

    broker = EmbeddedBroker(tmp_path / "broker")
    reader = broker.reader("priced", 0, read_committed=True)
    out = []
    while records := reader.read(50_000):
        out.extend(orjson.loads(value) for _offset, _ts, _key, value, _headers in records)
    broker.close()
    mismatched = [(trade, price) for trade, price in out if trade != price]
    assert len(out) == n and not mismatched, f"{len(mismatched)} trades joined another price: {mismatched[:3]}"
