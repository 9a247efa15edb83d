// total_tokens per turn as an inline SVG line chart, compaction events marked.
"use strict";

(function (global) {
  const NS = "http://www.w3.org/2000/svg";
  const W = 720;
  const H = 230;
  const PAD = { left: 58, right: 16, top: 18, bottom: 34 };

  function el(name, attrs, text) {
    const node = document.createElementNS(NS, name);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function short(n) {
    if (n >= 1e6) return (n / 1e6).toFixed(n >= 1e7 ? 0 : 1) + "M";
    if (n >= 1e3) return (n / 1e3).toFixed(n >= 1e4 ? 0 : 1) + "k";
    return String(Math.round(n));
  }

  function draw(container, turns, threshold) {
    container.textContent = "";
    const known = turns.filter((t) => typeof t.total_tokens === "number");
    if (!turns.length) {
      container.appendChild(document.createTextNode("No turns recorded yet."));
      return;
    }
    const top = Math.max(1, threshold || 0, ...known.map((t) => t.total_tokens)) * 1.08;
    const plotW = W - PAD.left - PAD.right;
    const plotH = H - PAD.top - PAD.bottom;
    const x = (i) => PAD.left + (turns.length === 1 ? plotW / 2 : (i * plotW) / (turns.length - 1));
    const y = (v) => PAD.top + plotH - (v / top) * plotH;

    const svg = el("svg", {
      viewBox: `0 0 ${W} ${H}`,
      class: "token-chart",
      role: "img",
      "data-turns": turns.length,
    });
    svg.appendChild(el("title", {}, "total_tokens per turn"));

    // Axes and grid.
    for (const frac of [0, 0.25, 0.5, 0.75, 1]) {
      const v = (top / 1.08) * frac;
      svg.appendChild(el("line", { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v), class: "grid" }));
      svg.appendChild(el("text", { x: PAD.left - 8, y: y(v) + 4, class: "axis-label", "text-anchor": "end" }, short(v)));
    }
    const step = Math.max(1, Math.ceil(turns.length / 12));
    turns.forEach((_, i) => {
      if (i % step === 0 || i === turns.length - 1) {
        svg.appendChild(el("text", { x: x(i), y: H - PAD.bottom + 16, class: "axis-label", "text-anchor": "middle" }, String(i + 1)));
      }
    });
    svg.appendChild(el("text", { x: PAD.left + plotW / 2, y: H - 4, class: "axis-title", "text-anchor": "middle" }, "turn"));

    if (threshold) {
      svg.appendChild(el("line", { x1: PAD.left, x2: W - PAD.right, y1: y(threshold), y2: y(threshold), class: "threshold" }));
      svg.appendChild(el("text", { x: PAD.left + 6, y: y(threshold) - 5, class: "threshold-label", "text-anchor": "start" }, "threshold " + short(threshold)));
    }

    // Compaction events: a vertical rule at the turn where the compaction took effect.
    let marks = 0;
    turns.forEach((t, i) => {
      if (t.compaction !== "toolcall" && t.compaction !== "summary") return;
      marks += 1;
      const kind = t.compaction + (t.manual ? " manual" : "");
      const g = el("g", { class: "compaction-mark mark-" + t.compaction + (t.manual ? " mark-manual" : "") });
      g.appendChild(el("title", {}, `turn ${i + 1}: ${kind} compaction`));
      g.appendChild(el("line", { x1: x(i), x2: x(i), y1: PAD.top, y2: PAD.top + plotH }));
      g.appendChild(el("text", { x: x(i), y: PAD.top - 5, "text-anchor": "middle" }, (t.compaction === "summary" ? "S" : "T") + (t.manual ? "*" : "")));
      svg.appendChild(g);
    });

    // The line, broken where a turn had no usage.
    let segment = [];
    const flush = () => {
      if (segment.length > 1) svg.appendChild(el("polyline", { points: segment.join(" "), class: "series" }));
      segment = [];
    };
    turns.forEach((t, i) => {
      if (typeof t.total_tokens !== "number") return flush();
      segment.push(`${x(i).toFixed(1)},${y(t.total_tokens).toFixed(1)}`);
    });
    flush();
    let points = 0;
    turns.forEach((t, i) => {
      if (typeof t.total_tokens !== "number") return;
      points += 1;
      const cold = t.cache_cold === true;
      const c = el("circle", { cx: x(i), cy: y(t.total_tokens), r: cold ? 4.5 : 3.2, class: "point" + (t.manual ? " point-manual" : "") + (cold ? " point-cold" : "") });
      c.appendChild(el("title", {}, `turn ${i + 1}: ${t.total_tokens} tokens` + (t.manual ? " (estimate after manual compaction)" : "") + (cold ? " (prompt cache cold: a compaction here rewrites nothing cached)" : "")));
      svg.appendChild(c);
    });
    svg.setAttribute("data-points", points);
    svg.setAttribute("data-marks", marks);
    svg.setAttribute("data-cold", turns.filter((t) => t.cache_cold === true).length);
    container.appendChild(svg);

    const legend = document.createElement("p");
    legend.className = "legend";
    for (const [cls, label] of [["series", "total_tokens"], ["mark-toolcall", "T: tool results reclaimed"], ["mark-summary", "S: summary"], ["mark-manual", "*: manual"], ["point-cold", "ring: cache cold"]]) {
      const span = document.createElement("span");
      span.className = "key " + cls;
      span.textContent = label;
      legend.appendChild(span);
    }
    container.appendChild(legend);
  }

  global.XunChart = { draw: draw };
})(window);
