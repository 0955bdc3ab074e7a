"""A worker whose state directory or embedded log fills up (a real full tmpfs): it exits
non-zero with one error naming the store or topic-partition and the stage, commits no
offset past what landed, and a restart with space again finishes the input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Tuple

from streamkit.broker.broker import EmbeddedBroker
from streamkit.core.records import TopicPartition
from tests.cli_processes import REPO
from tests.storage_limits import fill, small_filesystem

APP = '''
import streamkit as sk

app = sk.App("diskfull")
source = app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=1)


@app.topology
def build(b: sk.StreamsBuilder) -> None:
    stream = b.stream(source)
    stream.to("copy")
    stream.group_by_key().count(name="counts")
'''


def streamkit(workdir: Path, broker_dir: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "STREAMKIT_BROKER": f"embedded://{broker_dir}",
           "PYTHONPATH": f"{workdir}{os.pathsep}{REPO}"}
    return subprocess.run([sys.executable, "-m", "streamkit", "--log-level", "WARNING", *args], input=stdin,
                          capture_output=True, text=True, timeout=300, cwd=workdir, env=env)


def setup_input(workdir: Path, broker_dir: Path, records: int, key_bytes: int) -> None:
    (workdir / "diskfull_app.py").write_text(APP)
    assert streamkit(workdir, broker_dir, "topics", "create", "in", "--partitions", "1").returncode == 0
    lines = "".join(json.dumps({"k": f"key-{i:05d}-" + "y" * key_bytes, "v": i}) + "\n" for i in range(records))
    produced = streamkit(workdir, broker_dir, "produce", "in", "--key-field", "k", "--key-format", "text",
                         stdin=lines)
    assert produced.returncode == 0, produced.stderr


def run_worker(workdir: Path, broker_dir: Path, state_dir: Path) -> subprocess.CompletedProcess:
    return streamkit(workdir, broker_dir, "worker", "diskfull_app", "--state-dir", str(state_dir),
                     "--until-idle", "1")


def committed_and_copied(broker_dir: Path) -> Tuple[int, list]:
    """(committed input offset, the input positions ``v`` of the records in 'copy')."""
    with EmbeddedBroker(broker_dir) as broker:
        committed = broker.committed_offsets("diskfull").get(TopicPartition("in", 0), 0)
        copied = []
        if broker.topic("copy") is not None:
            with broker.reader("copy", 0) as reader:
                while batch := reader.read():
                    copied.extend(json.loads(value)["v"] for _o, _t, _k, value, _h in batch)
    return committed, copied


def assert_nothing_committed_past_what_landed(broker_dir: Path) -> int:
    committed, copied = committed_and_copied(broker_dir)
    assert sorted(set(copied))[:committed] == list(range(committed)), (committed, copied[:5])
    return committed


def test_a_full_state_directory_names_the_store_and_the_stage(tmp_path: Path) -> None:
    broker_dir = tmp_path / "broker"
    setup_input(tmp_path, broker_dir, records=2000, key_bytes=1000)  # ~2 MB of state
    with small_filesystem(tmp_path / "fs", 8 << 20) as fs:
        state_dir = fs / "state"
        state_dir.mkdir()
        filler = fill(fs, leave_bytes=300_000)
        failed = run_worker(tmp_path, broker_dir, state_dir)
        assert failed.returncode == 1, failed.stderr
        assert "Traceback" not in failed.stderr
        error = failed.stderr.strip().splitlines()[-1]
        assert error.startswith("Error: checkpoint after the commit failed for state store 'counts'"), error
        assert "changelog topic 'diskfull-counts-changelog' partition 0" in error
        assert f"RocksDB store {state_dir}" in error and "No space left on device" in error
        assert_nothing_committed_past_what_landed(broker_dir)
        # still full: the restart cannot restore the store from its changelog either
        again = run_worker(tmp_path, broker_dir, state_dir)
        assert again.returncode == 1, again.stderr
        error = again.stderr.strip().splitlines()[-1]
        assert error.startswith("Error: restore failed for state store 'counts' of task 0_0, restoring "
                                "changelog topic 'diskfull-counts-changelog' partition 0 offsets "), error
        assert "No space left on device" in error and "Traceback" not in again.stderr
        assert_nothing_committed_past_what_landed(broker_dir)
        filler.unlink()
        finished = run_worker(tmp_path, broker_dir, state_dir)  # restores, then goes on
        assert finished.returncode == 0, finished.stderr
    assert assert_nothing_committed_past_what_landed(broker_dir) == 2000


def test_a_full_embedded_log_names_the_partition_and_commits_nothing_past_it(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "fs", 2 << 20) as fs:
        broker_dir = fs / "broker"
        setup_input(tmp_path, broker_dir, records=400, key_bytes=1000)
        filler = fill(fs, leave_bytes=200_000)
        failed = run_worker(tmp_path, broker_dir, tmp_path / "state")
        assert failed.returncode == 1, failed.stderr
        assert "Traceback" not in failed.stderr
        error = failed.stderr.strip().splitlines()[-1]
        assert error.startswith("Error: "), error
        assert "No space left on device" in error and "[Errno 28]" in error
        # the output, the changelog or the offsets file: whichever did not fit is named with its stage
        assert ("produce (append of offsets" in error and "failed for topic '" in error
                or "offset commit failed for group 'diskfull'" in error), error
        assert assert_nothing_committed_past_what_landed(broker_dir) < 400
        filler.unlink()
        finished = run_worker(tmp_path, broker_dir, tmp_path / "state")
        assert finished.returncode == 0, finished.stderr
        assert assert_nothing_committed_past_what_landed(broker_dir) == 400
