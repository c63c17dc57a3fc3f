// The run report page: lays out the embedded report document (docs/report.md).
// It computes nothing: every number it shows is in the document.
(function () {
  "use strict";
  performance.mark("report-start");
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  const RUN = DATA.runs[0];
  const BASE = DATA.runs.length > 1 ? DATA.runs[1] : null;
  const DRILL = DATA.drilldown;
  const app = document.getElementById("app");
  const STEPS = {};
  if (DRILL) { DRILL.steps.forEach(function (s) { STEPS[s.step] = s; }); }
  const RANKINGS = DRILL ? DRILL.rankings : [];
  // vega-embed without its action menu (whose editor link would leave the file); Vega's
  // warnings (an empty layer in a panel: no flagged step, no threshold) are not errors
  const EMBED = { actions: false, renderer: "svg", mode: "vega-lite", logLevel: vega.Error };
  const CHART_CONFIG = { font: "-apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif",
    axis: { labelFontSize: 10, titleFontSize: 10, titleFontWeight: "normal" },
    header: { labelFontSize: 11, labelLimit: 300 }, view: { stroke: "#ddd" } };
  function embed(node, spec) {
    spec.config = CHART_CONFIG;
    return vegaEmbed(node, spec, EMBED).catch(function (error) { console.error(error); });
  }

  function el(tag, attrs) {
    const node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (key) {
        const value = attrs[key];
        if (value === null || value === undefined) return;
        if (key === "text") node.textContent = value;
        else if (key === "class") node.className = value;
        else if (key === "onclick") node.addEventListener("click", value);
        else node.setAttribute(key, value);
      });
    }
    for (let i = 2; i < arguments.length; i++) {
      const child = arguments[i];
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }
  function fmt(value) {
    if (value === null || value === undefined) return "\u2014";
    if (typeof value === "boolean") return value ? "yes" : "no";
    if (typeof value !== "number") return String(value);
    if (!isFinite(value)) return String(value);
    const a = Math.abs(value);
    // counts (tokens, sequences) exactly: four significant digits would show 252,337 as 252300
    if (Number.isInteger(value) && a < 1e15) return String(value);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return value.toExponential(3);
    return String(Number(value.toPrecision(4)));
  }
  function decode(b64, kind) {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return kind === "i" ? new Int32Array(bytes.buffer) : new Float32Array(bytes.buffer);
  }
  function crumbs(parts) {
    const node = el("div", { class: "crumbs" });
    parts.forEach(function (part, i) {
      if (i) node.appendChild(document.createTextNode(" \u203a "));
      node.appendChild(part[1] ? el("a", { href: part[1], text: part[0] }) : el("span", { text: part[0] }));
    });
    return node;
  }
  function table(headers, rows, opts) {
    const t = el("table", opts && opts.id ? { id: opts.id } : null);
    const head = el("tr");
    headers.forEach(function (h, i) { head.appendChild(el("th", { class: i === 0 || (opts && opts.left && opts.left.indexOf(i) >= 0) ? "left" : null, text: h })); });
    t.appendChild(el("thead", null, head));
    const body = el("tbody");
    rows.forEach(function (row) { body.appendChild(row); });
    t.appendChild(body);
    return t;
  }
  // the verdict's colours, as report.css's --green, --yellow and --red
  const LEVEL_COLOURS = { green: "#2e7d32", yellow: "#b8860b", red: "#c62828" };
  function levelBadge(level) { return el("span", { class: "badge " + level, text: level }); }
  function headlineKeys(run) {
    return run.timeline.headlines.filter(function (h) {
      return run.timeline.steps.some(function (s) { return s.values[h.key] !== null && s.values[h.key] !== undefined; });
    });
  }
  function stepFlags(step) { return new Set(step.flags || []); }
  // the verdict after a step, from the steps so far (null for a timeline without it)
  function stepLevel(step) { return step.verdict ? step.verdict.level : null; }
  function stepProblems(step) {
    return step.verdict ? step.verdict.findings.map(function (f) { return f.level + ": " + f.text; }).join("\n") : "";
  }

  // ------------------------------------------------------------------ run page
  function verdictBox(run, label) {
    const box = el("div", { class: "verdict", id: label === "run" ? "verdict" : "verdict-" + label });
    const v = run.verdict;
    if (!v) { box.appendChild(el("div", { class: "muted", text: "No verdict." })); return box; }
    box.appendChild(el("div", null, levelBadge(v.level), " ",
      el("span", { text: (label === "run" ? "health of the run" : "health of the " + label) + ": " +
        ["red", "yellow", "green"].filter(function (l) { return v.counts[l]; }).map(function (l) { return v.counts[l] + " " + l; }).join(", ") })));
    if (run.bottom_line) box.appendChild(el("div", { class: "bottom", text: run.bottom_line }));
    (v.findings || []).forEach(function (f) {
      box.appendChild(el("div", { class: "finding " + f.level }, el("span", { class: "lvl", text: f.level }), f.text));
    });
    (v.notes || []).forEach(function (n) {
      box.appendChild(el("div", { class: "finding note" }, el("span", { class: "lvl", text: "note" }), typeof n === "string" ? n : (n.text || JSON.stringify(n))));
    });
    return box;
  }
  // the vitals table leaves out distributions (quantiles) and their error bounds
  const SKIPPED = { distribution: true, quantile_bound: true, quantiles: true };
  function flatten(prefix, value, out) {
    if (value === null || value === undefined) return;
    const last = prefix.split(".").pop();
    if (SKIPPED[last]) return;
    if (typeof value === "object" && !Array.isArray(value)) {
      Object.keys(value).forEach(function (k) { flatten(prefix ? prefix + "." + k : k, value[k], out); });
    } else if (typeof value === "number" || typeof value === "string" || typeof value === "boolean") {
      out.push([prefix, value]);
    }
  }
  function vitalsBox(run) {
    const wrap = el("div", { id: "vitals" });
    if (run.vitals) {
      const rows = [];
      flatten("", run.vitals, rows);
      const list = el("div", { class: "vitals" });
      const meanings = run.vitals_meanings || {};
      rows.slice(0, 120).forEach(function (r) {
        // the key as the JSON and check rules name it; its meaning beside it
        list.appendChild(el("div", { class: "vital", title: meanings[r[0]] || r[0] },
          el("span", { class: "key", text: r[0] }), el("span", { class: "value", text: fmt(r[1]) }),
          meanings[r[0]] ? el("span", { class: "meaning", text: meanings[r[0]] }) : null));
      });
      wrap.appendChild(list);
      return wrap;
    }
    if (!DRILL || !DRILL.steps.length) { wrap.appendChild(el("div", { class: "note", text: "No vitals in these inputs." })); return wrap; }
    const first = DRILL.steps[0], last = DRILL.steps[DRILL.steps.length - 1];
    const tokens = DRILL.steps.reduce(function (a, s) { return a + s.tokens; }, 0);
    const seqs = DRILL.steps.reduce(function (a, s) { return a + s.sequences; }, 0);
    const rows = [
      ["steps", DRILL.steps.length, null],
      ["sequences", seqs, null],
      ["tokens", tokens, null],
      ["mean length (first \u2192 last step)", first.summary.mean_length, last.summary.mean_length],
      ["mean reward", first.summary.mean_reward, last.summary.mean_reward],
      ["share correct", first.summary.correct_share, last.summary.correct_share],
    ];
    wrap.appendChild(table(["", "first step / run", "last step"], rows.map(function (r) {
      return el("tr", null, el("td", { class: "left", text: r[0] }), el("td", { text: fmt(r[1]) }), el("td", { text: r[2] === null && r[0].indexOf("mean") < 0 && r[0].indexOf("share") < 0 ? "" : fmt(r[2]) }));
    }), { left: [0] }));
    return wrap;
  }
  // a panel's title in lines of at most 46 characters, a newline between them (the
  // chart's labelExpr splits there): a long headline is wrapped, not cut with an ellipsis
  function panelTitle(label) {
    const lines = [];
    let line = "";
    label.split(" ").forEach(function (word) {
      if (line && (line + " " + word).length > 46) { lines.push(line); line = word; }
      else line = line ? line + " " + word : word;
    });
    if (line) lines.push(line);
    return lines.join("\n");
  }
  function timelineRows() {
    // long format: one row per headline, run and step; the page computes nothing
    const rows = [];
    const heads = headlineKeys(RUN);
    [[RUN, "run"], [BASE, "baseline"]].forEach(function (pair) {
      const run = pair[0];
      if (!run) return;
      run.timeline.steps.forEach(function (s) {
        const flags = stepFlags(s);
        heads.forEach(function (h) {
          const value = s.values[h.key];
          if (value === null || value === undefined) return;
          rows.push({ label: h.label, panel: panelTitle(h.label), unit: h.unit, step: s.step, value: value, run: pair[1],
            flagged: pair[1] === "run" && flags.has(h.key), threshold: pair[1] === "run" && RUN.thresholds[h.key] !== undefined ? RUN.thresholds[h.key] : null,
            level: stepLevel(s), colour: LEVEL_COLOURS[stepLevel(s)] || null });
        });
      });
    });
    return rows;
  }
  function timelineChart(node) {
    const heads = headlineKeys(RUN);
    const x = { field: "step", type: "quantitative", title: "step", axis: { tickMinStep: 1 } };
    // padding: room at the bottom of each panel for the verdict's squares, off the points
    const y = { field: "value", type: "quantitative", title: null, scale: { zero: false, padding: 14 } };
    const tooltip = [{ field: "label", title: "quantity" }, { field: "run" }, { field: "step" },
      { field: "value", format: ".4~g" }, { field: "unit" }];
    const spec = {
      data: { values: timelineRows() },
      facet: { field: "panel", type: "nominal", title: null, sort: heads.map(function (h) { return panelTitle(h.label); }),
        header: { labelExpr: "split(datum.value, '\\n')", labelLimit: 0 } },
      columns: 3,
      spec: {
        width: 300, height: 130,
        layer: [
          { mark: { type: "line", strokeWidth: 1.6 }, encoding: { x: x, y: y,
            color: { field: "run", type: "nominal", scale: { domain: ["run", "baseline"], range: ["#1f77b4", "#999999"] }, legend: BASE ? { orient: "top", title: null } : null },
            strokeDash: { field: "run", type: "nominal", scale: { domain: ["run", "baseline"], range: [[1, 0], [5, 3]] }, legend: null } } },
          { mark: { type: "point", filled: true, size: 30, cursor: "pointer" }, encoding: { x: x, y: y, tooltip: tooltip,
            color: { field: "run", type: "nominal", scale: { domain: ["run", "baseline"], range: ["#1f77b4", "#999999"] }, legend: null } } },
          { transform: [{ filter: "datum.flagged" }], mark: { type: "point", size: 160, strokeWidth: 2.5, color: "#d62728", cursor: "pointer" },
            encoding: { x: x, y: y, tooltip: tooltip } },
          { transform: [{ filter: "datum.threshold !== null" }, { aggregate: [{ op: "max", field: "threshold", as: "threshold" }], groupby: ["label"] }],
            mark: { type: "rule", color: "#e6a100", strokeDash: [3, 3], strokeWidth: 1.5 },
            encoding: { y: { field: "threshold", type: "quantitative" }, tooltip: [{ field: "threshold", title: "the verdict's threshold", format: ".4~g" }] } },
          // the verdict after each step: a strip of squares along the bottom of the panel
          // (the colours are the values themselves, scale: null: a colour scale would be
          // the layers' one, whose domain is the run's and the baseline's)
          { transform: [{ filter: "datum.run === 'run' && datum.level !== null" }],
            mark: { type: "square", size: 36, opacity: 0.9, cursor: "pointer" },
            encoding: { x: x, y: { value: 126 }, tooltip: [{ field: "step" }, { field: "level", title: "verdict after the step" }],
              color: { field: "colour", type: "nominal", scale: null, legend: null } } }
        ]
      },
      resolve: { scale: { y: "independent", x: "independent" } }
    };
    return embed(node, spec).then(function (result) {
      if (!result) return;
      result.view.addEventListener("click", function (event, item) {
        const datum = item && item.datum;
        if (datum && datum.run === "run" && STEPS[datum.step]) location.hash = "step=" + datum.step;
      });
    });
  }
  function stepTable() {
    const heads = headlineKeys(RUN);
    const levels = RUN.timeline.steps.some(function (s) { return stepLevel(s) !== null; });
    const headers = ["step"].concat(levels ? ["verdict"] : []).concat(["sequences", "mean length", "mean reward", "share correct"]).concat(heads.map(function (h) { return h.short || h.key; }));
    const rows = RUN.timeline.steps.map(function (s) {
      const drill = STEPS[s.step];
      const flags = stepFlags(s);
      const tr = el("tr", { class: drill ? "click" : null, "data-step": s.step, onclick: drill ? function () { location.hash = "step=" + s.step; } : null });
      tr.appendChild(el("td", { class: "left" }, drill ? el("a", { href: "#step=" + s.step, text: String(s.step) }) : String(s.step)));
      if (levels) tr.appendChild(el("td", { class: "left level", title: stepProblems(s) || "nothing to do" }, stepLevel(s) ? levelBadge(stepLevel(s)) : "\u2014"));
      const summary = drill ? drill.summary : {};
      tr.appendChild(el("td", { text: drill ? String(drill.sequences) : "\u2014" }));
      tr.appendChild(el("td", { text: fmt(summary.mean_length) }));
      tr.appendChild(el("td", { text: fmt(summary.mean_reward) }));
      tr.appendChild(el("td", { text: fmt(summary.correct_share) }));
      heads.forEach(function (h) {
        tr.appendChild(el("td", { class: flags.has(h.key) ? "flag" : null, title: h.label + (flags.has(h.key) ? " (change flagged)" : ""), text: fmt(s.values[h.key]) }));
      });
      return tr;
    });
    return el("div", { class: "scroll" }, table(headers, rows, { id: "step-table" }));
  }
  function showRun() {
    app.replaceChildren();
    app.appendChild(el("h1", { text: DATA.title }));
    app.appendChild(el("div", { class: "muted", text: RUN.timeline.steps.length + " steps" + (BASE ? "; baseline drawn dashed grey" : "") +
      " \u00b7 ratioscope " + (DATA.tool && DATA.tool.version ? DATA.tool.version : "") + " \u00b7 click a step (chart point or table row) to see its sequences" }));
    app.appendChild(el("h2", { text: "Verdict" }));
    app.appendChild(verdictBox(RUN, "run"));
    if (BASE) app.appendChild(verdictBox(BASE, "baseline"));
    app.appendChild(el("h2", { text: "Vitals" }));
    app.appendChild(vitalsBox(RUN));
    (DATA.notes || []).concat(RUN.timeline.warnings || []).forEach(function (n) { app.appendChild(el("div", { class: "note", text: n })); });
    app.appendChild(el("h2", { text: "Timeline" }));
    app.appendChild(el("div", { class: "muted", text: "Red rings: a change flagged by the change rule; dotted line: the verdict's threshold; squares along the bottom: the verdict after each step, from the steps so far (green, yellow, red); hover for values, click a point for its step." }));
    const law = RUN.timeline.entropy_performance;
    if (law && law.fit && law.fit.a !== null) {
      const f = law.fit;
      app.appendChild(el("div", { class: "muted", id: "entropy-performance", text: "Entropy-performance law (Cui et al. 2025, R = \u2212a\u00b7exp(H) + b, R the " +
        (law.performance.indexOf("correct") >= 0 ? "correct share" : "reward") + "): a = " + fmt(f.a) + ", b = " + fmt(f.b) + ", predicted ceiling b \u2212 a = " + fmt(f.ceiling) +
        (f.ceiling_interval ? " [" + fmt(f.ceiling_interval[0]) + ", " + fmt(f.ceiling_interval[1]) + "] (95 %)" : "") +
        (f.holdout_rmse !== null ? "; the first " + f.head_steps + " steps predict the rest with RMSE " + fmt(f.holdout_rmse) : "") + "." }));
    }
    const chart = el("div", { id: "timeline" });
    app.appendChild(chart);
    const drawn = headlineKeys(RUN).length ? timelineChart(chart) : Promise.resolve();
    app.appendChild(el("h2", { text: "Steps" }));
    app.appendChild(stepTable());
    return drawn;
  }

  // ------------------------------------------------------------------ step page
  function sequenceName(drill, id) {
    const row = drill.rows[id];
    const file = drill.files[row.file] || "";
    const base = file.split("/").pop();
    return base + ":" + row.row;
  }
  function showStep(step) {
    const drill = STEPS[step];
    app.replaceChildren();
    app.appendChild(crumbs([["run", "#"], ["step " + step, null]]));
    if (!drill) { app.appendChild(el("p", { text: "No drill-down data for step " + step + "." })); return; }
    const index = DRILL.steps.indexOf(drill);
    const nav = el("div", { class: "muted" });
    if (index > 0) nav.appendChild(el("a", { href: "#step=" + DRILL.steps[index - 1].step, text: "\u2190 step " + DRILL.steps[index - 1].step }));
    if (index + 1 < DRILL.steps.length) { nav.appendChild(document.createTextNode("  ")); nav.appendChild(el("a", { href: "#step=" + DRILL.steps[index + 1].step, text: "step " + DRILL.steps[index + 1].step + " \u2192" })); }
    app.appendChild(el("h1", { text: "Step " + step }));
    app.appendChild(nav);
    const tl = RUN.timeline.steps.filter(function (s) { return s.step === step; })[0];
    const facts = [["files", drill.files.join(", ")], ["sequences", drill.sequences], ["tokens", drill.tokens],
      ["generation limit (tokens)", drill.length_limit], ["mean length", drill.summary.mean_length],
      ["mean reward", drill.summary.mean_reward], ["share correct", drill.summary.correct_share]];
    if (tl && tl.flags.length) facts.push(["changes flagged", tl.flags.join(", ")]);
    if (tl && tl.verdict) facts.push(["verdict after this step", tl.verdict.level]);
    app.appendChild(table(["", "value"], facts.map(function (f) { return el("tr", null, el("td", { class: "left", text: f[0] }), el("td", { class: "left", text: fmt(f[1]) })); }), { left: [0, 1] }));
    if (tl && tl.verdict) tl.verdict.findings.forEach(function (f) {
      app.appendChild(el("div", { class: "finding " + f.level }, el("span", { class: "lvl", text: f.level }), f.text));
    });
    drill.notes.forEach(function (n) { app.appendChild(el("div", { class: "note", text: n })); });
    const grid = el("div", { class: "rankings", id: "rankings" });
    app.appendChild(grid);
    RANKINGS.forEach(function (ranking) {
      const ids = drill.rankings[ranking.key];
      if (!ids || !ids.length) return;
      const block = el("div", { "data-ranking": ranking.key });
      block.appendChild(el("h3", { text: ranking.label }));
      const rows = ids.map(function (id, rank) {
        const row = drill.rows[id];
        const kept = DRILL.tokens[id] !== undefined;
        const tr = el("tr", { class: kept ? "click" : null, "data-seq": id, onclick: kept ? function () { location.hash = "seq=" + id; } : null });
        tr.appendChild(el("td", { class: "left", text: String(rank + 1) }));
        tr.appendChild(el("td", { class: "left" }, kept ? el("a", { href: "#seq=" + id, text: sequenceName(drill, id) }) : el("span", { title: "tokens left out by the size budget", text: sequenceName(drill, id) + " *" })));
        tr.appendChild(el("td", { text: fmt(row.scores[ranking.key]) }));
        tr.appendChild(el("td", { text: fmt(row.reward) }));
        tr.appendChild(el("td", { text: fmt(row.correct) }));
        tr.appendChild(el("td", { text: String(row.length) }));
        tr.appendChild(el("td", { class: "left", text: row.group === null ? "\u2014" : row.group }));
        return tr;
      });
      block.appendChild(table(["#", "sequence", ranking.unit, "reward", "correct", "length", "group"], rows, { left: [1, 6] }));
      grid.appendChild(block);
    });
  }

  // ------------------------------------------------------------------ sequence page
  function colour(kind, value, scale) {
    if (value === null || !isFinite(value)) return "transparent";
    if (kind === "state") return value > 0 ? "rgba(214,39,40,0.55)" : value < 0 ? "rgba(31,119,180,0.55)" : "transparent";
    if (kind === "sequential") { const t = Math.min(1, Math.max(0, value / scale)); return "rgba(123,50,148," + (0.85 * t).toFixed(3) + ")"; }
    const t = Math.max(-1, Math.min(1, value / scale));
    return t >= 0 ? "rgba(214,39,40," + (0.85 * t).toFixed(3) + ")" : "rgba(31,119,180," + (-0.85 * t).toFixed(3) + ")";
  }
  function tokenText(id) {
    if (DRILL.vocab && DRILL.vocab[String(id)] !== undefined) return DRILL.vocab[String(id)];
    return null;
  }
  function showSequence(id, quantity) {
    const step = Number(id.split("_")[0].slice(1));
    const drill = STEPS[step];
    app.replaceChildren();
    const data = DRILL && DRILL.tokens[id];
    app.appendChild(crumbs([["run", "#"], ["step " + step, "#step=" + step], [drill && drill.rows[id] ? sequenceName(drill, id) : id, null]]));
    if (!data || !drill) { app.appendChild(el("p", { text: "No token data for this sequence (left out by the size budget)." })); return Promise.resolve(); }
    const row = drill.rows[id];
    app.appendChild(el("h1", { text: "Sequence " + sequenceName(drill, id) + " of step " + step }));
    const facts = [["reward", row.reward], ["correct", row.correct], ["length", row.length], ["group", row.group]];
    RANKINGS.forEach(function (r) { if (row.scores[r.key] !== undefined) facts.push([r.label, row.scores[r.key]]); });
    app.appendChild(table(["", "value"], facts.map(function (f) { return el("tr", null, el("td", { class: "left", text: f[0] }), el("td", { text: fmt(f[1]) })); }), { left: [0], id: "sequence-facts" }));
    const available = DRILL.series.filter(function (s) { return data.series[s.key] !== undefined; });
    if (!available.length) { app.appendChild(el("p", { text: "No per-token values." })); return Promise.resolve(); }
    const chosen = available.filter(function (s) { return s.key === quantity; })[0] || available[0];
    const select = el("select", { id: "quantity" });
    available.forEach(function (s) {
      const option = el("option", { value: s.key, text: s.label });
      if (s.key === chosen.key) option.selected = true;
      select.appendChild(option);
    });
    select.addEventListener("change", function () { location.hash = "seq=" + id + "&q=" + select.value; });
    app.appendChild(el("div", { class: "controls" }, el("label", { for: "quantity", text: "colour tokens by: " }), select));
    const values = decode(data.series[chosen.key], "f");
    const ids = data.ids ? decode(data.ids, "i") : null;
    let scale = 0;
    for (let i = 0; i < values.length; i++) if (isFinite(values[i])) scale = Math.max(scale, Math.abs(values[i]));
    if (scale === 0) scale = 1;
    const legend = el("div", { class: "legend" });
    if (chosen.kind === "state") legend.appendChild(el("span", { text: "red: up (ratio above the band) \u00b7 no colour: on \u00b7 blue: down" }));
    else if (chosen.kind === "sequential") legend.appendChild(el("span", { text: "0 (white) to " + fmt(scale) + " (purple)" }));
    else legend.appendChild(el("span", { text: "blue: " + fmt(-scale) + " \u00b7 white: 0 \u00b7 red: " + fmt(scale) }));
    legend.appendChild(el("span", { text: ids ? (DRILL.vocab ? "(token text from the tokenizer)" : "(token ids; give --tokenizer for text)") : "(no token ids in the dump: positions)" }));
    app.appendChild(legend);
    const hover = el("div", { id: "hover", class: "muted", text: "hover a token" });
    app.appendChild(hover);
    const view = el("div", { id: "tokens", "data-sequence": id, "data-quantity": chosen.key });
    const labels = [];
    for (let i = 0; i < values.length; i++) {
      const text = ids ? tokenText(ids[i]) : null;
      const shown = text === null ? (ids ? String(ids[i]) : String(i)) : text.replace(/\n/g, "\u21b5\n").replace(/\t/g, "\u21e5");
      labels.push(text === null ? (ids ? "id " + ids[i] : "#" + i) : JSON.stringify(text));
      const span = el("span", { class: text === null ? "tok id" : "tok", "data-index": i, "data-value": String(values[i]),
        "data-id": ids ? String(ids[i]) : null, text: shown });
      span.style.background = colour(chosen.kind, values[i], scale);
      span.title = "#" + i + " " + labels[i] + ": " + fmt(values[i]);
      view.appendChild(span);
    }
    view.addEventListener("mouseover", function (ev) {
      const t = ev.target;
      if (t && t.dataset && t.dataset.index !== undefined) hover.textContent = "token " + t.dataset.index + " (" + labels[Number(t.dataset.index)] + "): " + chosen.label + " = " + fmt(Number(t.dataset.value));
    });
    app.appendChild(view);
    const plot = el("div", { id: "seqplot" });
    app.appendChild(plot);
    const points = [];
    for (let i = 0; i < values.length; i++) points.push({ i: i, v: isFinite(values[i]) ? values[i] : null, t: labels[i] });
    const x = { field: "i", type: "quantitative", title: "token position" };
    const y = { field: "v", type: "quantitative", title: chosen.label };
    return embed(plot, {
      width: "container", height: 200, autosize: { type: "fit-x", contains: "padding" }, data: { values: points },
      layer: [
        { mark: { type: "line", strokeWidth: 1.4, interpolate: chosen.kind === "state" ? "step-after" : "linear" }, encoding: { x: x, y: y } },
        { params: [{ name: "hover", select: { type: "point", on: "pointerover", nearest: true, clear: "pointerout" } }],
          mark: { type: "point", filled: true, size: 40, color: "#d62728" },
          encoding: { x: x, y: y, opacity: { condition: { param: "hover", empty: false, value: 1 }, value: 0 },
            tooltip: [{ field: "i", title: "token" }, { field: "t", title: "text" }, { field: "v", title: chosen.key, format: ".4~g" }] } }
      ]
    });
  }

  function route() {
    const params = new URLSearchParams(location.hash.replace(/^#/, ""));
    const page = params.has("seq") ? "sequence" : params.has("step") ? "step" : "run";
    document.body.removeAttribute("data-ready");
    document.body.setAttribute("data-page", page);
    window.scrollTo(0, 0);
    let drawn;
    if (page === "sequence") drawn = showSequence(params.get("seq"), params.get("q"));
    else if (page === "step") { showStep(Number(params.get("step"))); drawn = Promise.resolve(); }
    else drawn = showRun();
    return Promise.resolve(drawn).then(function () {
      performance.mark("report-drawn");
      document.body.setAttribute("data-ready", "1");
    });
  }
  window.addEventListener("hashchange", route);
  route();
})();
