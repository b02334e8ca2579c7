// robot-rl console: one WebSocket to the console server (robot_rl/console/server.py describes the messages).
// No libraries: plain DOM and <canvas>. window.consoleState is what the browser tests and the benchmark read.
"use strict";

const S = window.consoleState = {
  hello: null, seq: 0, episode: -1, framesShown: 0, status: null, episodes: [], estopRoundTrips: [],
  connected: false, lastMessage: "",
};
const $ = (id) => document.getElementById(id);
let ws = null, nextId = 1, retryMs = 250;
const pendingEstops = new Map();  // id -> performance.now() at the press
const COLORS = { policy: "#2b6cb0", operator: "#dd6b20", hold: "#718096", reset: "#2f855a" };

function say(text, ok) {
  S.lastMessage = text;
  $("message").textContent = text;
  $("message").className = ok ? "ok" : "";
}

function send(message) {
  if (!ws || ws.readyState !== WebSocket.OPEN) {
    say("not connected to the console: use the robot's own e-stop if it must stop now");
    return false;
  }
  ws.send(JSON.stringify(message));
  return true;
}

function connect() {
  ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
  ws.onopen = () => { S.connected = true; retryMs = 250; badge("link", "page: connected", "ok"); };
  ws.onclose = () => {
    S.connected = false;
    badge("link", "page: disconnected (retrying)", "bad");
    setTimeout(connect, retryMs);
    retryMs = Math.min(retryMs * 2, 4000);
  };
  ws.onmessage = (event) => {
    const m = JSON.parse(event.data);
    const handler = HANDLERS[m.type];
    if (handler) handler(m);
  };
}

function badge(id, text, kind) {
  const el = $(id);
  el.textContent = text;
  el.className = "badge " + (kind || "");
}

const HANDLERS = {
  hello(m) {
    S.hello = m;
    $("robot").textContent = `${m.robot} at ${m.control_hz} Hz`;
    const cams = $("cams");
    cams.textContent = "";
    for (const c of m.cameras) {
      const fig = document.createElement("figure");
      fig.className = "cam";
      const img = document.createElement("img");
      img.id = "cam-" + c.name;
      img.alt = c.name;
      const cap = document.createElement("figcaption");
      cap.textContent = `${c.name} ${c.height}x${c.width}`;
      fig.append(img, cap);
      cams.append(fig);
    }
    if (!m.cameras.length) cams.textContent = "this robot serves no cameras";
    $("classifier").hidden = m.threshold === null;
    if (m.threshold !== null) $("prob-threshold").style.left = (100 * m.threshold) + "%";
  },

  tick(m) {
    S.seq = m.seq;
    S.episode = m.episode;
    badge("driver", "driver: " + m.driver, m.driver);
    badge("episode-badge", `episode ${m.episode} · step ${m.step}`);
    const decoded = [];
    for (const [name, data] of Object.entries(m.frames)) {
      const img = $("cam-" + name);
      if (!img) continue;
      img.src = "data:image/jpeg;base64," + data;
      decoded.push(img.decode().catch(() => null));
    }
    // acknowledged once the frames are decoded and the next frame is painted: the server measures camera -> page
    Promise.all(decoded).then(() => requestAnimationFrame(() => {
      S.framesShown += 1;
      if (decoded.length) send({ type: "ack", seq: m.seq });
    }));
    const rows = [["episode", m.episode], ["step", m.step], ["reward", m.reward.toFixed(3)],
                  ["success (robot)", m.success ? "yes" : "no"],
                  ["state", m.state.map((v) => v.toFixed(3)).join(" ")]];
    if (m.applied) rows.push(["applied action", m.applied.map((v) => v.toFixed(2)).join(" ")]);
    fillTable("state-table", rows);
    if (m.prob !== null && m.threshold !== null) {
      $("prob-fill").style.width = (100 * m.prob) + "%";
      $("prob-text").textContent = `p(success) ${m.prob.toFixed(2)} · threshold ${m.threshold.toFixed(2)}`;
    }
  },

  status(m) {
    S.status = m;
    drawStrip(m.drivers || []);
    const latched = m.state === "estop";
    badge("robot-state", "robot: " + (latched ? "E-STOP LATCHED" : m.state), latched ? "bad" :
          m.health === "ok" && m.state === "running" ? "ok" : "warn");
    if (latched) $("estop-info").textContent = "latched: " + (m.estop_reason || "");
    const ms = (v) => (v === null || v === undefined ? "–" : v.toFixed(1) + " ms");
    fillTable("loop-table", [
      ["health", m.health + (m.error ? " (" + m.error + ")" : "")], ["state", m.state],
      ["ticks", m.ticks], ["overruns", m.overruns], ["jitter p50 / p99", ms(m.jitter_p50_ms) + " / " + ms(m.jitter_p99_ms)],
      ["tick work p99", ms(m.tick_work_p99_ms)], ["last tick", ms(m.last_tick_age_ms) + " ago"],
      ["priority", m.loop_priority], ["watchdog trips", m.watchdog_trips], ["e-stops", m.estops],
      ["frame latency p50 / p95 (camera → this page)", ms(m.latency_p50_ms) + " / " + ms(m.latency_p95_ms)],
    ]);
  },

  episodes(m) {
    S.episodes = m.episodes;
    S.held = m.held;
    const body = $("episodes");
    body.textContent = "";
    for (const e of m.episodes.slice().reverse()) {
      const tr = document.createElement("tr");
      const cells = [e.episode, e.label, e.ret.toFixed(2), e.length, e.interventions, e.takeovers,
                     e.robot_minutes.toFixed(2)];
      for (const c of cells) { const td = document.createElement("td"); td.textContent = c; tr.append(td); }
      const td = document.createElement("td");
      for (const [camera, url] of Object.entries(e.videos || {})) {
        const a = document.createElement("a");
        a.href = url; a.textContent = camera; a.target = "_blank"; a.style.marginRight = "6px";
        td.append(a);
      }
      tr.append(td);
      if (e.episode === m.held) {  // ended, not yet recorded: it can still be labelled (a late label)
        const late = document.createElement("td");
        for (const [name, text] of [["success", "✓"], ["failure", "✗"], ["rerecord", "↺"]]) {
          const b = document.createElement("button");
          b.textContent = text; b.title = "late label: " + name; b.className = "late-" + name;
          b.addEventListener("click", () => label(name, e.episode));
          late.append(b);
        }
        tr.append(late);
      }
      body.append(tr);
    }
    plots(m.episodes);
  },

  estop_ack(m) {
    const t0 = pendingEstops.get(m.id);
    pendingEstops.delete(m.id);
    const ms = t0 === undefined ? null : performance.now() - t0;
    if (ms !== null) S.estopRoundTrips.push(ms);
    say(m.ok ? `e-stop latched and acknowledged by the robot (${ms.toFixed(0)} ms)` :
        "e-stop: " + m.message + " — use the robot's own e-stop", m.ok);
  },
  clear_ack(m) { say(m.ok ? "e-stop cleared" : "clear e-stop: " + m.message, m.ok); },
  label_ack(m) { say(`label ${m.label}: ${m.message} (episode ${m.episode})`, true); },
  error(m) { say(m.message); },
};

function fillTable(id, rows) {
  const body = $(id);
  body.textContent = "";
  for (const [k, v] of rows) {
    const tr = document.createElement("tr");
    const a = document.createElement("th"); a.textContent = k;
    const b = document.createElement("td"); b.textContent = v;
    tr.append(a, b);
    body.append(tr);
  }
}

function estop() {
  const id = nextId++;
  pendingEstops.set(id, performance.now());
  if (send({ type: "estop", id })) say("e-stop sent…", true);
}

function clearEstop() {
  if (!confirm("Clear the e-stop? The robot may move again as soon as it is cleared.")) return;
  send({ type: "clear_estop", confirm: true, token: $("token").value });
}

function label(name, episode = S.episode) {
  send({ type: "label", label: name, episode, token: $("token").value });
}

$("estop").addEventListener("click", estop);
$("clear").addEventListener("click", clearEstop);
$("label-success").addEventListener("click", () => label("success"));
$("label-failure").addEventListener("click", () => label("failure"));
$("label-rerecord").addEventListener("click", () => label("rerecord"));
document.addEventListener("keydown", (event) => {
  const typing = event.target instanceof HTMLInputElement;
  if (event.key === "Escape" || (event.key === " " && !typing)) {  // the e-stop key works everywhere on the page
    event.preventDefault();
    estop();
  } else if (!typing && !event.repeat) {
    const name = { s: "success", f: "failure", r: "rerecord" }[event.key];
    if (name) label(name);
  }
});

// -- plots ------------------------------------------------------------------------------------------------------
function drawStrip(drivers) {
  const c = $("strip"), g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  const w = c.width / Math.max(drivers.length, 1);
  drivers.forEach((d, i) => { g.fillStyle = COLORS[d] || "#000"; g.fillRect(i * w, 0, Math.ceil(w), c.height); });
}

function plot(id, series, xLabel) {
  const c = $(id), g = c.getContext("2d"), W = c.width, H = c.height, L = 42, B = 18;
  g.clearRect(0, 0, W, H);
  const points = series.flatMap((s) => s.points);
  c.dataset.points = String(points.length);
  if (!points.length) { g.fillStyle = "#718096"; g.fillText("no episodes yet", L, H / 2); return; }
  let [x0, x1] = [Math.min(...points.map((p) => p[0])), Math.max(...points.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...points.map((p) => p[1])), Math.max(...points.map((p) => p[1]))];
  if (series.some((s) => s.unit)) { y0 = 0; y1 = Math.max(1, y1); }
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y0 -= 1; y1 += 1; }
  const X = (x) => L + (W - L - 8) * (x - x0) / (x1 - x0), Y = (y) => H - B - (H - B - 6) * (y - y0) / (y1 - y0);
  g.strokeStyle = "#cbd5e0"; g.beginPath(); g.moveTo(L, 4); g.lineTo(L, H - B); g.lineTo(W, H - B); g.stroke();
  g.fillStyle = "#4a5568"; g.font = "11px sans-serif";
  g.fillText(y1.toPrecision(3), 2, 12); g.fillText(y0.toPrecision(3), 2, H - B);
  g.fillText(x0.toPrecision(3), L, H - 4); g.fillText(`${x1.toPrecision(3)} ${xLabel}`, W - 110, H - 4);
  for (const s of series) {
    g.strokeStyle = g.fillStyle = s.color; g.lineWidth = 1.5; g.beginPath();
    s.points.forEach(([x, y], i) => (i ? g.lineTo(X(x), Y(y)) : g.moveTo(X(x), Y(y))));
    g.stroke();
    for (const [x, y] of s.points) g.fillRect(X(x) - 1.5, Y(y) - 1.5, 3, 3);
  }
}

function rolling(episodes, value, n) {
  return episodes.map((e, i) => {
    const window = episodes.slice(Math.max(0, i - n + 1), i + 1);
    return [e.robot_minutes, window.reduce((a, w) => a + value(w), 0) / window.length];
  });
}

function plots(episodes) {
  plot("plot-rates", [
    { color: "#2f855a", unit: true, points: rolling(episodes, (e) => (e.success ? 1 : 0), 10) },
    { color: "#dd6b20", unit: true, points: rolling(episodes, (e) => e.intervention_rate, 10) },
  ], "robot min");
  plot("plot-returns", [{ color: "#2b6cb0", points: episodes.map((e) => [e.episode, e.ret]) }], "episode");
  plot("plot-updates", [{
    color: "#6b46c1",
    points: episodes.filter((e) => e.updates_per_robot_s !== null).map((e) => [e.robot_minutes, e.updates_per_robot_s]),
  }], "robot min");
}

plots([]);
connect();
