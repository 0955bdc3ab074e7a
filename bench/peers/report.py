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


def judge_floors(results: Results, latency: Dict[str, dict], at_jvm_size: Optional[Results] = None,
                 jvm_events: int = 0) -> List[dict]:
    """The issue's floors, each with the measured ratio or figure and PASS/FAIL/not measured;
    the per-core floor against Kafka Streams also at ``jvm_events`` when that pass ran."""
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
        if at_jvm_size:
            add(f"{s}: streamkit >= 1.0x Kafka Streams per core at {jvm_events:,} events",
                per_core_ratio(at_jvm_size, s, "streamkit", "kafka-streams"), 1.0)

    for s in ("S1", "S2", "S3"):
        add(f"{s}: streamkit >= 10x faust-streaming", ratio(s, "streamkit", "faust"), 10)
    for s in ("S1", "S2", "S3"):
        add(f"{s}: streamkit >= 1.5x Quix Streams", ratio(s, "streamkit", "quix"), 1.5)
    for s in ("S2", "S3"):
        add(f"{s}: streamkit (caching) >= 3x Quix Streams", ratio(s, "streamkit-cached", "quix"), 3)
    add("S1: streamkit >= 1.2x the aiokafka loop", ratio("S1", "streamkit", "raw"), 1.2)
    for s in ("S2", "S3"):
        add(f"{s}: streamkit >= 0.9x the aiokafka loop (caching off)", ratio(s, "streamkit", "raw"), 0.9)
    add("embedded S1 >= 300,000 events/s", rate(results, "S1", "embedded"), 300_000, "ev/s")
    add("embedded S2 >= 150,000 events/s", rate(results, "S2", "embedded"), 150_000, "ev/s")
    eos = rate(results, "S5", "embedded")
    alos = rate(results, "S2", "embedded")
    add("embedded exactly_once (S5) >= 80% of at_least_once (S2)", eos / alos if eos and alos else None, 0.8, "%")
    for column, bound, key in (("streamkit", 5, "p50_ms"), ("streamkit", 10, "p99_ms"),
                               ("streamkit-eos-50ms", 100, "p99_ms")):
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


RATIOS = (("streamkit", "raw"), ("streamkit", "kafka-streams"), ("streamkit-cached", "kafka-streams-cached"),
          ("streamkit", "quix"), ("streamkit-cached", "quix"), ("streamkit", "faust"), ("streamkit", "bytewax"),
          ("streamkit", "pathway"), ("streamkit-rdkafka", "streamkit"), ("embedded", "streamkit"),
          ("embedded-cached", "streamkit-cached"))
"""The ratios the report prints per scenario: streamkit against each peer, the librdkafka
client against aiokafka, the embedded broker against Kafka."""
PER_CPU_RATIOS = (("streamkit", "kafka-streams"), ("streamkit-cached", "kafka-streams-cached"), ("streamkit", "raw"))


def _short_reason(reason: str) -> str:
    """The first clause of a skip reason, for a ratio's n/a (the notes carry the whole)."""
    head = reason.split(";")[0].split(":", 1)[-1].strip()
    return head if len(head) <= 70 else head[:67] + "..."


def _ratio_text(results: Results, scenario: str, a: str, b: str, per_cpu: bool = False) -> Optional[str]:
    """``a / b`` in events/s (or events per CPU second), 'n/a (why)' when either could not run
    the scenario, None when either was not asked for."""
    fa, fb = results.get(scenario, {}).get(a), results.get(scenario, {}).get(b)
    if fa is None or fb is None:
        return None
    label = f"{LABELS[a]} / {LABELS[b]}" + (" per CPU second" if per_cpu else "")
    missing = [(c, f) for c, f in ((a, fa), (b, fb)) if "skipped" in f]
    if missing:
        why = "; ".join(f"{LABELS[c]}: {_short_reason(f['skipped'])}" for c, f in missing)
        return f"{label} n/a ({why})"
    value = per_core_ratio(results, scenario, a, b) if per_cpu else fa["events_per_second"] / fb["events_per_second"]
    return f"{label} {value:.2f}" if value is not None else None


def print_throughput(results: Results, events: int) -> None:
    """The events/s table (peak RSS), the CPU per event table, the notes and the ratios of one
    pass; a cell measured at another event count than ``events`` is marked * and named."""
    columns = [c for c in COLUMNS if any(c in results.get(s, {}) for s in SCENARIOS)]
    if not columns:
        return
    width = 2 + max(len(LABELS[c]) for c in columns)
    notes: List[Tuple[str, str, str]] = []
    other_sizes: Dict[str, int] = {}
    for title, cell in (("events/s, median of reps (peak RSS MiB)",
                         lambda f: f"{f['events_per_second']:,.0f} ({f['peak_rss_mib']:,.0f})"),
                        ("CPU us per event (the framework's process; Kafka Streams: the JVM's)",
                         lambda f: f"{f['cpu_us_per_event']:,.1f}")):
        print(f"  {title}; n/a and skipped with the reason below\n")
        print(f"  {'scenario':<42}" + "".join(f"{LABELS[c]:>{width}}" for c in columns))
        for name, scenario in SCENARIOS.items():
            if not results.get(name):
                continue
            cells = []
            for column in columns:
                figures = results.get(name, {}).get(column)
                if figures is None:
                    cells.append("")
                elif "skipped" in figures:
                    cells.append("n/a" if figures["skipped"].startswith("n/a") else "skipped")
                else:
                    marked = figures.get("events", events) != events
                    if marked:
                        other_sizes[column] = figures["events"]
                    cells.append(cell(figures) + ("*" if marked else ""))
            print(f"  {name + ' ' + scenario.title:<42}" + "".join(f"{c:>{width}}" for c in cells))
        print()
    for name in SCENARIOS:
        for column in columns:
            figures = results.get(name, {}).get(column, {})
            if "skipped" in figures:
                notes.append((name, column, figures["skipped"]))
    for column, n in other_sizes.items():
        print(f"  * {LABELS[column]}: {n:,} events per run (figures per event, as every column's)")
    for scenario, column, reason in notes:
        print(f"  {scenario} {LABELS[column]}: {reason}")
    for column in columns:  # where a framework's figures depart from the output contract
        contract = next((results[s][column]["contract"] for s in SCENARIOS
                         if results.get(s, {}).get(column, {}).get("contract")), None)
        if contract:
            print(f"  {LABELS[column]}: {contract}")
    print("\n  ratios (events/s unless per CPU second; streamkit's caching off unless named):")
    for name in SCENARIOS:
        parts = [_ratio_text(results, name, a, b) for a, b in RATIOS]
        parts += [_ratio_text(results, name, a, b, per_cpu=True) for a, b in PER_CPU_RATIOS]
        parts = [p for p in parts if p]
        if parts:
            print(f"    {name}: " + "\n        ".join(parts))


def print_table(header: str, results: Results, latency: Dict[str, dict], restore: Dict[str, dict],
                floors: List[dict], events: int = 0, at_jvm_size: Optional[Results] = None,
                jvm_events: int = 0) -> None:
    print(f"\n{header}\n")
    print_throughput(results, events)
    if at_jvm_size:
        print(f"\n  At {jvm_events:,} events (Kafka Streams at a size fair to a JVM, streamkit and the aiokafka "
              "loop beside it; compare within this table):\n")
        print_throughput(at_jvm_size, jvm_events)
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
        records = next((f["records"] for f in restore.values() if "records" in f), None)
        print(f"\n  restore of a {records:,}-record changelog into RocksDB:" if records else
              "\n  restore of a changelog into RocksDB:")
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
    # tab10 repeats after ten columns and there are twelve: tab20's dark shades first, then its light ones
    palette = plt.get_cmap("tab20").colors
    colors = list(palette[0::2]) + list(palette[1::2])
    for i, column in enumerate(columns):
        xs, ys = [], []
        for j, scenario in enumerate(scenarios):
            value = rate(results, scenario, column)
            if value is not None:
                xs.append(j + (i - (len(columns) - 1) / 2) * width)
                ys.append(value)
        bars = ax.bar(xs, ys, width, label=LABELS[column], color=colors[i % len(colors)])
        ax.bar_label(bars, labels=[f"{y / 1000:.0f}k" if y >= 1000 else f"{y:.0f}" for y in ys], fontsize=6,
                     rotation=90, padding=2)
    ax.set_yscale("log")
    ax.set_xticks(range(len(scenarios)), [f"{s}\n" + "\n".join(textwrap.wrap(SCENARIOS[s].title, 24))
                                          for s in scenarios], fontsize=8)
    ax.set_ylabel("events/s (log scale, median of reps, verified)")
    ax.set_title("\n".join(textwrap.wrap(title, 140)), fontsize=9)
    ax.legend(fontsize=8, ncols=4, loc="upper right")
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
