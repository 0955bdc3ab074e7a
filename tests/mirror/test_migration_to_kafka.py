"""The walk of docs/migration.md, end to end: a stateful app moves from the embedded broker
to Apache Kafka, and its outputs go on with no gap and no duplicate."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List

from tests.kafka.broker import KafkaTestBroker

REPO = Path(__file__).resolve().parents[2]

APP = textwrap.dedent("""
    from datetime import timedelta
    import streamkit as sk

    app = sk.App("shop", processing_guarantee="exactly_once", caching=False,
                 commit_interval=timedelta(milliseconds=200))
    orders = app.topic("shop-orders", partitions=3)

    @app.topology
    def build(b):
        b.stream(orders).group_by_key().count(name="orders-per-user").to_stream().to("shop-counts")
""")


class Shop:
    """The app's module in ``directory``, run with the real CLI on either broker."""

    def __init__(self, directory: Path, kafka: KafkaTestBroker) -> None:
        self.directory = directory
        self.embedded = f"embedded://{directory / 'embedded'}"
        self.kafka = kafka
        (directory / "shop_app.py").write_text(APP)

    def cli(self, *args: str, stdin: str = "", timeout: float = 180) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": f"{self.directory}{os.pathsep}{REPO}", **self.kafka.streamkit_env()}
        env.pop("STREAMKIT_BROKER", None)
        done = subprocess.run([sys.executable, "-m", "streamkit", *args], input=stdin, capture_output=True,
                              text=True, timeout=timeout, cwd=self.directory, env=env)
        assert done.returncode == 0, f"{args}: {done.stderr[-4000:]}"
        return done

    def order(self, broker: str, users: List[str]) -> None:
        lines = "".join(json.dumps({"user": user, "item": n}) + "\n" for n, user in enumerate(users))
        self.cli("produce", "shop-orders", "--key-field", "user", "--broker", broker, stdin=lines)

    def run_worker(self, broker: str, state: str) -> None:
        self.cli("worker", "shop_app", "--broker", broker, "--until-idle", "3", "--state-dir",
                 str(self.directory / state))

    def counts(self, broker: str) -> Dict[str, List[int]]:
        out = self.cli("consume", "shop-counts", "--from-beginning", "--timeout", "3", "--broker", broker)
        per_user: Dict[str, List[int]] = defaultdict(list)
        for line in out.stdout.splitlines():
            record = json.loads(line)
            per_user[record["key"]].append(record["value"])
        return dict(per_user)


def test_a_stateful_app_moves_to_kafka_and_its_counts_go_on_exactly(tmp_path: Path, kafka) -> None:
    shop = Shop(tmp_path, kafka)
    before = [f"user{n % 7}" for n in range(140)]
    after = [f"user{n % 9}" for n in range(90)]  # two users new on Kafka
    # 1. The app runs on the embedded broker over the first orders, then stops.
    shop.cli("topics", "create", "shop-orders", "--partitions", "3", "--broker", shop.embedded)
    shop.order(shop.embedded, before[:100])
    shop.run_worker(shop.embedded, "state-embedded")
    shop.order(shop.embedded, before[100:])  # not processed yet when the app moves
    counted_before = shop.counts(shop.embedded)
    assert sum(len(v) for v in counted_before.values()) == 100

    # 2. Everything is mirrored (sources, changelogs, outputs) and the group translated.
    mirrored = shop.cli("mirror", "--from", shop.embedded, "--to", kafka.url, "--include", "shop-.*",
                        "--include-internal", "--until-caught-up", "--translate-groups", "shop")
    assert "group 'shop': 3 committed offset(s) translated" in mirrored.stderr, mirrored.stderr[-3000:]
    assert shop.counts(kafka.url) == counted_before

    # 3. The worker starts on Kafka with a fresh state directory: it restores the counts from
    #    the mirrored changelog and reads the orders from the translated offsets.
    shop.order(kafka.url, after)
    shop.run_worker(kafka.url, "state-kafka")

    counts = shop.counts(kafka.url)
    totals = Counter(before) + Counter(after)
    assert counts == {user: list(range(1, total + 1)) for user, total in totals.items()}
