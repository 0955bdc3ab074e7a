// The worker's live page: the topology (mermaid, from /topology.mmd) and the task
// table (from /status), refreshed every second. No build step, no network beyond
// this worker.
"use strict";

const REFRESH_MS = 1000;

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
}

function restoreText(restore) {
  if (!restore) return "";
  const total = restore.restored + restore.remaining;
  return `${restore.restored} / ${total}`;
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
  body.replaceChildren();
  for (const task of status.tasks) {
    const row = document.createElement("tr");
    row.dataset.task = task.task;
    cell(row, task.task);
    cell(row, task.state, `state-${task.state}`);
    cell(row, String(task.records_processed), "records");
    cell(row, task.records_per_second.toFixed(1), "rate");
    cell(row, task.lag === null ? "" : String(task.lag), "lag");
    cell(row, String(task.late_records_dropped), "late");
    cell(row, restoreText(task.restore), "restore");
    body.appendChild(row);
  }
}

async function refresh() {
  try {
    const answer = await fetch("/status", { cache: "no-store" });
    if (answer.ok) showStatus(await answer.json());
  } catch (error) {
    document.getElementById("health").textContent = "unreachable";
    document.getElementById("health").className = "bad";
  }
}

async function drawTopology() {
  const target = document.getElementById("topology");
  const answer = await fetch("/topology.mmd");
  const text = await answer.text();
  mermaid.initialize({ startOnLoad: false, securityLevel: "strict" });
  const { svg } = await mermaid.render("topology-svg", text);
  target.innerHTML = svg;
}

document.getElementById("every").textContent = String(REFRESH_MS / 1000);
drawTopology();
refresh();
setInterval(refresh, REFRESH_MS);
