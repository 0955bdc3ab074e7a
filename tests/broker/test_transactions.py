"""Transactions of the embedded broker: visibility, last stable offset, fencing, kill -9.

Real files and real subprocesses; a crash is a real SIGKILL that a child process sends
itself at an exact point of the transaction protocol.
"""
import json
import signal
import time

import pytest

from streamkit.transport.base import TopicPartition as TP
from streamkit.broker import (
    EmbeddedBroker, ProducerFencedError, TransactionStateError)
from streamkit.broker.transaction_state import read_transaction_record
from tests.broker.subprocesses import (
    TIMEOUT, finish, run_json, spawn, wait_for_line)


def rec(key, value, ts=1):
    return (key.encode(), value.encode(), ts, None)


def read_all(reader):
    out = []
    while True:
        got = reader.read()
        if not got:
            return out
        out.extend(got)


def values(records):
    return [r[3].decode() for r in records]


@pytest.fixture
def broker(tmp_path):
    b = EmbeddedBroker(tmp_path)
    b.create_topic("out", 3)
    yield b
    b.close()


# A reader in another process: what read_committed / read_uncommitted readers and the
# group offsets show right now.
LOOK = """
    import json, sys
    from streamkit.broker import EmbeddedBroker
    with EmbeddedBroker(sys.argv[1]) as b:
        view = {}
        for p in range(3):
            rc, ru = b.reader("out", p), b.reader("out", p, read_committed=False)
            view[p] = {"committed": [[r[0], r[3].decode()] for r in rc.read()],
                       "uncommitted": [[r[0], r[3].decode()] for r in ru.read()],
                       "position": rc.position, "lso": b.last_stable_offset("out", p),
                       "end": b.partition_offsets("out", p).end}
        offsets = {f"{tp[0]}/{tp[1]}": o for tp, o in b.committed_offsets("g").items()}
        print(json.dumps({"partitions": view, "offsets": offsets}))
"""


def look(tmp_path):
    view = run_json(LOOK, tmp_path)
    return {int(p): v for p, v in view["partitions"].items()}, view["offsets"]


@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_another_process_sees_all_of_a_transaction_after_commit_and_none_after_abort(
        broker, tmp_path, outcome):
    broker.append("out", 0, [rec("a", "plain")])
    txn = broker.begin_transaction("app-0")
    assert txn.transactional_id == "app-0" and txn.id > 0
    assert txn.append("out", 0, [rec("k", "t0-a"), rec("k", "t0-b")]) == 1
    assert txn.append("out", 2, [rec("k", "t2")]) == 0
    txn.commit_offsets("g", {TP("in", 0): 42, TP("in", 1): 7})

    parts, offsets = look(tmp_path)  # open: read_committed sees none of it
    assert parts[0]["committed"] == [[0, "plain"]] and parts[0]["position"] == 1
    assert parts[0]["uncommitted"] == [[0, "plain"], [1, "t0-a"], [2, "t0-b"]]
    assert parts[0]["lso"] == 1 and parts[2]["lso"] == 0 and parts[1]["lso"] == 0
    assert parts[2]["committed"] == [] and parts[2]["uncommitted"] == [[0, "t2"]]
    assert offsets == {}

    getattr(txn, outcome)()
    assert txn.state == ("committed" if outcome == "commit" else "aborted")
    parts, offsets = look(tmp_path)
    if outcome == "commit":
        assert parts[0]["committed"] == [[0, "plain"], [1, "t0-a"], [2, "t0-b"]]
        assert parts[2]["committed"] == [[0, "t2"]]
        assert offsets == {"in/0": 42, "in/1": 7}
    else:
        assert parts[0]["committed"] == [[0, "plain"]]
        assert parts[2]["committed"] == []
        assert offsets == {}
    for p in (0, 2):  # the marker is never a record; the position moves past it
        assert parts[p]["uncommitted"] == (parts[p]["committed"] if outcome == "commit" else
                                           parts[p]["uncommitted"])
        assert parts[p]["end"] == parts[p]["lso"] == parts[p]["position"]
        assert parts[p]["end"] == len(parts[p]["uncommitted"]) + 1
    assert parts[1] == {"committed": [], "uncommitted": [], "position": 0, "lso": 0, "end": 0}
    with pytest.raises(TransactionStateError):
        txn.append("out", 0, [rec("k", "late")])


def test_a_read_committed_reader_stops_at_the_last_stable_offset_until_the_commit(broker):
    broker.append("out", 0, [rec("a", "p0")])
    first = broker.begin_transaction("one")
    first.append("out", 0, [rec("k", "first")])
    broker.append("out", 0, [rec("a", "p2")])
    second = broker.begin_transaction("two")
    second.append("out", 0, [rec("k", "second")])
    broker.append("out", 0, [rec("a", "p4")])
    committed = broker.reader("out", 0)
    everything = broker.reader("out", 0, read_committed=False)
    assert values(committed.read()) == ["p0"] and committed.position == 1
    assert broker.last_stable_offset("out", 0) == 1
    assert values(read_all(everything)) == ["p0", "first", "p2", "second", "p4"]
    assert committed.read() == [] and committed.position == 1

    second.commit()  # the earlier transaction still holds the reader back
    assert committed.read() == [] and broker.last_stable_offset("out", 0) == 1
    first.abort()
    assert values(committed.read()) == ["p2", "second", "p4"]
    assert broker.last_stable_offset("out", 0) == broker.partition_offsets("out", 0).end == 7
    assert committed.position == 7
    committed.seek(0)  # again from the start: outcomes are known now
    assert [(r[0], r[3]) for r in read_all(committed)] == [
        (0, b"p0"), (2, b"p2"), (3, b"second"), (4, b"p4")]


def test_many_transactions_interleaved_with_plain_appends_read_in_offset_order(tmp_path):
    with EmbeddedBroker(tmp_path, segment_bytes=2048) as b:
        b.create_topic("out", 1)
        expected = []
        reader = b.reader("out", 0)
        got = []
        for i in range(60):
            txn = b.begin_transaction("t")
            txn.append("out", 0, [rec("k", f"t{i}-{j}") for j in range(3)])
            b.append("out", 0, [rec("p", f"plain{i}")])
            expected.append(f"plain{i}")
            if i % 4 == 3:
                txn.abort()
            else:
                txn.commit()
                expected[-1:-1] = [f"t{i}-{j}" for j in range(3)]
            got.extend(reader.read(7))
        got.extend(read_all(reader))
        assert values(got) == expected
        assert [r[0] for r in got] == sorted(r[0] for r in got)
        assert len(list((tmp_path / "topics" / "out" / "0").glob("*.log"))) > 5
        assert values(read_all(b.reader("out", 0))) == expected


def test_offsets_are_applied_with_the_data_and_only_once(broker):
    txn = broker.begin_transaction("t")
    txn.commit_offsets("g", {TP("in", 0): 5})
    txn.commit_offsets("g", {TP("in", 0): 9, TP("in", 1): 1})  # later stagings win
    txn.commit_offsets("h", {TP("in", 3): 2})
    txn.commit()  # offsets only: still atomic
    assert broker.committed_offsets("g") == {TP("in", 0): 9, TP("in", 1): 1}
    assert broker.committed_offsets("h") == {TP("in", 3): 2}
    broker.commit_offsets("g", {TP("in", 0): 0})  # e.g. a reset by hand
    aborted = broker.begin_transaction("t")
    aborted.append("out", 1, [rec("k", "v")])
    aborted.commit_offsets("g", {TP("in", 0): 100})
    aborted.abort()
    assert broker.committed_offsets("g") == {TP("in", 0): 0, TP("in", 1): 1}


def test_offset_metadata_is_committed_with_its_offset_and_replaced_by_the_next_commit(broker):
    txn = broker.begin_transaction("t")
    txn.commit_offsets("g", {TP("in", 0): 5, TP("in", 1): 3}, {TP("in", 0): "sk1 t=7 1:4"})
    txn.commit()
    assert broker.committed_metadata("g") == {TP("in", 0): "sk1 t=7 1:4"}
    broker.commit_offsets("g", {TP("in", 1): 4}, {TP("in", 1): "note"})
    assert broker.committed_metadata("g") == {TP("in", 0): "sk1 t=7 1:4", TP("in", 1): "note"}
    broker.commit_offsets("g", {TP("in", 0): 6})  # a commit without metadata clears it, as in Kafka
    assert broker.committed_metadata("g") == {TP("in", 1): "note"}
    assert broker.committed_offsets("g") == {TP("in", 0): 6, TP("in", 1): 4}
    aborted = broker.begin_transaction("t")
    aborted.commit_offsets("g", {TP("in", 1): 9}, {TP("in", 1): "never"})
    aborted.abort()
    assert broker.committed_metadata("g") == {TP("in", 1): "note"}


def test_a_second_owner_fences_the_first_across_processes(broker, tmp_path):
    zombie = spawn("""
        import os, sys, time
        from streamkit.broker import EmbeddedBroker, ProducerFencedError
        b = EmbeddedBroker(sys.argv[1])
        txn = b.begin_transaction("task-1")
        txn.append("out", 0, [(b"k", b"zombie-0", 1, None)])
        print("ready", flush=True)
        while not os.path.exists(os.path.join(sys.argv[1], "go")):
            time.sleep(0.005)
        try:
            txn.append("out", 1, [(b"k", b"zombie-1", 1, None)])
            print("appended")
        except ProducerFencedError:
            print("append fenced")
        try:
            txn.commit()
            print("committed")
        except ProducerFencedError:
            print("commit fenced")
        b.close()
    """, tmp_path)
    wait_for_line(zombie, "ready")
    txn = broker.begin_transaction("task-1")  # fences the zombie, aborts its transaction
    (tmp_path / "go").touch()
    assert finish(zombie).split() == ["append", "fenced", "commit", "fenced"]
    txn.append("out", 0, [rec("k", "owner")])
    txn.commit()
    assert values(read_all(broker.reader("out", 0))) == ["owner"]
    assert values(read_all(broker.reader("out", 0, read_committed=False))) == ["zombie-0",
                                                                               "owner"]
    assert read_all(broker.reader("out", 1)) == []
    for p in range(3):
        assert broker.last_stable_offset("out", p) == broker.partition_offsets("out", p).end
    assert broker.resolve_abandoned_transactions() == 0


def test_a_fenced_owner_learns_it_once_then_may_take_the_id_back(tmp_path):
    with EmbeddedBroker(tmp_path) as first, EmbeddedBroker(tmp_path) as second:
        first.create_topic("out", 1)
        first.begin_transaction("t").commit()
        second.begin_transaction("t").append("out", 0, [rec("k", "second")])
        with pytest.raises(ProducerFencedError):
            first.begin_transaction("t")  # fenced while idle: reported once
        again = first.begin_transaction("t")  # then a new take-over, fencing `second`
        again.append("out", 0, [rec("k", "first again")])
        again.commit()
        assert values(read_all(first.reader("out", 0))) == ["first again"]


def test_a_zombie_fenced_after_its_commit_point_is_rolled_forward_not_aborted(broker, tmp_path):
    # The zombie passes its commit point and stops before writing markers; the new owner
    # must complete that transaction, not abort it.
    zombie = spawn("""
        import sys, time
        from streamkit.transport.base import TopicPartition
        from streamkit.broker import EmbeddedBroker, PartitionReader
        from streamkit.broker.partition_log import PartitionLog
        PartitionLog.append_marker = lambda *a, **k: (print("at markers", flush=True),
                                                      time.sleep(60))
        b = EmbeddedBroker(sys.argv[1])
        txn = b.begin_transaction("task-1")
        txn.append("out", 0, [(b"k", b"zombie", 1, None)])
        txn.commit_offsets("g", {TopicPartition("in", 0): 3})
        txn.commit()
    """, tmp_path)
    try:
        wait_for_line(zombie, "at markers")
        assert read_all(broker.reader("out", 0)) == []
        txn = broker.begin_transaction("task-1")
        assert values(read_all(broker.reader("out", 0))) == ["zombie"]
        assert broker.committed_offsets("g") == {TP("in", 0): 3}
        txn.abort()
    finally:
        zombie.kill()
        zombie.wait(TIMEOUT)


def test_misuse_is_reported(broker):
    txn = broker.begin_transaction("t")
    with pytest.raises(TransactionStateError, match="still open"):
        broker.begin_transaction("t")
    with pytest.raises(ValueError):
        txn.commit_offsets("g", {TP("in", 0): -1})
    txn.commit()
    with pytest.raises(TransactionStateError, match="committed"):
        txn.commit()
    with broker.begin_transaction("t") as ctx:  # a context manager commits on success
        ctx.append("out", 0, [rec("k", "ctx")])
    assert values(read_all(broker.reader("out", 0))) == ["ctx"]
    with pytest.raises(RuntimeError):
        with broker.begin_transaction("t") as ctx:  # and aborts on error
            ctx.append("out", 0, [rec("k", "failed")])
            raise RuntimeError("boom")
    assert ctx.state == "aborted"
    assert values(read_all(broker.reader("out", 0))) == ["ctx"]


def test_closing_the_broker_aborts_an_open_transaction_and_releases_the_id(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("out", 1)
        b.begin_transaction("t").append("out", 0, [rec("k", "open at close")])
    with EmbeddedBroker(tmp_path) as b:
        assert b.resolve_abandoned_transactions() == 0  # nothing left pending
        assert b.last_stable_offset("out", 0) == b.partition_offsets("out", 0).end == 2
        assert read_all(b.reader("out", 0)) == []


# ---------------------------------------------------------------- kill -9 at any point

CRASHER = """
    import os, signal, sys
    from streamkit.transport.base import TopicPartition as TP
    from streamkit.broker import EmbeddedBroker
    from streamkit.broker import transactions as tx
    from streamkit.broker.transaction_outcomes import TransactionOutcomes
    from streamkit.broker import transaction_state as state
    from streamkit.broker.group_store import GroupStore
    from streamkit.broker.partition_log import PartitionLog

    directory, point = sys.argv[1], sys.argv[2]
    calls = {}

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def hook(owner, name, when, nth=1, only=lambda *a, **k: True):
        original = getattr(owner, name)
        def wrapper(*args, **kwargs):
            if not only(*args, **kwargs):
                return original(*args, **kwargs)
            calls[name] = calls.get(name, 0) + 1
            if when == "before" and calls[name] == nth:
                die()
            result = original(*args, **kwargs)
            if when == "after" and calls[name] == nth:
                die()
            return result
        setattr(owner, name, wrapper)

    def torn_write(self, batch):  # half a batch reaches the file, then the process dies
        os.write(self._fd, batch[:len(batch) // 2])
        die()

    # the second transaction (sequence 2) reaching its commit point / being recorded aborted
    committing = lambda self, record: (record["state"], record["sequence"]) == ("committing", 2)
    complete = lambda self, record: (record["state"], record["sequence"]) == ("complete", 2)
    write_record = state.IdDirectory.write
    def torn_commit_point(self, record):  # the commit point's pwrite is torn
        if not committing(self, record):
            return write_record(self, record)
        payload = state.json.dumps(record, sort_keys=True).encode()
        version = max(v for v, _ in self._slots()) + 1
        header = state._SLOT_HEADER.pack(state._SLOT_MAGIC, version, len(payload),
                                         state.zlib.crc32(payload))
        os.pwrite(self._fd, (header + payload)[:len(payload) // 2], (version % 2) * state.SLOT_SPAN)
        die()

    transactional = lambda *a, **k: k.get("transactional", False)
    HOOKS = {
        "before_register": lambda: hook(tx._Producer, "register", "before"),
        "after_register": lambda: hook(tx._Producer, "register", "after"),
        "after_first_append": lambda: hook(PartitionLog, "append", "after", 1, transactional),
        "torn_append": lambda: setattr(PartitionLog, "_write", torn_write),
        "before_fsync": lambda: hook(tx, "sync_all", "before"),
        "before_commit_point": lambda: hook(state.IdDirectory, "write", "before", 1, committing),
        "torn_commit_point": lambda: setattr(state.IdDirectory, "write", torn_commit_point),
        "after_commit_point": lambda: hook(state.IdDirectory, "write", "after", 1, committing),
        "after_first_marker": lambda: hook(PartitionLog, "append_marker", "after"),
        "after_markers": lambda: hook(TransactionOutcomes, "apply_offsets", "before"),
        "after_first_group": lambda: hook(GroupStore, "commit", "after"),
        "after_commit": lambda: None,
        "abort_after_first_marker": lambda: hook(PartitionLog, "append_marker", "after"),
        "abort_before_record": lambda: hook(state.IdDirectory, "write", "before", 1, complete),
    }

    broker = EmbeddedBroker(directory)
    first = broker.begin_transaction("task")  # an earlier transaction, committed
    first.append("out", 0, [(b"k", b"first", 1, None)])
    first.commit_offsets("g", {TP("in", 0): 10})
    first.commit()
    broker.append("out", 1, [(b"p", b"plain", 1, None)])

    HOOKS[point]()
    txn = broker.begin_transaction("task")
    for p in range(3):
        txn.append("out", p, [(b"k%d" % p, b"second-%d-%d" % (p, i), 2, None) for i in range(2)])
    txn.commit_offsets("g", {TP("in", 0): 20}, {TP("in", 0): "sk1 t=20"})
    txn.commit_offsets("h", {TP("in", 1): 7})
    if point.startswith("abort"):
        txn.abort()
    else:
        txn.commit()
    die()
"""

COMMITTED_POINTS = ["after_commit_point", "after_first_marker", "after_markers",
                    "after_first_group", "after_commit"]
ABORTED_POINTS = ["before_register", "after_register", "after_first_append", "torn_append",
                  "before_fsync", "before_commit_point", "torn_commit_point",
                  "abort_after_first_marker", "abort_before_record"]
# records of the second transaction on disk when the process dies there
WRITTEN_AT = {"before_register": 2, "after_register": 2, "after_first_append": 2,
              "torn_append": 0}


def crash_at(tmp_path, point):
    proc = spawn(CRASHER, tmp_path, point)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == -signal.SIGKILL, err
    # it died where intended: the record and the data on disk say so
    record = read_transaction_record(tmp_path, "task")
    assert record["sequence"] == (2 if point in COMMITTED_POINTS else 1)
    with EmbeddedBroker(tmp_path) as b:
        written = sum(r[3].startswith(b"second") for p in range(3)
                      for r in read_all(b.reader("out", p, read_committed=False)))
    assert written == WRITTEN_AT.get(point, 6)


def check_outcome(broker, committed):
    second = {p: [f"second-{p}-{i}" for i in range(2)] for p in range(3)}
    expect = {0: ["first"] + (second[0] if committed else []),
              1: ["plain"] + (second[1] if committed else []),
              2: second[2] if committed else []}
    for p in range(3):
        assert values(read_all(broker.reader("out", p))) == expect[p], p
        assert broker.last_stable_offset("out", p) == broker.partition_offsets("out", p).end
    assert broker.committed_offsets("g") == {TP("in", 0): 20 if committed else 10}
    assert broker.committed_offsets("h") == ({TP("in", 1): 7} if committed else {})
    # the offset's metadata is rolled forward (or dropped) with it
    assert broker.committed_metadata("g") == ({TP("in", 0): "sk1 t=20"} if committed else {})
    # the id is usable again, and what was resolved stays resolved
    txn = broker.begin_transaction("task")
    txn.append("out", 2, [(b"k", b"third", 3, None)])
    txn.commit_offsets("g", {TP("in", 0): 30})
    txn.commit()
    assert values(read_all(broker.reader("out", 2)))[-1:] == ["third"]
    assert values(read_all(broker.reader("out", 0))) == expect[0]
    assert broker.committed_offsets("g")[TP("in", 0)] == 30


@pytest.mark.parametrize("point", COMMITTED_POINTS + ABORTED_POINTS)
def test_kill_9_anywhere_in_a_transaction_then_resolve_gives_all_or_nothing(tmp_path, point):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("out", 3)
    crash_at(tmp_path, point)
    with EmbeddedBroker(tmp_path) as b:
        assert b.resolve_abandoned_transactions() == 1
        assert b.resolve_abandoned_transactions() == 0
        check_outcome(b, point in COMMITTED_POINTS)


@pytest.mark.parametrize("point", ["after_first_append", "after_first_marker"])
def test_the_next_owner_resolves_on_begin(tmp_path, point):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("out", 3)
    crash_at(tmp_path, point)
    with EmbeddedBroker(tmp_path) as b:
        b.begin_transaction("task").abort()  # takes the id over: resolves first
        assert b.resolve_abandoned_transactions() == 0
        check_outcome(b, point in COMMITTED_POINTS)


def test_a_recovery_killed_halfway_is_completed_by_the_next_one(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("out", 3)
    crash_at(tmp_path, "after_commit_point")
    recoverer = spawn("""
        import os, signal, sys
        from streamkit.broker import EmbeddedBroker
        from streamkit.broker.partition_log import PartitionLog
        original = PartitionLog.append_marker
        def once_then_die(*args, **kwargs):
            original(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
        PartitionLog.append_marker = once_then_die
        EmbeddedBroker(sys.argv[1]).resolve_abandoned_transactions()
    """, tmp_path)
    recoverer.communicate(timeout=TIMEOUT)
    assert recoverer.returncode == -signal.SIGKILL
    with EmbeddedBroker(tmp_path) as b:
        assert b.resolve_abandoned_transactions() == 1
        check_outcome(b, committed=True)


def test_a_live_owner_is_not_resolved_by_others(broker, tmp_path):
    txn = broker.begin_transaction("mine")
    txn.append("out", 0, [rec("k", "pending")])
    assert run_json("""
        import sys
        from streamkit.broker import EmbeddedBroker
        with EmbeddedBroker(sys.argv[1]) as b:
            print(b.resolve_abandoned_transactions())
    """, tmp_path) == 0
    txn.commit()
    assert values(read_all(broker.reader("out", 0))) == ["pending"]


def test_one_commit_touching_ten_partitions_is_cheap(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("out", 10)
        records = [rec("k", "v" * 50)] * 50
        timings = []
        for i in range(25):
            txn = b.begin_transaction("t")
            for p in range(10):
                txn.append("out", p, records)
            txn.commit_offsets("g", {TP("in", p): i for p in range(10)})
            start = time.perf_counter()
            txn.commit()
            timings.append(time.perf_counter() - start)
        median = sorted(timings[1:])[len(timings) // 2]  # the first registers partitions
        assert median < 0.05, f"median commit {median * 1000:.1f} ms"


def test_ids_with_nothing_pending_leave_no_files_behind(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("out", 3)
    crash_at(tmp_path, "after_first_append")  # a crashed owner ...
    with EmbeddedBroker(tmp_path) as b:
        for i in range(3):  # ... and cleanly closed ones (a worker's id is new per process)
            with EmbeddedBroker(tmp_path) as other:
                other.begin_transaction(f"worker-{i}").commit()
        mine = b.begin_transaction("live")
        assert b.resolve_abandoned_transactions() == 1
        ids = tmp_path / "transactions"
        assert sorted(p.name for p in ids.iterdir() if p.is_dir()) == ["live"]
        mine.commit()
        assert b.begin_transaction("task").id > 0  # an id can start over
        assert read_transaction_record(tmp_path, "task")["active"] is True


def test_the_applied_transactions_of_a_group_are_bounded(tmp_path):
    from streamkit.broker.group_store import MAX_APPLIED_TRANSACTIONS, GroupStore
    groups = GroupStore(tmp_path)
    for i in range(MAX_APPLIED_TRANSACTIONS + 20):
        assert groups.commit("g", {TP("in", 0): i}, txn=(f"id-{i}", 1), durable=False)
    assert not groups.commit("g", {TP("in", 0): 0}, txn=(f"id-{i}", 1))  # applied already
    applied = json.loads((tmp_path / "g" / "offsets.json").read_text())["transactions"]
    assert len(applied) == MAX_APPLIED_TRANSACTIONS and applied[-1] == [f"id-{i}", 1]
    assert groups.committed("g") == {TP("in", 0): i}
