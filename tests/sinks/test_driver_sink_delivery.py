"""The test driver writes to no real external sink unless asked (issue 37): a database
sink's records are collected for ``sink_records`` and the database is never opened; with
``deliver_external_sinks=True`` the rows land as a worker writes them; a Callback sink,
which runs in the process, is called either way."""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import List

import pytest

import streamkit as sk
from streamkit.errors import StreamkitError
from streamkit.sinks import SinkRecord
from streamkit.testing import TopologyTestDriver


def _app(db: Path, called: List[SinkRecord]) -> sk.App:
    app = sk.App("driver-sinks")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        counts = b.stream("clicks").group_by_key().count(name="counts").to_stream()
        counts.sink(sk.sinks.Database(f"sqlite:///{db}", "counts", key_columns=["key"]), name="db")
        counts.sink(sk.sinks.Callback(called.append), name="seen")
    return app


def test_the_driver_collects_external_sink_records_and_touches_no_database(tmp_path: Path) -> None:
    db, called = tmp_path / "counts.db", []
    with TopologyTestDriver(_app(db, called)) as driver:
        for user in ["u1", "u2", "u1"]:
            driver.input_topic("clicks").pipe_input(user, "x", timestamp=1)
        collected = driver.sink_records("db")
        assert [(r.key, r.value) for r in collected] == [("u1", 1), ("u2", 1), ("u1", 2)]
        assert [(r.key, r.value) for r in called] == [("u1", 1), ("u2", 1), ("u1", 2)]  # in-process: called
        with pytest.raises(StreamkitError, match="is delivered, not collected"):
            driver.sink_records("seen")
        with pytest.raises(StreamkitError, match="no external sink node 'nope'.*db, seen"):
            driver.sink_records("nope")
    assert not db.exists()


def test_the_driver_delivers_to_external_sinks_when_asked(tmp_path: Path) -> None:
    db, called = tmp_path / "counts.db", []
    with TopologyTestDriver(_app(db, called), deliver_external_sinks=True) as driver:
        for user in ["u1", "u2", "u1"]:
            driver.input_topic("clicks").pipe_input(user, "x", timestamp=1)
        with pytest.raises(StreamkitError, match="is delivered, not collected"):
            driver.sink_records("db")
    with sqlite3.connect(db) as connection:
        rows = sorted(connection.execute("select key, value from counts").fetchall())
    assert [(key.strip('"'), int(value)) for key, value in rows] == [("u1", 2), ("u2", 1)]
    assert len(called) == 3
