"""Kafka's console tools as people type them (issue 37): ``groups reset-offsets`` with every
target, ``consume`` with Kafka's options, ``topics alter``, ``topics delete`` next to live
consumers, ``groups list|delete``, and a help text for every option. Each console test
runs the real CLI against the embedded broker and against Apache Kafka."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import click
import pytest
from click.testing import CliRunner

from streamkit.cli import cli as streamkit_cli
from tests.cli_processes import REPO

HOUR_MS = 3_600_000

MEMBER_SCRIPTS = {
    # A live member of GROUP until its stdin closes.
    "embedded": textwrap.dedent("""
        import sys
        from streamkit.broker import EmbeddedBroker
        broker = EmbeddedBroker(sys.argv[1])
        member = broker.join_group(sys.argv[2])
        print("joined", flush=True)
        sys.stdin.read()
        member.leave()
        broker.close()
    """),
    "kafka": textwrap.dedent("""
        import asyncio, sys
        from aiokafka import AIOKafkaConsumer
        from streamkit.transport.kafka.no_auto_create import no_topic_auto_creation

        async def main():
            # (without auto-creation: Kafka would recreate the topic the test deletes under it)
            consumer = no_topic_auto_creation(AIOKafkaConsumer(
                sys.argv[3], bootstrap_servers=sys.argv[1], group_id=sys.argv[2], enable_auto_commit=False,
                session_timeout_ms=6000, heartbeat_interval_ms=500))
            await consumer.start()
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=200)
            print("joined", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
            await consumer.stop()  # leaves the group at once

        asyncio.run(main())
    """),
}


class Console:
    """The ``streamkit`` CLI in subprocesses against one broker (``kind``: embedded or kafka)."""

    def __init__(self, kind: str, env: Dict[str, str], *, directory: Optional[Path] = None,
                 kafka=None) -> None:
        self.kind = kind
        self.env = {**os.environ, "PYTHONPATH": str(REPO), **env}
        self.directory = directory
        self.kafka = kafka

    def __call__(self, *args: str, stdin: Optional[str] = None, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "streamkit", *args], input=stdin, capture_output=True,
                              text=True, timeout=timeout, cwd=REPO, env=self.env)

    def ok(self, *args: str, stdin: Optional[str] = None) -> subprocess.CompletedProcess:
        """Run and assert exit code 0."""
        done = self(*args, stdin=stdin)
        assert done.returncode == 0, f"streamkit {' '.join(args)}: {done.stderr[-3000:]}"
        return done

    def name(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    def topic(self, prefix: str, partitions: int = 1) -> str:
        """A new topic that keeps its records (Kafka's default retention would delete old timestamps)."""
        name = self.name(prefix)
        self.ok("topics", "create", name, "--partitions", str(partitions), "--config", "retention.ms=-1")
        return name

    def committed(self, group: str, topic: str) -> Dict[int, int]:
        rows = [line.split() for line in self.ok("groups", "describe", group).stdout.splitlines()[1:]]
        return {int(r[1]): int(r[2]) for r in rows if r[0] == topic}

    def plan(self, result: subprocess.CompletedProcess) -> Dict[int, int]:
        """``{partition: new offset}`` of a reset-offsets table."""
        rows = [line.split() for line in result.stdout.splitlines()[1:]]
        return {int(r[1]): int(r[2]) for r in rows}

    @contextlib.contextmanager
    def live_member(self, group: str, topic: str) -> Iterator[None]:
        """A live member of ``group`` (a real process) for the duration of the block."""
        if self.kind == "embedded":
            args = [str(self.directory), group]
        else:
            args = [self.kafka.bootstrap, group, topic]
        proc = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPTS[self.kind], *args], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=self.env)
        try:
            line = proc.stdout.readline()  # blocks until the member joined (or the process died)
            assert line.strip() == "joined", f"the member of {group} did not join: {proc.stderr.read()[-2000:]}"
            yield
        finally:
            try:
                proc.communicate(input="", timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate(timeout=10)

    def write_aborted(self, topic: str, values: List[int]) -> None:
        """Append ``values`` to partition 0 of ``topic`` in a transaction that is then aborted."""
        records = [json.dumps(v).encode() for v in values]
        if self.kind == "embedded":
            from streamkit.broker import EmbeddedBroker

            broker = EmbeddedBroker(str(self.directory))
            try:
                transaction = broker.begin_transaction(self.name("tx"))
                transaction.append(topic, 0, [(None, r, int(time.time() * 1000), None) for r in records])
                transaction.abort()
            finally:
                broker.close()
            return
        from aiokafka import AIOKafkaProducer

        async def abort() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=self.kafka.bootstrap, transactional_id=self.name("tx"))
            await producer.start()
            try:
                await producer.begin_transaction()
                for record in records:
                    await producer.send_and_wait(topic, record, partition=0)
                await producer.abort_transaction()
            finally:
                await producer.stop()
        asyncio.run(abort())


@pytest.fixture(params=["embedded", "kafka"])
def console(request, tmp_path) -> Console:
    if request.param == "embedded":
        directory = tmp_path / "broker"
        return Console("embedded", {"STREAMKIT_BROKER": f"embedded://{directory}"}, directory=directory)
    kafka = request.getfixturevalue("kafka")
    return Console("kafka", {"STREAMKIT_BROKER": kafka.url, **kafka.streamkit_env()}, kafka=kafka)


def _values(result: subprocess.CompletedProcess) -> List:
    return [json.loads(line)["value"] for line in result.stdout.splitlines()]


def test_reset_offsets_to_every_target(console, tmp_path):
    topic = console.topic("reset", partitions=2)
    now = int(time.time() * 1000)
    base = now - 10 * HOUR_MS  # record i of each partition is stamped base + i hours
    for partition in (0, 1):
        lines = "".join(json.dumps({"n": i, "ts": base + i * HOUR_MS}) + "\n" for i in range(10))
        console.ok("produce", topic, "--partition", str(partition), "--timestamp-field", "ts", stdin=lines)
    group = console.name("g")
    console.ok("consume", topic, "--group", group, "--from-beginning", "--max-messages", "20", "--timeout", "10")
    assert console.committed(group, topic) == {0: 10, 1: 10}

    def reset(*args: str) -> subprocess.CompletedProcess:
        return console.ok("groups", "reset-offsets", group, *args)

    # --dry-run is the default: the plan is printed, nothing moves
    planned = reset("--topic", topic, "--to-earliest")
    assert console.plan(planned) == {0: 0, 1: 0} and "dry run" in planned.stderr
    assert console.committed(group, topic) == {0: 10, 1: 10}

    # --to-datetime: the first record at or after the moment, with a zone or in local time
    third = datetime.fromtimestamp((base + 3 * HOUR_MS) / 1000, tz=timezone.utc)
    utc = third.strftime("%Y-%m-%dT%H:%M:%S.") + f"{third.microsecond // 1000:03d}Z"
    assert console.plan(reset("--topic", topic, "--to-datetime", utc)) == {0: 3, 1: 3}
    local = datetime.fromtimestamp((base + 3 * HOUR_MS + 1) / 1000).isoformat(timespec="milliseconds")
    assert console.plan(reset("--topic", topic, "--to-datetime", local)) == {0: 4, 1: 4}
    future = datetime.fromtimestamp(now / 1000 + 86_400, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert console.plan(reset("--topic", topic, "--to-datetime", future)) == {0: 10, 1: 10}  # none: the end

    # --by-duration: records of the last 3.5 hours are those stamped base + 7, 8, 9 hours
    assert console.plan(reset("--topic", topic, "--by-duration", "PT3H30M")) == {0: 7, 1: 7}

    # --to-offset and --shift-by, clamped to the log start and end with a warning
    assert console.plan(reset("--topic", f"{topic}:1", "--to-offset", "4")) == {1: 4}
    past = reset("--topic", topic, "--to-offset", "99")
    assert console.plan(past) == {0: 10, 1: 10}
    assert f"{topic}[0]: offset 99 is past the log end 10: set to 10" in past.stderr
    shifted = reset("--all-topics", "--shift-by", "-3", "--execute")
    assert console.plan(shifted) == {0: 7, 1: 7} and console.committed(group, topic) == {0: 7, 1: 7}
    below = reset("--topic", f"{topic}:0", "--shift-by", "-100", "--execute")
    assert f"{topic}[0]: offset -93 is below the log start 0: set to 0" in below.stderr
    assert console.committed(group, topic) == {0: 0, 1: 7}
    reset("--topic", topic, "--to-latest", "--execute")
    assert console.committed(group, topic) == {0: 10, 1: 10}

    # --export writes what --from-file reads back (Kafka's CSV: topic,partition,offset)
    exported = reset("--topic", f"{topic}:0", "--to-offset", "2", "--export")
    assert exported.stdout == f"{topic},0,2\n"
    plan_file = tmp_path / "plan.csv"
    plan_file.write_text(exported.stdout + f"{topic},1,50\n")
    from_file = reset("--from-file", str(plan_file), "--execute")
    assert console.plan(from_file) == {0: 2, 1: 10} and "offset 50 is past the log end 10" in from_file.stderr
    assert console.committed(group, topic) == {0: 2, 1: 10}

    wrong = console("groups", "reset-offsets", group, "--topic", topic, "--by-duration", "3 hours")
    assert wrong.returncode == 2 and "PnDTnHnMnS" in wrong.stderr
    two = console("groups", "reset-offsets", group, "--topic", topic, "--to-offset", "1", "--shift-by", "1")
    assert two.returncode == 2 and "exactly one of" in two.stderr


def test_consume_like_the_console_consumer(console):
    topic = console.topic("consume", partitions=2)
    for partition in (0, 1):
        lines = "".join(json.dumps({"k": f"k{i}", "v": 100 * partition + i}) + "\n" for i in range(5))
        console.ok("produce", topic, "--partition", str(partition), "--key-field", "k", stdin=lines)
    base = ("consume", topic, "--timeout", "3")

    # --partition with --offset earliest|latest|N, --max-messages and --max
    first = console.ok(*base, "--partition", "1", "--offset", "earliest", "--max-messages", "2")
    assert [v["v"] for v in _values(first)] == [100, 101]
    from_two = console.ok(*base, "--partition", "1", "--offset", "2", "--max", "10")
    assert [v["v"] for v in _values(from_two)] == [102, 103, 104]
    assert _values(console.ok(*base, "--partition", "0", "--offset", "latest")) == []
    clamped = console.ok(*base, "--partition", "0", "--offset", "40")
    assert _values(clamped) == [] and "offset 40 is outside its records (0 to 5): starting at 5" in clamped.stderr
    needs_partition = console("consume", topic, "--offset", "3")
    assert needs_partition.returncode == 2 and "--offset N needs --partition" in needs_partition.stderr

    # --print picks the fields and their order; Kafka's --property print.X=true adds to the value
    printed = console.ok(*base, "--partition", "0", "--offset", "3", "--print", "offset,key,timestamp")
    lines = [json.loads(line) for line in printed.stdout.splitlines()]
    assert [list(line) for line in lines] == [["offset", "key", "timestamp"]] * 2
    assert [(line["offset"], line["key"]) for line in lines] == [(3, "k3"), (4, "k4")]
    assert all(isinstance(line["timestamp"], int) for line in lines)
    props = console.ok(*base, "--partition", "0", "--offset", "4", "--property", "print.timestamp=true",
                       "--property", "print.key=true")
    (line,) = [json.loads(text) for text in props.stdout.splitlines()]
    assert set(line) == {"timestamp", "key", "value"} and line["key"] == "k4"
    bad = console(*base, "--property", "print.colour=true")
    assert bad.returncode == 2 and "print.FIELD=true|false" in bad.stderr

    # --isolation-level: aborted transactional records only with read_uncommitted
    console.write_aborted(topic, [900, 901])
    committed = console.ok(*base, "--partition", "0", "--offset", "earliest", "--isolation-level",
                           "read_committed")
    assert [v["v"] for v in _values(committed)] == [0, 1, 2, 3, 4]
    uncommitted = console.ok(*base, "--partition", "0", "--offset", "earliest", "--isolation-level",
                             "read_uncommitted")
    values = _values(uncommitted)
    assert [v["v"] for v in values[:5]] == [0, 1, 2, 3, 4] and values[5:] == [900, 901]


def test_consume_into_a_closed_pipe_ends_quietly(console):
    """``streamkit consume ... | head -1``: exit 0, no traceback, and with --group no
    offset committed past what could be written."""
    topic = console.topic("pipe")
    count = 5000  # ~700 kB of output: far more than a pipe holds, so the write fails
    console.ok("produce", topic, stdin="".join(json.dumps({"n": i, "pad": "x" * 100}) + "\n" for i in range(count)))
    group = console.name("g")
    command = (f"set -o pipefail; {sys.executable} -m streamkit consume {topic} --from-beginning --group {group} "
               f"| head -1")
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=console.env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["value"]["n"] == 0
    for sign in ("Traceback", "BrokenPipe", "Exception ignored"):
        assert sign not in done.stderr, done.stderr[-3000:]
    described = console("groups", "describe", group)
    if described.returncode == 1:  # nothing was committed, so the group does not exist
        assert f"unknown group '{group}'" in described.stderr
    else:
        assert console.committed(group, topic).get(0, 0) < count


def test_topics_alter_partitions_only_grows_and_new_partitions_take_records(console):
    topic = console.topic("grow", partitions=2)
    grown = console.ok("topics", "alter", topic, "--partitions", "5")
    assert f"altered topic {topic}: partitions 2 -> 5" in grown.stdout
    assert "Partitions: 5" in console.ok("topics", "describe", topic).stdout
    shrink = console("topics", "alter", topic, "--partitions", "3")
    assert shrink.returncode == 1 and "can only be added" in shrink.stderr, shrink.stderr
    assert "already has 5" in console.ok("topics", "alter", topic, "--partitions", "5").stdout
    # every new partition is a real log: records produced to it are read back from it
    keys = [f"k{i}" for i in range(60)]
    console.ok("produce", topic, "--key-field", "k", stdin="".join(f'{{"k": "{k}"}}\n' for k in keys))
    console.ok("produce", topic, "--partition", "4", stdin='{"k": "last"}\n')
    rows = console.ok("topics", "describe", topic).stdout.splitlines()[2:]
    records = {int(r.split()[0]): int(r.split()[3]) for r in rows}
    assert sum(records.values()) == 61 and all(records[p] > 0 for p in (2, 3, 4)), records


def test_topics_alter_and_delete_next_to_live_consumers(console):
    topic = console.topic("alter")
    altered = console.ok("topics", "alter", topic, "--config", "retention.ms=86400000", "--config",
                         "cleanup.policy=compact,delete")
    assert "retention.ms=86400000" in altered.stdout
    described = console.ok("topics", "describe", topic).stdout.splitlines()[0]
    assert "retention.ms=86400000" in described and "cleanup.policy=compact,delete" in described
    console.ok("topics", "alter", topic, "--delete-config", "cleanup.policy")
    described = console.ok("topics", "describe", topic).stdout.splitlines()[0]
    assert "cleanup.policy" not in described and "retention.ms=86400000" in described
    unknown = console("topics", "alter", topic, "--config", "no.such.config=1")
    assert unknown.returncode == 1 and "no.such.config" in unknown.stderr
    assert "retention.ms=86400000" in console.ok("topics", "describe", topic).stdout  # unchanged

    console.ok("produce", topic, stdin="1\n2\n")
    group = console.name("readers")
    console.ok("consume", topic, "--group", group, "--from-beginning", "--max", "2", "--timeout", "10")
    with console.live_member(group, topic):
        refused = console("topics", "delete", topic)
        assert refused.returncode == 1, refused.stderr
        assert f"topic '{topic}' is consumed by group '{group}' (1 live member(s)" in refused.stderr
        assert topic in console.ok("topics", "list").stdout.split()
        forced = console.ok("topics", "delete", topic, "--force")
        assert f"warning: deleting topic '{topic}' consumed by group '{group}'" in forced.stderr
    assert topic not in console.ok("topics", "list").stdout.split()


def test_groups_list_and_delete(console):
    topic = console.topic("groups")
    console.ok("produce", topic, stdin="1\n2\n3\n")
    group, other = console.name("g"), console.name("h")
    for name in (group, other):
        console.ok("consume", topic, "--group", name, "--from-beginning", "--max", "3", "--timeout", "10")
    listed = console.ok("groups", "list").stdout.split()
    assert group in listed and other in listed

    with console.live_member(group, topic):
        refused = console("groups", "delete", group)
        assert refused.returncode == 1 and f"group '{group}' has 1 live member(s)" in refused.stderr
        reset = console("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
        assert reset.returncode == 1 and "offsets can only be reset while the group is inactive" in reset.stderr
    assert console.committed(group, topic) == {0: 3}

    assert console.ok("groups", "delete", group).stdout.strip() == f"deleted group {group}"
    listed = console.ok("groups", "list").stdout.split()
    assert group not in listed and other in listed
    again = console("groups", "delete", group)
    assert again.returncode == 1 and f"unknown group '{group}'" in again.stderr


def _commands(command: click.Command, path: tuple) -> Iterator[tuple]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from _commands(sub, path + (name,))


def test_every_option_of_every_command_has_a_help_text():
    runner = CliRunner()
    missing = []
    for path, command in _commands(streamkit_cli, ()):
        shown = runner.invoke(streamkit_cli, [*path, "--help"])
        assert shown.exit_code == 0 and "Usage:" in shown.output, (path, shown.output)
        for param in command.params:
            if isinstance(param, click.Option) and not (param.help or "").strip():
                missing.append(f"streamkit {' '.join(path)} {'/'.join(param.opts)}")
            elif isinstance(param, click.Option) and not param.hidden:
                assert param.opts[0] in shown.output, (path, param.opts)
        options = {name for param in command.params for name in getattr(param, "opts", ())}
        for named in re.findall(r"default:\s+(--[a-z][a-z-]*)", " ".join(shown.output.split())):
            assert named in options, f"`streamkit {' '.join(path)} --help` defaults to {named}, which it lacks"
    assert not missing, "options without a help text: " + "; ".join(missing)
