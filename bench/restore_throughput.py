"""How fast a task restores a store from its changelog into RocksDB.

Writes N changelog records (100,000 distinct keys, values as a count store
holds them) to one changelog partition of the embedded broker, then times
``restore_task_stores`` into a fresh RocksDB store and checks the result.

Usage: python -m bench.restore_throughput [--records 1000000]
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import struct
import tempfile
import time


from streamkit.serdes import Json, compact_json
from streamkit.state.restore import restore_task_stores
from streamkit.state.task_stores import open_task_stores
from streamkit.stores import StoreSpec
from streamkit.transport.embedded.transport import EmbeddedTransport

KEYS = 100_000


def measure(records: int) -> float:
    """Records restored per second."""
    directory = tempfile.mkdtemp(prefix="sk-bench-restore-")
    try:
        transport = EmbeddedTransport(directory)
        topic = "bench-counts-changelog"
        transport.admin.create_topic(topic, 1, {"cleanup.policy": "compact"})
        stamp = struct.pack(">q", 1_700_000_000_000)
        batch = []
        for i in range(records):
            batch.append((compact_json(f"key-{i % KEYS}"), stamp + str(i // KEYS + 1).encode(), i, None))
            if len(batch) == 10_000:
                transport.broker.append(topic, 0, batch)
                batch = []
        if batch:
            transport.broker.append(topic, 0, batch)
        transport.broker.sync()
        stores = open_task_stores([StoreSpec("counts", key_serde=Json(), value_serde=Json(), timestamped=True)],
                                  app_id="bench", task_id="0_0", partition=0, backend="rocksdb",
                                  state_dir=f"{directory}/state")
        consumer = transport.consumer("bench-restore")
        started = time.perf_counter()
        report = asyncio.run(restore_task_stores("0_0", stores, consumer, transport.admin, show_progress=False))
        elapsed = time.perf_counter() - started
        assert report["counts"] == records, report
        counts = stores.by_name["counts"]
        assert counts.get("key-0") == -(-records // KEYS) and counts.get(f"key-{KEYS - 1}") == records // KEYS
        stores.close()
        transport.close()
        return records / elapsed
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    rate = measure(args.records)
    print(f"restore: {args.records:,} changelog records into RocksDB at {rate:,.0f} records/s "
          f"({args.records / rate:.1f} s)")


if __name__ == "__main__":
    main()
