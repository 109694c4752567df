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
  const kw = (w) => (w == null ? "–" : (w / 1000).toFixed(1) + " kW");
  // Every time on the page is UTC, 24-hour; the reader's own zone is named once in the headline.
  const pad2 = (n) => String(n).padStart(2, "0");
  const utcTzDate = (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC");
  function utcTicks(u, splits, axisIdx, space, incr) {
    const labels = splits.map((v, i) => {
      if (v == null) return "";
      const d = new Date(v * 1000);
      const day = pad2(d.getUTCMonth() + 1) + "-" + pad2(d.getUTCDate());
      if (incr >= 86400) return day;
      const hm = pad2(d.getUTCHours()) + ":" + pad2(d.getUTCMinutes());
      const newDay = i === 0 || (d.getUTCHours() === 0 && d.getUTCMinutes() === 0);
      return newDay ? hm + "\n" + day : hm;
    });
    u.rwTicks = labels;
    return labels;
  }
  const timeAxis = () => ({ values: utcTicks, label: "time (UTC)" });
  const timeSeries = () => ({ label: "time (UTC)", value: (u, v) => when(v) });

  function section(title, note, id) {
    const s = document.createElement("section");
    if (id) s.id = id;
    s.innerHTML = "<h2>" + esc(title) + "</h2>" + (note ? "<p class=\"note\">" + esc(note) + "</p>" : "");
    app.appendChild(s);
    return s;
  }

  function legend(host, entries) {
    const div = document.createElement("div");
    div.className = "legend";
    div.innerHTML = entries.map((e) => "<span><i class=\"" + (e.kind || "") + "\" style=\"background:" + e.colour + "\"></i>" + esc(e.label) + "</span>").join("");
    host.appendChild(div);
  }

  // A chart's canvas has no text: its aria-label names the axes and the time ticks drawn.
  function describe(u, div, title) {
    const labels = u.axes.map((a, i) => (a.label ? (i === 0 ? "x: " : "y: ") + a.label : "")).filter(Boolean);
    const ticks = u.rwTicks ? "; x ticks: " + u.rwTicks.map((t) => t.replace("\n", " ")).join(", ") : "";
    div.setAttribute("role", "img");
    div.setAttribute("aria-label", title + "; " + labels.join("; ") + ticks);
  }

  function plot(host, opts, data) {
    const div = document.createElement("div");
    div.className = "chart";
    host.appendChild(div);
    const o = Object.assign({ width: width(), height: 260, tzDate: utcTzDate }, opts);
    o.axes = (o.axes || [{}, {}]).map((a, i) => (i === 0 ? a : Object.assign({ size: 70 }, a)));
    o.series.forEach((sr, i) => { if (i > 0 && sr.width === 0) { sr.points = { show: false }; } });
    const title = host.querySelector("h2") ? host.querySelector("h2").textContent : "chart";
    o.hooks = Object.assign({}, o.hooks);
    o.hooks.draw = (o.hooks.draw || []).concat([(u) => describe(u, div, title)]);
    const u = new uPlot(o, data, div);
    charts += 1;
    return u;
  }

  const CAUSE_COLOUR = { workload: "21,101,192" };
  const causeColour = (cause) => CAUSE_COLOUR[cause] || "198,40,40";

  // Confirmed drifts: shaded from the estimated start to the clearing (or the end, still active),
  // a dashed line where the detector confirmed it.
  function driftOverlay(u) {
    const ctx = u.ctx, b = u.bbox;
    ctx.save();
    for (const p of D.drifts) {
      const x0 = Math.max(b.left, u.valToPos(p.start, "x", true));
      const x1 = Math.min(b.left + b.width, u.valToPos(p.end, "x", true));
      if (x1 < b.left || x0 > b.left + b.width) continue;
      ctx.fillStyle = "rgba(" + causeColour(p.cause) + ",0.13)";
      ctx.fillRect(x0, b.top, Math.max(1, x1 - x0), b.height);
      const xc = u.valToPos(p.confirmed, "x", true);
      ctx.strokeStyle = "rgb(" + causeColour(p.cause) + ")";
      ctx.lineWidth = 1.5 * devicePixelRatio;
      ctx.setLineDash([6 * devicePixelRatio, 4 * devicePixelRatio]);
      ctx.beginPath(); ctx.moveTo(xc, b.top); ctx.lineTo(xc, b.top + b.height); ctx.stroke();
    }
    ctx.restore();
  }
  const DRIFT_LEGEND = { label: "confirmed drift: shaded from its estimated start to its clearing; dashed: confirmed", colour: "rgba(198,40,40,0.35)" };

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
  const active = D.drifts.filter((p) => p.active && p.cause !== "workload");
  // Detections the data could not support for some of the run: "no drift" would overclaim there.
  const off = D.detections_off || [];
  const offText = off.map((d) => d.detection + " (" + d.why + ", " + pct(d.share) + " of the time)").join("; ");
  const zone = (Intl.DateTimeFormat().resolvedOptions().timeZone || "unknown");
  const offsetMin = -new Date(D.range[0] * 1000).getTimezoneOffset();
  const offset = "UTC" + (offsetMin < 0 ? "−" : "+") + pad2(Math.floor(Math.abs(offsetMin) / 60)) + ":" + pad2(Math.abs(offsetMin) % 60);
  document.getElementById("headline").innerHTML =
    "<span>" + esc(when(D.range[0])) + " → " + esc(when(D.range[1])) + "</span>" +
    "<span id=\"zone\">all times UTC, 24-hour (your zone: " + esc(zone) + ", " + esc(offset) + ")</span>" +
    "<span>baseline window error P95 <b>" + fmt(ep.p95, 2) + " %</b>" +
    (sp.p95 != null ? " (static PUE: " + fmt(sp.p95, 1) + " %)" : "") + "</span>" +
    "<span title=\"" + esc(D.definitions.non_compute) + "\"><a href=\"#terms\">non-compute energy</a> <b>" + pct(D.energy.non_compute_share) + "</b></span>" +
    "<span class=\"" + (onsets.length ? "bad" : off.length ? "warn" : "good") + "\">" +
    (onsets.length ? onsets.length + " drift onset(s), first " + esc(when(onsets[0].ts)) + " (" + esc(onsets[0].cause) + ")" +
      (active.length ? "; active since " + esc(when(active[0].start)) + " (estimated start)" : "")
      : (off.length ? "no drift detected by the detections that ran" : "no drift detected")) + "</span>" +
    (off.length ? "<span class=\"warn\">off: " + esc(offText) + "</span>" : "") + skipped(D.input);

  // 1. Stage timeline: one coloured band per bucket (dominant stage); inferred stages paler.
  {
    const s = section("Stage timeline", "Dominant stage per time bucket. Paler: inferred from GPU telemetry (no label from the job).");
    const t = D.timeline;
    const ones = t.x.map(() => 1);
    plot(s, {
      height: 110, legend: { show: false }, cursor: { show: false },
      scales: { x: { time: true }, y: { range: [0, 1] } },
      axes: [timeAxis(), { show: false }],
      series: [timeSeries(), { stroke: "transparent" }],
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
        driftOverlay(u);
      }] },
    }, [t.x, ones]);
    legend(s, D.stages.map((st) => ({ label: st, colour: D.colours[st] })));
  }

  // 2. Facility power: window means vs expectation, the measured envelope drawn under them.
  {
    const ax = D.power_axis;
    const clippedN = ax ? ax.clipped_above.length + ax.clipped_below.length : 0;
    const s = section("Facility power: measured vs the baseline's expectation",
      "Window means (step lines); shaded grey: the measured min–max envelope from the trace. " +
      (clippedN ? "Axis scaled on robust percentiles: " + clippedN + " time bucket(s) beyond it are clipped and marked ▲/▼ (extremes " +
        kw(ax.trough) + " / " + kw(ax.peak) + ")." : "Axis scaled on robust percentiles; nothing clipped."));
    const w = D.windows, env = D.envelope;
    const data = [w.x, w.measured_w, w.predicted_w];
    const stepped = () => uPlot.paths.stepped({ align: 1 });
    const series = [timeSeries(),
      { label: "measured (window mean)", stroke: "#263238", width: 1.5, paths: stepped(), value: (u, v) => kw(v) },
      { label: "expected", stroke: "#ef6c00", width: 1.5, dash: [5, 3], paths: stepped(), value: (u, v) => kw(v) }];
    const drawEnvelope = (u) => {
      if (!env) return;
      const ctx = u.ctx, xs = env.x, hi = env.max, lo = env.min;
      const yOf = (v) => u.valToPos(Math.min(Math.max(v, ax.min), ax.max), "y", true);
      ctx.save();
      ctx.fillStyle = "rgba(96,125,139,0.22)";
      for (let i = 0; i < xs.length; i++) {
        if (hi[i] == null || lo[i] == null) continue;
        const x = u.valToPos(xs[i], "x", true), y0 = yOf(hi[i]), y1 = yOf(lo[i]);
        ctx.fillRect(x - 0.5, y0, 1.5 * devicePixelRatio, Math.max(1, y1 - y0));
      }
      ctx.restore();
    };
    const drawClipped = (u) => {
      if (!ax) return;
      const ctx = u.ctx, b = u.bbox, r = 5 * devicePixelRatio;
      ctx.save();
      ctx.fillStyle = "#d32f2f";
      for (const [xs, top] of [[ax.clipped_above, true], [ax.clipped_below, false]]) {
        for (const t of xs) {
          const x = u.valToPos(t, "x", true), y = top ? b.top : b.top + b.height;
          ctx.beginPath();
          ctx.moveTo(x - r, top ? y + r * 1.6 : y - r * 1.6); ctx.lineTo(x + r, top ? y + r * 1.6 : y - r * 1.6); ctx.lineTo(x, y);
          ctx.closePath(); ctx.fill();
        }
      }
      ctx.restore();
    };
    plot(s, {
      scales: { x: { time: true }, y: ax ? { range: [ax.min, ax.max] } : {} },
      axes: [timeAxis(), { label: "facility power (kW)", values: (u, v) => v.map((x) => (x / 1000).toFixed(1)) }],
      series: series, hooks: { drawClear: [drawEnvelope], draw: [driftOverlay, drawClipped] },
    }, data);
    legend(s, [{ label: "measured min–max envelope", colour: "rgba(96,125,139,0.4)" }, DRIFT_LEGEND,
      { label: "▲▼ clipped glitch", colour: "#d32f2f" }]);

    // The step in the operator's terms: how far measured is from what the baseline expects, per window.
    const sd = section("Deviation from the expectation",
      "(measured − expected) / expected facility energy per window, in %: a drift shows as a step at its start. Large values in the first hours: the baseline is still warming up.");
    const da = D.deviation_axis;
    plot(sd, { height: 200, scales: { x: { time: true }, y: da ? { range: [da.min, da.max] } : {} },
      hooks: { draw: [driftOverlay] },
      axes: [timeAxis(), { label: "deviation (%)" }],
      series: [timeSeries(), { label: "facility deviation", stroke: "#6a1b9a", width: 1.5, paths: stepped(), value: (u, v) => fmt(v, 2) + " %" }],
    }, [w.x, w.deviation_pct]);

    const s2 = section("IT and cooling", "Window means: PDU power (IT, left axis) and the rack's share of cooling power (right axis); solid measured, dashed expected.");
    const kwAxis = (label, extra) => Object.assign({ label: label, values: (u, v) => v.map((x) => (x / 1000).toFixed(1)) }, extra);
    plot(s2, { scales: { x: { time: true } }, hooks: { draw: [driftOverlay] }, series: [timeSeries(),
      { label: "IT measured", stroke: "#1565c0", paths: stepped(), value: (u, v) => kw(v) },
      { label: "IT expected", stroke: "#64b5f6", dash: [5, 3], paths: stepped(), value: (u, v) => kw(v) },
      { label: "cooling measured", stroke: "#00838f", scale: "c", paths: stepped(), value: (u, v) => kw(v) },
      { label: "cooling expected", stroke: "#80deea", dash: [5, 3], scale: "c", paths: stepped(), value: (u, v) => kw(v) }],
      axes: [timeAxis(), kwAxis("IT power (kW)"), kwAxis("cooling power (kW)", { side: 1, scale: "c", grid: { show: false }, size: 70 })],
    }, [w.x, w.it_measured_w, w.it_predicted_w, w.cooling_measured_w, w.cooling_predicted_w]);
  }

  // 3. Per-stage baselines over time: one line per stage (its level), its band shaded; one legend
  // entry per stage.
  {
    const names = Object.keys(D.baselines);
    const s = section("Per-stage baselines over time", names.length ? "Facility power level per stage as the agent learned it (line), with its band (shaded)." : "No summary lines in this report.");
    if (names.length) {
      const tables = names.map((n) => [D.baselines[n].ts, D.baselines[n].level_w, D.baselines[n].low_w, D.baselines[n].high_w]);
      const data = tables.length > 1 ? uPlot.join(tables) : tables[0];
      const series = [timeSeries()], bands = [];
      names.forEach((n, i) => {
        const c = D.colours[n] || "#555";
        series.push({ label: n, stroke: c, width: 1.5 }, { label: n + " low", stroke: c, width: 0 }, { label: n + " high", stroke: c, width: 0 });
        bands.push({ series: [3 * i + 3, 3 * i + 2], fill: c + "22" });
      });
      plot(s, { legend: { show: false }, scales: { x: { time: true } }, series: series, bands: bands,
        axes: [timeAxis(), { label: "facility power (kW)", values: (u, v) => v.map((x) => (x / 1000).toFixed(1)) }] }, data);
      legend(s, names.map((n) => ({ label: n, colour: D.colours[n] || "#555" })));
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
    plot(s, { height: 240, scales: { x: { time: false } }, series: series,
      axes: [{ label: "window error (%), (expected − measured) / measured" }, { label: "windows (count)" }] }, data);
    const p = document.createElement("p");
    p.innerHTML = "|error| P50 / P95 / max — rackwatt: <b>" + fmt(e.engine_pct.p50, 2) + " / " + fmt(e.engine_pct.p95, 2) + " / " + fmt(e.engine_pct.max, 2) + " %</b>" +
      (e.static ? "; static PUE: " + fmt(e.static_pct.p50, 2) + " / " + fmt(e.static_pct.p95, 2) + " / " + fmt(e.static_pct.max, 2) + " %" : "");
    s.appendChild(p);
  }

  // 5. Events, with cause, estimated start, explanation and the playbook section in this page.
  {
    const s = section("Events", D.events.length ? "Times UTC. Estimated start: when the evidence began; time: when it was confirmed or cleared." : "No events: the facility behaved as learned.");
    if (D.events.length) {
      const rows = D.events.map((e) => "<tr class=\"" + esc(e.state) + "\"><td>" + esc(when(e.ts)) + "</td><td>" + esc(e.state) + "</td><td>" +
        esc(e.cause) + "</td><td>" + esc(e.stage) + "</td><td>" + esc(when(e.since)) + "</td><td>" + fmt(e.deviation_pct, 1) + "</td><td>" + esc(e.explanation) +
        "</td><td>" + (D.playbook[e.cause] ? "<a href=\"#playbook-" + esc(e.cause) + "\">what to check</a>" : "") + "</td></tr>").join("");
      s.insertAdjacentHTML("beforeend", "<table><thead><tr><th>time (UTC)</th><th>state</th><th>cause</th><th>stage</th><th>estimated start</th><th>deviation %</th><th>explanation</th><th></th></tr></thead><tbody>" + rows + "</tbody></table>");
    }
  }

  // 6. Summary table: what each stage costs.
  {
    const s = section("Energy by stage", D.definitions.non_compute + " Total " + fmt(D.energy.total_kwh, 1) + " kWh.");
    const rows = D.table.map((r) => "<tr><td><i style=\"background:" + D.colours[r.stage] + "\"></i>" + esc(r.stage) + "</td><td>" + fmt(r.time_h, 1) +
      "</td><td>" + fmt(r.energy_kwh, 1) + "</td><td>" + pct(r.energy_share) + "</td><td>" + fmt(r.level_w, 0) + "</td><td>" +
      (Array.isArray(r.band_w) ? fmt(r.band_w[0], 0) + "–" + fmt(r.band_w[1], 0) : fmt(r.band_w, 0)) + "</td><td>" + fmt(r.lag_s, 0) + (r.dead_s != null ? " + " + fmt(r.dead_s, 0) : "") +
      "</td><td>" + fmt(r.facility_gpu_ratio, 3) + "</td></tr>").join("");
    s.insertAdjacentHTML("beforeend", "<table><thead><tr><th>stage</th><th>time h</th><th>energy kWh</th><th>share</th><th>baseline W</th><th>band W</th><th>lag τ + dead s</th><th>facility/GPU</th></tr></thead><tbody>" + rows + "</tbody></table>");
  }

  // 6b. Energy per job (racks whose nodes run different jobs): each job's total, then its stages.
  if (D.jobs && D.jobs.length) {
    const s = section("Energy by job", "Since the engine started, kWh. Each bin's measured IT and cooling energy is split over the (job, stage) every node was in, by each node's GPU power and its stage's learned non-GPU power.");
    const rows = D.jobs.map((r) => "<tr" + (r.stage == null ? " class=\"total\"" : "") + "><td>" + esc(r.stage == null ? r.job : "") + "</td><td>" +
      (r.stage == null ? "<b>all stages</b>" : "<i style=\"background:" + (D.colours[r.stage] || "#999") + "\"></i>" + esc(r.stage)) + "</td><td>" +
      fmt(r.facility, 1) + "</td><td>" + fmt(r.it, 1) + "</td><td>" + fmt(r.cooling, 1) + "</td><td>" + fmt(r.gpu, 1) + "</td></tr>").join("");
    s.insertAdjacentHTML("beforeend", "<table><thead><tr><th>job</th><th>stage</th><th>facility kWh</th><th>IT kWh</th><th>cooling kWh</th><th>GPU kWh</th></tr></thead><tbody>" + rows + "</tbody></table>");
  }

  // 7. The playbook sections for the causes above, embedded (the page travels without the docs).
  {
    const causes = Object.keys(D.playbook);
    if (causes.length) {
      const s = section("Drift playbook: what to check", "From the rackwatt drift playbook, for the causes in this report.", "playbook");
      for (const cause of causes) {
        const a = document.createElement("article");
        a.id = "playbook-" + cause;
        a.innerHTML = "<h3>" + esc(cause) + "</h3>" + D.playbook[cause];  // HTML built and escaped by page.py
        s.appendChild(a);
      }
    }
  }

  // 8. Terms used on this page.
  {
    const s = section("Terms", "", "terms");
    s.insertAdjacentHTML("beforeend", "<dl><dt>non-compute energy</dt><dd>" + esc(D.definitions.non_compute) + "</dd>" +
      "<dt>expected</dt><dd>What the learned per-stage baseline predicts the facility power to be for the stages run and the work done.</dd>" +
      "<dt>estimated start</dt><dd>When the evidence of a drift began (the detector confirms it later, once the deviation is sustained).</dd></dl>");
  }

  document.body.dataset.charts = String(charts);
})();
