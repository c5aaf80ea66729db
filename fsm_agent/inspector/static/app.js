// The fsm_agent inspector's pages. All data is put into the page with textContent (never as
// markup): model output and tool results are untrusted. The diagram is this server's own SVG.
"use strict";

const TOKEN_KEY = "fsm-agent-inspector-token";
const TERMINAL = new Set(["done", "aborted"]);

function accessToken() {
  const found = location.hash.match(/token=([^&]+)/);
  if (found) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(found[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

const TOKEN = accessToken();

function notice(text) {
  const box = document.getElementById("notice");
  box.textContent = text || "";
  box.hidden = !text;
}

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: "Bearer " + TOKEN }, options.headers || {});
  const response = await fetch(path, Object.assign({}, options, { headers }));
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

function badge(state) {
  return el("span", { className: "badge " + state, text: state, "data-state": state });
}

function age(seconds) {
  if (seconds < 60) return Math.round(seconds) + " s";
  if (seconds < 3600) return Math.round(seconds / 60) + " min";
  if (seconds < 86400) return Math.round(seconds / 3600) + " h";
  return Math.round(seconds / 86400) + " d";
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

// -- the run list ------------------------------------------------------------------------------

let knownStates = false;

async function loadRuns() {
  const state = document.getElementById("state-filter").value;
  const search = document.getElementById("search").value;
  const query = new URLSearchParams({ state, q: search });
  const data = await (await api("/api/runs?" + query)).json();
  document.getElementById("store").textContent = data.store;
  if (!knownStates) {
    const select = document.getElementById("state-filter");
    for (const name of data.states) select.append(el("option", { value: name, text: name }));
    knownStates = true;
  }
  const body = document.querySelector("#runs tbody");
  const rows = data.runs.map((run) => {
    const link = el("a", { href: "/runs/" + encodeURIComponent(run.run_id), text: run.run_id });
    const usage = run.usage;
    return el(
      "tr",
      { "data-run-id": run.run_id },
      el("td", {}, link),
      el("td", {}, badge(run.state)),
      cell(run.stop_reason || "–"),
      cell(run.steps, "num"),
      cell(usage ? usage.requests : "?", "num"),
      cell(usage ? usage.input_tokens + " / " + usage.output_tokens : "?", "num"),
      cell(run.waiting || "", "num"),
      cell(age(run.age_s), "num"),
    );
  });
  body.replaceChildren(...rows);
  document.getElementById("empty").hidden = rows.length > 0;
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

function counterText(counters) {
  return Object.entries(counters)
    .filter(([, value]) => value)
    .map(([name, value]) => name + "=" + value)
    .join(" ");
}

function highlight(state) {
  for (const node of document.querySelectorAll("#diagram g.node")) {
    const title = node.querySelector("title");
    node.classList.toggle("current", Boolean(title) && title.textContent === state);
  }
}

async function loadDiagram(detail) {
  if (shownDiagram === detail.version) return;
  const response = await api("/api/runs/" + encodeURIComponent(RUN_ID) + "/diagram.svg");
  const parsed = new DOMParser().parseFromString(await response.text(), "image/svg+xml");
  const svg = document.importNode(parsed.documentElement, true);
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  document.getElementById("diagram").replaceChildren(svg);
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

function renderQuestions(detail) {
  const section = document.getElementById("questions-section");
  section.hidden = detail.questions.length === 0;
  document.getElementById("read-only").hidden = detail.can_answer || detail.questions.length === 0;
  const disabled = !detail.can_answer || detail.resuming;
  const boxes = detail.questions.map((q) => {
    const box = el(
      "div",
      { className: "question", "data-call-id": q.call_id },
      el("div", {}, el("strong", { text: q.tool }), " ", el("span", { className: "muted", text: q.call_id })),
      el("pre", { text: json(q.arguments) }),
    );
    if (q.question) box.append(el("p", { text: q.question }));
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
    box.append(el("div", {}, reply, " ", ...buttons));
    return box;
  });
  document.getElementById("questions").replaceChildren(...boxes);
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

function renderRun(detail) {
  document.title = "fsm_agent inspector: " + detail.run_id;
  document.getElementById("run-id").textContent = detail.run_id;
  document.getElementById("current-state").textContent = detail.state;
  document.body.dataset.state = detail.state;
  document.getElementById("stop-reason").textContent = detail.stop_reason || "–";
  document.getElementById("steps").textContent = detail.counters.steps;
  document.getElementById("model-calls").textContent = detail.model_calls;
  document.getElementById("tool-runs").textContent = detail.tool_executions;
  document.getElementById("usage").textContent = usageText(detail.usage);
  document.getElementById("version").textContent = detail.version;
  const ended = detail.output !== null || detail.error !== null;
  document.getElementById("ending").hidden = !ended;
  document.getElementById("output").textContent = detail.output || "";
  document.getElementById("error").textContent = detail.error || "";
  document.querySelector("#moves tbody").replaceChildren(
    ...detail.moves.map((m) =>
      el(
        "tr",
        { "data-move": String(m.n) },
        cell(m.n, "num"),
        cell(m.source),
        cell(m.outcome),
        cell(m.dest),
        cell(m.row, "num"),
        cell(m.stop || ""),
        cell(counterText(m.counters)),
      ),
    ),
  );
  document.querySelector("#tool-calls tbody").replaceChildren(
    ...detail.tool_calls.map((call) =>
      el(
        "tr",
        { "data-call-id": call.id },
        cell(call.id),
        cell(call.name),
        el("td", {}, el("pre", { text: json(call.arguments) })),
        el("td", { className: call.is_error ? "error" : "" }, el("pre", { text: call.result === null ? "(no result yet)" : call.result })),
      ),
    ),
  );
  renderQuestions(detail);
  renderMessages(detail);
  highlight(detail.state);
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
    const resting = TERMINAL.has(detail.state) && !detail.resuming;
    document.getElementById("live").textContent = resting ? "at rest" : "following live";
    if (detail.resume_error) {
      notice("The resume failed: " + detail.resume_error);
    } else if (answered && !detail.resuming && detail.state !== "suspended") {
      answered = false;
      notice("");
    }
    delay = resting ? 3000 : 500;
  } catch (error) {
    notice(error.message);
    delay = 3000;
  }
  setTimeout(followRun, delay);
}

if (document.body.dataset.page === "index") indexPage();
else followRun();
