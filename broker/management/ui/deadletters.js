/* OtterMQ web UI: dead letters (browse x-death, send back) and the dead-letter archive's reports. */
"use strict";

NAV.push(["#/dead-letters", "Dead letters"], ["#/archive", "Archive", ["administrator", "monitoring"]]);

ROUTES.push([/^#\/dead-letters$/, "Dead letters", async (main) => {
  const list = h("div");
  append(main, [h("h1", {}, "Dead letters"),
    h("p", {class: "muted"}, "Queues holding dead-lettered messages (messages with an x-death header). " +
      "Open one to see why its messages died and to send them back."), list]);
  async function refresh() {
    const data = await get("/dead-letters");
    replace(list, table([["Virtual host", (q) => q.vhost], ["Queue", (q) => link(`#/dead-letters/${vhostPath(q.vhost, q.name)}`, q.name)],
      ["Ready", (q) => fmtNum(q.messages_ready), {num: true}],
      ["Dead-lettered", (q) => fmtNum(q.dead_lettered) + (q.sampled ? ` (of the first ${fmtNum(q.sampled)})` : ""), {num: true}],
      ["Reasons", (q) => Object.entries(q.reasons || {}).map(([r, n]) => h("span", {class: "tag"}, `${r}: ${fmtNum(n)}`))]],
    data, {empty: "No queue holds dead-lettered messages."}));
  }
  await refresh();
  return {refresh};
}]);

ROUTES.push([/^#\/dead-letters\/([^/]+)\/([^/]+)$/, "Dead letters", async (main, vhost, name) => {
  const base = `/dead-letters/${vhostPath(vhost, name)}`;
  const state = {reason: "", source: "", offset: 0, limit: 50, selected: new Set()};
  const summaryEl = h("div"), messagesEl = h("div"), jobsEl = h("div"), progressEl = h("div");
  const reasonSel = h("select", {name: "reason", "aria-label": "reason filter"});
  const sourceSel = h("select", {name: "source_queue", "aria-label": "source queue filter"});
  const pageInfo = h("span", {class: "muted"});
  const prev = h("button", {type: "button", onclick: () => { state.offset = Math.max(0, state.offset - state.limit); load(); }}, "‹ Previous");
  const next = h("button", {type: "button", onclick: () => { state.offset += state.limit; load(); }}, "Next ›");
  reasonSel.addEventListener("change", () => { state.reason = reasonSel.value; state.offset = 0; state.selected.clear(); load(); });
  sourceSel.addEventListener("change", () => { state.source = sourceSel.value; state.offset = 0; state.selected.clear(); load(); });

  const moveForm = h("form", {class: "stack", id: "move-form"},
    field("Which messages", select("which", [["selected", "the selected messages"], ["filter", "all matching the filter"], ["all", "all messages in the queue"]], "selected")),
    field("Send to", select("target", [["original", "their original exchange and routing key (from x-death)"], ["chosen", "this exchange and routing key:"]], "original")),
    field("Exchange", h("input", {name: "exchange", placeholder: "(default exchange)"})),
    field("Routing key", h("input", {name: "routing_key"})),
    field("Keep x-death headers", h("input", {type: "checkbox", name: "keep"})),
    field("Rate limit (messages/s, 0 = none)", h("input", {type: "number", name: "rate", min: 0, value: 0})),
    h("div", {class: "actions"}, h("button", {type: "submit", class: "primary"}, "Send back")));
  moveForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const d = formData(moveForm);
    const body = {keep_death_headers: d.keep, rate: Number(d.rate || 0),
      target: d.target === "chosen" ? {exchange: d.exchange, routing_key: d.routing_key} : null};
    let what;
    if (d.which === "selected") {
      if (!state.selected.size) { flash("Select messages first.", true); return; }
      body.ids = [...state.selected];
      what = `${state.selected.size} selected message(s)`;
    } else if (d.which === "filter") {
      body.filter = {reason: state.reason || null, source_queue: state.source || null};
      what = "every message matching the filter";
    } else {
      body.all = true;
      what = "every message in the queue";
    }
    const where = body.target ? `exchange '${body.target.exchange || "(default)"}' with routing key '${body.target.routing_key}'` : "their original exchanges";
    if (!window.confirm(`Move ${what} from '${name}' to ${where}?`)) return;
    try {
      const job = await api("POST", `${base}/moves`, body);
      state.selected.clear();
      watch(job.id);
    } catch (e) {
      flash(`Send back failed: ${e.message}`, true);
    }
  });

  append(main, [h("h1", {}, "Dead letters in ", h("code", {}, name), h("span", {class: "muted"}, ` (${vhost})`)),
    h("p", {}, link(queueHash(vhost, name), "← queue page")),
    h("h2", {}, "Why they died"), summaryEl,
    h("h2", {}, "Messages"),
    h("div", {class: "toolbar"}, field("Reason", reasonSel), field("Source queue", sourceSel), h("span", {class: "pager"}, prev, pageInfo, next)),
    messagesEl,
    h("h2", {}, "Send back"), moveForm, progressEl,
    h("h2", {}, "Moves"), jobsEl]);

  function options(sel, values, value, all) {
    replace(sel, h("option", {value: ""}, all), values.map((v) => h("option", {value: v, selected: v === value ? true : null}, v)));
  }

  async function load() {
    const query = new URLSearchParams({offset: state.offset, limit: state.limit, truncate: 2000});
    if (state.reason) query.set("reason", state.reason);
    if (state.source) query.set("source_queue", state.source);
    const data = await get(`${base}?${query}`);
    const reasons = [...new Set(data.summary.map((s) => s.reason))].sort();
    const sources = [...new Set(data.summary.map((s) => s.source_queue))].sort();
    options(reasonSel, reasons, state.reason, "all reasons");
    options(sourceSel, sources, state.source, "all source queues");
    replace(summaryEl, h("p", {}, `${fmtNum(data.dead_lettered)} of ${fmtNum(data.total)} ready messages carry x-death.`),
      summaryTable(data.summary));
    const matching = data.matching !== undefined ? data.matching : data.messages.length;
    pageInfo.textContent = `${data.messages.length ? state.offset + 1 : 0}–${state.offset + data.messages.length} of ${fmtNum(matching)}`;
    prev.disabled = state.offset <= 0;
    next.disabled = state.offset + data.messages.length >= matching;
    replace(messagesEl, table([
      ["", (m) => { const box = h("input", {type: "checkbox", "aria-label": `select message ${m.id}`, checked: state.selected.has(m.id)});
        box.addEventListener("change", () => { if (box.checked) state.selected.add(m.id); else state.selected.delete(m.id); }); return box; }],
      ["Reason", (m) => (m.deaths[0] || {}).reason || ""],
      ["Source queue", (m) => (m.deaths[0] || {}).queue || ""],
      ["Exchange", (m) => { const d = m.deaths[0]; return d ? (d.exchange || "(default)") : ""; }],
      ["Routing keys", (m) => ((m.deaths[0] || {}).routing_keys || []).join(", ")],
      ["Count", (m) => (m.deaths[0] || {}).count, {num: true}],
      ["Died at", (m) => fmtTime((m.deaths[0] || {}).time)],
      ["Original expiration", (m) => (m.deaths[0] || {}).original_expiration || ""],
      ["Earlier deaths", (m) => m.deaths.slice(1).map((d) => `${d.reason} in ${d.queue} ×${d.count}`).join("; ")],
      ["Message ID", (m) => (m.properties || {}).message_id || ""],
      ["Headers", (m) => appHeaders(m).map(([k, v]) => h("div", {class: "header"}, h("code", {}, k), " = ", show(v)))],
      ["Payload", (m) => h("pre", {class: "payload"}, m.payload)],
    ], data.messages, {empty: "No messages match."}));
  }

  // the message's own headers: not x-death nor the x-first-death-* / x-last-death-* the broker adds
  function appHeaders(m) {
    return Object.entries((m.properties || {}).headers || {})
      .filter(([k]) => k !== "x-death" && !k.startsWith("x-first-death-") && !k.startsWith("x-last-death-"));
  }

  function summaryTable(rows) {
    return table([["Reason", (s) => s.reason], ["Source queue", (s) => s.source_queue], ["Messages", (s) => fmtNum(s.count), {num: true}],
      ["", (s) => h("button", {type: "button", onclick: () => { state.reason = s.reason; state.source = s.source_queue; state.offset = 0; load(); }}, "Show")]],
    rows, {empty: "No dead-lettered messages here."});
  }

  async function loadJobs() {
    const jobs = (await get("/dead-letter-moves")).filter((j) => j.vhost === vhost && j.queue === name);
    replace(jobsEl, table([["Move", (j) => j.id], ["State", (j) => j.state], ["Moved", (j) => fmtNum(j.moved), {num: true}],
      ["Selected", (j) => fmtNum(j.selected), {num: true}], ["Unroutable", (j) => fmtNum(j.unroutable), {num: true}],
      ["Skipped", (j) => fmtNum(j.skipped), {num: true}], ["Refused", (j) => fmtNum(j.refused || 0), {num: true}], ["Started", (j) => fmtTime(j.started)], ["Error", (j) => j.error || ""],
      ["", (j) => jobButtons(j)]], jobs, {empty: "No moves yet."}));
  }

  function jobButtons(j) {
    const path = `/dead-letter-moves/${enc(j.id)}`;
    if (j.state === "running") return [h("button", {type: "button", onclick: () => act("Pause", () => api("PUT", path, {state: "paused"}))}, "Pause"), " ",
      h("button", {type: "button", class: "danger", onclick: () => act("Cancel", () => api("DELETE", path), {confirmText: "Cancel this move? Messages already moved stay moved."})}, "Cancel")];
    if (j.state === "paused") return [h("button", {type: "button", onclick: () => act("Resume", () => api("PUT", path, {state: "running"}))}, "Resume"), " ",
      h("button", {type: "button", class: "danger", onclick: () => act("Cancel", () => api("DELETE", path), {confirmText: "Cancel this move?"})}, "Cancel")];
    return "";
  }

  let watching = null;
  function watch(id) {
    clearInterval(watching);
    const bar = h("progress", {max: 1, value: 0});
    const text = h("span", {class: "muted"}, " starting…");
    replace(progressEl, h("p", {}, bar, text));
    const poll = async () => {
      let job;
      try { job = await get(`/dead-letter-moves/${enc(id)}`); } catch (e) { text.textContent = " " + e.message; return; }
      const done = job.moved + job.unroutable + job.skipped + (job.refused || 0);
      bar.max = Math.max(1, job.selected || 0);
      bar.value = done;
      const counting = !job.selected && !done && ["running", "paused"].includes(job.state);  // not "0 of 0"
      text.textContent = counting ? ` ${job.state}: selecting messages…` :
        ` ${job.state}: moved ${fmtNum(job.moved)} of ${fmtNum(job.selected)}` +
        (job.unroutable ? `, ${fmtNum(job.unroutable)} unroutable (left in place)` : "") + (job.skipped ? `, ${fmtNum(job.skipped)} skipped` : "") +
        (job.refused ? `, ${fmtNum(job.refused)} refused (left in place, see the broker log)` : "") +
        (job.error ? ` — ${job.error}` : "");
      if (!["running", "paused"].includes(job.state)) {
        clearInterval(watching);
        watching = null;
        flash(`Send back ${job.state}: moved ${job.moved}, unroutable ${job.unroutable}, skipped ${job.skipped}` + (job.refused ? `, refused ${job.refused}` : ""), job.state === "failed");
        await refresh();
      }
    };
    watching = setInterval(poll, 500);
    poll();
  }

  async function refresh() { await Promise.all([load(), loadJobs()]); }
  await refresh();
  return {refresh, stop: () => clearInterval(watching)};
}]);

// -- archive ------------------------------------------------------------------------------------------
ROUTES.push([/^#\/archive$/, "Archive", async (main) => {
  const filesEl = h("div"), reportsEl = h("div");
  append(main, [h("h1", {}, "Dead-letter archive"), h("h2", {}, "Reports"), reportsEl, h("h2", {}, "Archive files by hour"), filesEl]);
  async function refresh() {
    const [archive, reports] = await Promise.all([get("/dead-letter-archive"), get("/dead-letter-archive/reports")]);
    replace(filesEl, !archive.enabled ? h("p", {class: "muted"}, "No archive: set OTTERMQ_DLX_ARCHIVE_DIR to keep every dead letter.") : [
      h("p", {class: "muted"}, `In ${archive.dir}`),
      table([["Hour (UTC)", (hr) => hr.hour], ["Files", (hr) => hr.files.map((f) => h("div", {}, f.name, f.writing ? " (being written)" : ""))],
        ["Records", (hr) => fmtNum(hr.records), {num: true}], ["Size", (hr) => fmtBytes(hr.size), {num: true}]], archive.hours, {empty: "The archive is empty."})]);
    replace(reportsEl, !reports.enabled ? h("p", {class: "muted"}, "No reports folder: set OTTERMQ_DLX_REPORTS_DIR and write reports there with ottermq dlq report --out.") :
      table([["Report", (r) => link(`#/archive/reports/${enc(r.name)}`, r.name)], ["Written", (r) => fmtTime(r.modified)],
        ["Dead letters", (r) => fmtNum(r.records), {num: true}], ["Charts", (r) => fmtNum((r.charts || []).length), {num: true}]],
      reports.reports, {empty: `No reports in ${reports.dir}.`}));
  }
  await refresh();
  return {refresh};
}]);

ROUTES.push([/^#\/archive\/reports\/([^/]+)$/, "Report", async (main, name) => {
  const base = `/dead-letter-archive/reports/${enc(name)}`;
  const report = await get(base);
  const urls = [];
  async function chart(src) {
    const img = h("img", {alt: src});
    const file = src.replace(/^charts\//, "");
    api("GET", `${base}/charts/${enc(file)}`, undefined, {raw: true}).then(async (r) => {
      const url = URL.createObjectURL(await r.blob());
      urls.push(url);
      img.src = url;
    }).catch(() => { img.alt = `${src} (not found)`; });
    return img;
  }
  append(main, [h("h1", {}, "Report ", h("code", {}, name)), h("p", {}, link("#/archive", "← archive")),
    h("div", {class: "report-md"}, await renderMarkdown(report.markdown, chart))]);
  return {stop: () => urls.forEach((u) => URL.revokeObjectURL(u))};
}]);

// The subset of Markdown report.md uses: headings, paragraphs, lists, pipe tables, images, **bold**, `code`
async function renderMarkdown(text, image) {
  const out = [];
  const lines = (text || "").split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (!line.trim()) continue;
    const heading = line.match(/^(#{1,4})\s+(.*)$/);
    const img = line.match(/^!\[([^\]]*)\]\(([^)]+)\)\s*$/);
    if (heading) out.push(h(`h${Math.min(4, heading[1].length + 1)}`, {}, inline(heading[2])));
    else if (img) out.push(await image(img[2]));
    else if (line.startsWith("|")) {
      const rows = [];
      while (i < lines.length && lines[i].startsWith("|")) rows.push(lines[i++]);
      i--;
      const cells = (row) => row.replace(/^\||\|$/g, "").split("|").map((c) => c.trim());
      const body = rows.slice(2).map(cells);
      out.push(h("table", {}, h("thead", {}, h("tr", {}, cells(rows[0]).map((c) => h("th", {}, inline(c))))),
        h("tbody", {}, body.map((r) => h("tr", {}, r.map((c) => h("td", {}, inline(c))))))));
    } else if (/^[-*]\s/.test(line)) {
      const items = [];
      while (i < lines.length && /^[-*]\s/.test(lines[i])) items.push(lines[i++].slice(2));
      i--;
      out.push(h("ul", {}, items.map((it) => h("li", {}, inline(it)))));
    } else out.push(h("p", {}, inline(line)));
  }
  return out;
}

// **bold** and `code` as nodes; everything else text
function inline(text) {
  const parts = [];
  const re = /\*\*([^*]+)\*\*|`([^`]+)`/g;
  let last = 0, m;
  while ((m = re.exec(text))) {
    if (m.index > last) parts.push(text.slice(last, m.index));
    parts.push(m[1] !== undefined ? h("strong", {}, m[1]) : h("code", {}, m[2]));
    last = re.lastIndex;
  }
  parts.push(text.slice(last));
  return parts;
}
