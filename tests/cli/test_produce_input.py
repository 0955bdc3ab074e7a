"""``streamkit produce`` reading standard input: long lines, line endings, chunk borders."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from streamkit.broker.broker import EmbeddedBroker
from tests.cli_processes import REPO


def produce_bytes(broker_dir: Path, topic: str, data: bytes, *args: str) -> subprocess.CompletedProcess:
    """Run ``streamkit produce TOPIC ARGS`` with `data` (bytes) on standard input."""
    env = {**os.environ, "STREAMKIT_BROKER": f"embedded://{broker_dir}", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "streamkit", "produce", topic, *args], input=data,
                          capture_output=True, timeout=300, cwd=REPO, env=env)


def values_in(broker_dir: Path, topic: str) -> list[bytes]:
    """Every value of partition 0 of `topic`, in offset order."""
    with EmbeddedBroker(broker_dir) as broker, broker.reader(topic, 0) as reader:
        values = []
        while batch := reader.read():
            values.extend(record[3] for record in batch)
        return values


def test_a_20_mib_line_round_trips_byte_for_byte(cli, broker_dir):
    cli("topics", "create", "big", "--partitions", "1")
    # not one repeated byte: a shifted or dropped piece of the line would show
    line = bytes(range(33, 127)) * ((20 << 20) // 94) + b"tail"
    result = produce_bytes(broker_dir, "big", b"short\n" + line + b"\r\nafter", "--format", "text")
    assert result.returncode == 0, result.stderr
    assert b"produced 3 record(s)" in result.stderr
    values = values_in(broker_dir, "big")
    assert [len(v) for v in values] == [5, len(line), 5]
    assert values[1] == line
    assert values == [b"short", line, b"after"]


def test_lines_split_across_reads_keep_their_bytes(cli, broker_dir):
    # lines of every length around the 1 MiB read size end at every offset of a read
    cli("topics", "create", "t", "--partitions", "1")
    lines = [b"%d:" % i + b"y" * n for i, n in enumerate((0, 1, (1 << 20) - 3, 1 << 20, (1 << 20) + 1, 7))]
    result = produce_bytes(broker_dir, "t", b"\n".join(lines) + b"\n", "--format", "text")
    assert result.returncode == 0, result.stderr
    assert values_in(broker_dir, "t") == lines
