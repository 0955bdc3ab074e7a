"""One module per framework. Each defines:

  NAME                         the column's name in the report
  version() -> str             the installed version, for the report
  unsupported(scenario, transactions) -> str | None
                               why the framework cannot run the scenario here, or None
  run(spec, probe) -> None     run the scenario (see ``bench.peers.child``) until
                               ``probe.on_done`` fires, reporting fetches and commits to
                               ``probe``; then stop cleanly
"""
FRAMEWORKS = ("streamkit", "raw", "faust", "quix")
