// The worker's live page: the topology (mermaid, from /topology.mmd) annotated with
// each sub-topology's records/s, charts of the last minutes (uPlot, from /history),
// restore progress, the task table with sparklines (from /status) and the latest
// commits. Refreshed every second. No build step, no network beyond this worker.
"use strict";

const REFRESH_MS = 1000;
const COMMITS_LISTED = 10;
const PALETTE = ["#0b6bcb", "#e8590c", "#2f9e44", "#9c36b5", "#c92a2a", "#1098ad", "#5c940d", "#d6336c"];

// -- human units (the rules of streamkit/core/units.py) -------------------------------
function significant(value, digits = 3) {
  if (value === 0 || !Number.isFinite(value)) return String(value);
  const decimals = Math.max(digits - 1 - Math.floor(Math.log10(Math.abs(value))), 0);
  let text = value.toFixed(decimals);
  if (text.includes(".")) text = text.replace(/0+$/, "").replace(/\.$/, "");
  return text;
}

function formatDuration(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (!Number.isFinite(seconds)) return seconds > 0 ? "forever" : String(seconds);
  if (seconds < 0) return "-" + formatDuration(-seconds);
  if (seconds === 0) return "0s";
  if (seconds < 1) return significant(seconds * 1000) + "ms";
  if (seconds < 60 && significant(seconds) !== "60") return significant(seconds) + "s";
  const sizes = [["d", 86400000], ["h", 3600000], ["m", 60000], ["s", 1000]];
  let total = Math.round(seconds * 1000);
  const first = sizes.findIndex(([, size]) => total >= size);
  const keep = sizes[Math.min(first + 1, sizes.length - 1)][1];
  total = Math.round(total / keep) * keep;
  const parts = [];
  for (const [unit, size] of sizes) {
    const count = Math.floor(total / size);
    total -= count * size;
    if (count) parts.push(`${count}${unit}`);
  }
  return parts.join(" ");
}

const DECIMAL = [["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]];

function formatCount(count) {
  if (count === null || count === undefined) return "";
  if (Math.abs(count) < 10000) return Number.isInteger(count) ? String(count) : significant(count, 4);
  for (const [prefix, size] of DECIMAL) {
    if (Math.abs(count) >= size) return significant(count / size) + prefix;
  }
  return String(count);
}

function formatRate(perSecond) {
  if (perSecond === null || perSecond === undefined) return "";
  if (Math.abs(perSecond) < 1000) return significant(perSecond) + "/s";
  for (const [prefix, size] of DECIMAL) {
    if (Math.abs(perSecond) >= size) return significant(perSecond / size) + prefix + "/s";
  }
  return `${perSecond}/s`;
}

function formatBytes(count) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let value = count, unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${unit === 0 ? Math.trunc(value) : significant(value)} ${units[unit]}`;
}

function clockTime(epochMs) {
  return new Date(epochMs).toLocaleTimeString([], { hour12: false });
}

// -- the history kept in the page (aligned series, trimmed to the server's window) ----
const history = { times: [], series: new Map(), windowPoints: 300, last: null, data: null };

function flatten(answer) {
  const out = new Map();
  for (const [task, series] of Object.entries(answer.tasks)) {
    for (const [name, values] of Object.entries(series)) out.set(`task:${task}:${name}`, values);
  }
  for (const [sub, series] of Object.entries(answer.sub_topologies)) {
    for (const [name, values] of Object.entries(series)) out.set(`sub:${sub}:${name}`, values);
  }
  for (const [name, values] of Object.entries(answer.worker)) out.set(`worker:${name}`, values);
  return out;
}

function mergeHistory(answer) {
  history.windowPoints = Math.round(answer.window_s / answer.every_s);
  history.data = answer;
  const count = answer.times.length;
  if (count === 0) return;
  const incoming = flatten(answer);
  const known = history.times.length;
  for (const [key, values] of incoming) {
    if (!history.series.has(key)) history.series.set(key, new Array(known).fill(null));
  }
  for (const [key, values] of history.series) {
    const fresh = incoming.get(key);
    for (let i = 0; i < count; i++) values.push(fresh ? fresh[i] : null);
  }
  history.times.push(...answer.times.map(t => t / 1000));
  const excess = history.times.length - history.windowPoints;
  if (excess > 0) {
    history.times.splice(0, excess);
    for (const values of history.series.values()) values.splice(0, excess);
  }
  history.last = answer.times[count - 1];
}

function latest(key) {
  const values = history.series.get(key);
  if (!values) return null;
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null) return values[i];
  return null;
}

function subTopologies() {
  const subs = new Set();
  for (const key of history.series.keys()) if (key.startsWith("sub:")) subs.add(key.split(":")[1]);
  return [...subs].sort((a, b) => Number(a) - Number(b));
}

// -- charts (uPlot) -------------------------------------------------------------------
const charts = new Map();

function chartWidth() {
  return Math.max(280, Math.min(460, Math.floor((document.body.clientWidth - 80) / 3)));
}

function drawChart(id, keys, labels, format, options = {}) {
  const target = document.getElementById(id);
  const signature = keys.join("|");
  let entry = charts.get(id);
  const xs = options.times || history.times;
  const data = [xs, ...keys.map(key => options.values ? options.values[key] : (history.series.get(key) || new Array(xs.length).fill(null)))];
  if (entry && entry.signature === signature) {
    entry.plot.setData(data);
  } else {
    if (entry) entry.plot.destroy();
    const series = [{}, ...labels.map((label, i) => ({
      label, stroke: PALETTE[i % PALETTE.length], width: 1.5, spanGaps: false,
      scale: (options.scales && options.scales[i]) || "y",
      paths: options.bars && options.bars[i] ? uPlot.paths.bars({ size: [0.6, 8] }) : undefined,
      fill: options.bars && options.bars[i] ? PALETTE[i % PALETTE.length] + "55" : undefined,
      value: (u, v) => (v === null || v === undefined ? "–" : ((options.formats && options.formats[i]) || format)(v)),
    }))];
    const axes = [{ stroke: "#555", grid: { stroke: "#eee" } },
                  { stroke: "#555", grid: { stroke: "#eee" }, size: 60, scale: "y",
                    values: (u, ticks) => ticks.map(format) }];
    if (options.scales && options.scales.includes("y2")) {
      axes.push({ side: 1, stroke: "#555", grid: { show: false }, size: 60, scale: "y2",
                  values: (u, ticks) => ticks.map(options.formats[options.scales.indexOf("y2")]) });
    }
    const plot = new uPlot({
      width: options.width || chartWidth(), height: options.height || 170, series, axes,
      // From 0, and never flatter than a smallest top (1 record, or 1 ms for durations).
      scales: { x: { time: true, range: options.xRange || windowRange },
                y: { range: (u, min, max) => [0, Math.max(max, options.smallestTop || 1) * 1.1] },
                y2: { range: (u, min, max) => [0, Math.max(max, 1) * 1.1] } },
      legend: { live: true },
    }, data, target);
    target.dataset.series = signature;
    entry = { plot, signature };
    charts.set(id, entry);
  }
  // What the page plots, for readers that are not eyes (the browser test).
  target.dataset.points = String(xs.length);
  const lastValues = data.slice(1).map(values => values.length ? values[values.length - 1] : null);
  target.dataset.last = JSON.stringify(lastValues);
  target.dataset.max = JSON.stringify(data.slice(1).map(values => Math.max(0, ...values.filter(v => v !== null))));
}

// The last window_s seconds up to the latest sample: the charts fill from the right.
function windowRange(u, min, max) {
  const end = history.times.length ? history.times[history.times.length - 1] : Date.now() / 1000;
  return [end - history.windowPoints * (history.data ? history.data.every_s : 1), end];
}

// Commits come every commit interval: their own span, at least a minute wide.
function commitRange(u, min, max) {
  if (min === null || max === null) return windowRange(u, min, max);
  return [Math.min(min, max - 60), max];
}

function drawCharts() {
  const subs = subTopologies();
  const labels = subs.map(sub => `sub-topology ${sub}`);
  drawChart("chart-rate", subs.map(sub => `sub:${sub}:records_per_second`), labels, formatRate);
  drawChart("chart-lag", subs.map(sub => `sub:${sub}:lag`), labels, formatCount);
  drawChart("chart-drops", ["worker:late_per_second", "worker:dead_lettered_per_second"],
            ["late drops/s", "dead-lettered/s"], formatRate);
  drawCommits();
}

const sparklines = new Map();

function sparkline(cell, key, format) {
  const id = `${cell.closest("tr").dataset.task}:${key}`;
  const data = [history.times, history.series.get(key) || []];
  let plot = sparklines.get(id);
  if (plot && plot.root.isConnected) {
    plot.setData(data);
  } else {
    plot = new uPlot({
      width: 120, height: 30, legend: { show: false }, cursor: { show: false },
      axes: [{ show: false }, { show: false }],
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(max, 1)] } },
      series: [{}, { stroke: PALETTE[0], width: 1, fill: PALETTE[0] + "22" }],
    }, data, cell);
    sparklines.set(id, plot);
  }
  cell.title = `now ${format(latest(key))}`;
  cell.dataset.points = String(data[1].filter(v => v !== null).length);
}

// -- the topology, with live rates on its sub-topologies --------------------------------
async function drawTopology() {
  const target = document.getElementById("topology");
  const answer = await fetch("/topology.mmd");
  const text = await answer.text();
  mermaid.initialize({ startOnLoad: false, securityLevel: "strict" });
  const { svg } = await mermaid.render("topology-svg", text);
  target.innerHTML = svg;
  annotateTopology();
}

function annotateTopology() {
  const svg = document.querySelector("#topology svg");
  if (!svg) return;
  for (const cluster of svg.querySelectorAll("g.cluster")) {
    const match = /sub(\d+)$/.exec(cluster.id || "");
    const box = cluster.querySelector("rect");
    if (!match || !box) continue;
    const sub = match[1];
    let label = cluster.querySelector("text.live-rate");
    if (!label) {
      label = document.createElementNS("http://www.w3.org/2000/svg", "text");
      label.setAttribute("class", "live-rate");
      label.setAttribute("text-anchor", "end");
      label.dataset.sub = sub;
      cluster.appendChild(label);
    }
    const x = Number(box.getAttribute("x")) + Number(box.getAttribute("width")) - 6;
    const y = Number(box.getAttribute("y")) + 16;
    label.setAttribute("x", String(x));
    label.setAttribute("y", String(y));
    const rate = latest(`sub:${sub}:records_per_second`);
    label.textContent = rate === null ? "…" : formatRate(rate);
  }
}

// -- tiles, restores, commits -----------------------------------------------------------
function showTiles() {
  const data = history.data;
  if (!data) return;
  document.getElementById("total-rate").textContent = formatRate(latest("worker:records_per_second") || 0);
  document.getElementById("total-records").textContent = formatCount(data.totals.records_processed);
  const lag = latest("worker:lag");
  document.getElementById("total-lag").textContent = lag === null ? "–" : formatCount(lag);
  document.getElementById("total-late").textContent = formatCount(data.totals.late_records_dropped);
  document.getElementById("total-dlq").textContent = formatCount(data.totals.records_dead_lettered);
  const commits = data.commits;
  if (commits.length) {
    const last = commits[commits.length - 1];
    document.getElementById("last-commit").textContent = formatDuration(last.seconds);
  }
  document.getElementById("window").textContent = formatDuration(data.window_s);
}

function showRestores() {
  const data = history.data;
  if (!data) return;
  const target = document.getElementById("restores");
  const seen = new Set();
  for (const restore of data.restores) {
    seen.add(restore.task);
    let box = target.querySelector(`.restore[data-task="${restore.task}"]`);
    if (!box) {
      box = document.createElement("div");
      box.className = "restore";
      box.dataset.task = restore.task;
      box.innerHTML = '<div class="text"></div><div class="bar"><div class="done"></div></div>';
      target.appendChild(box);
    }
    const share = restore.total ? restore.restored / restore.total : 1;
    box.dataset.restored = String(restore.restored);
    box.dataset.total = String(restore.total);
    box.querySelector(".done").style.width = `${(100 * share).toFixed(1)}%`;
    const rate = restore.records_per_second === null ? "measuring" : formatRate(restore.records_per_second);
    const eta = restore.eta_seconds === null ? "" : ` · ETA ${formatDuration(restore.eta_seconds)}`;
    box.querySelector(".text").textContent =
      `task ${restore.task}: ${formatCount(restore.restored)} / ${formatCount(restore.total)} records ` +
      `(${Math.floor(100 * share)}%) · ${rate}${eta}`;
  }
  for (const box of [...target.querySelectorAll(".restore")]) {
    if (!seen.has(box.dataset.task)) box.remove();
  }
  const note = target.querySelector(".note");
  if (data.restores.length && note) note.remove();
  if (!data.restores.length && !note) target.innerHTML = '<p class="note">no restore in progress</p>';
  const finished = data.finished_restores.slice(-5).reverse();
  document.getElementById("finished-restores").textContent = finished.length ? "Finished: " + finished.map(
    r => `task ${r.task}: ${formatCount(r.records)} records in ${formatDuration(r.seconds)} ` +
         `(${clockTime(r.ended)})`).join("; ") : "";
}

function drawCommits() {
  const commits = history.data ? history.data.commits : [];
  const times = commits.map(c => c.ended / 1000);
  drawChart("chart-commits", ["seconds", "records"], ["took", "records"], formatDuration, {
    times, values: { seconds: commits.map(c => c.seconds), records: commits.map(c => c.records) },
    scales: ["y", "y2"], formats: [formatDuration, formatCount], bars: [false, true], smallestTop: 0.001,
    xRange: commitRange,
  });
  const body = document.querySelector("#commits tbody");
  body.replaceChildren();
  const now = Date.now();
  for (const commit of commits.slice(-COMMITS_LISTED).reverse()) {
    const row = document.createElement("tr");
    row.dataset.ended = String(commit.ended);
    cell(row, `${clockTime(commit.ended)} (${formatDuration(Math.max(now - commit.ended, 0) / 1000)} ago)`);
    cell(row, formatDuration(commit.seconds), "took");
    cell(row, formatCount(commit.records), "records").dataset.value = String(commit.records);
    body.appendChild(row);
  }
}

// -- the task table ---------------------------------------------------------------------
function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

const TASK_COLUMNS = ["task", "state", "records", "rate", "rate-spark spark", "lag", "lag-spark spark", "late",
                      "dlq", "cache", "restore"];

function taskRow(body, task) {
  let row = body.querySelector(`tr[data-task="${task}"]`);
  if (!row) {
    row = document.createElement("tr");
    row.dataset.task = task;
    for (const name of TASK_COLUMNS) cell(row, "", name);
    row.children[0].textContent = task;
    const rows = [...body.children];
    const after = rows.find(other => compareTasks(other.dataset.task, task) > 0);
    body.insertBefore(row, after || null);
  }
  return row;
}

function compareTasks(a, b) {
  const [as, ap] = a.split("_").map(Number), [bs, bp] = b.split("_").map(Number);
  return as - bs || ap - bp || a.localeCompare(b);
}

function restoreText(restore) {
  if (!restore) return "";
  const total = restore.restored + restore.remaining;
  return `${formatCount(restore.restored)} / ${formatCount(total)}`;
}

function showStatus(status) {
  document.getElementById("app").textContent = status.app;
  document.getElementById("worker").textContent = status.worker || "";
  const health = document.getElementById("health");
  health.textContent = status.health;
  health.className = status.health === "ok" ? "" : "bad";
  const ready = document.getElementById("ready");
  ready.textContent = status.ready;
  ready.className = status.ready === "ready" ? "" : "bad";
  const body = document.querySelector("#tasks tbody");
  const seen = new Set();
  for (const task of status.tasks) {
    seen.add(task.task);
    const row = taskRow(body, task.task);
    const cells = row.children;
    cells[1].textContent = task.state;
    cells[1].className = `state state-${task.state}`;
    cells[2].textContent = formatCount(task.records_processed);
    cells[2].dataset.value = String(task.records_processed);
    cells[3].textContent = formatRate(task.records_per_second);
    sparkline(cells[4], `task:${task.task}:records_per_second`, formatRate);
    cells[5].textContent = task.lag === null ? "" : formatCount(task.lag);
    sparkline(cells[6], `task:${task.task}:lag`, formatCount);
    cells[7].textContent = formatCount(task.late_records_dropped);
    cells[8].textContent = formatCount(task.records_dead_lettered);
    cells[9].textContent = formatBytes(task.cache_bytes);
    cells[10].textContent = restoreText(task.restore);
  }
  for (const row of [...body.children]) if (!seen.has(row.dataset.task)) row.remove();
}

// -- refreshing -------------------------------------------------------------------------
async function refreshHistory() {
  const since = history.last === null ? "" : `?since=${history.last}`;
  const answer = await fetch(`/history${since}`, { cache: "no-store" });
  if (!answer.ok) return;
  mergeHistory(await answer.json());
  drawCharts();
  showTiles();
  showRestores();
  annotateTopology();
}

async function refreshStatus() {
  const answer = await fetch("/status", { cache: "no-store" });
  if (!answer.ok) {
    settled = false;
    return;
  }
  const status = await answer.json();
  settled = status.ready === "ready";
  showStatus(status);
}

// Two independent loops: /history is answered by the HTTP thread even while the
// worker's loop is busy, /status by the worker's loop; one never waits for the other.
// While the worker is not ready (starting, restoring, rebalancing, unreachable) the
// history is asked for four times as often: restore bars move, a short restore is seen.
const FAST_REFRESH_MS = 250;
let settled = false;  // the worker answered /status and is ready

function every(delay, work) {
  const turn = async () => {
    try {
      await work();
    } catch (error) {
      settled = false;
      document.getElementById("health").textContent = "unreachable";
      document.getElementById("health").className = "bad";
    }
    setTimeout(turn, delay());  // the next turn after this one's answer: requests never pile up
  };
  turn();
}

document.getElementById("every").textContent = String(REFRESH_MS / 1000);
drawTopology();
every(() => (settled && !(history.data && history.data.restores.length) ? REFRESH_MS : FAST_REFRESH_MS),
      refreshHistory);
every(() => REFRESH_MS, refreshStatus);
