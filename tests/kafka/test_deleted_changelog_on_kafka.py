"""A changelog deleted under an app on Apache Kafka: the worker refuses to start the task
instead of wiping its intact store, and --reseed-changelog keeps the counts (issue 34
item 1; tests/e2e/test_deleted_changelog.py covers the embedded broker and --reset-store)."""
from __future__ import annotations

import re

from .workers import KafkaApp, final_counts, wait_for


def test_a_deleted_changelog_is_refused_then_reseeded_on_kafka(kafka, tmp_path, unique_name) -> None:
    app = KafkaApp(kafka, tmp_path, unique_name("reseed"))
    changelog = f"{app.app_id}-counts-changelog"
    expected = app.produce_events(200, pages=5)
    app.run_until_idle("s")
    assert final_counts(app) == expected

    assert app.cli("topics", "delete", changelog).returncode == 0
    wait_for(lambda: changelog not in app.cli("topics", "list").stdout.split(), 60, f"{changelog} deleted")
    more = app.produce_events(5, pages=5, first=200)

    refused = app.cli("worker", app.module, "--until-idle", "2", "--state-dir", str(tmp_path / "s"))
    assert refused.returncode != 0
    found = re.search(rf"store counts of task 1_\d: its checkpoint \(changelog offset applied\) is (\d+) but "
                      rf"its changelog {changelog}\[\d\] ends at 0", refused.stderr)
    assert found is not None and int(found.group(1)) > 0, refused.stderr[-3000:]
    assert final_counts(app) == expected  # nothing restarted from 1

    app.run_until_idle("s", "--reseed-changelog", "counts")
    assert final_counts(app) == {page: expected[page] + more[page] for page in expected}
