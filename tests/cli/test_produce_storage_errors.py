"""``streamkit produce`` when the embedded log cannot be written (a real full disk, a real
file size limit): one error naming topic, partition and file, what was acknowledged
before it per partition, and a non-zero exit; the acknowledged records are all there."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from streamkit.broker.broker import EmbeddedBroker
from tests.cli_processes import REPO
from tests.storage_limits import file_size_limit, fill, small_filesystem

LINES = b"".join(b'"%d-%s"\n' % (i, b"x" * 1000) for i in range(3000))


def produce(broker_dir: Path, topic: str, data: bytes, preexec_fn=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "STREAMKIT_BROKER": f"embedded://{broker_dir}", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "streamkit", "produce", topic], input=data, capture_output=True,
                          timeout=300, cwd=REPO, env=env, preexec_fn=preexec_fn)


def acknowledged_spans(stderr: str) -> dict:
    """{partition: (count, first, last)} from the error's 'partition P: N at offsets F to L'."""
    return {int(p): (int(n), int(first), int(last))
            for p, n, first, last in re.findall(r"partition (\d+): (\d+) at offsets (\d+) to (\d+)", stderr)}


def check_acknowledged_records_are_there(broker_dir: Path, topic: str, stderr: str) -> int:
    """Every acknowledged record is in the log, in input order; returns how many."""
    spans = acknowledged_spans(stderr)
    assert spans, stderr
    with EmbeddedBroker(broker_dir) as broker:
        for partition, (count, first, last) in spans.items():
            assert last - first + 1 == count
            assert broker.partition_offsets(topic, partition).end >= last + 1
            with broker.reader(topic, partition) as reader:
                reader.seek(first)
                got = []
                while len(got) < count and (batch := reader.read()):
                    got.extend(batch)
            numbers = [int(value.split(b"-")[0].strip(b'"')) for _o, _t, _k, value, _h in got[:count]]
            assert numbers == sorted(numbers) and all(n % 2 == partition for n in numbers)
    total = sum(count for count, _first, _last in spans.values())
    assert f"{total} record(s) acknowledged before the failure" in stderr
    return total


def test_produce_to_a_full_disk_says_what_was_acknowledged(tmp_path):
    with small_filesystem(tmp_path / "fs", 2 << 20) as fs:
        broker_dir = fs / "broker"
        created = subprocess.run([sys.executable, "-m", "streamkit", "topics", "create", "t", "--partitions", "2"],
                                 capture_output=True, text=True, cwd=REPO, timeout=60,
                                 env={**os.environ, "STREAMKIT_BROKER": f"embedded://{broker_dir}",
                                      "PYTHONPATH": str(REPO)})
        assert created.returncode == 0, created.stderr
        result = produce(broker_dir, "t", LINES)
        stderr = result.stderr.decode()
        assert result.returncode == 1, stderr
        assert "Traceback" not in stderr
        assert "No space left on device" in stderr and "[Errno 28]" in stderr
        assert re.search(r"failed for topic 't' partition \d, file \S+/topics/t/\d/\d{20}\.log", stderr), stderr
        total = check_acknowledged_records_are_there(broker_dir, "t", stderr)
        assert 0 < total < 3000
        # once there is space again, producing goes on after the acknowledged records
        fill(fs).unlink()
        assert produce(broker_dir, "t", b'"more"\n').returncode == 0


def test_produce_past_the_file_size_limit_fails_with_efbig(cli, broker_dir):
    assert cli("topics", "create", "t", "--partitions", "2").returncode == 0
    result = produce(broker_dir, "t", LINES, preexec_fn=file_size_limit(600_000))
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert "File too large" in stderr and "[Errno 27]" in stderr, stderr
    assert "Traceback" not in stderr
    assert re.search(r"produce \(append of offsets \d+ to \d+, \d+ bytes\) failed for topic 't' partition \d",
                     stderr), stderr
    total = check_acknowledged_records_are_there(broker_dir, "t", stderr)
    assert 0 < total < 3000
