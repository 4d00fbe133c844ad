// The scalecua dashboard page: one EventSource, one handler per panel, Chart.js for charts.
// Every panel event carries the panel's whole content, so a handler just redraws it.
"use strict";

(function () {
  const COLORS = ["#4ea1ff", "#3fb950", "#d29922", "#f778ba", "#a371f7", "#56d4dd", "#f85149", "#e3b341"];
  const GRID = "rgba(138, 150, 163, 0.15)";
  const TICKS = "#8a96a3";
  const run = new URLSearchParams(location.search).get("run") || "";
  const query = run ? "?run=" + encodeURIComponent(run) : "";
  const panels = {};
  const charts = {};
  let taskSort = { key: null, desc: true };

  const $ = (id) => document.getElementById(id);
  const fmt = (v, digits = 3) => {
    if (v === null || v === undefined) return "–";
    const text = Number(v).toFixed(digits);
    return text.includes(".") ? text.replace(/0+$/, "").replace(/\.$/, "") : text;
  };
  const pct = (v) => (v === null || v === undefined ? "–" : (100 * v).toFixed(1) + "%");
  const int = (v) => (v === null || v === undefined ? "–" : Number(v).toLocaleString("en-US"));
  const plural = (n, word) => n + " " + word + (n === 1 ? "" : "s");
  const rate = (v) => (v === null || v === undefined ? "–" : Number(v).toFixed(1));

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k === "dataset") Object.assign(node.dataset, v);
      else node.setAttribute(k, v);
    }
    for (const child of children) if (child !== null && child !== undefined) node.append(child);
    return node;
  }

  function baseOptions(extra = {}) {
    return {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      interaction: { mode: "index", intersect: false },
      plugins: { legend: { labels: { color: TICKS, boxWidth: 12 } } },
      ...extra,
    };
  }

  function axis(extra = {}) {
    return { grid: { color: GRID }, ticks: { color: TICKS }, title: { color: TICKS }, ...extra };
  }

  // The frontier band μ ± σ behind the histogram's bars, with a dashed line at μ.
  const frontierBand = {
    id: "frontierBand",
    beforeDatasetsDraw(chart) {
      const pool = panels.pool;
      if (!pool) return;
      const { ctx, chartArea: area, scales: { x } } = chart;
      const left = x.getPixelForValue(pool.band[0]);
      const right = x.getPixelForValue(pool.band[1]);
      const mu = x.getPixelForValue(pool.mu);
      ctx.save();
      ctx.fillStyle = "rgba(78, 161, 255, 0.14)";
      ctx.fillRect(left, area.top, right - left, area.bottom - area.top);
      ctx.strokeStyle = "rgba(78, 161, 255, 0.8)";
      ctx.setLineDash([4, 4]);
      ctx.beginPath();
      ctx.moveTo(mu, area.top);
      ctx.lineTo(mu, area.bottom);
      ctx.stroke();
      ctx.fillStyle = "#4ea1ff";
      ctx.font = "11px system-ui, sans-serif";
      ctx.fillText("frontier band μ±σ", left + 4, area.top + 12);
      ctx.restore();
    },
  };

  function makeCharts() {
    charts.iterations = new Chart($("chart-iterations"), {
      data: {
        labels: [],
        datasets: [
          { type: "line", label: "pass rate", data: [], yAxisID: "y", borderColor: COLORS[1], backgroundColor: COLORS[1], tension: 0.2, spanGaps: true, order: 0 },
          { type: "line", label: "mean reward", data: [], yAxisID: "y", borderColor: COLORS[0], backgroundColor: COLORS[0], borderDash: [6, 3], tension: 0.2, spanGaps: true, order: 0 },
          { type: "bar", label: "scored rollouts", data: [], yAxisID: "n", backgroundColor: "rgba(138, 150, 163, 0.18)", stack: "n", barPercentage: 0.6, order: 1 },
          { type: "bar", label: "environment failures", data: [], yAxisID: "n", backgroundColor: "rgba(248, 81, 73, 0.5)", stack: "n", barPercentage: 0.6, order: 1 },
        ],
      },
      options: baseOptions({
        scales: {
          x: axis({ title: { display: true, text: "policy version (iteration)", color: TICKS } }),
          y: axis({ suggestedMin: 0, suggestedMax: 1, title: { display: true, text: "reward / pass rate", color: TICKS } }),
          n: axis({ position: "right", stacked: true, beginAtZero: true, grid: { drawOnChartArea: false }, title: { display: true, text: "rollouts", color: TICKS } }),
        },
      }),
    });
    charts.pool = new Chart($("chart-pool"), {
      type: "bar",
      data: {
        datasets: [
          { label: "active", data: [], backgroundColor: "rgba(63, 185, 80, 0.75)", barPercentage: 1, categoryPercentage: 1 },
          { label: "excluded", data: [], backgroundColor: "rgba(138, 150, 163, 0.45)", barPercentage: 1, categoryPercentage: 1 },
        ],
      },
      options: baseOptions({
        interaction: { mode: "nearest", intersect: true },
        scales: {
          x: axis({ type: "linear", min: 0, max: 1, stacked: true, offset: false, title: { display: true, text: "EMA pass rate", color: TICKS } }),
          y: axis({ stacked: true, beginAtZero: true, ticks: { color: TICKS, precision: 0 }, title: { display: true, text: "tasks", color: TICKS } }),
        },
      }),
      plugins: [frontierBand],
    });
    const seriesChart = (canvas, title) =>
      new Chart(canvas, {
        type: "line",
        data: { datasets: [] },
        options: baseOptions({
          plugins: { legend: { labels: { color: TICKS, boxWidth: 12 } }, title: { display: true, text: title, color: TICKS } },
          scales: {
            x: axis({ type: "linear", title: { display: true, text: "seconds since the dashboard started", color: TICKS } }),
            y: axis({ beginAtZero: true }),
          },
        }),
      });
    charts.lag = seriesChart($("chart-lag"), "consumer lag (records)");
    charts.rate = seriesChart($("chart-rate"), "consumed records/s");
    charts.metrics = {};
  }

  // -- panels ------------------------------------------------------------------------------

  function onSummary(p) {
    $("source").textContent = p.source + (p.runs.length ? " · run " + p.runs[p.runs.length - 1].run_id : "");
    const status = $("status");
    status.textContent = p.status;
    status.dataset.state = p.status === "live" || p.status === "archive" ? p.status : p.status.startsWith("broker") ? "error" : "connecting";
    $("kpi-version").textContent = p.policy_version === null ? "–" : p.policy_version;
    $("kpi-rewards").textContent = int(p.rewards);
    $("kpi-unscored").textContent = int(p.unscored);
    $("kpi-tasks").textContent = int(p.tasks);
    const judges = Object.keys(p.judges);
    const statuses = Object.entries(p.statuses).map(([k, v]) => k + " " + v).join(", ");
    $("iterations-note").textContent =
      (p.judge_version ? "judge " + p.judge_version : "") +
      (judges.length > 1 ? " (of " + judges.join(", ") + ")" : "") +
      (statuses ? " · ends: " + statuses : "") +
      (p.undecodable ? " · " + p.undecodable + " undecodable records" : "");
  }

  function onIterations(p) {
    const rows = p.rows;
    const chart = charts.iterations;
    chart.data.labels = rows.map((r) => r.version);
    chart.data.datasets[0].data = rows.map((r) => r.pass_rate);
    chart.data.datasets[1].data = rows.map((r) => r.mean_reward);
    chart.data.datasets[2].data = rows.map((r) => r.scored);
    chart.data.datasets[3].data = rows.map((r) => r.unscored);
    chart.data.datasets[0].label = "pass rate (score ≥ " + p.threshold + ")";
    chart.update("none");
    const last = rows[rows.length - 1];
    $("kpi-pass-rate").textContent = last ? pct(last.pass_rate) : "–";
    $("kpi-pass-rate").dataset.value = last && last.pass_rate !== null ? last.pass_rate : "";
    $("kpi-mean-reward").textContent = last ? fmt(last.mean_reward) : "–";
    $("kpi-mean-reward").dataset.value = last && last.mean_reward !== null ? last.mean_reward : "";
    $("chart-iterations").dataset.points = rows.length;
  }

  function onTrainer(p) {
    const grid = $("trainer-metrics");
    const names = Object.keys(p.metrics);
    $("trainer-note").textContent = p.versions.length
      ? plural(p.versions.length, "update") + " · latest v" + p.versions[p.versions.length - 1] + (p.checkpoint ? " · " + p.checkpoint : "")
      : "";
    if (!names.length) return;
    if (grid.querySelector(".empty")) grid.textContent = "";
    for (const name of names) {
      let entry = charts.metrics[name];
      if (!entry) {
        const value = el("b");
        const canvas = el("canvas");
        const box = el("div", { class: "metric", dataset: { metric: name } }, el("div", { class: "name" }, el("span", { text: name }), value), el("div", { class: "spark" }, canvas));
        grid.append(box);
        const chart = new Chart(canvas, {
          type: "line",
          data: { labels: [], datasets: [{ data: [], borderColor: COLORS[Object.keys(charts.metrics).length % COLORS.length], borderWidth: 1.5, pointRadius: (ctx) => (ctx.dataset.data.length <= 30 ? 2 : 0), spanGaps: true }] },
          options: baseOptions({
            plugins: { legend: { display: false }, tooltip: { enabled: true } },
            scales: { x: { display: false }, y: { display: true, ticks: { color: TICKS, maxTicksLimit: 3, font: { size: 9 } }, grid: { color: GRID } } },
          }),
        });
        entry = charts.metrics[name] = { chart, value };
      }
      const series = p.metrics[name];
      entry.chart.data.labels = p.versions;
      entry.chart.data.datasets[0].data = series;
      entry.chart.update("none");
      const latest = series[series.length - 1];
      entry.value.textContent = latest === null ? "–" : Math.abs(latest) >= 1000 || (latest !== 0 && Math.abs(latest) < 0.001) ? latest.toExponential(2) : fmt(latest, 4);
    }
  }

  function onPool(p) {
    const width = p.edges[1] - p.edges[0];
    const centre = (i) => p.edges[i] + width / 2;
    const chart = charts.pool;
    chart.data.datasets[0].data = p.active.map((y, i) => ({ x: centre(i), y }));
    chart.data.datasets[1].data = p.excluded.map((y, i) => ({ x: centre(i), y }));
    chart.update("none");
    const excluded = p.excluded.reduce((a, b) => a + b, 0);
    $("pool-note").textContent =
      plural(p.tasks, "task") + " · " + p.in_band + " in band [" + fmt(p.band[0], 2) + ", " + fmt(p.band[1], 2) + "] · " +
      p.unmeasured + " not yet measured · " + excluded + " excluded";
    $("kpi-in-band").textContent = int(p.in_band);
    $("chart-pool").dataset.measured = p.active.concat(p.excluded).reduce((a, b) => a + b, 0);
  }

  function onTasks(p) {
    $("tasks-note").textContent = p.rows.length < p.total ? "newest " + p.rows.length + " of " + p.total : plural(p.total, "task") + ", newest first";
    let rows = p.rows.slice();
    if (taskSort.key) {
      const k = taskSort.key;
      const sign = taskSort.desc ? -1 : 1;
      rows.sort((a, b) => {
        const x = a[k], y = b[k];
        if (x === y) return 0;
        if (x === null) return 1;
        if (y === null) return -1;
        return (x < y ? -1 : 1) * sign;
      });
    }
    const body = el("tbody");
    for (const r of rows) {
      const cell = (v, cls = "num") => el("td", { class: cls + (v === "–" ? " none" : ""), text: v });
      body.append(
        el("tr", { dataset: { task: r.task_id } },
          el("td", { class: "task", title: r.task_id }, el("a", { href: "/trajectory?q=" + encodeURIComponent(r.task_id) + (run ? "&run=" + encodeURIComponent(run) : ""), text: r.task_id })),
          el("td", { class: "num ema" + (r.in_band ? " in-band" : "") + (r.ema === null ? " none" : ""), text: r.ema === null ? "–" : fmt(r.ema, 3), dataset: { value: r.ema === null ? "" : r.ema } }),
          cell(fmt(r.initial, 3)), cell(int(r.attempts)), cell(int(r.rollouts)), cell(int(r.successes)),
          cell(fmt(r.last_score, 3)), cell(fmt(r.weight, 3)),
          el("td", { class: "state-" + r.state, text: r.state }))
      );
    }
    $("tasks-table").tBodies[0].replaceWith(body);
  }

  function thumb(ref, caption, point) {
    const shot = el("div", { class: "shot" });
    if (ref) {
      const img = el("img", { src: "/blob/" + ref + "?w=352", alt: caption, loading: "lazy", decoding: "async" });
      shot.append(img);
      shot.addEventListener("click", () => {
        $("viewer-img").src = "/blob/" + ref;
        $("viewer-caption").textContent = caption;
        $("viewer").showModal();
      });
    } else {
      shot.append(el("span", { class: "caption", text: "no screenshot" }));
    }
    if (point) {
      const dot = el("span", { class: "dot" });
      dot.style.left = point[0] / 10 + "%";
      dot.style.top = point[1] / 10 + "%";
      shot.append(dot);
    }
    return shot;
  }

  // Films are rebuilt only when their content changed, so images are not reloaded.
  const films = new Map();

  function buildFilm(t) {
    let badge;
    if (t.scored === false) badge = el("span", { class: "badge unscored", text: "environment failure" });
    else if (t.score === null) badge = el("span", { class: "badge", text: "not judged yet" });
    else badge = el("span", { class: "badge " + (t.score >= (panels.iterations ? panels.iterations.threshold : 1) ? "pass" : "fail"), text: "score " + fmt(t.score, 2) });
    const head = el("div", { class: "film-head" },
      el("span", { class: "task", text: t.task_id || "(no task)" }), badge,
      el("span", { class: "meta", text: t.status + " · " + plural(t.num_steps, "step") + " · v" + t.policy_version + " · " + fmt(t.seconds, 1) + " s" + (t.error ? " · " + t.error : "") }),
      el("a", { class: "tid", href: "/trajectory?id=" + encodeURIComponent(t.trajectory_id) + (run ? "&run=" + encodeURIComponent(run) : ""), text: t.trajectory_id }));
    const frames = el("div", { class: "frames" });
    for (const f of t.frames) {
      frames.append(el("div", { class: "frame", dataset: { step: f.step } },
        thumb(f.ref, "turn " + f.step + ": " + f.action, f.point),
        el("div", { class: "caption" + (f.error ? " error" : ""), title: f.action }, el("b", { text: "#" + f.step + " " }), f.action)));
    }
    if (t.final_ref) {
      frames.append(el("div", { class: "frame final" }, thumb(t.final_ref, "final screenshot", null), el("div", { class: "caption" }, el("b", { text: "final" }))));
    }
    return el("div", { class: "film", dataset: { trajectory: t.trajectory_id } }, head, frames);
  }

  function onFilmstrip(p) {
    const box = $("filmstrip");
    const n = p.trajectories.length;
    $("film-note").textContent = n ? "newest " + plural(n, "finished episode") + " · red ring: where the action points" : "";
    if (!n) return;
    const keep = new Map();
    const scrolls = [];
    const nodes = p.trajectories.map((t) => {
      const signature = JSON.stringify(t);
      const old = films.get(t.trajectory_id);
      const node = old && old.signature === signature ? old.node : buildFilm(t);
      if (old && node !== old.node) scrolls.push([node, old.node.querySelector(".frames").scrollLeft]);
      keep.set(t.trajectory_id, { signature, node });
      return node;
    });
    films.clear();
    for (const [k, v] of keep) films.set(k, v);
    box.replaceChildren(...nodes);
    for (const [node, left] of scrolls) node.querySelector(".frames").scrollLeft = left;
  }

  function onServices(p) {
    const groups = el("tbody");
    for (const g of p.groups) {
      groups.append(el("tr", { dataset: { group: g.group } },
        el("td", { text: g.group }),
        el("td", { class: "reads", text: g.topics.length > 3 ? g.topics.length + " topics" : g.topics.join(", "), title: g.topics.join(", ") }),
        el("td", { class: "num committed", text: g.committed === null ? "no commits" : int(g.committed) }),
        el("td", { class: "num lag" + (g.lag > 1000 ? " lag-high" : ""), text: int(g.lag), dataset: { value: g.lag === null ? "" : g.lag } }),
        el("td", { class: "num rate", text: rate(g.rate) })));
    }
    $("services-table").tBodies[0].replaceWith(groups);
    const topics = el("tbody");
    for (const t of p.topics) {
      topics.append(el("tr", { dataset: { topic: t.topic } }, el("td", { text: t.topic }), el("td", { class: "num records", text: int(t.records) }), el("td", { class: "num", text: rate(t.rate) })));
    }
    $("topics-table").tBodies[0].replaceWith(topics);
    $("services-note").textContent = p.live ? "sampled every few seconds; lag = high-watermark − committed offset" : "archived run: records per topic (no live services)";
    for (const node of document.querySelectorAll(".live-only")) node.hidden = !p.live;
    for (const [key, chart] of [["lag", charts.lag], ["rate", charts.rate]]) {
      const names = p.groups.map((g) => g.group);
      chart.data.datasets = names.map((name, i) => ({
        label: name,
        data: p.history.map((h) => ({ x: h.t, y: h[key][name] })),
        borderColor: COLORS[i % COLORS.length],
        backgroundColor: COLORS[i % COLORS.length],
        pointRadius: 1.5,
        borderWidth: 1.5,
        spanGaps: false,
      }));
      chart.update("none");
    }
  }

  const HANDLERS = { summary: onSummary, iterations: onIterations, trainer: onTrainer, pool: onPool, tasks: onTasks, filmstrip: onFilmstrip, services: onServices };

  function connect() {
    const source = new EventSource("/events" + query);
    for (const [name, handler] of Object.entries(HANDLERS)) {
      source.addEventListener(name, (event) => {
        const data = JSON.parse(event.data);
        panels[name] = data;
        handler(data);
        window.dashboard.received[name] = (window.dashboard.received[name] || 0) + 1;
      });
    }
    source.onerror = () => {
      const status = $("status");
      status.textContent = "reconnecting…";
      status.dataset.state = "error";
    };
    window.dashboard.source = source;
  }

  async function runPicker() {
    const response = await fetch("/api/runs" + query);
    const info = await response.json();
    if (info.mode !== "archive" || !info.runs.length) return;
    const select = $("run-select");
    const current = run || info.runs[info.runs.length - 1];
    for (const id of info.runs.slice().reverse()) select.append(el("option", { value: id, text: id }));
    select.value = current;
    select.addEventListener("change", () => {
      location.search = "?run=" + encodeURIComponent(select.value);
    });
    $("run-picker").hidden = false;
  }

  function sortableTasks() {
    for (const th of document.querySelectorAll("#tasks-table th")) {
      th.addEventListener("click", () => {
        const key = th.dataset.key;
        taskSort = { key, desc: taskSort.key === key ? !taskSort.desc : key !== "task_id" };
        if (panels.tasks) onTasks(panels.tasks);
      });
    }
  }

  window.dashboard = { charts, panels, received: {} };
  if (typeof Chart === "undefined") {
    $("status").textContent = "chart library missing: run infra/install.sh";
    $("status").dataset.state = "error";
    return;
  }
  Chart.defaults.color = TICKS;
  makeCharts();
  sortableTasks();
  connect();
  runPicker().catch((err) => console.warn("runs:", err));
})();
