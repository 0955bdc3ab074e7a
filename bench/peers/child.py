"""The process that runs one framework on one scenario and prints its figures.

``python -m bench.peers.child SPEC_JSON``; SPEC holds:

  framework      a module of ``bench.peers.frameworks``
  scenario       S0 .. S5 (``bench.peers.workload.SCENARIOS``)
  bootstrap      host:port of the broker
  app_id         the application id / consumer group (fresh per run)
  source, sink   the input and output topics; ``table``: the pages table topic (S4)
  events         how many input records to wait for
  state_dir      a fresh directory for local state
  caching        streamkit only: its record cache on (default caching) or off
  commit_interval_s  every framework commits at this interval (the raw loop: every batch)
  fetch_max_wait_ms  (latency runs) how long the broker may hold an empty fetch: Tansu holds
                 every fetch at the end of the log this long, even when records arrive

The last line of stdout is the JSON figures of :meth:`bench.peers.probe.Probe.figures`.
"""
from __future__ import annotations

import cProfile
import importlib
import json
import logging
import sys
import time

from bench.peers.probe import Probe


def run(spec: dict) -> dict:
    started = time.perf_counter()
    framework = importlib.import_module(f"bench.peers.frameworks.{spec['framework']}")
    probe = Probe(spec["events"])
    profiler = cProfile.Profile() if spec.get("profile") else None
    if profiler is not None:
        profiler.enable()
    framework.run(spec, probe)
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(spec["profile"])
    return probe.figures(started)


def main() -> None:
    spec = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.INFO if spec.get("verbose") else logging.WARNING,
                        format=f"%(asctime)s {spec['framework']} %(name)s %(levelname)s %(message)s")
    print(json.dumps(run(spec)), flush=True)


if __name__ == "__main__":
    main()
