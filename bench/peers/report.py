"""The report of a run: a table on stdout, the floors judged, a JSON file and a PNG chart."""
from __future__ import annotations

import json
import os
import textwrap
from typing import Dict, List, Optional, Tuple

from bench.peers.workload import SCENARIOS

COLUMNS = ("streamkit", "streamkit-rdkafka", "streamkit-cached", "embedded", "embedded-cached", "raw",
           "kafka-streams", "kafka-streams-cached", "faust", "quix", "bytewax", "pathway")
LABELS = {"streamkit": "streamkit", "streamkit-rdkafka": "streamkit librdkafka",
          "streamkit-cached": "streamkit (caching)", "embedded": "streamkit embedded",
          "embedded-cached": "embedded (caching)", "raw": "aiokafka limit", "faust": "faust-streaming",
          "quix": "Quix Streams", "kafka-streams": "Kafka Streams", "kafka-streams-cached": "Kafka Streams (caching)",
          "bytewax": "Bytewax", "pathway": "Pathway"}
Results = Dict[str, Dict[str, dict]]  # scenario -> column -> figures or {"skipped": reason}


def rate(results: Results, scenario: str, column: str) -> Optional[float]:
    figures = results.get(scenario, {}).get(column, {})
    return figures.get("events_per_second")


def per_core_ratio(results: Results, scenario: str, a: str, b: str) -> Optional[float]:
    """How many more events ``a`` processes per CPU second than ``b`` (``b``'s CPU per event
    over ``a``'s), or None when either was not measured."""
    x = results.get(scenario, {}).get(a, {}).get("cpu_us_per_event")
    y = results.get(scenario, {}).get(b, {}).get("cpu_us_per_event")
    return y / x if x and y else None


def judge_floors(results: Results, latency: Dict[str, dict]) -> List[dict]:
    """The issue's floors, each with the measured ratio or figure and PASS/FAIL/not measured."""
    floors: List[dict] = []

    def add(rule: str, value: Optional[float], threshold: float, unit: str = "x") -> None:
        verdict = "not measured" if value is None else ("PASS" if value >= threshold else "FAIL")
        floors.append({"rule": rule, "value": value, "threshold": threshold, "unit": unit, "verdict": verdict})

    def ratio(scenario: str, a: str, b: str) -> Optional[float]:
        x, y = rate(results, scenario, a), rate(results, scenario, b)
        return x / y if x is not None and y else None

    add("S1: streamkit >= 1.2x the aiokafka loop", ratio("S1", "streamkit", "raw"), 1.2)
    for s in ("S2", "S3"):
        add(f"{s}: streamkit >= 0.9x the aiokafka loop", ratio(s, "streamkit", "raw"), 0.9)
    for s in ("S1", "S2", "S3"):
        add(f"{s}: streamkit >= 1.0x Kafka Streams per core (events per CPU second)",
            per_core_ratio(results, s, "streamkit", "kafka-streams"), 1.0)

    for s in ("S1", "S2", "S3"):
        add(f"{s}: streamkit >= 10x faust-streaming", ratio(s, "streamkit", "faust"), 10)
    for s in ("S1", "S2", "S3"):
        add(f"{s}: streamkit >= 1.5x Quix Streams", ratio(s, "streamkit", "quix"), 1.5)
    for s in ("S2", "S3"):
        add(f"{s}: streamkit (caching) >= 3x Quix Streams", ratio(s, "streamkit-cached", "quix"), 3)
    add("S1: streamkit >= 70% of the aiokafka limit", ratio("S1", "streamkit", "raw"), 0.7, "%")
    add("embedded S1 >= 300,000 events/s", rate(results, "S1", "embedded"), 300_000, "ev/s")
    add("embedded S2 >= 150,000 events/s", rate(results, "S2", "embedded"), 150_000, "ev/s")
    eos = rate(results, "S5", "embedded")
    alos = rate(results, "S2", "embedded")
    add("embedded exactly_once (S5) >= 80% of at_least_once (S2)", eos / alos if eos and alos else None, 0.8, "%")
    for column, bound, key in (("streamkit", 5, "p50_ms"), ("streamkit", 10, "p99_ms"),
                               ("streamkit-eos-100ms", 100, "p99_ms")):
        value = latency.get(column, {}).get(key)
        floors.append({"rule": f"{LABELS.get(column, column)} {key[:3]} latency at 10,000 events/s <= {bound} ms",
                       "value": value, "threshold": bound, "unit": "ms",
                       "verdict": "not measured" if value is None else ("PASS" if value <= bound else "FAIL")})
    p99 = latency.get("embedded", {}).get("p99_ms")
    floors.append({"rule": "embedded p99 latency at 10,000 events/s <= 20 ms", "value": p99, "threshold": 20,
                   "unit": "ms", "verdict": "not measured" if p99 is None else ("PASS" if p99 <= 20 else "FAIL")})
    return floors


def _fmt_value(value: Optional[float], unit: str) -> str:
    if value is None:
        return "-"
    return {"x": f"{value:.1f}x", "%": f"{value:.0%}", "ev/s": f"{value:,.0f}", "ms": f"{value:.1f} ms"}[unit]


def print_table(header: str, results: Results, latency: Dict[str, dict], restore: Dict[str, dict],
                floors: List[dict]) -> None:
    columns = [c for c in COLUMNS if any(c in results.get(s, {}) for s in SCENARIOS)]
    width = 21
    print(f"\n{header}\n")
    print("events/s, median of reps (peak RSS MiB); n/a and skipped with the reason below\n")
    print(f"  {'scenario':<40}" + "".join(f"{LABELS[c]:>{width}}" for c in columns))
    notes: List[Tuple[str, str, str]] = []
    for name, scenario in SCENARIOS.items():
        cells = []
        for column in columns:
            figures = results.get(name, {}).get(column)
            if figures is None:
                cells.append("")
            elif "skipped" in figures:
                cells.append("n/a" if figures["skipped"].startswith("n/a") else "skipped")
                notes.append((name, column, figures["skipped"]))
            else:
                cells.append(f"{figures['events_per_second']:,.0f} ({figures['peak_rss_mib']:,.0f})")
        print(f"  {name + ' ' + scenario.title:<40}" + "".join(f"{c:>{width}}" for c in cells))
    print()
    for scenario, column, reason in notes:
        print(f"  {scenario} {LABELS[column]}: {reason}")
    for column in columns:  # where a framework's figures depart from the output contract
        contract = next((results[s][column]["contract"] for s in SCENARIOS
                         if results.get(s, {}).get(column, {}).get("contract")), None)
        if contract:
            print(f"  {LABELS[column]}: {contract}")
    print("\n  streamkit's ratios (caching off unless named):")
    for name in SCENARIOS:
        parts = []
        for a, b in (("streamkit", "raw"), ("streamkit", "faust"), ("streamkit", "quix"),
                     ("streamkit-rdkafka", "streamkit"), ("streamkit-rdkafka", "quix"),
                     ("streamkit-cached", "quix"), ("embedded", "streamkit"), ("streamkit", "kafka-streams"),
                     ("streamkit-cached", "kafka-streams-cached")):
            x, y = rate(results, name, a), rate(results, name, b)
            if x is not None and y:
                parts.append(f"{LABELS[a]} / {LABELS[b]} {x / y:.2f}")
        per_core = per_core_ratio(results, name, "streamkit", "kafka-streams")
        if per_core is not None:
            parts.append(f"streamkit / Kafka Streams per CPU second {per_core:.2f}")
        if parts:
            print(f"    {name}: " + "; ".join(parts))
    if latency:
        print("\n  S1 latency at a fixed offered load (produce -> output observed):")
        for column, figures in latency.items():
            if "skipped" in figures:
                print(f"    {LABELS.get(column, column):<22} {figures['skipped']}")
            else:
                print(f"    {LABELS.get(column, column):<22} p50 {figures['p50_ms']:.1f} ms  p99 {figures['p99_ms']:.1f} ms"
                      f"  max {figures['max_ms']:.1f} ms  ({figures['events']:,} events at "
                      f"{figures['offered_per_second']:,} events/s)"
                      + ("  FALLS BEHIND: slower than the offered load" if figures.get("falls_behind") else "")
                      + ("  reps p50/p99: " + ", ".join(f"{r['p50_ms']:.1f}/{r['p99_ms']:.1f}" for r in figures["reps"])
                         if len(figures.get("reps", ())) > 1 else ""))
    if restore:
        print("\n  restore of a 1,000,000-record changelog into RocksDB:")
        for column, figures in restore.items():
            if "skipped" in figures:
                print(f"    {column:<22} {figures['skipped']}")
            else:
                print(f"    {column:<22} {figures['seconds']:.1f} s ({figures['records_per_second']:,.0f} records/s)"
                      f"  peak RSS {figures.get('peak_rss_mib', 0):,.0f} MiB")
    print("\n  floors:")
    for floor in floors:
        print(f"    {floor['verdict']:<13} {floor['rule']}: {_fmt_value(floor['value'], floor['unit'])}")


def write_json(path: str, document: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(document, f, indent=2)


def write_chart(path: str, results: Results, title: str) -> Optional[str]:
    """A grouped bar chart of events/s per scenario and framework (log scale: faust and the
    embedded broker are two orders of magnitude apart). Returns why not, if it was not drawn."""
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]')"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = [s for s in SCENARIOS if any("events_per_second" in f for f in results.get(s, {}).values())]
    columns = [c for c in COLUMNS if any("events_per_second" in results.get(s, {}).get(c, {}) for s in scenarios)]
    if not scenarios or not columns:
        return "no verified figures to draw"
    fig, ax = plt.subplots(figsize=(12, 5.5))
    width = 0.8 / len(columns)
    for i, column in enumerate(columns):
        xs, ys = [], []
        for j, scenario in enumerate(scenarios):
            value = rate(results, scenario, column)
            if value is not None:
                xs.append(j + (i - (len(columns) - 1) / 2) * width)
                ys.append(value)
        bars = ax.bar(xs, ys, width, label=LABELS[column])
        ax.bar_label(bars, labels=[f"{y / 1000:.0f}k" if y >= 1000 else f"{y:.0f}" for y in ys], fontsize=6,
                     rotation=90, padding=2)
    ax.set_yscale("log")
    ax.set_xticks(range(len(scenarios)), [f"{s}\n" + "\n".join(textwrap.wrap(SCENARIOS[s].title, 24))
                                          for s in scenarios], fontsize=8)
    ax.set_ylabel("events/s (log scale, median of reps, verified)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, ncols=4, loc="upper right")
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
