// What the model asked back of what compaction took, in the viewer: per tool for a session
// (the detail's `lookback`: reclaimed, reads, re-runs, their rate and level 1's policy), and
// for the fleet (the savings report's `lookback`). Text nodes only: tool names are client input.
"use strict";

(function (global) {
  const POLICY = {
    reclaim: "reclaimed as usual",
    double: "twice as many kept",
    keep: "no longer reclaimed",
    off: "learning off",
  };

  function cells(tr, values, tag) {
    for (const v of values) {
      const td = document.createElement(tag || "td");
      td.textContent = v === null || v === undefined ? "–" : String(v);
      tr.appendChild(td);
    }
  }

  function rate(r) {
    return typeof r === "number" ? (r * 100).toFixed(0) + " %" : "–";
  }

  function searches(s) {
    return `searches: ${s.hits} with hits, ${s.empty} without`;
  }

  // A table of per-tool rows; `policy` adds the policy column.
  function render(block, data, policy) {
    const table = block.querySelector("table");
    table.textContent = "";
    const head = document.createElement("tr");
    const names = ["tool", "reclaimed", "reads", "re-runs", "asked back"];
    cells(head, policy ? [...names, "policy"] : names, "th");
    table.appendChild(head);
    for (const row of data.tools) {
      const tr = document.createElement("tr");
      tr.dataset.tool = row.tool;
      const values = [row.tool, row.reclaimed, row.reads, row.reruns, rate(row.rate)];
      cells(tr, policy ? [...values, POLICY[row.policy] || row.policy] : values);
      if (policy) tr.dataset.policy = row.policy;
      table.appendChild(tr);
    }
    block.querySelector(".lookback-searches").textContent = searches(data.searches);
  }

  function session(d) {
    const block = document.getElementById("lookback-block");
    const data = d.lookback;
    const empty = !data || (!data.tools.length && !data.searches.hits && !data.searches.empty);
    block.hidden = empty;
    if (!empty) render(block, data, true);
  }

  function fleet(report) {
    const block = document.getElementById("fleet-lookback");
    const data = report.lookback;
    const empty = !data || (!data.tools.length && !data.searches.hits && !data.searches.empty);
    block.hidden = empty;
    if (!empty) render(block, data, false);
  }

  global.XunLookBack = { session: session, fleet: fleet };
})(window);
