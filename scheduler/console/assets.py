"""The console's stylesheet and script, served by the scheduler itself (no CDN, no build step)."""

from __future__ import annotations

CONSOLE_CSS = """\
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1b1f24; background: #f6f7f9; }
header { display: flex; flex-wrap: wrap; gap: 1em; align-items: center; padding: .6em 1em;
  background: #1b1f24; color: #fff; }
header a { color: #9cd1ff; margin-right: .8em; }
header label { font-size: 12px; }
header input, header select { font-size: 12px; }
#live-state { margin-left: auto; font-size: 12px; opacity: .8; }
main { padding: 1em; }
#summary { display: flex; gap: 1.5em; margin-bottom: 1em; }
#tiles { display: flex; flex-wrap: wrap; gap: .8em; }
.tile { display: flex; flex-direction: column; gap: .3em; padding: .6em; background: #fff; border: 1px solid #d0d7de;
  border-radius: 6px; color: inherit; text-decoration: none; min-width: 10em; }
.tile.hidden { display: none; }
.tile-name { font-weight: 600; }
.tile-policy { font-size: 12px; color: #57606a; }
.numa-row { display: flex; gap: .3em; flex-wrap: wrap; }
.numa { font-size: 11px; padding: .3em .4em; border-radius: 4px; border: 1px solid #8c959f; }
.flag { font-size: 11px; background: #fff8c5; border-radius: 3px; padding: 0 .3em; }
.flag.bad { background: #ffebe9; color: #82071e; }
.fill-0 { background: #dafbe1; } .fill-1 { background: #fff8c5; } .fill-2 { background: #ffddb0; }
.fill-3 { background: #ffc1ba; } .fill-full { background: #ff8182; }
.swatch { padding: 0 .5em; margin: 0 .2em; border-radius: 3px; }
.numa-node { border: 1px solid #8c959f; border-radius: 6px; padding: .5em 1em; margin-bottom: 1em; }
/* A NUMA node's page section says how full it is with its left edge, not its whole background. */
.numa-node[class*="fill-"] { background: #fff; border-left-width: 10px; }
.numa-node.fill-0 { border-left-color: #4ac26b; } .numa-node.fill-1 { border-left-color: #d4a72c; }
.numa-node.fill-2 { border-left-color: #fb8f44; } .numa-node.fill-3 { border-left-color: #fa4549; }
.numa-node.fill-full { border-left-color: #a40e26; }
.cpus { display: flex; flex-wrap: wrap; gap: 3px; }
.core { display: inline-flex; border: 1px solid #8c959f; border-radius: 3px; }
.cpu { font: 10px monospace; width: 2.6em; text-align: center; padding: 1px 0; }
.cpu.free { background: #fff; } .cpu.pinned { background: #0969da; color: #fff; }
.cpu.reserved { background: #8c959f; color: #fff; } .cpu.held { background: #bf8700; color: #fff; }
table { border-collapse: collapse; margin: .5em 0; background: #fff; }
td, th { border: 1px solid #d0d7de; padding: 2px 6px; text-align: left; font-size: 12px; }
tr.device.allocated td, tr.device.held td { background: #ddf4ff; }
tr.device.unhealthy td { background: #ffebe9; }
tr.fits td { background: #dafbe1; }
td.nvlink { background: #ddf4ff; font-weight: 600; } td.self { color: #8c959f; }
#link-graph .edge { stroke: #0969da; } #link-graph circle { fill: #fff; stroke: #1b1f24; }
#link-graph text { font: 11px monospace; }
.reason { font-weight: 600; color: #82071e; }
.note, .legend { font-size: 12px; color: #57606a; }
pre { white-space: pre-wrap; max-width: 40em; font-size: 11px; }
.policy-open { color: #1a7f37; } .policy-close { color: #82071e; }
"""

CONSOLE_JS = """\
// Refresh the content from the scheduler's cache every few seconds (no full reload) and keep the
// tile filters applied. Everything else on the page is plain HTML.
(function () {
  "use strict";
  var content = document.getElementById("content");
  var state = document.getElementById("live-state");
  var period = parseInt(document.body.getAttribute("data-refresh-ms") || "0", 10);

  function value(id) {
    var element = document.getElementById(id);
    return element ? element.value.trim() : "";
  }

  function applyFilters() {
    var label = value("filter-label"), model = value("filter-model"), policy = value("filter-policy");
    var tiles = document.querySelectorAll(".tile");
    for (var i = 0; i < tiles.length; i++) {
      var tile = tiles[i];
      var labels = (tile.getAttribute("data-labels") || "").split(" ");
      var models = (tile.getAttribute("data-models") || "").split("|");
      var byKey = labels.some(function (l) { return l.split("=")[0] === label; });
      var show = (!label || labels.indexOf(label) >= 0 || byKey)
        && (!model || models.indexOf(model) >= 0)
        && (!policy || tile.getAttribute("data-policy") === policy);
      tile.classList.toggle("hidden", !show);
    }
  }

  function refresh() {
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    fetch(url.toString(), { cache: "no-store", credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        content.innerHTML = html;
        applyFilters();
        state.textContent = "updated " + new Date().toLocaleTimeString();
      })
      .catch(function (error) { state.textContent = "not updated: " + error.message; });
  }

  // Filters live in the address too (?label=k%3Dv&model=...&policy=...), so a view can be shared.
  var filters = { "filter-label": "label", "filter-model": "model", "filter-policy": "policy" };
  var query = new URLSearchParams(window.location.search);
  Object.keys(filters).forEach(function (id) {
    var element = document.getElementById(id);
    if (!element) { return; }
    if (query.get(filters[id])) { element.value = query.get(filters[id]); }
    function changed() {
      var url = new URL(window.location.href);
      if (element.value) { url.searchParams.set(filters[id], element.value); }
      else { url.searchParams.delete(filters[id]); }
      window.history.replaceState(null, "", url.toString());
      applyFilters();
    }
    element.addEventListener("input", changed);
    element.addEventListener("change", changed);
  });
  applyFilters();
  if (period > 0) { window.setInterval(refresh, period); }
})();
"""
