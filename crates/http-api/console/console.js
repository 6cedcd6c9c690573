// baton console: plain JavaScript, no build step. It talks to the /v1 API of the node that
// served it, like any client: the token the user gives (kept in this tab only), the event
// stream for live updates (resumed from the last revision after a break), and the cluster
// status for the banners. Every text from the server goes into the page as text, never as
// HTML.
"use strict";

const TOKEN_KEY = "baton.token";
const REFRESH_DEBOUNCE_MS = 200;
const CLUSTER_POLL_MS = 1000;
const EVENTS_KEPT = 500;

const state = {
  view: "cluster",
  arg: null,
  cluster: null,
  clusterError: null,
  replication: null,
  lastRevision: 0,
  stream: "connecting", // connecting | live | lost
  streamNote: "",
  events: [],
  eventFilter: "",
  lockPrefix: "",
  needsToken: false,
  refreshTimer: null,
  viewSeq: 0,
  history: null, // the lock page's event stream
  alerts: [], // messages about the user's actions, each until its time
};

// ---------------------------------------------------------------- helpers

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function headers(extra) {
  const out = Object.assign({ Accept: "application/json" }, extra || {});
  const t = token();
  if (t) out.Authorization = "Bearer " + t;
  return out;
}

class ApiError extends Error {
  constructor(status, body) {
    const code = body && body.error ? body.error.code : "http_" + status;
    const message = body && body.error ? body.error.message : "HTTP " + status;
    super(code + ": " + message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

async function api(path, options) {
  const opts = Object.assign({ method: "GET", cache: "no-store" }, options || {});
  opts.headers = headers(opts.headers);
  let response;
  try {
    response = await fetch(path, opts);
  } catch (e) {
    throw new ApiError(0, { error: { code: "unreachable", message: "this node does not answer" } });
  }
  let body = null;
  const text = await response.text();
  try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
  if (response.status === 401) {
    state.needsToken = true;
    renderBanners();
  }
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

function fmtMs(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return Math.round(ms) + " ms";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + " min " + Math.floor(s % 60) + " s";
  const hrs = Math.floor(m / 60);
  return hrs + " h " + (m % 60) + " min";
}

// A duration that keeps counting in the page: `base` ms when fetched, plus time since.
function ticking(age, direction) {
  if (!age) return h("span", { class: "muted", title: "this node cannot tell" }, "unknown");
  return h("span", {
    class: "tick",
    dataset: { base: String(age.ms), at: String(performance.now()), dir: direction || "up", least: age.at_least ? "1" : "" },
  }, (age.at_least ? "≥ " : "") + fmtMs(age.ms));
}

function updateTicks() {
  const now = performance.now();
  for (const el of document.querySelectorAll(".tick")) {
    const base = Number(el.dataset.base);
    const spent = now - Number(el.dataset.at);
    const value = el.dataset.dir === "down" ? Math.max(0, base - spent) : base + spent;
    el.textContent = (el.dataset.least ? "≥ " : "") + fmtMs(value);
    if (el.dataset.dir === "down") el.classList.toggle("error", value <= 0);
  }
}

function enc(name) {
  return encodeURIComponent(name);
}

function table(head, rows, empty) {
  if (!rows.length) return h("div", { class: "empty" }, empty);
  return h("table", {},
    h("thead", {}, h("tr", {}, head.map((c) => h("th", { class: c.startsWith("#") ? "num" : null }, c.replace(/^#/, ""))))),
    h("tbody", {}, rows));
}

function holderLine(x) {
  return h("div", { class: "holder" },
    h("span", { class: "mono" }, x.owner || "(no owner)"),
    " · lease ", h("a", { href: "/ui/leases", "data-nav": true, class: "mono" }, String(x.lease_id)),
    " · ", h("span", { class: "tag" }, x.mode + (x.permits ? " ×" + x.permits : "")),
    " · fence ", h("span", { class: "fence mono" }, String(x.fence)),
    x.count > 1 ? " · re-entered ×" + x.count : null,
    " · held ", ticking(x.held_for));
}

// ---------------------------------------------------------------- banners, header

function renderBanners() {
  const box = document.getElementById("banners");
  box.replaceChildren();
  const add = (text, cls) => box.append(h("div", { class: "banner " + (cls || ""), role: "alert" }, text));
  const now = performance.now();
  state.alerts = state.alerts.filter((a) => a.until > now);
  for (const a of state.alerts) add(a.text, "warn");
  if (state.needsToken) add("This server requires a token: press Token and paste one (it stays in this tab only).", "warn");
  if (state.clusterError) add("This node does not answer: " + state.clusterError + ". Retrying.");
  else if (state.cluster && state.cluster.leader === null) {
    add("No leader: the cluster is electing one or has lost its quorum. Writes and linearizable reads wait; what you see may be stale.");
  }
  if (state.stream === "lost") add("Live updates lost" + (state.streamNote ? " (" + state.streamNote + ")" : "") + ": reconnecting, resuming after revision " + state.lastRevision + ".");
  if (state.stream === "denied") add("No live updates: this token may not watch every event (it needs read on watches for the empty prefix). Views refresh every 5 s.", "warn");
  const live = document.getElementById("live");
  live.className = "pill " + (state.stream === "live" ? "live" : state.stream === "connecting" ? "" : "down");
  // Until an event or a progress report arrives, a live page is at the node's revision.
  const shown = Math.max(state.lastRevision, state.cluster ? state.cluster.revision : 0);
  live.textContent = state.stream === "live" ? "live · rev " + shown : state.stream === "denied" ? "not live" : state.stream;
  const who = document.getElementById("whoami");
  const c = state.cluster;
  who.textContent = c ? "node " + c.node_id + " (" + c.state + ")" + (c.leader ? " · leader " + c.leader : " · no leader") : "";
}

async function pollCluster() {
  try {
    state.cluster = await api("/v1/cluster");
    state.clusterError = null;
    state.needsToken = false;
  } catch (e) {
    if (e.status !== 401) state.clusterError = e.message;
  }
  renderBanners();
  if (state.view === "cluster") renderView();
  setTimeout(pollCluster, CLUSTER_POLL_MS);
}

// ---------------------------------------------------------------- the event stream

// Every open stream's controller, to close them all when the page goes away: a browser
// allows few connections per server (six over HTTP/1.1), and a page kept in the
// back-forward cache would otherwise keep its streams open.
const controllers = new Set();
window.addEventListener("pagehide", () => {
  for (const c of controllers) c.abort();
});

// Follows /v1/watch over fetch (EventSource cannot send a token), from the revision after
// the last one seen, so a reconnect neither loses nor repeats an event. `after`: the
// revision to start after (null: from now on).
async function follow(path, after, onEvent, onStatus, signal) {
  let resume = after; // the revision to resume after
  let backoff = 500;
  while (!signal.aborted) {
    const url = path + (resume !== null ? (path.includes("?") ? "&" : "?") + "start_revision=" + (resume + 1) : "");
    try {
      const response = await fetch(url, { headers: headers({ Accept: "text/event-stream" }), cache: "no-store", signal });
      if (response.status === 410) {
        const body = await response.json().catch(() => null);
        const oldest = body && body.error ? body.error.oldest_revision : null;
        onStatus("lost", "events before revision " + oldest + " were compacted away");
        resume = oldest ? oldest - 1 : null;
        continue;
      }
      if (response.status === 401) { state.needsToken = true; renderBanners(); throw new Error("a token is required"); }
      if (response.status === 403) {
        // This token may not watch what was asked: no live updates, no point in retrying.
        onStatus("denied", "this token may not watch these events");
        return;
      }
      if (!response.ok) throw new Error("HTTP " + response.status);
      onStatus("live", "");
      backoff = 500;
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let type = "message"; let id = null; const data = [];
          for (const line of frame.split("\n")) {
            if (line.startsWith("event:")) type = line.slice(6).trim();
            else if (line.startsWith("id:")) id = Number(line.slice(3).trim());
            else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
          }
          if (!data.length) continue;
          let payload = null;
          try { payload = JSON.parse(data.join("\n")); } catch (e) { continue; }
          if (type === "progress") { resume = Math.max(resume || 0, payload.revision); onEvent(null, payload.revision); continue; }
          if (type === "error") {
            const d = payload.error || {};
            if (d.code === "compacted" && d.oldest_revision) resume = d.oldest_revision - 1;
            throw new Error(d.code || "stream error");
          }
          if (id !== null) resume = id;
          onEvent(payload, payload.revision);
        }
      }
      throw new Error("the stream ended");
    } catch (e) {
      if (signal.aborted) return;
      onStatus("lost", e.message);
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 5000);
    }
  }
}

function startMainStream() {
  const controller = new AbortController();
  controllers.add(controller);
  follow("/v1/watch", null, (event, revision) => {
    state.lastRevision = Math.max(state.lastRevision, revision || 0);
    if (event) {
      state.events.push({ event, seen: new Date() });
      if (state.events.length > EVENTS_KEPT) state.events.splice(0, state.events.length - EVENTS_KEPT);
      scheduleRefresh();
    }
    renderBanners();
  }, (status, note) => {
    state.stream = status;
    state.streamNote = note;
    renderBanners();
  }, controller.signal);
}

function scheduleRefresh() {
  if (state.refreshTimer) return;
  state.refreshTimer = setTimeout(() => {
    state.refreshTimer = null;
    renderView();
  }, REFRESH_DEBOUNCE_MS);
}

// ---------------------------------------------------------------- admin actions

function confirmAction(title, body, label) {
  const dialog = document.getElementById("confirm-dialog");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-body").replaceChildren(body);
  document.getElementById("confirm-ok").textContent = label;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}

async function adminCall(path, method) {
  try {
    const result = await api(path, { method, headers: { "Idempotency-Key": "console-" + crypto.randomUUID() } });
    renderView();
    return result;
  } catch (e) {
    if (e.status === 401 || e.status === 403) {
      alertBox("Refused: " + e.message + ". Admin actions need an admin token (press Token).");
    } else {
      alertBox("Failed: " + e.message);
    }
    return null;
  }
}

// A message about an action the user took: shown for ALERT_MS with the other banners.
const ALERT_MS = 10000;
function alertBox(text) {
  state.alerts.push({ text, until: performance.now() + ALERT_MS });
  renderBanners();
}

async function forceRelease(lock) {
  const fences = lock.holders.map((x) => x.fence);
  const body = h("div", {},
    h("p", {}, "Every holder of lock ", h("b", { class: "mono" }, lock.name), " loses it now. Their fences stop being current; a store that checks fences refuses them from then on."),
    h("ul", {}, lock.holders.map((x) => h("li", {}, "fence ", h("span", { class: "fence mono" }, String(x.fence)), " held by ", h("span", { class: "mono" }, x.owner), " (lease " + x.lease_id + ")"))),
    h("p", { class: "muted" }, "The next waiter in the queue (if any) is granted with a new fence."));
  if (await confirmAction("Force-release " + lock.name + "?", body, "Free fence " + fences.join(", "))) {
    await adminCall("/v1/locks/" + enc(lock.name), "DELETE");
  }
}

async function revokeLease(lease) {
  const claims = lease.claims || [];
  const rows = [];
  for (const c of claims) {
    let fence = null;
    try {
      const path = c.kind === "election" ? null : "/v1/" + (c.kind === "lock" ? "locks" : "semaphores") + "/" + enc(c.name);
      if (path) {
        const s = await api(path);
        const held = (s.holders || []).find((x) => x.lease_id === lease.lease_id && x.owner === c.owner);
        fence = held ? held.fence : null;
      } else {
        const s = await api("/v1/elections/" + enc(c.name));
        fence = s.leader && s.leader.lease_id === lease.lease_id ? s.leader.fence : null;
      }
    } catch (e) { fence = null; }
    rows.push(h("li", {}, c.kind + " ", h("b", { class: "mono" }, c.name), fence !== null ? [" — fence ", h("span", { class: "fence mono" }, String(fence)), " freed"] : " — queued (its place is cancelled)"));
  }
  const body = h("div", {},
    h("p", {}, "Lease ", h("b", { class: "mono" }, String(lease.lease_id)), " ends now, with everything it holds, in one revision."),
    rows.length ? h("ul", {}, rows) : h("p", { class: "muted" }, "It holds no lock, semaphore or election."),
    (lease.keys || []).length ? h("p", {}, "Ephemeral keys deleted: ", (lease.keys || []).join(", ")) : null);
  if (await confirmAction("Revoke lease " + lease.lease_id + "?", body, "Revoke")) {
    await adminCall("/v1/leases/" + lease.lease_id, "DELETE");
  }
}

// ---------------------------------------------------------------- views

const views = {
  async cluster() {
    const c = state.cluster || await api("/v1/cluster");
    let rep = null; let repError = null;
    try { rep = await api("/v1/cluster/replication"); } catch (e) { repError = e.message; }
    const byId = new Map((rep ? rep.members : []).map((m) => [m.id, m]));
    const rows = c.members.map((m) => {
      const r = byId.get(m.id);
      const lag = r ? r.lag_entries : null;
      const health = !rep ? h("span", { class: "tag warn" }, "unknown")
        : lag === null ? h("span", { class: "tag bad" }, "not replicating")
        : lag > 1000 ? h("span", { class: "tag warn" }, "behind")
        : h("span", { class: "tag leader" }, "healthy");
      return h("tr", {},
        h("td", { class: "num" }, String(m.id), m.id === c.node_id ? " ◀ this page" : ""),
        h("td", {}, h("span", { class: "tag " + (m.role === "leader" ? "leader" : "") }, m.role)),
        h("td", { class: "mono" }, m.api), h("td", { class: "mono" }, m.peer),
        h("td", { class: "num" }, r && r.matched_index !== null ? String(r.matched_index) : "–"),
        h("td", { class: "num" }, lag === null ? "–" : String(lag)),
        h("td", {}, health));
    });
    return [
      h("h1", {}, "Cluster"),
      h("p", { class: "muted" }, "This page talks to node " + c.node_id + " (" + c.state + "). Replication is read from the leader."),
      h("div", { class: "cards" },
        card("leader", c.leader === null ? "none" : "node " + c.leader),
        card("term", c.term), card("revision", c.revision),
        card("commit index", c.commit_index), card("applied index", c.applied_index),
        card("apply lag", Math.max(0, c.commit_index - c.applied_index)),
        card("leader changes seen", c.leader_changes),
        card("security", (c.security.auth ? "auth" : "no auth") + " · " + (c.security.tls ? "TLS" : "plain"))),
      table(["#id", "role", "api", "peer", "#matched index", "#lag (entries)", "health"], rows, "no members"),
      repError ? h("p", { class: "error" }, "Replication unknown: " + repError) : null,
      (c.warnings || []).length ? h("p", { class: "error" }, c.warnings.join("; ")) : null,
    ];
  },

  async locks() {
    if (state.arg) return lockPage(state.arg);
    const q = "/v1/locks?limit=500" + (state.lockPrefix ? "&prefix=" + enc(state.lockPrefix) : "");
    const list = await api(q);
    const rows = list.locks.map((l) => h("tr", {},
      h("td", {}, h("a", { href: "/ui/locks/" + enc(l.name), "data-nav": true, class: "mono" }, l.name)),
      h("td", {}, l.holders.length ? l.holders.map(holderLine) : h("span", { class: "muted" }, "free")),
      h("td", { class: "num" }, String(l.queue_len)),
      h("td", {}, l.lock_delay ? h("span", { class: "tag warn" }, "lock-delay") : ""),
      h("td", {}, l.holders.length ? h("button", { class: "small danger", onclick: () => forceRelease(l) }, "Force-release") : null)));
    return [
      h("h1", {}, "Locks"),
      prefixFilter(),
      table(["name", "holders (owner · lease · mode · fence · held for)", "#waiting", "", ""], rows,
        state.lockPrefix ? "No lock in use under this prefix." : "No lock is held or waited for."),
      h("p", { class: "muted" }, "At revision " + list.revision + ". Hold times are by the clock of the node this page talks to, from when it applied each grant."),
    ];
  },

  async hot() {
    const s = await api("/v1/stats/locks?limit=100");
    const rows = s.locks.map((x) => h("tr", {},
      h("td", {}, x.kind === "lock" ? h("a", { href: "/ui/locks/" + enc(x.name), "data-nav": true, class: "mono" }, x.name) : h("span", { class: "mono" }, x.name)),
      h("td", {}, x.kind),
      h("td", { class: "num" }, x.grants_per_second.toFixed(2)),
      h("td", { class: "num" }, fmtMs(x.wait_p50_ms)), h("td", { class: "num" }, fmtMs(x.wait_p99_ms)),
      h("td", { class: "num" }, fmtMs(x.hold_p50_ms)), h("td", { class: "num" }, fmtMs(x.hold_p99_ms)),
      h("td", { class: "num" }, String(x.timeouts)), h("td", { class: "num" }, String(x.expiries)),
      h("td", { class: "num" }, fmtMs(x.wait_total_ms))));
    return [
      h("h1", {}, "Hot locks"),
      h("p", { class: "muted" }, "The last " + fmtMs(s.window_ms) + " on node " + s.node_id + ", most contended first (time spent waiting)."),
      table(["name", "kind", "#grants/s", "#wait p50", "#wait p99", "#hold p50", "#hold p99", "#timeouts", "#expiries", "#waited in total"], rows, "Nothing was granted, released or timed out in the window."),
    ];
  },

  async leases() {
    const list = await api("/v1/leases?detail=true&limit=200");
    const rows = list.leases.map((l) => h("tr", {},
      h("td", { class: "num mono" }, String(l.lease_id)),
      h("td", { class: "num" }, fmtMs(l.ttl_ms)),
      h("td", { class: "num" }, l.remaining_ms === undefined || l.remaining_ms === null ? h("span", { class: "muted" }, "unknown") : ticking({ ms: l.remaining_ms, at_least: false }, "down")),
      h("td", {}, (l.claims || []).length ? (l.claims || []).map((c) => h("div", {}, h("span", { class: "tag" }, c.kind), " ", h("span", { class: "mono" }, c.name), c.owner ? " (" + c.owner + ")" : "")) : h("span", { class: "muted" }, "nothing")),
      h("td", {}, (l.keys || []).map((k) => h("div", { class: "mono" }, k))),
      h("td", {}, h("button", { class: "small danger", onclick: () => revokeLease(l) }, "Revoke"))));
    return [
      h("h1", {}, "Leases"),
      h("p", { class: "muted" }, "Remaining TTL on the leader's clock, counting down from the last keepalive it saw; refreshed on every event."),
      table(["#lease", "#ttl", "#remaining", "holds and waits", "ephemeral keys", ""], rows, "No live lease."),
    ];
  },

  async semaphores() {
    const list = await api("/v1/semaphores?limit=500");
    const rows = list.semaphores.map((s) => h("tr", {},
      h("td", { class: "mono" }, s.name),
      h("td", { class: "num" }, s.limit === null ? "–" : String(s.limit)),
      h("td", {}, s.holders.map(holderLine)),
      h("td", { class: "num" }, String(s.queue_len))));
    return [h("h1", {}, "Semaphores"), table(["name", "#permits", "holders", "#waiting"], rows, "No semaphore in use.")];
  },

  async elections() {
    const list = await api("/v1/elections?limit=500");
    const rows = list.elections.map((e) => h("tr", {},
      h("td", { class: "mono" }, e.name),
      h("td", {}, e.leader ? ["lease ", h("span", { class: "mono" }, String(e.leader.lease_id))] : h("span", { class: "muted" }, "none")),
      h("td", { class: "mono" }, e.leader ? e.leader.value : ""),
      h("td", { class: "num fence mono" }, e.leader ? String(e.leader.fence) : ""),
      h("td", { class: "num" }, e.leader ? ticking(e.leading_for) : ""),
      h("td", { class: "num" }, String(e.candidates))));
    return [
      h("h1", {}, "Elections"),
      h("p", { class: "muted" }, "What an observer of each election sees now: its leader, the value it proclaimed and its fence."),
      table(["name", "leader", "value", "#fence", "#leading for", "#candidates"], rows, "No election has a leader or a candidate."),
    ];
  },

  async events() {
    const filter = state.eventFilter.toLowerCase();
    const shown = state.events.filter((x) => !filter || JSON.stringify(x.event).toLowerCase().includes(filter)).slice(-200).reverse();
    return [
      h("h1", {}, "Events"),
      h("div", { class: "toolbar" },
        h("input", { id: "event-filter", placeholder: "filter: a type, name, key or owner", value: state.eventFilter, oninput: (e) => { state.eventFilter = e.target.value; scheduleRefresh(); } }),
        h("span", { class: "muted" }, state.events.length + " events received since this page opened")),
      h("div", { class: "events" }, table(["#revision", "seen", "type", "what"], shown.map(eventRow), "No event yet: they appear here as they happen.")),
    ];
  },
};

function card(label, value) {
  return h("div", { class: "card" }, h("div", { class: "label" }, label), h("div", { class: "value" }, String(value)));
}

function prefixFilter() {
  return h("div", { class: "toolbar" },
    h("input", { id: "lock-prefix", placeholder: "name prefix", value: state.lockPrefix, onchange: (e) => { state.lockPrefix = e.target.value; renderView(); } }),
    h("button", { onclick: () => { state.lockPrefix = document.getElementById("lock-prefix").value; renderView(); } }, "Filter"));
}

function eventRow(x) {
  const e = x.event;
  const change = e.type.replace(/^(lock|semaphore|election|lease|key)_/, "");
  const what = [];
  if (e.name) what.push(h("span", { class: "mono" }, e.name));
  if (e.key) what.push(h("span", { class: "mono" }, e.key));
  if (e.owner) what.push(" owner " + e.owner);
  if (e.lease_id !== undefined && e.lease_id !== null) what.push(" lease " + e.lease_id);
  if (e.fence !== undefined && e.fence !== null) what.push(" fence ", h("span", { class: "fence mono" }, String(e.fence)));
  if (e.reason) what.push(" (" + e.reason + ")");
  if (e.position !== undefined) what.push(" position " + e.position);
  return h("tr", {},
    h("td", { class: "num mono" }, String(e.revision)),
    h("td", { class: "muted" }, x.seen ? x.seen.toLocaleTimeString() : "before this page"),
    h("td", { class: "ev-" + change }, e.type),
    h("td", {}, what));
}

async function lockPage(name) {
  const s = await api("/v1/locks/" + enc(name));
  const holders = s.holders.map((x) => h("tr", {},
    h("td", { class: "mono" }, x.owner), h("td", { class: "num mono" }, String(x.lease_id)), h("td", {}, x.mode),
    h("td", { class: "num fence mono" }, String(x.fence)), h("td", { class: "num" }, String(x.count)), h("td", { class: "num" }, ticking(x.held_for))));
  const queue = s.queue.map((w) => h("tr", {},
    h("td", { class: "num" }, String(w.position)), h("td", { class: "mono" }, w.owner), h("td", { class: "num mono" }, String(w.lease_id)),
    h("td", {}, w.mode), h("td", { class: "num" }, ticking(w.waiting_for)),
    h("td", { class: "num" }, w.waiting_for ? ticking({ ms: Math.max(0, w.wait_ms - w.waiting_for.ms), at_least: false }, "down") : fmtMs(w.wait_ms) + " after it joined")));
  ensureHistory(name);
  const history = state.history.events.slice(-100).reverse();
  return [
    h("p", {}, h("a", { href: "/ui/locks", "data-nav": true }, "← all locks")),
    h("h1", {}, "Lock ", h("span", { class: "mono" }, name)),
    s.lock_delay ? h("p", { class: "tag warn" }, "lock-delay of " + fmtMs(s.lock_delay.delay_ms) + " since revision " + s.lock_delay.since_revision) : null,
    h("div", { class: "toolbar" }, s.holders.length ? h("button", { class: "danger", onclick: () => forceRelease(s) }, "Force-release") : null),
    h("h2", {}, "Holders"),
    table(["owner", "#lease", "mode", "#fence", "#re-entry count", "#held for"], holders, "Free."),
    h("h2", {}, "Queue, in grant order"),
    table(["#position", "owner", "#lease", "mode", "#waiting for", "#deadline in"], queue, "Nobody waits."),
    h("h2", {}, "Recent history"),
    h("p", { class: "muted" }, "From the server's event window (grants, releases, expiries, timeouts), then live."),
    table(["#revision", "seen", "type", "what"], history.map(eventRow), "No event of this lock in the window."),
  ];
}

function ensureHistory(name) {
  if (state.history && state.history.name === name) return;
  if (state.history) {
    state.history.controller.abort();
    controllers.delete(state.history.controller);
  }
  const controller = new AbortController();
  controllers.add(controller);
  const history = { name, controller, events: [] };
  state.history = history;
  // From revision 1: the server answers 410 with the oldest revision it holds, and the
  // stream resumes there (the whole window).
  follow("/v1/watch?lock=" + enc(name), 0, (event) => {
    if (event && history === state.history) {
      history.events.push({ event, seen: null });
      scheduleRefresh();
    }
  }, () => {}, controller.signal);
}

async function renderView() {
  const seq = ++state.viewSeq;
  const main = document.getElementById("view");
  const build = views[state.view] || views.cluster;
  let content;
  try {
    content = await build();
  } catch (e) {
    content = [h("h1", {}, state.view), h("p", { class: "error" }, e.message)];
  }
  if (seq !== state.viewSeq) return; // a newer render started meanwhile
  const focused = document.activeElement && document.activeElement.id;
  main.replaceChildren(...[content].flat().filter(Boolean));
  if (focused) {
    const el = document.getElementById(focused);
    if (el && el.tagName === "INPUT") { el.focus(); el.setSelectionRange(el.value.length, el.value.length); }
  }
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === state.view);
}

// ---------------------------------------------------------------- routing

function route() {
  const parts = location.pathname.split("/").filter(Boolean);
  if (parts[0] === "ui" && parts[1] && views[parts[1]]) {
    state.view = parts[1];
    state.arg = parts.length > 2 ? decodeURIComponent(parts.slice(2).join("/")) : null;
  } else {
    state.view = "cluster";
    state.arg = null;
  }
  if (!(state.view === "locks" && state.arg) && state.history) {
    state.history.controller.abort();
    controllers.delete(state.history.controller);
    state.history = null;
  }
  renderView();
}

document.addEventListener("click", (e) => {
  const a = e.target.closest("a[data-nav]");
  if (!a || e.ctrlKey || e.metaKey || e.shiftKey) return;
  e.preventDefault();
  history.pushState(null, "", a.getAttribute("href"));
  route();
});
window.addEventListener("popstate", route);

// ---------------------------------------------------------------- token

function setupToken() {
  const dialog = document.getElementById("token-dialog");
  document.getElementById("token-button").addEventListener("click", () => {
    document.getElementById("token-input").value = "";
    dialog.showModal();
  });
  dialog.addEventListener("close", () => {
    if (dialog.returnValue === "save") {
      sessionStorage.setItem(TOKEN_KEY, document.getElementById("token-input").value.trim());
    } else if (dialog.returnValue === "clear") {
      sessionStorage.removeItem(TOKEN_KEY);
    } else {
      return;
    }
    state.needsToken = false;
    location.reload();
  });
}

setupToken();
route();
pollCluster();
startMainStream();
setInterval(updateTicks, 1000);
// A periodic refresh of the open view keeps countdowns honest when nothing happens.
setInterval(() => { if (state.view !== "events") scheduleRefresh(); }, 5000);
