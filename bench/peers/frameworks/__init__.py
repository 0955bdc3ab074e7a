"""One module per framework. Each defines:

  NAME                         the column's name in the report
  version() -> str             the installed version, for the report
  unsupported(scenario, transactions) -> str | None
                               why the framework cannot run the scenario here, or None
  run(spec, probe) -> None     run the scenario (see ``bench.peers.child``) until
                               ``probe.on_done`` fires, reporting fetches and commits to
                               ``probe``; then stop cleanly
"""
from typing import Optional

from bench.peers.workload import Scenario

FRAMEWORKS = ("streamkit", "raw", "faust", "quix")
NEEDS_TRANSACTIONS = "skipped: needs a broker with transactions"


def transactions_missing(scenario: Scenario, transactions: bool) -> Optional[str]:
    """The reason to skip an exactly_once scenario on a broker without transactions, else None."""
    return NEEDS_TRANSACTIONS if scenario.exactly_once and not transactions else None
