/* rackwatt replay report: draws the inlined data with uPlot. No network access. */
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("rackwatt-data").textContent);
  const app = document.getElementById("app");
  let charts = 0;

  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  const fmt = (v, digits) => (v == null ? "–" : Number(v).toFixed(digits == null ? 1 : digits));
  const pct = (v) => (v == null ? "–" : (100 * v).toFixed(1) + " %");
  const when = (t) => (t == null ? "–" : new Date(t * 1000).toISOString().replace("T", " ").slice(0, 16) + "Z");
  const width = () => Math.max(600, Math.min(1280, document.documentElement.clientWidth - 48));

  function section(title, note) {
    const s = document.createElement("section");
    s.innerHTML = "<h2>" + esc(title) + "</h2>" + (note ? "<p class=\"note\">" + esc(note) + "</p>" : "");
    app.appendChild(s);
    return s;
  }

  function plot(host, opts, data) {
    const div = document.createElement("div");
    div.className = "chart";
    host.appendChild(div);
    const o = Object.assign({ width: width(), height: 260 }, opts);
    o.axes = (o.axes || [{}, {}]).map((a, i) => (i === 0 ? a : Object.assign({ size: 70 }, a)));
    o.series.forEach((sr, i) => { if (i > 0 && sr.width === 0) { sr.points = { show: false }; } });
    const u = new uPlot(o, data, div);
    charts += 1;
    return u;
  }

  function eventMarkers(u) {
    const ctx = u.ctx;
    const top = u.bbox.top, height = u.bbox.height;
    ctx.save();
    for (const e of D.events) {
      if (e.ts == null) continue;
      const x = u.valToPos(e.ts, "x", true);
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
      ctx.strokeStyle = e.state === "onset" ? (e.cause === "workload" ? "#1565c0" : "#c62828") : "#2e7d32";
      ctx.lineWidth = 2 * devicePixelRatio;
      ctx.setLineDash([6 * devicePixelRatio, 4 * devicePixelRatio]);
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + height); ctx.stroke();
    }
    ctx.restore();
  }

  // Input the engine did not use: duplicated/out-of-order rows, impossible timestamps, restarts after gaps.
  function skipped(inp) {
    if (!inp) return "";
    const parts = [];
    if (inp.out_of_order_rows) parts.push(inp.out_of_order_rows + " duplicated or out-of-order rows skipped");
    if (inp.bad_ts_rows) parts.push(inp.bad_ts_rows + " rows with an impossible ts skipped");
    if (inp.gaps) parts.push(inp.gaps + " gap(s) without rows");
    return parts.length ? "<span class=\"bad\">" + esc(parts.join(" · ")) + "</span>" : "";
  }

  // Headline: the three questions, answered at a glance.
  const ep = D.errors.engine_pct, sp = D.errors.static_pct;
  const onsets = D.events.filter((e) => e.state === "onset" && e.cause !== "workload");
  document.getElementById("headline").innerHTML =
    "<span>" + esc(when(D.range[0])) + " → " + esc(when(D.range[1])) + "</span>" +
    "<span>baseline window error P95 <b>" + fmt(ep.p95, 2) + " %</b>" +
    (sp.p95 != null ? " (static PUE: " + fmt(sp.p95, 1) + " %)" : "") + "</span>" +
    "<span>non-compute energy <b>" + pct(D.energy.non_compute_share) + "</b></span>" +
    "<span class=\"" + (onsets.length ? "bad" : "good") + "\">" +
    (onsets.length ? onsets.length + " drift onset(s), first " + esc(when(onsets[0].ts)) + " (" + esc(onsets[0].cause) + ")"
      : "no drift detected") + "</span>" + skipped(D.input);

  // 1. Stage timeline: one coloured band per bucket (dominant stage); inferred stages paler.
  {
    const s = section("Stage timeline", "Dominant stage per time bucket. Paler, hatched: inferred from GPU telemetry (no label from the job).");
    const t = D.timeline;
    const ones = t.x.map(() => 1);
    plot(s, {
      height: 90, legend: { show: false }, cursor: { show: false },
      scales: { x: { time: true }, y: { range: [0, 1] } },
      axes: [{}, { show: false }],
      series: [{}, { stroke: "transparent" }],
      hooks: { draw: [(u) => {
        const ctx = u.ctx, n = t.x.length;
        if (n === 0) return;
        const half = n > 1 ? (t.x[1] - t.x[0]) / 2 : 1;
        for (let i = 0; i < n; i++) {
          const d = t.dominant[i];
          if (d < 0) continue;
          const x0 = u.valToPos(t.x[i] - half, "x", true), x1 = u.valToPos(t.x[i] + half, "x", true);
          ctx.globalAlpha = t.inferred_share[i] > 0.5 ? 0.45 : 1;
          ctx.fillStyle = D.colours[D.stages[d]] || "#999";
          ctx.fillRect(x0, u.bbox.top, Math.max(1, x1 - x0 + 0.5), u.bbox.height);
        }
        ctx.globalAlpha = 1;
        eventMarkers(u);
      }] },
    }, [t.x, ones]);
    const legend = document.createElement("div");
    legend.className = "legend";
    legend.innerHTML = D.stages.map((st) => "<span><i style=\"background:" + D.colours[st] + "\"></i>" + esc(st) + "</span>").join("");
    s.appendChild(legend);
  }

  // 2. Facility power: measured envelope (min/max, never drops a peak) and window means vs expectation.
  {
    const s = section("Facility power: measured vs the baseline's expectation",
      "Window means (step lines); the shaded band is the measured min–max envelope from the trace. Dashed verticals: drift events.");
    const w = D.windows;
    let tables = [[w.x, w.measured_w, w.predicted_w]];
    const series = [{}, { label: "measured (window mean) W", stroke: "#263238", width: 1.5, paths: uPlot.paths.stepped({ align: 1 }), spanGaps: false },
      { label: "expected W", stroke: "#ef6c00", width: 1.5, dash: [5, 3], paths: uPlot.paths.stepped({ align: 1 }) }];
    const bands = [];
    if (D.envelope) {
      tables.push([D.envelope.x, D.envelope.max, D.envelope.min]);
      series.push({ label: "measured max W", stroke: "rgba(96,125,139,0.5)", width: 0.5 },
        { label: "measured min W", stroke: "rgba(96,125,139,0.5)", width: 0.5 });
      bands.push({ series: [3, 4], fill: "rgba(96,125,139,0.18)" });
    }
    const data = tables.length > 1 ? uPlot.join(tables) : tables[0];
    plot(s, { scales: { x: { time: true } }, series: series, bands: bands, hooks: { draw: [eventMarkers] } }, data);

    const s2 = section("IT and cooling share", "Window means: PDU power (IT) and the rack's share of cooling power, measured vs expected.");
    plot(s2, { scales: { x: { time: true } }, hooks: { draw: [eventMarkers] }, series: [{},
      { label: "IT measured W", stroke: "#1565c0", paths: uPlot.paths.stepped({ align: 1 }) },
      { label: "IT expected W", stroke: "#64b5f6", dash: [5, 3], paths: uPlot.paths.stepped({ align: 1 }) },
      { label: "cooling measured W", stroke: "#00838f", scale: "c", paths: uPlot.paths.stepped({ align: 1 }) },
      { label: "cooling expected W", stroke: "#80deea", dash: [5, 3], scale: "c", paths: uPlot.paths.stepped({ align: 1 }) }],
      axes: [{}, { label: "IT W" }, { side: 1, scale: "c", label: "cooling W", grid: { show: false } }],
    }, [w.x, w.it_measured_w, w.it_predicted_w, w.cooling_measured_w, w.cooling_predicted_w]);
  }

  // 3. Per-stage baselines over time (level and band).
  {
    const names = Object.keys(D.baselines);
    const s = section("Per-stage baselines over time", names.length ? "Facility power level per stage as the agent learned it, with its band." : "No summary lines in this report.");
    if (names.length) {
      const tables = names.map((n) => [D.baselines[n].ts, D.baselines[n].level_w, D.baselines[n].low_w, D.baselines[n].high_w]);
      const data = tables.length > 1 ? uPlot.join(tables) : tables[0];
      const series = [{}], bands = [];
      names.forEach((n, i) => {
        const c = D.colours[n] || "#555";
        series.push({ label: n + " W", stroke: c, width: 1.5 }, { label: n + " low", stroke: c, width: 0 }, { label: n + " high", stroke: c, width: 0 });
        bands.push({ series: [3 * i + 3, 3 * i + 2], fill: c + "22" });
      });
      plot(s, { scales: { x: { time: true } }, series: series, bands: bands, legend: { live: false } }, data);
    }
  }

  // 4. Window error distribution, engine vs the static-PUE reference.
  {
    const e = D.errors;
    const s = section("Window error distribution",
      "Signed error of each predicted window, (expected − measured) / measured. " +
      (e.static ? "Grey: static PUE reference (facility/GPU ratio of the first 24 h × the window's GPU energy, ratio " + fmt(e.static_ratio, 3) + ")." : "Give --trace to compare with the static-PUE reference."));
    const centres = e.edges.slice(0, -1).map((v, i) => (v + e.edges[i + 1]) / 2);
    const bars = uPlot.paths.bars({ size: [0.9, 40] });
    const series = [{ label: "error %" }, { label: "rackwatt", fill: "rgba(239,108,0,0.7)", stroke: "#ef6c00", paths: bars }];
    const data = [centres, e.engine];
    if (e.static) { series.push({ label: "static PUE", fill: "rgba(120,120,120,0.45)", stroke: "#777", paths: bars }); data.push(e.static); }
    plot(s, { height: 220, scales: { x: { time: false } }, series: series }, data);
    const p = document.createElement("p");
    p.innerHTML = "|error| P50 / P95 / max — rackwatt: <b>" + fmt(e.engine_pct.p50, 2) + " / " + fmt(e.engine_pct.p95, 2) + " / " + fmt(e.engine_pct.max, 2) + " %</b>" +
      (e.static ? "; static PUE: " + fmt(e.static_pct.p50, 2) + " / " + fmt(e.static_pct.p95, 2) + " / " + fmt(e.static_pct.max, 2) + " %" : "");
    s.appendChild(p);
  }

  // 5. Events, with cause, explanation and playbook link.
  {
    const s = section("Events", D.events.length ? "" : "No events: the facility behaved as learned.");
    if (D.events.length) {
      const rows = D.events.map((e) => "<tr class=\"" + esc(e.state) + "\"><td>" + esc(when(e.ts)) + "</td><td>" + esc(e.state) + "</td><td>" +
        esc(e.cause) + "</td><td>" + esc(e.stage) + "</td><td>" + fmt(e.deviation_pct, 1) + "</td><td>" + esc(e.explanation) +
        "</td><td><a href=\"" + esc(e.playbook) + "\">playbook</a></td></tr>").join("");
      s.insertAdjacentHTML("beforeend", "<table><thead><tr><th>time</th><th>state</th><th>cause</th><th>stage</th><th>deviation %</th><th>explanation</th><th></th></tr></thead><tbody>" + rows + "</tbody></table>");
    }
  }

  // 6. Summary table: what each stage costs.
  {
    const s = section("Energy by stage", "Non-compute stages: idle, checkpoint, data_load, grad_sync. Total " + fmt(D.energy.total_kwh, 1) + " kWh.");
    const rows = D.table.map((r) => "<tr><td><i style=\"background:" + D.colours[r.stage] + "\"></i>" + esc(r.stage) + "</td><td>" + fmt(r.time_h, 1) +
      "</td><td>" + fmt(r.energy_kwh, 1) + "</td><td>" + pct(r.energy_share) + "</td><td>" + fmt(r.level_w, 0) + "</td><td>" +
      (Array.isArray(r.band_w) ? fmt(r.band_w[0], 0) + "–" + fmt(r.band_w[1], 0) : fmt(r.band_w, 0)) + "</td><td>" + fmt(r.lag_s, 0) + (r.dead_s != null ? " + " + fmt(r.dead_s, 0) : "") +
      "</td><td>" + fmt(r.facility_gpu_ratio, 3) + "</td></tr>").join("");
    s.insertAdjacentHTML("beforeend", "<table><thead><tr><th>stage</th><th>time h</th><th>energy kWh</th><th>share</th><th>baseline W</th><th>band W</th><th>lag τ + dead s</th><th>facility/GPU</th></tr></thead><tbody>" + rows + "</tbody></table>");
  }

  document.body.dataset.charts = String(charts);
})();
