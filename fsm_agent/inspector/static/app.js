// The fsm_agent inspector's pages. All data is put into the page with textContent (never as
// markup): model output and tool results are untrusted. The diagrams are this server's own SVG.
"use strict";

const TOKEN_KEY = "fsm-agent-inspector-token";
const RESTING = new Set(["done", "aborted", "suspended"]);

// -- the access token --------------------------------------------------------------------------
// Taken from the address's #token= fragment (then removed from the address, so a copied link
// carries none), kept in this browser's storage for this server; asked for when the server
// refuses the one held, so a shared link opens once the token is given.

function takeToken() {
  const found = location.hash.match(/token=([^&]+)/);
  if (found) {
    localStorage.setItem(TOKEN_KEY, decodeURIComponent(found[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
}

takeToken();

let tokenAsked = null; // the promise of a token the form will give, while it is shown

function askToken() {
  if (!tokenAsked) {
    const form = document.getElementById("token-form");
    const input = document.getElementById("token-input");
    form.hidden = false;
    input.focus();
    tokenAsked = new Promise((resolve) => {
      form.addEventListener(
        "submit",
        (event) => {
          event.preventDefault();
          localStorage.setItem(TOKEN_KEY, input.value.trim());
          form.hidden = true;
          tokenAsked = null;
          resolve();
        },
        { once: true },
      );
    });
  }
  return tokenAsked;
}

function notice(text) {
  const box = document.getElementById("notice");
  box.textContent = text || "";
  box.hidden = !text;
}

async function api(path, options = {}) {
  for (;;) {
    const token = localStorage.getItem(TOKEN_KEY);
    const headers = Object.assign({}, options.headers || {});
    if (token) headers.Authorization = "Bearer " + token;
    const response = await fetch(path, Object.assign({}, options, { headers }));
    if (response.status === 401) {
      notice(token ? "The access token was refused: give the current one." : "");
      await askToken();
      continue;
    }
    if (!response.ok) {
      let message = response.status + " " + response.statusText;
      try {
        message = (await response.json()).error || message;
      } catch (ignored) {
        // not JSON: keep the status line
      }
      throw new Error(message);
    }
    return response;
  }
}

// -- small helpers -----------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "text") node.textContent = value;
    else if (name === "className") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function cell(text, className) {
  return el("td", className ? { text: String(text), className } : { text: String(text) });
}

// A cell of free text (a task, a model's name, an answer): cut to a few lines, or to one for a
// "line" cell, so that no text widens the list past the window; the whole text shows on hover.
function clippedCell(text, className, line = false) {
  const shown = String(text);
  return el("td", { className }, el("div", { className: line ? "clip-line" : "clip", text: shown, title: shown }));
}

// A run's state; a run that ended done without a clean answer (a limit or a budget ended it:
// max_steps, unverified, ...) reads "gave up", in another colour.
function badge(state, title, gaveUp) {
  const shown = state || "unknown";
  const attrs = { className: "badge " + shown, text: shown, "data-state": shown };
  if (gaveUp) {
    attrs.className += " gave-up";
    attrs.text = "gave up";
  }
  if (title) attrs.title = title;
  return el("span", attrs);
}

function pad(number, width = 2) {
  return String(number).padStart(width, "0");
}

// A time of day, with the date when it is not today (the browser's time zone).
function when(seconds, withMillis = false) {
  if (seconds === null || seconds === undefined) return "–";
  const date = new Date(seconds * 1000);
  let text = pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds());
  if (withMillis) text += "." + pad(date.getMilliseconds(), 3);
  if (date.toDateString() !== new Date().toDateString()) {
    text = date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) + " " + text;
  }
  return text;
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 0.01) return (seconds * 1000).toFixed(1) + " ms";
  if (seconds < 1) return Math.round(seconds * 1000) + " ms";
  if (seconds < 60) return seconds.toFixed(seconds < 10 ? 1 : 0) + " s";
  if (seconds < 3600) return Math.floor(seconds / 60) + " min " + Math.round(seconds % 60) + " s";
  if (seconds < 86400) return Math.floor(seconds / 3600) + " h " + Math.round((seconds % 3600) / 60) + " min";
  return Math.floor(seconds / 86400) + " d " + Math.round((seconds % 86400) / 3600) + " h";
}

function usageText(usage) {
  if (!usage) return "?";
  let text = usage.requests + " requests, " + usage.input_tokens + " in / " + usage.output_tokens + " out";
  if (usage.cost_usd) text += ", $" + usage.cost_usd.toFixed(4);
  return text;
}

function json(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

function stateLinks(states, current) {
  const box = document.getElementById("state-links");
  const links = states.map((name) =>
    el("a", { href: "/states/" + encodeURIComponent(name), text: name, className: name === current ? "here" : "" }),
  );
  box.replaceChildren(box.firstElementChild, ...links.flatMap((link, i) => (i ? [" · ", link] : [" ", link])));
}

// -- zoom, pan and fit for any SVG with a viewBox ----------------------------------------------

class Viewer {
  constructor(box) {
    this.box = box;
    this.svg = null;
    this.full = null; // the picture's own viewBox
    this.view = null; // the part shown, or null to fit
    this.dragged = false;
    box.addEventListener("wheel", (event) => this.wheel(event), { passive: false });
    box.addEventListener("pointerdown", (event) => this.press(event));
    document.getElementById("zoom-in").addEventListener("click", () => this.zoom(1.4));
    document.getElementById("zoom-out").addEventListener("click", () => this.zoom(1 / 1.4));
    document.getElementById("fit").addEventListener("click", () => this.fit());
  }

  show(svg) {
    const box = svg.viewBox.baseVal;
    const width = parseFloat(svg.getAttribute("width")) || 800;
    const height = parseFloat(svg.getAttribute("height")) || 600;
    this.full = box && box.width ? { x: box.x, y: box.y, w: box.width, h: box.height } : { x: 0, y: 0, w: width, h: height };
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
    this.box.replaceChildren(svg);
    this.svg = svg;
    this.apply();
  }

  apply() {
    const v = this.view || this.full;
    this.svg.setAttribute("viewBox", [v.x, v.y, v.w, v.h].join(" "));
    this.box.dataset.zoomed = this.view ? "yes" : "no";
  }

  fit() {
    if (!this.svg) return;
    this.view = null;
    this.apply();
  }

  // Zoom by factor around a point given in the picture's coordinates (default: the centre).
  zoom(factor, x, y) {
    if (!this.svg) return;
    const v = this.view || this.full;
    const cx = x === undefined ? v.x + v.w / 2 : x;
    const cy = y === undefined ? v.y + v.h / 2 : y;
    const w = Math.min(this.full.w * 4, Math.max(this.full.w / 40, v.w / factor));
    const h = (v.h * w) / v.w;
    this.view = { x: cx - ((cx - v.x) * w) / v.w, y: cy - ((cy - v.y) * h) / v.h, w, h };
    this.apply();
  }

  // The picture's units per screen pixel (the larger of the two: "meet" fits the larger).
  scale() {
    const v = this.view || this.full;
    return Math.max(v.w / this.box.clientWidth, v.h / this.box.clientHeight);
  }

  wheel(event) {
    if (!this.svg) return;
    event.preventDefault();
    const point = this.svg.createSVGPoint();
    point.x = event.clientX;
    point.y = event.clientY;
    const at = point.matrixTransform(this.svg.getScreenCTM().inverse());
    this.zoom(event.deltaY < 0 ? 1.2 : 1 / 1.2, at.x, at.y);
  }

  press(event) {
    if (!this.svg || event.button !== 0) return;
    const start = { x: event.clientX, y: event.clientY };
    const from = Object.assign({}, this.view || this.full);
    const scale = this.scale();
    this.dragged = false;
    const move = (e) => {
      const dx = e.clientX - start.x;
      const dy = e.clientY - start.y;
      if (Math.abs(dx) + Math.abs(dy) > 4) this.dragged = true;
      if (!this.dragged) return;
      this.view = { x: from.x - dx * scale, y: from.y - dy * scale, w: from.w, h: from.h };
      this.apply();
    };
    const release = () => {
      window.removeEventListener("pointermove", move);
      window.removeEventListener("pointerup", release);
    };
    window.addEventListener("pointermove", move);
    window.addEventListener("pointerup", release);
  }
}

// A click on a state (not the end of a drag) opens its rows: through the link the picture
// carries, else by the node's title.
function linkStates(viewer) {
  viewer.box.addEventListener("click", (event) => {
    if (viewer.dragged) {
      event.preventDefault();
      return;
    }
    if (event.target.closest("a")) return;
    const name = stateOf(event.target.closest("g.node"));
    if (name) location.href = "/states/" + encodeURIComponent(name);
  });
}

// The state a diagram's node stands for: its id (state-NAME, or to-NAME for a destination in a
// state's detail), else its title.
function stateOf(node) {
  if (!node) return null;
  const found = node.id.match(/^(?:state|to)-(.+)$/);
  if (found) return found[1];
  const title = node.querySelector("title");
  return title ? title.textContent : null;
}

async function loadSvg(path) {
  const response = await api(path);
  const parsed = new DOMParser().parseFromString(await response.text(), "image/svg+xml");
  return document.importNode(parsed.documentElement, true);
}

// -- the run list ------------------------------------------------------------------------------

let knownStates = false;

function taskCell(run) {
  const link = el("a", { href: "/runs/" + encodeURIComponent(run.run_id), className: "task-link clip" });
  link.textContent = run.task || (run.problem ? "(cannot be read)" : "(no task)");
  link.title = link.textContent;
  const box = el("td", { className: "task-cell" }, link, el("div", { className: "run-id muted", text: run.run_id }));
  if (run.problem) box.append(el("div", { className: "problem", text: run.problem }));
  const origin = originText(run);
  if (origin) box.prepend(el("div", { className: "origin muted", text: origin }));
  if (run.depth) box.style.paddingLeft = 1.5 * run.depth + "em";
  return box;
}

// Where a listed run comes from: the call of its parent run it ran for, or the move of the run
// it was forked from (the list shows it under that run when that run is listed too).
function originText(run) {
  if (run.parent) return "↳ child of " + run.parent.run_id + " (call " + run.parent.call_id + ")";
  if (run.forked_from) return "↳ fork of " + run.forked_from.run_id + " after move " + run.forked_from.move;
  return "";
}

async function loadRuns() {
  const state = document.getElementById("state-filter").value;
  const search = document.getElementById("search").value;
  const query = new URLSearchParams({ state, q: search });
  const data = await (await api("/api/runs?" + query)).json();
  document.getElementById("store").textContent = data.store;
  document.getElementById("access").textContent = data.public_read ? "· reading needs no token" : "";
  if (!knownStates) {
    const select = document.getElementById("state-filter");
    for (const name of [...data.states, "unknown"]) select.append(el("option", { value: name, text: name }));
    knownStates = true;
  }
  const body = document.querySelector("#runs tbody");
  const rows = data.runs.map((run) => {
    const usage = run.usage;
    return el(
      "tr",
      {
        "data-run-id": run.run_id,
        "data-depth": run.depth || 0,
        className: [run.problem ? "unreadable" : "", run.depth ? "under" : ""].join(" ").trim(),
      },
      taskCell(run),
      el("td", {}, badge(run.state, run.problem || (run.gave_up ? "done (" + run.stop_reason + "): no clean answer" : ""), run.gave_up)),
      cell(run.stop_reason || "–"),
      cell(run.steps, "num"),
      clippedCell(run.model || "–", "model", true),
      cell(when(run.started_at), "started"),
      cell(duration(run.duration_s), "num duration"),
      cell(usage ? usage.input_tokens + " / " + usage.output_tokens : "?", "num"),
      clippedCell(run.state === "suspended" ? "waiting for a human (" + run.waiting + ")" : run.ending || "–", "answer"),
    );
  });
  body.replaceChildren(...rows);
  document.getElementById("empty").hidden = rows.length > 0;
  document.getElementById("count").textContent = rows.length + (rows.length === 1 ? " run" : " runs");
}

function indexPage() {
  const refresh = () => loadRuns().then(() => notice(""), (error) => notice(error.message));
  document.getElementById("state-filter").addEventListener("change", refresh);
  document.getElementById("search").addEventListener("input", refresh);
  document.getElementById("filters").addEventListener("submit", (event) => event.preventDefault());
  refresh();
  setInterval(refresh, 2000);
}

// -- one run -----------------------------------------------------------------------------------

const RUN_ID = decodeURIComponent(location.pathname.replace(/^\/runs\//, ""));
let shownVersion = null;
let shownDiagram = null;
let lastDetail = null;
let answered = false; // an answer was sent and its run has not moved on yet
let runViewer = null;

function counterText(counters) {
  return Object.entries(counters)
    .filter(([, value]) => value)
    .map(([name, value]) => name + "=" + value)
    .join(" ");
}

function highlight(state) {
  for (const node of document.querySelectorAll("#diagram g.node")) {
    node.classList.toggle("current", stateOf(node) === state);
  }
}

async function loadDiagram(detail) {
  if (shownDiagram === detail.version) return;
  runViewer.show(await loadSvg("/api/runs/" + encodeURIComponent(RUN_ID) + "/diagram.svg"));
  shownDiagram = detail.version;
  highlight(detail.state);
}

async function answer(callId, decision, text) {
  const body = { decisions: { [callId]: { decision, text } } };
  try {
    await api("/api/runs/" + encodeURIComponent(RUN_ID) + "/decisions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    answered = true;
    notice("Resuming the run…");
  } catch (error) {
    notice(error.message);
  }
}

function questionBox(q, disabled) {
  const call = el(
    "div",
    { className: "call" },
    el("div", {}, el("strong", { text: q.tool }), " ", el("span", { className: "muted", text: q.call_id })),
    el("pre", { text: json(q.arguments) }),
  );
  if (q.question) call.append(el("p", { className: "asked", text: q.question }));
  const reply = el("input", { type: "text", placeholder: q.kind === "question" ? "your answer" : "reason (for a denial)" });
  const buttons = q.kind === "question"
    ? [el("button", { type: "button", className: "answer", text: "Answer" })]
    : [
        el("button", { type: "button", className: "approve", text: "Approve" }),
        el("button", { type: "button", className: "deny", text: "Deny" }),
      ];
  for (const button of buttons) {
    button.disabled = disabled;
    const decision = button.className === "approve" ? "allow" : button.className;
    button.addEventListener("click", () => {
      for (const other of buttons) other.disabled = true;
      answer(q.call_id, decision, reply.value || null);
    });
  }
  reply.disabled = disabled;
  call.append(el("div", { className: "decide" }, reply, " ", ...buttons));
  const said = el(
    "div",
    { className: "model-said" },
    el("div", { className: "label", text: "The model wrote, with this call" }),
    el("pre", { text: q.asked_by || "(no text: the call alone)" }),
  );
  return el("div", { className: "question", "data-call-id": q.call_id }, said, call);
}

function renderQuestions(detail) {
  const section = document.getElementById("questions-section");
  section.hidden = detail.questions.length === 0;
  document.getElementById("read-only").hidden = detail.can_answer || detail.questions.length === 0;
  const disabled = !detail.can_answer || detail.resuming;
  document.getElementById("questions").replaceChildren(...detail.questions.map((q) => questionBox(q, disabled)));
}

function renderMessages(detail) {
  const items = detail.messages.map((message) => {
    const box = el("div", { className: "message role-" + message.role }, el("div", { className: "role", text: message.role }));
    for (const part of message.parts) {
      let body;
      if (part.type === "tool_call") body = part.name + "(" + json(part.arguments) + ")  [" + part.id + "]";
      else if (part.type === "tool_result") body = part.content;
      else body = part.text;
      box.append(
        el(
          "div",
          { className: "part part-" + part.type },
          el("span", { className: "kind", text: part.type + (part.is_error ? " (error)" : "") }),
          el("pre", { text: body }),
        ),
      );
    }
    return box;
  });
  document.getElementById("messages").replaceChildren(...items);
}

const ENDINGS = {
  done: "Finished",
  aborted: "Stopped",
  suspended: "Waiting for a human",
};

function renderSummary(detail) {
  document.getElementById("task").textContent = detail.task || "(no task)";
  document.getElementById("model").textContent = detail.model || "model unknown";
  document.getElementById("started").textContent = when(detail.started_at);
  const moving = !RESTING.has(detail.state) && detail.started_at !== null && !detail.resume_error;
  document.getElementById("duration-label").textContent = moving ? "running for" : "ran";
  document.getElementById("duration").textContent = moving
    ? duration(Math.max(0, Date.now() / 1000 - detail.started_at))
    : duration(detail.duration_s);
  const box = document.getElementById("ending");
  box.className = "ending " + detail.state + (detail.gave_up ? " gave-up" : "");
  document.getElementById("state-badge").replaceChildren(badge(detail.state, "", detail.gave_up));
  const title = detail.gave_up ? "Gave up: no clean answer" : ENDINGS[detail.state];
  document.getElementById("ending-title").textContent = title || "Running: now in " + detail.state;
  document.getElementById("stop-reason").textContent = detail.stop_reason ? "(" + detail.stop_reason + ")" : "";
  document.getElementById("output").textContent = detail.output || "";
  document.getElementById("output").hidden = detail.output === null;
  document.getElementById("error").textContent = detail.error || "";
  document.getElementById("error").hidden = detail.error === null;
}

function runLink(runId, text) {
  return el("a", { href: "/runs/" + encodeURIComponent(runId), className: "run-link", text: text || runId });
}

// Where the run comes from: the parent run whose call started it (an agent used as a tool),
// or the run and move it was forked from.
function renderLineage(detail) {
  const box = document.getElementById("lineage");
  const parts = [];
  if (detail.parent) {
    parts.push("Run by the call " + detail.parent.call_id + " of ", runLink(detail.parent.run_id, "its parent run"));
  }
  if (detail.forked_from) {
    if (parts.length) parts.push(" · ");
    parts.push("Forked from ", runLink(detail.forked_from.run_id), " after move " + detail.forked_from.move);
  }
  box.replaceChildren(...parts);
  box.hidden = parts.length === 0;
  const forks = document.getElementById("forks");
  const items = (detail.forks || []).map((fork) =>
    el("li", { "data-run-id": fork.run_id }, runLink(fork.run_id), " after move " + fork.move + " ", badge(fork.state, "", fork.gave_up)),
  );
  forks.replaceChildren(...(items.length ? [el("span", { text: "Its forks:" }), el("ul", {}, ...items)] : []));
  forks.hidden = items.length === 0;
}

async function forkFrom(move) {
  try {
    const response = await api("/api/runs/" + encodeURIComponent(RUN_ID) + "/fork", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ at: move }),
    });
    const fork = await response.json();
    notice("");
    const line = el("p", { className: "forked", "data-fork": fork.run_id }, "Forked after move " + move + ": ", runLink(fork.run_id));
    document.getElementById("lineage").after(line);
  } catch (error) {
    notice(error.message);
  }
}

function forkCell(detail, move) {
  if (!detail.can_fork || (RESTING.has(move.dest) && move.dest !== "suspended")) return cell("");
  const button = el("button", { type: "button", className: "fork", text: "Fork from here", title: "A new run from the state after this move" });
  button.addEventListener("click", () => {
    button.disabled = true;
    forkFrom(move.n).finally(() => { button.disabled = false; });
  });
  return el("td", {}, button);
}

function toolCell(call) {
  if (!call.child_run_id) return cell(call.name);
  return el("td", {}, call.name + " ", runLink(call.child_run_id, "child run →"));
}

function renderRun(detail) {
  document.title = "fsm_agent inspector: " + (detail.task || detail.run_id);
  document.getElementById("run-id").textContent = detail.run_id;
  document.getElementById("current-state").textContent = detail.state;
  document.body.dataset.state = detail.state;
  document.getElementById("steps").textContent = detail.counters.steps;
  document.getElementById("model-calls").textContent = detail.model_calls;
  document.getElementById("tool-runs").textContent = detail.tool_executions;
  document.getElementById("usage").textContent = usageText(detail.usage);
  document.getElementById("version").textContent = detail.version;
  renderSummary(detail);
  renderLineage(detail);
  document.querySelector("#moves tbody").replaceChildren(
    ...detail.moves.map((m) =>
      el(
        "tr",
        { "data-move": String(m.n) },
        cell(m.n, "num"),
        cell(when(m.at, true), "time"),
        cell(m.took_s === null ? "–" : duration(m.took_s), "num took"),
        cell(m.source),
        cell(m.outcome),
        cell(m.dest),
        cell(m.row, "num"),
        cell(m.stop || ""),
        cell(counterText(m.counters)),
        forkCell(detail, m),
      ),
    ),
  );
  document.querySelector("#tool-calls tbody").replaceChildren(
    ...detail.tool_calls.map((call) =>
      el(
        "tr",
        { "data-call-id": call.id },
        cell(call.id),
        toolCell(call),
        el("td", {}, el("pre", { text: json(call.arguments) })),
        el("td", { className: call.is_error ? "error" : "" }, el("pre", { text: call.result === null ? "(no result yet)" : call.result })),
      ),
    ),
  );
  renderQuestions(detail);
  renderMessages(detail);
  highlight(detail.state);
}

function liveText(detail) {
  if (detail.resuming) return "resuming: following live";
  if (detail.state === "suspended") return "waiting for a human";
  if (RESTING.has(detail.state)) return "at rest";
  if (detail.resume_error) return "stopped: the resume failed";
  return "following live";
}

async function followRun() {
  let delay = 500;
  try {
    const detail = await (await api("/api/runs/" + encodeURIComponent(RUN_ID))).json();
    const changed = detail.version !== shownVersion || detail.resuming !== (lastDetail && lastDetail.resuming);
    if (changed) {
      renderRun(detail);
      shownVersion = detail.version;
      lastDetail = detail;
    }
    await loadDiagram(detail);
    const resting = RESTING.has(detail.state) && !detail.resuming;
    document.getElementById("live").textContent = liveText(detail);
    if (detail.resume_error) {
      notice("The resume failed: " + detail.resume_error);
    } else if (answered && !detail.resuming && detail.state !== "suspended") {
      answered = false;
      notice("");
    } else if (!answered) {
      notice("");
    }
    delay = resting ? 3000 : 500;
  } catch (error) {
    notice(error.message);
    delay = 3000;
  }
  setTimeout(followRun, delay);
}

function runPage(states) {
  runViewer = new Viewer(document.getElementById("diagram"));
  linkStates(runViewer);
  stateLinks(states, null);
  followRun();
}

// -- one state's rows --------------------------------------------------------------------------

async function statePage(states) {
  const name = decodeURIComponent(location.pathname.replace(/^\/states\//, ""));
  document.title = "fsm_agent inspector: state " + name;
  document.getElementById("state-name").textContent = name;
  stateLinks(states, name);
  const viewer = new Viewer(document.getElementById("diagram"));
  linkStates(viewer);
  try {
    viewer.show(await loadSvg("/api/states/" + encodeURIComponent(name) + ".svg"));
  } catch (error) {
    notice(error.message);
  }
}

async function start() {
  const page = document.body.dataset.page;
  if (page === "index") return indexPage();
  let states = [];
  try {
    const known = await (await api("/api/states")).json();
    states = known.states.filter((name) => !known.terminal.includes(name));
  } catch (error) {
    notice(error.message);
  }
  if (page === "state") return statePage(states);
  return runPage(states);
}

start();
