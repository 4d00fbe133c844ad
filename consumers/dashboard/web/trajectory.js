// The trajectory page: one trajectory's turns (screenshots with the action drawn where it
// points), its timeline from request to announced weights, and its GRPO group; or a search.
"use strict";

(function () {
  const params = new URLSearchParams(location.search);
  const run = params.get("run") || "";
  const id = params.get("id") || "";
  const q = params.get("q");
  const $ = (name) => document.getElementById(name);
  const state = { loaded: false, timeline: null, results: null, error: null };
  window.trajectory = state;

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
  const withRun = (query) => query + (run ? "&run=" + encodeURIComponent(run) : "");
  const link = (tid) => withRun("/trajectory?id=" + encodeURIComponent(tid));
  const secs = (ms) => {
    if (ms === null || ms === undefined) return "–";
    const s = ms / 1000;
    return Math.abs(s) >= 600 ? (s / 60).toFixed(1) + " min" : Math.abs(s) < 10 ? s.toFixed(3) + " s" : s.toFixed(1) + " s";
  };
  const clock = (ms) => new Date(ms).toISOString().slice(11, 23);
  const num = (v, d = 3) => (v === null || v === undefined ? "–" : (v >= 0 ? "+" : "") + Number(v).toFixed(d));
  const LABELS = {
    request_to_first_turn: "request → first turn", last_turn_to_complete: "last turn → complete",
    complete_to_reward: "complete → reward", complete_to_segments: "complete → segments",
    segments_to_trained: "segments → trained", trained_to_announced: "trained → announced",
  };

  function status(text, kind) {
    $("status").textContent = text;
    $("status").dataset.state = kind;
  }

  function dot(point, cls) {
    const d = el("span", { class: "dot" + (cls ? " " + cls : "") });
    d.style.left = point[0] / 10 + "%";
    d.style.top = point[1] / 10 + "%";
    return d;
  }

  function points(action) {
    const out = [];
    if (!action) return out;
    for (const [key, cls] of [["start_coordinate", "from"], ["coordinate", ""]]) {
      const c = action[key];
      if (Array.isArray(c) && c.length === 2 && c.every((v) => typeof v === "number")) out.push([c, cls]);
    }
    return out;
  }

  function screen(ref, caption, action) {
    const box = el("div", { class: "screen" });
    if (ref) {
      box.append(el("img", { src: "/blob/" + ref + "?w=768", alt: caption, decoding: "async" }));
      box.addEventListener("click", () => {
        $("viewer-img").src = "/blob/" + ref;
        $("viewer-caption").textContent = caption;
        $("viewer").showModal();
      });
    } else {
      box.append(el("span", { class: "none", text: "no screenshot" }));
    }
    for (const [p, cls] of points(action)) box.append(dot(p, cls));
    return box;
  }

  function renderHead(t) {
    const c = t.completion;
    const w = t.rewards.length ? t.rewards[0] : null;
    let badge;
    if (w && !w.scored) badge = el("span", { class: "badge unscored", text: "environment failure" });
    else if (w) badge = el("span", { class: "badge " + (w.score >= 1 ? "pass" : "fail"), text: "score " + num(w.score, 2) });
    else badge = el("span", { class: "badge", text: c ? "not judged yet" : "running" });
    const meta = [
      c ? c.status + " after " + c.num_steps + " turns" : t.turns.length + " turns so far",
      "played by v" + (t.turns.length ? t.turns[0].policy_version : "?"),
      t.training ? "trained into v" + t.training.version : "not trained yet",
      "sample " + t.sample_index + " of " + t.group_size,
    ].join(" · ");
    $("head").replaceChildren(...[
      el("span", { class: "task", text: t.task_id || "(no task)" }), badge,
      el("span", { class: "meta", text: meta }),
      el("span", { class: "meta tid", text: t.trajectory_id }),
      t.instruction ? el("span", { class: "instruction", text: t.instruction }) : null,
      c && c.error ? el("span", { class: "error", text: "error: " + c.error }) : null].filter((n) => n !== null));
    document.title = "trajectory " + t.trajectory_id;
  }

  function renderTurns(t) {
    const box = $("turns");
    const nodes = t.turns.map((turn) => {
      const caption = "turn " + turn.step + ": " + turn.action_text;
      return el("div", { class: "turn", dataset: { step: turn.step } },
        screen(turn.screenshot, caption, turn.action),
        el("div", { class: "action" + (turn.action ? "" : " error"), title: turn.response_text, text: "#" + turn.step + " " + turn.action_text }),
        el("div", { class: "meta", text: "v" + turn.policy_version + " · " + turn.tokens + " tokens · " + secs(turn.latency_ms) + " · saw " + (turn.observation.join("+") || "nothing") }));
    });
    const final = t.completion && t.completion.artifacts.final_screenshot;
    if (final) {
      nodes.push(el("div", { class: "turn final" }, screen(final, "final screenshot", null),
        el("div", { class: "action", text: "final screen" })));
    }
    box.replaceChildren(...nodes);
    $("turns-note").textContent = t.turns.length + " turns · red ring: where the action points (dashed: where a drag starts)";
    $("turns-card").hidden = false;
  }

  function stageWhat(t, name) {
    if (name === "request" && t.request) {
      const r = t.request;
      const why = r.drawn + (r.pool_rank ? " (rank " + r.pool_rank + " of " + r.live_tasks + ", pool top " + r.pool_size + ")" : "");
      return "batch " + (r.batch === null ? "–" : r.batch) + " · asks v" + r.policy_version + " · drawn: " + why + (r.ema === null ? "" : " · EMA " + r.ema.toFixed(3));
    }
    if (name.startsWith("turn ")) {
      const turn = t.turns.find((x) => "turn " + x.step === name);
      return turn ? turn.action_text : "";
    }
    if (name === "complete" && t.completion) return t.completion.status + (t.completion.error ? ": " + t.completion.error : "");
    if (name === "reward" && t.rewards.length) return "score " + num(t.rewards[0].score) + " by " + t.rewards[0].judge_version;
    if (name === "segments" && t.segments) return t.segments.count + " segments · " + t.segments.tokens + " tokens, " + t.segments.trained_tokens + " trained · " + t.segments.images + " images";
    if (name === "trained" && t.training) return "step → v" + t.training.version + " on " + t.training.groups + " groups · advantage " + num(t.training.advantage);
    if (name === "announced" && t.training) return "v" + t.training.version + " at " + t.training.checkpoint_uri;
    return "";
  }

  function renderTimeline(t) {
    const body = el("tbody");
    const origin = t.request ? t.request.at_ms : (t.stages.length ? t.stages[0].at_ms : 0);
    let previous = null;
    for (const s of t.stages) {
      body.append(el("tr", { class: s.stage.startsWith("turn ") ? "turn-row" : "", dataset: { stage: s.stage } },
        el("td", { text: s.stage }), el("td", { text: clock(s.at_ms) }),
        el("td", { class: "num", text: secs(s.at_ms - origin) }),
        el("td", { class: "num", text: previous === null ? "" : secs(s.at_ms - previous) }),
        el("td", { class: "what", text: stageWhat(t, s.stage) })));
      previous = s.at_ms;
    }
    $("timeline").tBodies[0].replaceWith(body);
    const gaps = el("tbody");
    const turns = t.turns.map((x) => x.latency_ms);
    for (const [key, label] of Object.entries(LABELS)) {
      gaps.append(el("tr", { dataset: { gap: key } }, el("td", { text: label }), el("td", { class: "num", text: secs(t.gaps[key]) })));
      if (key === "request_to_first_turn" && turns.length) {
        gaps.append(el("tr", { dataset: { gap: "turn" } }, el("td", { text: "turns (" + turns.length + ")" }), el("td", { class: "num", text: secs(turns.reduce((a, b) => a + b, 0)) })));
      }
    }
    $("gaps").tBodies[0].replaceWith(gaps);
    const details = [];
    const line = (label, text) => el("p", {}, el("b", { text: label + ": " }), text);
    for (const w of t.rewards) details.push(line("reward " + w.judge_version, w.reason + (w.metric_score === null ? "" : " (metric " + w.metric_score.toFixed(3) + ")")));
    if (t.completion) {
      const arts = Object.entries(t.completion.artifacts).map(([k, v]) => k + " " + v.slice(0, 19) + "…").join(", ");
      if (arts) details.push(line("judge read", arts));
      for (const a of t.completion.retries) details.push(line("attempt " + a.attempt, a.status + (a.error ? ": " + a.error : "") + " — " + a.trajectory_id));
    }
    if (t.task_after) details.push(line("task after this group", "EMA " + t.task_after.ema.toFixed(3) + ", weight " + t.task_after.weight.toFixed(3) + ", " + t.task_after.groups_counted + " groups"));
    $("details").replaceChildren(...details);
    $("timeline-note").textContent = t.run_id ? "run " + t.run_id : "";
    $("timeline-card").hidden = false;
  }

  function renderGroup(t) {
    const body = el("tbody");
    for (const m of t.group) {
      const good = m.score !== null && m.score >= 1;
      body.append(el("tr", { class: m.trajectory_id === t.trajectory_id ? "me" : "", dataset: { sample: m.sample_index } },
        el("td", { text: String(m.sample_index) }),
        el("td", { text: m.status + (m.attempts > 1 ? " (" + m.attempts + " attempts)" : "") }),
        el("td", { class: "num " + (m.score === null ? "" : good ? "good" : "bad"), text: m.scored === false ? "unscored" : num(m.score, 2) }),
        el("td", { class: "num", text: num(m.advantage) }),
        el("td", { class: "num", text: String(m.num_steps) }),
        el("td", { class: "num", text: m.policy_version === null ? "–" : "v" + m.policy_version }),
        el("td", { class: "tid" }, m.trajectory_id ? el("a", { href: link(m.trajectory_id), text: m.trajectory_id }) : "–")));
    }
    $("group").tBodies[0].replaceWith(body);
    $("group-note").textContent = t.group_id + (t.training ? " · trained into v" + t.training.version : " · not trained yet");
    $("group-card").hidden = false;
  }

  function renderResults(rows, total, note) {
    const body = el("tbody");
    for (const r of rows) {
      body.append(el("tr", {},
        el("td", { class: "tid" }, el("a", { href: link(r.trajectory_id), text: r.trajectory_id })),
        el("td", { text: r.task_id }), el("td", { text: r.status }),
        el("td", { class: "num", text: num(r.score, 2) }),
        el("td", { class: "num", text: r.policy_version === null ? "–" : "v" + r.policy_version }),
        el("td", { class: "num", text: r.trained === null ? "–" : "v" + r.trained })));
    }
    $("results").tBodies[0].replaceWith(body);
    $("results-note").textContent = note + " · " + (rows.length < total ? "newest " + rows.length + " of " + total : total + " found");
    $("results-card").hidden = false;
    state.results = rows;
  }

  async function load() {
    $("search").value = q !== null ? q : id;
    if (run) {
      $("search-run").value = run;
      $("search-run").disabled = false;
      $("home").href = "/?run=" + encodeURIComponent(run);
    }
    if (id) {
      const response = await fetch(withRun("/api/trajectory?id=" + encodeURIComponent(id)));
      const data = await response.json();
      if (!response.ok) throw new Error(data.error || response.statusText);
      if (data.matches) {
        renderResults(data.matches, data.matches.length, "named by " + id);
      } else {
        state.timeline = data;
        renderHead(data);
        renderTurns(data);
        renderTimeline(data);
        renderGroup(data);
        $("source").textContent = data.run_id ? "run " + data.run_id : "";
      }
    } else {
      const response = await fetch(withRun("/api/trajectories?q=" + encodeURIComponent(q || "")));
      const data = await response.json();
      renderResults(data.rows, data.total, q ? "matching “" + q + "”" : "newest first");
      $("source").textContent = data.run ? "run " + data.run : "";
    }
    status("loaded", "archive");
  }

  load().then(() => { state.loaded = true; }).catch((err) => {
    state.error = String(err.message || err);
    state.loaded = true;
    $("head").replaceChildren(el("span", { class: "error", text: state.error }));
    status("not found", "error");
  });
})();
