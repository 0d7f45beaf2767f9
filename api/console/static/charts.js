// Draws the console's charts with the vendored uPlot from the JSON series under /console/api/charts/.
(function () {
  "use strict";
  var palette = ["#1f6feb", "#b35900", "#1a7f37", "#8250df", "#cf222e", "#0a7a8a", "#6e7781"];

  function series(label, i, extra) {
    return Object.assign({ label: label, stroke: palette[i % palette.length], width: 2 }, extra || {});
  }

  function build(name, d) {
    if (name === "cache") {
      return {
        data: [d.t, d.input_tokens, d.cache_read_tokens, d.cache_share.map(function (v) { return v === null ? null : v * 100; })],
        series: [{}, series("input tokens", 0), series("cache read tokens", 1), series("cache share %", 2, { scale: "%" })],
        axes: [{}, { label: "tokens" }, { side: 1, scale: "%", label: "%", grid: { show: false } }],
        scales: { "%": { range: [0, 100] } },
      };
    }
    if (name === "llm-calls" || name === "llm-tokens" || name === "llm-cost") {
      // Three charts from one series document: calls, tokens and estimated cost per purpose.
      var field = { "llm-calls": "calls", "llm-tokens": "tokens", "llm-cost": "cost_usd" }[name];
      var unit = { "llm-calls": "calls", "llm-tokens": "tokens", "llm-cost": "US$" }[name];
      var names = Object.keys(d.purposes);
      return {
        data: [d.t].concat(names.map(function (p) { return d.purposes[p][field]; })),
        series: [{}].concat(names.map(function (p, i) { return series(p + " " + unit, i); })),
        axes: [{}, { label: unit }],
      };
    }
    if (name === "turns") {
      return {
        data: [d.t, d.turns, d.p50_ms, d.p95_ms],
        series: [{}, series("turns", 0), series("p50 ms", 1, { scale: "ms" }), series("p95 ms", 4, { scale: "ms" })],
        axes: [{}, { label: "turns" }, { side: 1, scale: "ms", label: "ms", grid: { show: false } }],
      };
    }
    if (name === "lag") {
      var kinds = Object.keys(d.kinds);
      var lagSeries = [{}], lagData = [d.t];
      kinds.forEach(function (k, i) {
        var label = k.replace("_", " ");
        lagSeries.push(series(label + " p50 s", i), series(label + " p95 s", i, { dash: [6, 4] }));
        lagData.push(d.kinds[k].p50_s, d.kinds[k].p95_s);
      });
      return { data: lagData, series: lagSeries, axes: [{}, { label: "seconds" }] };
    }
    var sources = Object.keys(d.sources);
    return {
      data: [d.t].concat(sources.map(function (s) { return d.sources[s]; })),
      series: [{}].concat(sources.map(function (s, i) { return series(s, i); })),
      axes: [{}, { label: "memories" }],
    };
  }

  // Charts drawn from the same document fetch it once.
  var loads = {};
  function load(source) {
    if (!loads[source]) {
      loads[source] = fetch("/console/api/charts/" + source, { credentials: "same-origin" })
        .then(function (r) { if (!r.ok) { throw new Error(r.status + " " + r.statusText); } return r.json(); });
    }
    return loads[source];
  }

  function draw(el) {
    var name = el.getAttribute("data-chart");
    var source = el.getAttribute("data-source") || name;
    load(source)
      .then(function (d) {
        var spec = build(name, d);
        var width = Math.max(280, Math.min(el.clientWidth || 800, 1000));
        new uPlot({ width: width, height: 260, series: spec.series, axes: spec.axes, scales: spec.scales || {} },
                  spec.data, el);
        if (d.unpriced_models && d.unpriced_models.length && name === "llm-cost") {
          var note = document.createElement("p");
          note.className = "chart-note";
          note.textContent = "No price set for: " + d.unpriced_models.join(", ") + " (counted as US$0).";
          el.appendChild(note);
        }
        el.setAttribute("data-drawn", "true");
      })
      .catch(function (e) { el.textContent = "Could not load this chart: " + e.message; });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-chart]").forEach(draw);
  });
})();
