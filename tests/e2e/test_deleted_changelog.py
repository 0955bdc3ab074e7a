"""A changelog deleted under an app never silently resets its state (issue 34 item 1).

The word counts of apps.wordcount reach 61; its changelog topic is then deleted. The
worker used to recreate it, wipe the intact RocksDB store as "ahead of its changelog" and
restart every count at 1. Now it refuses to start the task, naming the store, the task,
the checkpoint and the changelog's end, until the operator chooses: --reseed-changelog
(the local store goes back into the changelog, counts continue) or --reset-store (the
store is rebuilt from the changelog as it is, the loss logged)."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.cli_processes import final_table

WORDS = [f"w{n:02d}" for n in range(50)]
LINE = " ".join(WORDS) + "\n"
CHANGELOG = "wordcount-word-counts-changelog"


def _count_to_61_then_delete_the_changelog(cli, guarantee: str) -> None:
    assert cli("topics", "create", "lines", "--partitions", "3").returncode == 0
    assert cli("produce", "lines", "--format", "text", stdin=LINE * 61).returncode == 0
    run = cli("worker", "apps.wordcount", "--until-idle", "1", "--guarantee", guarantee)
    assert run.returncode == 0, run.stderr
    assert final_table(cli, "word-counts") == {word: 61 for word in WORDS}
    assert cli("topics", "delete", CHANGELOG).returncode == 0
    assert cli("produce", "lines", "--format", "text", stdin=LINE).returncode == 0


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_deleted_changelog_is_refused_then_reseeded_from_the_intact_store(cli, broker_dir: Path,
                                                                            guarantee: str) -> None:
    _count_to_61_then_delete_the_changelog(cli, guarantee)

    for _ in range(2):  # refusing touches nothing: it refuses again, the same way
        refused = cli("worker", "apps.wordcount", "--until-idle", "1", "--guarantee", guarantee)
        assert refused.returncode != 0
        message = re.search(r"store word-counts of task (1_\d): its checkpoint \(changelog offset applied\) is "
                            rf"(\d+) but its changelog {CHANGELOG}\[\d\] ends at (\d+)", refused.stderr)
        assert message is not None, refused.stderr
        assert int(message.group(2)) > int(message.group(3)) == 0
        assert "--reseed-changelog word-counts" in refused.stderr and "--reset-store word-counts" in refused.stderr
        assert final_table(cli, "word-counts") == {word: 61 for word in WORDS}  # nothing reset downstream

    reseeded = cli("worker", "apps.wordcount", "--until-idle", "1", "--guarantee", guarantee,
                   "--reseed-changelog", "word-counts")
    assert reseeded.returncode == 0, reseeded.stderr
    assert "reseeded " + CHANGELOG in reseeded.stderr
    assert final_table(cli, "word-counts") == {word: 62 for word in WORDS}  # the next line added to 61

    # The checkpoint moved with the reseed: a plain restart neither refuses nor reseeds again.
    assert cli("produce", "lines", "--format", "text", stdin=LINE).returncode == 0
    plain = cli("worker", "apps.wordcount", "--until-idle", "1", "--guarantee", guarantee)
    assert plain.returncode == 0, plain.stderr
    assert "reseed" not in plain.stderr
    assert final_table(cli, "word-counts") == {word: 63 for word in WORDS}

    # A new machine (no local state): the reseeded changelog is the whole truth.
    shutil.rmtree(broker_dir / "state" / "wordcount")
    assert cli("produce", "lines", "--format", "text", stdin=LINE).returncode == 0
    fresh = cli("worker", "apps.wordcount", "--until-idle", "1", "--guarantee", guarantee)
    assert fresh.returncode == 0, fresh.stderr
    assert final_table(cli, "word-counts") == {word: 64 for word in WORDS}


def test_reset_store_rebuilds_from_the_changelog_as_it_is_and_logs_the_loss(cli) -> None:
    _count_to_61_then_delete_the_changelog(cli, "at_least_once")
    reset = cli("worker", "apps.wordcount", "--until-idle", "1", "--reset-store", "word-counts")
    assert reset.returncode == 0, reset.stderr
    discarded = re.findall(r"store word-counts of task 1_\d: discarding its local state as asked \(--reset-store\): "
                           rf"(\d+) entr(?:y|ies) at checkpoint \d+, past the end 0 of its changelog {CHANGELOG}",
                           reset.stderr)
    assert sum(int(n) for n in discarded) == len(WORDS), reset.stderr
    assert final_table(cli, "word-counts") == {word: 1 for word in WORDS}  # chosen, and said


def test_a_repair_naming_no_store_of_the_app_is_refused(cli) -> None:
    run = cli("worker", "apps.wordcount", "--until-idle", "1", "--reseed-changelog", "word-count")
    assert run.returncode != 0
    assert "has no store named word-count (its stores: word-counts)" in run.stderr
    both = cli("worker", "apps.wordcount", "--until-idle", "1", "--reseed-changelog", "word-counts",
               "--reset-store", "word-counts")
    assert both.returncode != 0 and "not both" in both.stderr
