// The session viewer: talks to the admin API with the key kept in sessionStorage.
"use strict";

(function () {
  const KEY = "xun-admin-key";
  const $ = (id) => document.getElementById(id);
  const state = { cursor: null, current: null, tenant: "" };
  const WIRES = {
    chat: "Chat Completions",
    responses: "Responses",
    messages: "Anthropic Messages",
  };

  function key() {
    return sessionStorage.getItem(KEY) || "";
  }

  function status(text, isError) {
    const node = $("status");
    node.textContent = text || "";
    node.classList.toggle("error", Boolean(isError));
  }

  async function api(path, options) {
    const opts = Object.assign({ headers: {} }, options || {});
    if (key()) opts.headers.Authorization = "Bearer " + key();
    if (opts.json !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(opts.json);
      delete opts.json;
    }
    const resp = await fetch(path, opts);
    const text = await resp.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (err) {
      data = null;
    }
    if (!resp.ok) {
      const message = data && data.error ? data.error.message : resp.status + " " + resp.statusText;
      const error = new Error(message);
      error.status = resp.status;
      throw error;
    }
    return data === null ? text : data;
  }

  function when(seconds, short) {
    if (typeof seconds !== "number") return "";
    const iso = new Date(seconds * 1000).toISOString();
    return short ? iso.slice(5, 16).replace("T", " ") : iso.replace("T", " ").slice(0, 19) + " UTC";
  }

  function cell(row, text, cls) {
    const td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "–" : String(text);
    if (cls) td.className = cls;
    row.appendChild(td);
  }

  // -- list ---------------------------------------------------------------------------
  async function loadList(append) {
    const params = new URLSearchParams({ limit: "50" });
    if (append && state.cursor) params.set("cursor", state.cursor);
    if (state.tenant) params.set("tenant", state.tenant);
    let page;
    try {
      page = await api("sessions?" + params.toString());
    } catch (err) {
      status(err.status === 401 ? "Enter the admin key to see sessions." : err.message, true);
      if (err.status === 401) $("key-input").focus();
      return;
    }
    status("");
    const body = $("session-list");
    if (!append) body.textContent = "";
    for (const s of page.data) {
      const tr = document.createElement("tr");
      tr.className = "session-row";
      tr.dataset.id = s.id;
      tr.tabIndex = 0;
      tr.title = "tenant " + s.tenant + " · id " + s.id;
      cell(tr, s.session, "name");
      cell(tr, s.wire || "chat", "wire wire-" + (s.wire || "chat"));
      cell(tr, s.messages, "num");
      cell(tr, s.total_tokens, "num");
      cell(tr, s.reclaimed, "num");
      cell(tr, s.counters.summary_rounds, "num");
      cell(tr, when(s.updated_at, true));
      tr.addEventListener("click", () => openSession(s.id));
      tr.addEventListener("keydown", (e) => { if (e.key === "Enter") openSession(s.id); });
      if (state.current === s.id) tr.classList.add("selected");
      body.appendChild(tr);
    }
    if (!body.children.length) {
      const tr = document.createElement("tr");
      cell(tr, "No sessions yet.", "empty");
      tr.firstChild.colSpan = 7;
      body.appendChild(tr);
    }
    state.cursor = page.next_cursor;
    $("more").hidden = !page.has_more;
    if (!append) loadSavings();
  }

  async function loadSavings() {
    const since = $("savings-window").value;
    try {
      const report = await api("savings" + (since ? "?since=" + encodeURIComponent(since) : ""));
      window.XunSavings.fleet(report);
      window.XunLookBack.fleet(report);
    } catch (err) {
      status(err.message, true);
    }
  }

  // -- one session --------------------------------------------------------------------
  function fact(list, name, value) {
    const pair = document.createElement("div");
    const dt = document.createElement("dt");
    dt.textContent = name;
    const dd = document.createElement("dd");
    dd.textContent = value === null || value === undefined ? "–" : String(value);
    pair.append(dt, dd);
    list.appendChild(pair);
  }

  function renderFacts(d) {
    const list = $("facts");
    list.textContent = "";
    fact(list, "session", d.session);
    fact(list, "wire", WIRES[d.wire] || d.wire);
    fact(list, "tenant", d.tenant);
    fact(list, "total_tokens", d.total_tokens);
    fact(list, "messages (client)", d.meta && d.meta.messages);
    fact(list, "messages (upstream)", d.upstream_messages);
    fact(list, "reclaimed", d.reclaimed.length);
    fact(list, "summary rounds", d.counters.summary_rounds);
    fact(list, "tool rounds", d.counters.toolcall_rounds);
    fact(list, "updated", when(d.updated_at));
    if (d.pending_summary) fact(list, "summary", "pending: made on the session's next request");
    if (d.last_compaction) {
      const lc = d.last_compaction;
      fact(list, "last compaction", lc.level + (lc.manual ? " (manual)" : "") +
        (lc.tokens_before ? ` · ${lc.tokens_before} → ${lc.estimated_tokens_after}` : ""));
    }
  }

  function renderSystem(d) {
    const system = (d.conversation || []).find((m) => m.kind === "system");
    const summary = d.summary || (system && system.summary);
    $("summary-block").hidden = !summary;
    const target = $("summary");
    target.textContent = "";
    if (summary) target.appendChild(window.XunMarkdown.render(summary));
    const trail = d.trail && d.trail.rendered;
    $("trail-block").hidden = !trail;
    $("trail").textContent = trail || "";
    const sections = system ? Object.entries(system.sections || {}) : [];
    $("sections-block").hidden = !sections.length;
    const box = $("sections");
    box.textContent = "";
    for (const [name, text] of sections) {
      const fig = document.createElement("figure");
      fig.className = "kept-section";
      const cap = document.createElement("figcaption");
      cap.textContent = name;
      const pre = document.createElement("pre");
      pre.textContent = text;
      fig.append(cap, pre);
      box.appendChild(fig);
    }
  }

  async function expand(sessionId, item, button) {
    button.disabled = true;
    try {
      const original = await api(
        "sessions/" + encodeURIComponent(sessionId) + "/compacted/" + encodeURIComponent(item.compacted_id)
      );
      const pre = document.createElement("pre");
      pre.className = "original";
      pre.textContent = original.text;
      button.replaceWith(pre);
    } catch (err) {
      button.disabled = false;
      status(err.message, true);
    }
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  // A collapsed block: a summary line, its text inside.
  function folded(cls, label, text) {
    const box = el("details", "item " + cls);
    box.appendChild(el("summary", "item-label", label));
    box.appendChild(el("pre", "item-body", text || "(no text)"));
    return box;
  }

  // One item of a model turn (Responses items, Anthropic blocks), as the admin API names it.
  function renderItem(item) {
    if (item.kind === "reasoning") {
      const label = (item.encrypted ? "encrypted reasoning · " + item.encrypted_chars + " chars" : "reasoning") +
        (item.text ? " · summary" : "");
      return folded("reasoning", label, item.text || "(encrypted only: no summary was sent)");
    }
    if (item.kind === "thinking") {
      if (item.redacted) return folded("thinking", "redacted thinking", "(encrypted by the provider)");
      return folded("thinking", "thinking" + (item.signed ? " · signed" : ""), item.text);
    }
    if (item.kind === "call") {
      const box = el("div", "item call" + (item.hidden ? " hidden-extract" : ""));
      const head = el("div", "item-head");
      head.appendChild(el("span", "item-label", (item.hidden ? "tool call · answered by the proxy" : "tool call") +
        (item.type && item.type !== "function" ? " · " + item.type : "")));
      head.appendChild(el("code", "call-name", item.name));
      if (item.call_id) head.appendChild(el("code", "call-id", item.call_id));
      box.appendChild(head);
      if (item.arguments) box.appendChild(el("pre", "item-body", item.arguments));
      return box;
    }
    if (item.kind === "result") {
      const box = el("div", "item result" + (item.is_error ? " error" : ""));
      const head = el("div", "item-head");
      head.appendChild(el("span", "item-label", "tool result · " + item.type + (item.is_error ? " · error" : "")));
      if (item.call_id) head.appendChild(el("code", "call-id", item.call_id));
      box.append(head, el("pre", "item-body", item.text));
      return box;
    }
    if (item.kind === "text") return el("pre", "msg-body item text", item.text);
    return folded("other", item.type || "item", item.text);
  }

  function roleLabel(m) {
    if (m.system) return "system · mid-conversation";
    let label = m.role === "tool" ? "tool result" : m.role;
    if (m.wire_type && m.role === "tool" && m.wire_type !== "tool_result") label += " · " + m.wire_type;
    if (m.compacted_id) label += " · reclaimed";
    if (m.hidden) label += " · answered by the proxy";
    return label;
  }

  function renderConversation(d) {
    const list = $("conversation");
    list.textContent = "";
    if (!d.conversation) {
      const li = document.createElement("li");
      li.className = "note";
      li.textContent = "The client's last messages were not kept for this session (too large, or no turn recorded yet).";
      list.appendChild(li);
      return;
    }
    for (const m of d.conversation) {
      if (m.kind === "system") continue; // shown above as summary and kept sections
      const li = document.createElement("li");
      li.className = "msg role-" + m.role + (m.compacted_id ? " placeholder" : "") +
        (m.hidden ? " hidden-extract" : "") + (m.system ? " mid-system" : "");
      const head = document.createElement("div");
      head.className = "msg-head";
      const role = document.createElement("span");
      role.className = "role";
      role.textContent = roleLabel(m);
      head.appendChild(role);
      if (m.tool_call_id) {
        const id = document.createElement("code");
        id.className = "call-id";
        id.textContent = m.tool_call_id;
        head.appendChild(id);
      }
      if (m.compacted_id) li.dataset.compactedId = m.compacted_id;
      li.appendChild(head);
      if (m.items) {
        // A model turn of the Responses or Messages API: its items one by one.
        const items = el("div", "items");
        for (const item of m.items) items.appendChild(renderItem(item));
        li.appendChild(items);
      } else {
        li.appendChild(el("pre", "msg-body", m.content));
      }
      if (m.compacted_id) {
        const button = document.createElement("button");
        button.type = "button";
        button.className = "expand quiet";
        button.textContent = "Show original";
        button.addEventListener("click", () => expand(d.id, m, button));
        li.appendChild(button);
      }
      list.appendChild(li);
    }
  }

  async function openSession(id) {
    state.current = id;
    history.replaceState(null, "", "#session=" + encodeURIComponent(id));
    for (const row of document.querySelectorAll(".session-row")) {
      row.classList.toggle("selected", row.dataset.id === id);
    }
    let d;
    try {
      d = await api("sessions/" + encodeURIComponent(id));
    } catch (err) {
      status(err.message, true);
      return;
    }
    status("");
    $("detail").hidden = false;
    $("detail").dataset.id = id;
    $("detail-title").textContent = "Session " + d.session;
    renderFacts(d);
    window.XunChart.draw($("chart"), d.turns || [], d.token_threshold);
    window.XunSavings.session(d);
    window.XunLookBack.session(d);
    renderSystem(d);
    renderConversation(d);
  }

  async function compact(mode) {
    const id = state.current;
    if (!id) return;
    const body = { mode: mode };
    const model = $("summary-model").value.trim();
    if (mode === "summary" && model) body.model = model;
    const buttons = [$("compact-toolcall"), $("compact-summary")];
    buttons.forEach((b) => { b.disabled = true; });
    status(mode === "summary" ? "Summarising…" : "Reclaiming tool results…");
    try {
      const result = await api("sessions/" + encodeURIComponent(id) + "/compact", { method: "POST", json: body });
      let text;
      if (mode === "toolcall") {
        text = result.changed
          ? `Reclaimed ${result.reclaimed_count} tool result(s), ${(result.reclaimed_fraction * 100).toFixed(0)}% of the text.`
          : "Nothing to reclaim.";
      } else if (result.status === "pending") {
        text = "Summary pending: the proxy has no upstream key of its own, so it is made on the session's next request, with that client's credentials.";
      } else {
        text = result.changed
          ? `Summarised ${result.summarized_count} message(s), kept ${result.kept_count}.`
          : "Summary not made: " + result.status + (result.upstream_error ? " (" + result.upstream_error + ")" : "");
      }
      await openSession(id);
      await loadList(false);
      status(text, !result.changed && result.status !== "pending");
    } catch (err) {
      status(err.message, true);
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
    }
  }

  async function download() {
    const id = state.current;
    if (!id) return;
    try {
      const text = await api("sessions/" + encodeURIComponent(id) + "/export");
      const blob = new Blob([typeof text === "string" ? text : JSON.stringify(text)], { type: "application/json" });
      const link = document.createElement("a");
      link.href = URL.createObjectURL(blob);
      link.download = "session-" + id + ".json";
      link.click();
      setTimeout(() => URL.revokeObjectURL(link.href), 1000);
    } catch (err) {
      status(err.message, true);
    }
  }

  async function remove() {
    const id = state.current;
    if (!id || !window.confirm("Forget this session's compaction state?")) return;
    try {
      await api("sessions/" + encodeURIComponent(id), { method: "DELETE" });
    } catch (err) {
      status(err.message, true);
      return;
    }
    state.current = null;
    $("detail").hidden = true;
    history.replaceState(null, "", "#");
    await loadList(false);
  }

  function init() {
    $("key-input").value = key();
    $("key-form").addEventListener("submit", (e) => {
      e.preventDefault();
      sessionStorage.setItem(KEY, $("key-input").value.trim());
      status("");
      loadList(false).then(() => { if (state.current) openSession(state.current); });
    });
    $("key-forget").addEventListener("click", () => {
      sessionStorage.removeItem(KEY);
      $("key-input").value = "";
      status("Key forgotten.");
    });
    $("filter-form").addEventListener("submit", (e) => {
      e.preventDefault();
      state.tenant = $("filter-tenant").value.trim();
      loadList(false);
    });
    $("refresh").addEventListener("click", () => loadList(false));
    $("savings-window").addEventListener("change", loadSavings);
    $("more").addEventListener("click", () => loadList(true));
    $("compact-toolcall").addEventListener("click", () => compact("toolcall"));
    $("compact-summary").addEventListener("click", () => compact("summary"));
    $("delete").addEventListener("click", remove);
    $("export").addEventListener("click", download);
    const match = location.hash.match(/session=([^&]+)/);
    if (match) state.current = decodeURIComponent(match[1]);
    loadList(false).then(() => { if (state.current) openSession(state.current); });
  }

  document.addEventListener("DOMContentLoaded", init);
})();
