// Savings in the viewer: the fleet's totals with an hourly chart (GET /admin/savings), and a
// session's net saving beside its token chart (the detail's `savings` and each turn's record).
"use strict";

(function (global) {
  const NS = "http://www.w3.org/2000/svg";
  const W = 440;
  const H = 150;
  const PAD = { left: 48, right: 8, top: 10, bottom: 22 };

  function svgEl(name, attrs, text) {
    const node = document.createElementNS(NS, name);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function short(n) {
    const a = Math.abs(n);
    const sign = n < 0 ? "-" : "";
    if (a >= 1e6) return sign + (a / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
    if (a >= 1e3) return sign + (a / 1e3).toFixed(a >= 1e4 ? 0 : 1) + "k";
    return sign + String(Math.round(a));
  }

  function money(v) {
    if (v === null || v === undefined) return "no price";
    return (v < 0 ? "-$" : "$") + Math.abs(v).toFixed(Math.abs(v) < 1 ? 4 : 2);
  }

  function percent(r) {
    return typeof r === "number" ? (r * 100).toFixed(1) + " %" : "–";
  }

  function figure(box, name, value, cls) {
    const div = document.createElement("div");
    div.className = "figure" + (cls ? " " + cls : "");
    const v = document.createElement("strong");
    v.textContent = value;
    const label = document.createElement("span");
    label.textContent = name;
    div.append(v, label);
    box.appendChild(div);
    return div;
  }

  function figures(box, t) {
    box.textContent = "";
    const net = figure(box, "tokens saved (net)", short(t.tokens_saved), t.tokens_saved < 0 ? "loss" : "gain");
    net.dataset.tokensSaved = String(t.tokens_saved);
    figure(box, "of the direct prompt", percent(t.saved_ratio));
    figure(box, "cost saved", money(t.cost_saved), (t.cost_saved || 0) < 0 ? "loss" : "");
    figure(box, "requests", String(t.requests));
    figure(box, "sent / direct", short(t.prompt_tokens_sent) + " / " + short(t.prompt_tokens_direct));
    figure(box, "summaries + extracts", money(t.summary_cost === null ? null : t.summary_cost + t.extract_cost));
  }

  // Bars of net tokens saved, one per point; negative bars go below the axis.
  function bars(container, points, label, title) {
    container.textContent = "";
    if (!points.length) {
      container.appendChild(document.createTextNode("Nothing recorded yet."));
      return;
    }
    const values = points.map((p) => p.value);
    const hi = Math.max(1, ...values);
    const lo = Math.min(0, ...values);
    const plotW = W - PAD.left - PAD.right;
    const plotH = H - PAD.top - PAD.bottom;
    const y = (v) => PAD.top + ((hi - v) / (hi - lo)) * plotH;
    const band = plotW / points.length;
    const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, class: "savings-chart", role: "img", "data-bars": points.length });
    svg.appendChild(svgEl("title", {}, title));
    for (const v of [hi, 0, lo]) {
      if (v === 0 && lo === 0 && v !== hi) continue;
      svg.appendChild(svgEl("line", { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v), class: v === 0 ? "axis" : "grid" }));
      svg.appendChild(svgEl("text", { x: PAD.left - 6, y: y(v) + 4, class: "axis-label", "text-anchor": "end" }, short(v)));
    }
    points.forEach((p, i) => {
      const top = y(Math.max(0, p.value));
      const rect = svgEl("rect", {
        x: PAD.left + i * band + band * 0.15,
        y: top,
        width: Math.max(1, band * 0.7),
        height: Math.max(0.5, Math.abs(y(0) - y(p.value))),
        class: p.value < 0 ? "bar loss" : "bar gain",
      });
      rect.appendChild(svgEl("title", {}, p.label + ": " + p.value + " tokens saved"));
      svg.appendChild(rect);
    });
    const step = Math.max(1, Math.ceil(points.length / 8));
    points.forEach((p, i) => {
      if (i % step === 0 || i === points.length - 1) {
        svg.appendChild(svgEl("text", { x: PAD.left + (i + 0.5) * band, y: H - 6, class: "axis-label", "text-anchor": "middle" }, p.tick));
      }
    });
    container.appendChild(svg);
    const note = document.createElement("p");
    note.className = "legend";
    note.textContent = label;
    container.appendChild(note);
  }

  // The fleet: totals, the hourly chart, and the projected savings of shadow turns apart.
  function fleet(report) {
    figures(document.getElementById("fleet-figures"), report.totals);
    const points = report.series.map((p) => ({
      value: p.tokens_saved,
      label: (p.time || "").slice(0, 16).replace("T", " ") + " UTC",
      tick: (p.time || "").slice(11, 16),
    }));
    bars(document.getElementById("fleet-chart"), points, "net tokens saved per hour (UTC)", "tokens saved per hour");
    const projected = document.getElementById("fleet-projected");
    const p = report.projected;
    projected.hidden = !p.requests;
    projected.textContent = p.requests
      ? `Shadow mode, projected (not counted above): ${short(p.tokens_saved)} tokens over ${p.requests} requests, ${money(p.cost_saved)}.`
      : "";
  }

  function turnSaving(t) {
    const s = t.savings;
    if (!s || t.shadow) return null;
    const first = (xs) => (Array.isArray(xs) && typeof xs[0] === "number" ? xs[0] : 0);
    return first(s.direct) - first(s.sent) - first(s.extract) - first(s.summary);
  }

  // One session: its totals beside the token chart, and its net saving turn by turn.
  function session(d) {
    const box = document.getElementById("session-savings");
    const totals = d.savings;
    if (!totals) {
      box.hidden = true;
      return;
    }
    box.hidden = false;
    figures(document.getElementById("session-figures"), totals);
    const points = [];
    (d.turns || []).forEach((t, i) => {
      const v = turnSaving(t);
      if (v !== null) points.push({ value: v, label: "turn " + (i + 1), tick: String(i + 1) });
    });
    bars(document.getElementById("session-chart"), points, "net tokens saved per turn", "tokens saved per turn");
  }

  global.XunSavings = { fleet: fleet, session: session };
})(window);
