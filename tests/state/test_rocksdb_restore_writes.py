"""RocksDB restore writes (issue 36): replayed records go in without the write-ahead log and
become durable, with their checkpoint, only when settled. A process killed (SIGKILL) before
that keeps the last settled checkpoint and at least the data it claims."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from streamkit.state.rocksdb import RocksDBBytesStore

REPO = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent("""
    import os, signal, sys
    from streamkit.state.rocksdb import RocksDBBytesStore

    store = RocksDBBytesStore(sys.argv[1])
    store.apply({b"before": b"0"}, 10)  # ordinary processing: through the log
    store.apply_restored({b"k%d" % i: b"first" for i in range(1000)}, 1010)
    store.settle_restored()
    store.apply_restored({b"k%d" % i: b"second" for i in range(500)} | {b"before": None}, 1510)
    os.kill(os.getpid(), signal.SIGKILL)  # before the second batch is settled
""")


def test_settled_restore_survives_a_kill_and_unsettled_writes_do_not_move_the_checkpoint(tmp_path) -> None:
    path = str(tmp_path / "store")
    killed = subprocess.run([sys.executable, "-c", WRITER, path], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    store = RocksDBBytesStore(path)
    try:
        assert store.changelog_offset() == 1010
        held = dict(store.range(None, None))
    finally:
        store.close()
    # The settled batch is all there; of the unsettled one, any part may have reached the files
    # (RocksDB flushes full memtables by itself): values of records past the checkpoint.
    for i in range(1000):
        assert held[b"k%d" % i] in ((b"first", b"second") if i < 500 else (b"first",)), i
    assert held.get(b"before") in (b"0", None)
    assert set(held) - {b"before"} == {b"k%d" % i for i in range(1000)}


def test_restore_writes_do_not_checkpoint_until_settled(tmp_path) -> None:
    store = RocksDBBytesStore(str(tmp_path / "store"))
    try:
        store.apply({}, 5)
        store.apply_restored({b"a": b"1", b"b": b"2"}, 7)
        assert store.changelog_offset() == 5
        assert store.get(b"a") == b"1"  # readable at once
        store.apply_restored({b"a": None}, 9)
        store.settle_restored()
        assert store.changelog_offset() == 9
        assert dict(store.range(None, None)) == {b"b": b"2"}
        store.settle_restored()  # nothing new: the checkpoint stays
        assert store.changelog_offset() == 9
    finally:
        store.close()
