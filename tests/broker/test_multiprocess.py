"""Several OS processes on one embedded log: real subprocesses, real files."""
import json
import os
import signal
import subprocess
import time

import pytest

from streamkit.transport.base import TopicPartition
from streamkit.broker import EmbeddedBroker, TopicExistsError
from tests.broker.subprocesses import TIMEOUT, finish, spawn



def wait_for_line(proc: subprocess.Popen, expected: str) -> None:
    line = proc.stdout.readline()
    assert line.strip() == expected, proc.stderr.read() if not line else line


WRITER = """
    import json, os, random, sys, time
    from streamkit.broker import EmbeddedBroker
    directory, name, batches, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    broker = EmbeddedBroker(directory, segment_bytes=16 * 1024)
    appended, seq = [], 0
    print("ready", flush=True)
    while not os.path.exists(os.path.join(directory, "go")):  # start together
        time.sleep(0.001)
    for _ in range(batches):
        n = rng.randint(1, 20)
        pad = b"x" * rng.randint(0, 200)
        records = [(name.encode(), b"%s-%d-" % (name.encode(), seq + i) + pad, seq + i, None)
                   for i in range(n)]
        appended.append([broker.append("t", 0, records), n])
        seq += n
    print(json.dumps(appended))
"""


def test_a_reader_sees_everything_another_process_appends_while_it_reads(tmp_path):
    with EmbeddedBroker(tmp_path) as broker:
        broker.create_topic("t", 1)
        reader = broker.reader("t", 0)
        writer = spawn(WRITER, tmp_path, "w", 400, 1)
        wait_for_line(writer, "ready")
        (tmp_path / "go").touch()
        got = []
        deadline = time.monotonic() + TIMEOUT
        while writer.poll() is None or len(got) < broker.partition_offsets("t", 0).end:
            got.extend(reader.read(500))
            assert time.monotonic() < deadline
        appended = json.loads(finish(writer))
        got.extend(reader.read())
    total = sum(n for _, n in appended)
    assert [r[0] for r in got] == list(range(total))
    assert [r[1] for r in got] == list(range(total))  # the writer's own sequence
    assert all(r[3].startswith(b"w-%d-" % r[1]) for r in got)
    assert len(list((tmp_path / "topics" / "t" / "0").glob("*.log"))) > 2


def test_two_processes_appending_to_one_partition_get_disjoint_contiguous_offsets(tmp_path):
    with EmbeddedBroker(tmp_path) as broker:
        broker.create_topic("t", 1)
    writers = {name: spawn(WRITER, tmp_path, name, 1000, seed) for seed, name in enumerate("ab")}
    for proc in writers.values():
        wait_for_line(proc, "ready")
    (tmp_path / "go").touch()
    appended = {name: json.loads(finish(proc)) for name, proc in writers.items()}
    claimed = sorted((first, n, name) for name, batches in appended.items() for first, n in batches)
    switches = sum(1 for x, y in zip(claimed, claimed[1:]) if x[2] != y[2])
    assert switches > 10  # the writers really did interleave
    expected_next = 0
    for first, n, _ in claimed:
        assert first == expected_next  # no gap, no overlap
        expected_next += n
    with EmbeddedBroker(tmp_path) as broker:
        assert broker.partition_offsets("t", 0).end == expected_next
        reader = broker.reader("t", 0)
        got = []
        while True:
            chunk = reader.read()
            if not chunk:
                break
            got.extend(chunk)
    assert [r[0] for r in got] == list(range(expected_next))
    for first, n, name in claimed:  # each batch is where its writer was told it is
        batch = got[first:first + n]
        assert {r[2] for r in batch} == {name.encode()}
        assert [r[1] for r in batch] == list(range(batch[0][1], batch[0][1] + n))
    for name in "ab":  # and each writer's records are all there, in its order
        mine = [r[1] for r in got if r[2] == name.encode()]
        assert mine == list(range(len(mine)))


def test_a_writer_killed_mid_stream_leaves_a_readable_log(tmp_path):
    code = """
        import sys
        from streamkit.broker import EmbeddedBroker
        broker = EmbeddedBroker(sys.argv[1], segment_bytes=8 * 1024 * 1024)
        print("ready", flush=True)
        i = 0
        while True:
            broker.append("t", 0, [(b"k", bytes([i % 256]) * 300_000, i, None) for _ in range(7)])
            i += 1
    """
    with EmbeddedBroker(tmp_path) as broker:
        broker.create_topic("t", 1)
    for _ in range(3):
        proc = spawn(code, tmp_path)
        wait_for_line(proc, "ready")
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(TIMEOUT)
        with EmbeddedBroker(tmp_path) as broker:
            end = broker.partition_offsets("t", 0).end
            assert end % 7 == 0 and end > 0
            reader = broker.reader("t", 0)
            reader.seek(end - 7)
            last = reader.read()
            assert [r[0] for r in last] == list(range(end - 7, end))
            assert len({r[3] for r in last}) == 1 and len(last[0][3]) == 300_000
            assert broker.append("t", 0, [(b"k", b"marker", 0, None)] * 7) == end


def test_processes_creating_the_same_topic_race_safely(tmp_path):
    code = """
        import sys
        from streamkit.broker import EmbeddedBroker, TopicExistsError
        broker = EmbeddedBroker(sys.argv[1])
        try:
            broker.create_topic("shared", 4)
            print("created")
        except TopicExistsError:
            print("exists")
        print(broker.create_topic("shared", 4, exist_ok=True).partitions)
    """
    procs = [spawn(code, tmp_path) for _ in range(4)]
    outputs = [finish(p).split() for p in procs]
    assert sorted(o[0] for o in outputs) == ["created", "exists", "exists", "exists"]
    assert all(o[1] == "4" for o in outputs)
    with EmbeddedBroker(tmp_path) as broker:
        assert [t.name for t in broker.list_topics()] == ["shared"]
        assert not [p for p in (tmp_path / "topics").iterdir() if p.name != "shared"]
        with pytest.raises(TopicExistsError):
            broker.create_topic("shared", 4)


def test_concurrent_commits_from_processes_merge_without_losing_entries(tmp_path):
    code = """
        import sys
        from streamkit.transport.base import TopicPartition
        from streamkit.broker import EmbeddedBroker
        broker = EmbeddedBroker(sys.argv[1])
        me = int(sys.argv[2])
        for i in range(1, 31):
            broker.commit_offsets("g", {TopicPartition("t", me): i})
    """
    procs = [spawn(code, tmp_path, partition) for partition in range(3)]
    for proc in procs:
        finish(proc)
    with EmbeddedBroker(tmp_path) as broker:
        assert broker.committed_offsets("g") == {TopicPartition("t", p): 30 for p in range(3)}


HOLDER = """
    import sys, time
    from streamkit.broker import EmbeddedBroker
    broker = EmbeddedBroker(sys.argv[1])
    lock = broker.try_lock_task("g", "0_2")
    print("locked" if lock else "busy", flush=True)
    time.sleep(60)
"""


def test_a_task_lock_is_exclusive_across_processes_and_freed_by_sigkill(tmp_path):
    holder = spawn(HOLDER, tmp_path)
    try:
        wait_for_line(holder, "locked")
        with EmbeddedBroker(tmp_path) as broker:
            assert broker.try_lock_task("g", "0_2") is None
            owner = broker.task_owner("g", "0_2")
            assert owner["pid"] == holder.pid and owner["host"]
            other = spawn(HOLDER, tmp_path)  # a second worker process cannot take it either
            wait_for_line(other, "busy")
            other.kill()
            other.wait(TIMEOUT)
            mine = broker.try_lock_task("g", "0_3")  # other tasks are independent
            assert mine is not None and mine.task_id == "0_3"

            holder.send_signal(signal.SIGKILL)
            holder.wait(TIMEOUT)
            assert broker.task_owner("g", "0_2") is None
            lock = broker.try_lock_task("g", "0_2")
            assert lock is not None
            assert broker.task_owner("g", "0_2")["pid"] == os.getpid()
            lock.release()
            assert broker.task_owner("g", "0_2") is None
    finally:
        holder.kill()
        holder.wait(TIMEOUT)
