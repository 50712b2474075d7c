// The chat demo's page: one websocket to this participant's node (abcast.apps.chat).
// Server frames are JSON objects tagged by "type" (abcast/apps/chat/protocol.py).
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
};

const state = { node: null, history: 1000, groups: new Map(), active: null };
let ws;

function send(message) {
  ws.send(JSON.stringify(message));
}

function showError(text) {
  const box = $("#errors");
  box.prepend(el("div", { class: "error" }, text));
  while (box.children.length > 5) box.lastChild.remove();
}

function fillSelect(select, values) {
  select.replaceChildren(...values.map((v) => el("option", { value: v }, v)));
}

// ------------------------------------------------------------------ tabs

function panelOf(name) {
  let g = state.groups.get(name);
  if (g) return g;
  const panel = $("#panel-template").content.firstElementChild.cloneNode(true);
  panel.dataset.group = name;
  const tab = el("button", { type: "button", class: "tab", "data-group": name }, name);
  tab.addEventListener("click", () => activate(name));
  $(".send-form", panel).addEventListener("submit", (ev) => {
    ev.preventDefault();
    const input = $(".send-text", panel);
    if (input.value) send({ type: "send", group: name, text: input.value });
    input.value = "";
  });
  $(".leave", panel).addEventListener("click", () => send({ type: "leave", group: name }));
  $(".hold", panel).addEventListener("click", () => {
    const member = $(".hold-member", panel).value;
    const delay = parseInt($(".hold-delay", panel).value || "0", 10);
    if (member) send({ type: "hold", group: name, member, delay_ms: delay });
  });
  $(".release", panel).addEventListener("click", () => {
    const member = $(".hold-member", panel).value;
    if (member) send({ type: "release", group: name, member });
  });
  $("#tabs").append(tab);
  $("#panels").append(panel);
  $("#no-groups").hidden = true;
  g = { panel, tab, members: [], ruled: [], last: 0 };
  state.groups.set(name, g);
  activate(name);
  return g;
}

// The members whose packets can be held or released: the view's others, and whoever
// still has a rule (a held member the view dropped must stay releasable).
function fillHoldMembers(g) {
  const members = [...new Set([...g.members, ...g.ruled])].filter((id) => id !== state.node);
  const select = $(".hold-member", g.panel);
  if (members.join("\n") === [...select.options].map((o) => o.value).join("\n")) return;
  const chosen = select.value;
  fillSelect(select, members);
  if (members.includes(chosen)) select.value = chosen;
}

function activate(name) {
  state.active = name;
  for (const [n, g] of state.groups) {
    g.panel.classList.toggle("active", n === name);
    g.tab.classList.toggle("active", n === name);
  }
}

function removeGroup(name) {
  const g = state.groups.get(name);
  if (!g) return;
  g.panel.remove();
  g.tab.remove();
  state.groups.delete(name);
  if (state.active === name) {
    const next = state.groups.keys().next();
    if (!next.done) activate(next.value);
  }
  $("#no-groups").hidden = state.groups.size > 0;
}

// ------------------------------------------------------------------ server frames

const handlers = {
  hello(m) {
    state.node = m.node;
    state.history = m.history_lines;
    $("#node").textContent = m.node;
    $("#registry").textContent = m.registry;
    fillSelect($("#new-ordering"), m.orderings);
    $("#new-ordering").value = m.joinable.includes("causal") ? "causal" : m.joinable[0];
    fillSelect($("#new-multicast"), m.multicasts);
    fillSelect($("#new-partitions"), m.partitions);
    send({ type: "list" });
  },
  groups(m) {
    const list = $("#registry-groups");
    const mine = new Set(state.groups.keys());
    const rows = m.groups.map((g) => {
      const li = el("li", { "data-group": g.group },
        el("span", {}, el("b", {}, g.group), " ",
           el("span", { class: "meta" }, `${g.ordering}, ${g.members} member(s), view ${g.view_id}`)));
      if (!mine.has(g.group)) {
        const join = el("button", { type: "button", class: "join" }, "join");
        join.addEventListener("click", () => send({ type: "join", group: g.group }));
        li.append(join);
      }
      return li;
    });
    list.replaceChildren(...(rows.length ? rows : [el("li", { class: "empty" }, "none yet")]));
  },
  joined(m) {
    const g = panelOf(m.group);
    // the room's whole window follows (again, after a merge or a rejoin replaced it)
    $(".messages", g.panel).replaceChildren();
    g.last = 0;
    $(".title", g.panel).textContent =
      `${m.group} (${m.ordering}, ${m.multicast}, ${m.partitions})`;
    send({ type: "list" });
  },
  view(m) {
    const g = panelOf(m.group);
    g.members = m.members;
    $(".view-id", g.panel).textContent = m.view_id;
    $(".members", g.panel).replaceChildren(...m.members.map((id) => {
      const cls = ["member"];
      if (id === m.leader) cls.push("leader");
      if (id === state.node) cls.push("me");
      return el("span", { class: cls.join(" "), "data-member": id,
                          title: id === m.leader ? "leader / sequencer" : "" },
                id === m.leader ? `${id} ★` : id);
    }));
    fillHoldMembers(g);
  },
  deliver(m) {
    const g = panelOf(m.group);
    const list = $(".messages", g.panel);
    if (m.index <= g.last) return; // already shown
    g.last = m.index;
    list.append(el("li", { "data-origin": m.origin, "data-seq": m.seq },
      el("span", { class: "origin" }, m.origin), " ",
      el("span", { class: "seq" }, `#${m.seq}`), " ", el("span", { class: "text" }, m.text)));
    while (list.children.length > state.history) list.firstChild.remove();
    list.scrollTop = list.scrollHeight;
  },
  left(m) {
    removeGroup(m.group);
    if (m.how === "removed") showError(`the group ${m.group} went on without this node`);
    send({ type: "list" });
  },
  debug(m) {
    const g = state.groups.get(m.group);
    if (!g) return;
    const rules = Object.entries(m.rules).map(([member, delay]) => {
      const waiting = m.held[member] || 0;
      return delay === 0 ? `${member}: held (${waiting} packets waiting)`
                         : `${member}: delayed ${delay} ms (${waiting} in flight)`;
    });
    $(".rules", g.panel).textContent = rules.join("; ");
    g.ruled = Object.keys(m.rules);
    fillHoldMembers(g);
    const t = m.transport;
    $(".transport", g.panel).textContent = t.frames_out === undefined ? "" :
      `this node's transport (all groups): ${t.frames_out} frames sent, ` +
      `${t.frames_in} received, ${t.reconnects} reconnects`;
    $(".layers", g.panel).replaceChildren(...m.layers.map((layer) => {
      const held = layer.holdback.map((h) =>
        el("li", { "data-origin": h.origin, "data-seq": h.seq },
           `${h.origin} #${h.seq} waits for ${h.waiting_for}`));
      const parts = [el("h3", {}, layer.layer, " ",
                        el("span", { class: "phase" }, layer.phase || ""))];
      const lines = (obj) => Object.entries(obj).map(([k, v]) => `${k}: ${JSON.stringify(v)}`);
      if (Object.keys(layer.clock).length)
        parts.push(el("pre", { class: "clock" }, lines(layer.clock).join("\n")));
      parts.push(el("ul", { class: "holdback" },
        ...(held.length ? held : [el("li", { class: "none" }, "holdback empty")])));
      if (Object.keys(layer.counters).length)
        parts.push(el("pre", { class: "counters" }, "counters " +
          Object.entries(layer.counters).map(([k, v]) => `${k}=${v}`).join(" ")));
      return el("div", { class: "layer", "data-layer": layer.layer }, ...parts);
    }));
  },
  error(m) {
    showError(m.message);
  },
};

function connect() {
  ws = new WebSocket(`ws://${location.host}/ws`);
  ws.addEventListener("open", () => { $("#status").textContent = "connected"; });
  ws.addEventListener("close", (ev) => {
    $("#status").textContent = ev.code === 1009 ? "disconnected: a frame too big (over 64 KiB)"
      : ev.code === 1006 ? "disconnected (reload to reconnect)" : `disconnected (${ev.code})`;
  });
  ws.addEventListener("message", (ev) => {
    const m = JSON.parse(ev.data);
    const handle = handlers[m.type];
    if (handle) handle(m);
  });
}

$("#create-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  send({ type: "create", group: $("#new-name").value.trim(),
         ordering: $("#new-ordering").value, multicast: $("#new-multicast").value,
         partitions: $("#new-partitions").value });
});
$("#refresh").addEventListener("click", () => send({ type: "list" }));
setInterval(() => { if (ws && ws.readyState === WebSocket.OPEN) send({ type: "list" }); }, 3000);
connect();
