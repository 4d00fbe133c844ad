// The main page's latency panel: p50/p90/p99 of each stage gap per policy version (from
// /api/latency, built from the log), refreshed every 15 s on a live run; and its search box.
"use strict";

(function () {
  const run = new URLSearchParams(location.search).get("run") || "";
  const query = run ? "?run=" + encodeURIComponent(run) : "";
  const $ = (name) => document.getElementById(name);
  const LABELS = {
    request_to_first_turn: "request → first turn", turn: "turn", last_turn_to_complete: "last turn → complete",
    complete_to_reward: "complete → reward", complete_to_segments: "complete → segments",
    segments_to_trained: "segments → trained", trained_to_announced: "trained → announced",
  };
  const VERSIONS_SHOWN = 4; // the newest versions, after every version together
  const secs = (ms) => (Math.abs(ms) < 10000 ? (ms / 1000).toFixed(3) : (ms / 1000).toFixed(1)) + " s";
  window.latency = { loaded: 0 };

  function td(text, cls) {
    const cell = document.createElement("td");
    cell.textContent = text;
    if (cls) cell.className = cls;
    return cell;
  }

  function render(data) {
    const versions = [...new Set(data.gaps.map((g) => g.version))];
    const shown = ["all", ...versions.filter((v) => v !== "all").slice(-VERSIONS_SHOWN).reverse()];
    const body = document.createElement("tbody");
    for (const version of shown) {
      for (const key of Object.keys(LABELS)) {
        const g = data.gaps.find((x) => x.version === version && x.gap === key);
        if (!g) continue;
        const row = document.createElement("tr");
        row.dataset.version = version;
        row.dataset.gap = key;
        const slow = data.slowest[version] === key;
        row.append(td(version === "all" ? "every version" : version), td(LABELS[key], slow ? "slowest" : ""),
          td(String(g.n), "num"), td(secs(g.p50), "num" + (slow ? " slowest" : "")), td(secs(g.p90), "num"), td(secs(g.p99), "num"));
        body.append(row);
      }
    }
    $("latency-table").tBodies[0].replaceWith(body);
    $("latency-note").textContent = data.trajectories + " trajectories · amber: where a trajectory spends most time";
    window.latency.loaded += 1;
  }

  async function refresh() {
    const response = await fetch("/api/latency" + query);
    if (response.ok) render(await response.json());
  }

  async function start() {
    if (run) {
      $("search-run").value = run;
      $("search-run").disabled = false;
    }
    if (!$("latency-table")) return;
    await refresh();
    const info = await (await fetch("/api/runs" + query)).json();
    if (info.mode !== "archive") setInterval(() => refresh().catch(() => {}), 15000);
  }

  start().catch((err) => console.warn("latency:", err));
})();
