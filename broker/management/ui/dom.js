/* OtterMQ web UI: DOM helpers. Every name, header and payload reaches the page as a text node or an
   attribute value set through the DOM, never as HTML, so nothing a client sends can run here. */
"use strict";

// h("td", {class: "num", onclick: f}, child, ...): children are nodes, strings/numbers (text) or arrays
function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "value") el.value = value;
    else if (key === "checked") el.checked = !!value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); return el; }
function replace(el, ...children) { clear(el); append(el, children); return el; }

function fmtNum(n) {
  if (n === undefined || n === null || n === "") return "";
  if (typeof n !== "number") return String(n);
  return Number.isInteger(n) ? n.toLocaleString("en-US") : n.toLocaleString("en-US", {maximumFractionDigits: 1});
}

function fmtRate(details) { return details && typeof details.rate === "number" ? fmtNum(details.rate) + "/s" : ""; }

function fmtBytes(n) {
  if (typeof n !== "number") return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function fmtTime(value) {
  if (value === undefined || value === null || value === "") return "";
  const ms = typeof value === "number" ? (value < 1e11 ? value * 1000 : value) : Date.parse(value);
  return isNaN(ms) ? String(value) : new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

// A value shown as text: objects as JSON
function show(value) {
  if (value === undefined || value === null) return "";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

// A table from rows: columns are [title, value(row) -> node/text, {num, sort: key(row)}]
function table(columns, rows, options = {}) {
  const state = options.sortState || {};
  const thead = h("thead", {}, h("tr", {}, columns.map(([title, , opts = {}], i) => {
    const sortable = opts.sort !== undefined || options.sortable;
    const cls = [opts.num ? "num" : "", sortable ? "sortable" : "",
      state.column === i ? (state.reverse ? "sorted-desc" : "sorted-asc") : ""].join(" ").trim();
    return h("th", {class: cls || null, onclick: sortable && options.onSort ? () => options.onSort(i) : null}, title);
  })));
  const body = h("tbody", {}, rows.length ? rows.map((row) => h("tr", {},
    columns.map(([, cell, opts = {}]) => h("td", {class: opts.num ? "num" : null}, cell(row))))) :
    h("tr", {}, h("td", {colspan: columns.length, class: "muted"}, options.empty || "Nothing here.")));
  return h("table", {class: options.class || null}, thead, body);
}

// Key/value table of an object
function kvTable(pairs) {
  return h("table", {class: "kv"}, h("tbody", {}, pairs.filter(Boolean).map(([k, v]) =>
    h("tr", {}, h("th", {}, k), h("td", {}, v instanceof Node ? v : show(v))))));
}

function link(hash, text) { return h("a", {href: hash}, text); }

function field(label, input) { return h("label", {}, label, input); }

function select(name, options, value) {
  return h("select", {name}, options.map((o) => {
    const [v, text] = Array.isArray(o) ? o : [o, o];
    return h("option", {value: v, selected: v === value ? true : null}, text);
  }));
}

function formData(form) {
  const data = {};
  for (const el of form.elements) {
    if (!el.name) continue;
    data[el.name] = el.type === "checkbox" ? el.checked : el.value;
  }
  return data;
}
