"""``streamkit replay ... --compare``: a replay checked against the live run, from the command line
(subprocesses, each with its own SparkSession: two of them) and in-process (``sk.spark.compare_topic``)."""
from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

import streamkit as sk
from streamkit.errors import ConfigError

from .harness import worker_outputs, write_inputs

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
START_MS = 1_700_000_000_000

COUNTER_APP = '''\
import streamkit as sk

app = sk.App("page-counter")
views = app.topic("pageviews", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=3)


@app.topology
def build(b):
    (b.stream(views)
      .filter(lambda key, view: view["amount"] > {threshold})
      .group_by(lambda key, view: view["page"].lower())
      .count(name="page-counts")
      .to_stream()
      .to("page-counts"))
'''


def streamkit(*args: str, env: Optional[Dict[str, str]] = None, timeout: float = 240,
              stdin: Optional[str] = None) -> subprocess.CompletedProcess:
    """``python -m streamkit ARGS`` from the repository, with ``env`` added."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "streamkit", *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=full_env)


def generated_views(count: int, seed: int) -> List[dict]:
    """Page views from ``apps.generate_pageviews`` (about 100 ms of event time apart, so
    minutes close), a few of them moved back 20-120 s (late for their minute)."""
    from apps.generate_pageviews import pageviews

    views = pageviews(seed=seed, pages=10, users=50, start_ms=START_MS, mean_gap_ms=100)
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        view = next(views)
        if rng.random() < 0.03:
            view["ts"] -= rng.randrange(20_000, 120_000)
        out.append(view)
    return out


def sqlite_rows(path: Path) -> list:
    with sqlite3.connect(path) as connection:
        return sorted(connection.execute("SELECT * FROM page_counts_per_minute").fetchall())


def test_cli_replay_of_the_archive_equals_the_live_pageviews_run(spark, tmp_path):
    broker, archive, out = tmp_path / "broker", tmp_path / "archive", tmp_path / "out"
    db = tmp_path / "pageviews.db"
    env = {"STREAMKIT_BROKER": f"embedded://{broker}", "PAGEVIEWS_ARCHIVE": str(archive),
           "PAGEVIEWS_DB": f"sqlite:///{db}"}
    views = generated_views(2000, seed=8)
    assert streamkit("topics", "create", "pageviews", "--partitions", "3", env=env).returncode == 0
    produced = streamkit("produce", "pageviews", "--key-field", "user", env=env,
                         stdin="".join(json.dumps(view) + "\n" for view in views))
    assert produced.returncode == 0, produced.stderr

    # live: the archive, then the page counts, both over the same broker
    for app in ("apps.archive", "apps.pageviews"):
        run = streamkit("worker", app, "--until-idle", "1", env=env)
        assert run.returncode == 0, run.stderr
    assert len(list(archive.glob("pageviews+*.parquet"))) == 3
    live_rows = sqlite_rows(db)
    assert live_rows

    replay = streamkit("replay", "apps.pageviews", "--input", f"pageviews=archive:{archive}", "--output", str(out),
                       "--master", "local[2]", "--compare", "page-counts-per-minute", "--compare-mode", "records",
                       "--compare-with", str(broker), "--no-stores",
                       env={**env, "STREAMKIT_BROKER": f"embedded://{tmp_path / 'unused'}"})
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "compare page-counts-per-minute (records)" in replay.stdout
    compared = re.search(r"compare page-counts-per-minute \(records\): (\d+) key\(s\) live, (\d+) replayed, "
                         r"(\d+) differ", replay.stdout)
    assert compared, replay.stdout
    live_keys, replayed_keys, differ = map(int, compared.groups())
    assert differ == 0 and live_keys == replayed_keys > 10, replay.stdout
    assert f"replayed {len(views)} input record(s)" in replay.stderr
    assert not (out / "stores").exists()  # --no-stores
    assert sqlite_rows(db) == live_rows  # the replay did not upsert into the live database

    # The same output compared in-process: the page counts table, by its last value per key
    # (the live run cached some updates away) ...
    from apps.pageviews import app

    topics = app.build().topics
    latest = sk.spark.compare_topic(spark, str(out), "page-counts", str(broker),
                                    key_serde=topics["page-counts"].key_serde,
                                    value_serde=topics["page-counts"].value_serde)
    assert latest.equal and latest.differing == 0
    assert latest.live_keys == latest.replay_keys == len({v["page"].lower() for v in views if v["amount"] > 10})
    # ... and the views that came too late for their minute, every one per key
    late = sk.spark.compare_topic(spark, str(out), "pageviews-late", str(broker),
                                  key_serde=topics["pageviews-late"].key_serde,
                                  value_serde=topics["pageviews-late"].value_serde, mode="records")
    assert late.equal and late.live_keys > 0


def load_module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_compare_of_a_changed_topology_exits_1_and_shows_the_differing_keys(tmp_path):
    (tmp_path / "counter_live.py").write_text(COUNTER_APP.replace("{threshold}", "10"))
    (tmp_path / "counter_changed.py").write_text(COUNTER_APP.replace("{threshold}", "20"))
    live_app = load_module(tmp_path / "counter_live.py").app
    broker, out = tmp_path / "broker", tmp_path / "out"
    views = generated_views(600, seed=2)
    write_inputs(live_app, str(broker), [("pageviews", v["user"], v, v["ts"]) for v in views],
                 partitions={"pageviews": 3})
    live = worker_outputs(live_app, str(broker))
    live_counts = Counter(v["page"].lower() for v in views if v["amount"] > 10)
    assert {k: v for k, v, _ts in live["page-counts"]} == dict(live_counts)

    replay = streamkit("replay", "counter_changed", "--input", f"pageviews={broker}", "--output", str(out),
                       "--master", "local[2]", "--compare", "page-counts", "--compare-with", str(broker),
                       "--slice-records", "7",  # the stateless first stage in slices: the same answers
                       env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}",
                            "STREAMKIT_BROKER": f"embedded://{tmp_path / 'unused'}"})

    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert re.search(r"\(offset order in \d+ slices, reads pageviews\)", replay.stderr), replay.stderr
    changed_counts = Counter(v["page"].lower() for v in views if v["amount"] > 20)
    differing = {page for page in live_counts if live_counts[page] != changed_counts.get(page)}
    assert differing  # the filter matters
    assert (f"compare page-counts (latest): {len(live_counts)} key(s) live, {len(changed_counts)} replayed, "
            f"{len(differing)} differ") in replay.stdout
    for page in differing:
        assert f"  key {page!r}: live={live_counts[page]} replay={changed_counts.get(page)}" in replay.stdout
    assert "the replay differs from the live run in page-counts" in replay.stderr
    assert "Traceback" not in replay.stderr
    assert (out / "stores" / "page-counts").is_dir()  # the final stores, by default


def test_cli_rejects_an_input_without_a_source_in_one_line(tmp_path):
    run = streamkit("replay", "apps.pageviews", "--input", "pageviews", "--output", str(tmp_path / "out"),
                    timeout=60)
    assert run.returncode != 0
    errors = [line for line in run.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, run.stderr
    assert "--input" in errors[0] and "'pageviews': expected TOPIC=SOURCE" in errors[0]
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists()


def test_cli_help_lists_the_options():
    run = streamkit("replay", "--help", timeout=60)
    assert run.returncode == 0, run.stderr
    for option in ("--input TOPIC=SOURCE", "--output DIR", "--master URL", "--allow-approximate",
                   "--compare TOPIC", "--compare-with SOURCE", "--compare-mode [latest|records]", "--no-stores",
                   "--slice-records N"):
        assert option in run.stdout, option


def test_an_unknown_source_kind_names_the_forms():
    with pytest.raises(ConfigError, match="unknown source kind 'bogus'.*archive:DIR"):
        sk.spark.parse_input("pageviews", "bogus:somewhere")
    assert sk.spark.parse_input("pageviews", "/some/dir") == sk.spark.EmbeddedTopic("/some/dir", "pageviews")


# -- sk.spark.compare_topic in-process ------------------------------------------------------------

def doubler() -> sk.App:
    app = sk.App("doubler")
    app.topic("numbers", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=2)

    @app.topology
    def build(b):
        (b.stream("numbers").filter(lambda key, n: n % 5 != 0).map_values(lambda n: n * 2)
          .to("doubled", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json()))
    return app


def test_compare_topic_in_process(spark, tmp_path):
    app = doubler()
    records = [("numbers", f"k{i % 7}", i, START_MS + i) for i in range(200)]
    live_dir, other_dir, out = str(tmp_path / "live"), str(tmp_path / "other"), str(tmp_path / "out")
    write_inputs(app, live_dir, records, partitions={"numbers": 2})
    # another "live" run whose input differs in one record of key k3 (n=3 -> 4)
    write_inputs(app, other_dir, [r if r[2] != 3 else ("numbers", "k3", 4, r[3]) for r in records],
                 partitions={"numbers": 2})
    worker_outputs(app, live_dir)
    worker_outputs(app, other_dir)
    sk.spark.replay(app, inputs={"numbers": live_dir}, output=out, spark=spark)
    serdes = dict(key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    same = sk.spark.compare_topic(spark, out, "doubled", live_dir, mode="records", **serdes)
    assert isinstance(same, sk.spark.CompareReport)
    assert same.equal and same.differing == 0 and same.examples == []
    assert same.live_keys == same.replay_keys == 7
    assert same.render() == "compare doubled (records): 7 key(s) live, 7 replayed, 0 differ"

    changed = sk.spark.compare_topic(spark, out, "doubled", other_dir, mode="records", **serdes)
    assert not changed.equal and changed.differing == 1
    [(key, live_values, replayed_values)] = changed.examples
    assert key == "'k3'"
    expected = [str(2 * i) for i in range(3, 200, 7) if i % 5 != 0]
    assert replayed_values[:6] == expected[:6] and live_values[:6] == ["8", *expected[1:6]]
    assert "  key 'k3': live=['8'," in changed.render()
    # the last value per key is the same: only records mode sees the change
    assert sk.spark.compare_topic(spark, out, "doubled", other_dir, mode="latest", **serdes).equal

    with pytest.raises(ConfigError, match="compare mode"):
        sk.spark.compare_topic(spark, out, "doubled", live_dir, mode="exact", **serdes)
    with pytest.raises(ConfigError, match="'nope'"):  # neither side has it
        sk.spark.compare_topic(spark, out, "nope", live_dir, mode="records", **serdes)
