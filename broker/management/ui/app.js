/* OtterMQ web UI: API client, login, routing and the refresh loop. Pages register themselves in
   ROUTES (pages.js, admin.js, deadletters.js). The UI uses only the management API, like RabbitMQ's. */
"use strict";

const API = document.querySelector('meta[name="ottermq-api"]').content.replace(/\/$/, "");
const REFRESH_MS = 5000;
const ROUTES = [];  // [regexp, title, render(main, ...params) -> {refresh?, stop?}]
const NAV = [];  // [hash, label, needsTag?]
let session = null;  // {user, auth, tags}; kept in sessionStorage only (gone when the tab closes)
let current = null;
let refreshTimer = null;

class ApiError extends Error {
  constructor(status, body) {
    super((body && (body.reason || body.error)) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

function enc(s) { return encodeURIComponent(s); }

async function api(method, path, body, options = {}) {
  const headers = {Authorization: "Basic " + session.auth};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  Object.assign(headers, options.headers || {});
  // credentials "omit": our own Authorization header only, so a 401 never opens the browser's login prompt
  const response = await fetch(API + path, {method, headers, credentials: "omit",
    body: body === undefined ? undefined : JSON.stringify(body)});
  if (options.raw) {
    if (!response.ok) throw new ApiError(response.status, null);
    return response;
  }
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = {reason: text}; }
  // a 401 that refuses the login itself ends the session; "Not administrator user", "Access
  // refused." and the like only refuse this request
  if (response.status === 401 && !options.login && (!data || data.reason === "Login failed" ||
      data.reason === "Not management user")) {
    logout("Your session ended: log in again.");
    throw new ApiError(401, data);
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

const get = (path) => api("GET", path);

function flash(message, bad = false) {
  const el = document.getElementById("flash");
  el.textContent = message;
  el.className = bad ? "flash bad" : "flash";
  el.hidden = false;
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => { el.hidden = true; }, bad ? 12000 : 5000);
}

// Run an action, report its outcome; destructive ones ask first
async function act(what, fn, {confirmText = null, after = null} = {}) {
  if (confirmText && !window.confirm(confirmText)) return false;
  document.getElementById("flash").hidden = true;
  try {
    const result = await fn();
    flash(what + ": done");
    if (after) await after(result);
    else await refreshNow();
    return true;
  } catch (e) {
    flash(`${what} failed: ${e.message}`, true);
    return false;
  }
}

function hasTag(...tags) { return session && session.tags.some((t) => tags.includes(t)); }

// -- login -----------------------------------------------------------------------------------
async function login(username, password) {
  const auth = btoa(unescape(encodeURIComponent(`${username}:${password}`)));
  session = {user: username, auth, tags: []};
  try {
    const me = await api("GET", "/whoami", undefined, {login: true});
    session.tags = me.tags || [];
  } catch (e) {
    session = null;
    if (e.status === 401 && e.body && e.body.reason === "Not management user") {
      throw new Error(`User '${username}' has no management tag (management, policymaker, monitoring or ` +
        "administrator), so it cannot use the management UI.");
    }
    throw new Error(e.status === 401 ? "Login failed: wrong username or password." : `Login failed: ${e.message}`);
  }
  sessionStorage.setItem("ottermq.session", JSON.stringify(session));
}

function logout(message = "") {
  session = null;
  sessionStorage.removeItem("ottermq.session");
  stopPage();
  document.getElementById("shell").hidden = true;
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message;
  document.getElementById("password").value = "";
}

function showShell() {
  document.getElementById("login").hidden = true;
  document.getElementById("shell").hidden = false;
  document.getElementById("whoami").textContent = `${session.user} (${session.tags.join(", ") || "no tags"})`;
  const nav = replace(document.getElementById("nav"));
  for (const [hash, label, tags] of NAV) {
    if (tags && !hasTag(...tags)) continue;
    append(nav, [h("a", {href: hash, dataset: {nav: hash}}, label)]);
  }
  route();
}

// -- routing ----------------------------------------------------------------------------------
function stopPage() {
  clearInterval(refreshTimer);
  refreshTimer = null;
  if (current && current.stop) current.stop();
  current = null;
}

async function route() {
  if (!session) return;
  stopPage();
  const hash = location.hash || "#/";
  for (const a of document.querySelectorAll("#nav a")) {
    const target = a.dataset.nav;
    a.classList.toggle("active", target === "#/" ? hash === "#/" : hash === target || hash.startsWith(target + "/"));
  }
  const main = replace(document.getElementById("main"));
  for (const [pattern, title, render] of ROUTES) {
    const match = hash.match(pattern);
    if (!match) continue;
    document.title = `${title} - OtterMQ`;
    const params = match.slice(1).map(decodeURIComponent);
    try {
      current = (await render(main, ...params)) || {};
    } catch (e) {
      append(main, [h("p", {class: "error"}, e.status === 404 ? "Not found." : e.message)]);
      current = {};
    }
    if (current.refresh) refreshTimer = setInterval(() => current && current.refresh().catch(() => {}), REFRESH_MS);
    return;
  }
  append(main, [h("h1", {}, "Not found"), h("p", {}, "No page at ", h("code", {}, hash))]);
}

async function refreshNow() { if (current && current.refresh) await current.refresh(); }

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => {
  document.getElementById("login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target;
    const error = document.getElementById("login-error");
    error.textContent = "";
    try {
      await login(form.username.value, form.password.value);
      showShell();
    } catch (e) {
      error.textContent = e.message;
    }
  });
  document.getElementById("logout").addEventListener("click", () => logout("Logged out."));
  const saved = sessionStorage.getItem("ottermq.session");
  if (saved) {
    session = JSON.parse(saved);
    showShell();
  } else {
    logout();
  }
});

// -- shared pieces ------------------------------------------------------------------------------
function vhostPath(vhost, name) { return `${enc(vhost)}/${enc(name)}`; }
function queueHash(vhost, name) { return `#/queues/${vhostPath(vhost, name)}`; }
function exchangeHash(vhost, name) { return `#/exchanges/${vhostPath(vhost, name || "amq.default")}`; }

async function vhostNames() { return (await get("/vhosts?columns=name")).map((v) => v.name); }

// A paged, sortable, filterable list backed by the API's pagination (RabbitMQ's page/name/use_regex)
function pagedList(container, path, columns, {empty = "Nothing here.", pageSize = 50} = {}) {
  const state = {page: 1, name: "", regex: false, sort: null, reverse: false};
  const filter = h("input", {type: "search", placeholder: "Filter by name", "aria-label": "filter", value: ""});
  const regex = h("input", {type: "checkbox", "aria-label": "regex"});
  const info = h("span", {class: "muted"});
  const body = h("div");
  const prev = h("button", {type: "button", onclick: () => { state.page--; load(); }}, "‹ Previous");
  const next = h("button", {type: "button", onclick: () => { state.page++; load(); }}, "Next ›");
  let timer = null;
  filter.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => { state.name = filter.value; state.page = 1; load(); }, 250); });
  regex.addEventListener("change", () => { state.regex = regex.checked; state.page = 1; load(); });
  append(container, [h("div", {class: "toolbar"}, filter, h("label", {class: "inline"}, h("span", {}, "Regex"), regex),
    h("span", {class: "pager"}, prev, info, next)), body]);

  async function load() {
    const query = new URLSearchParams({page: state.page, page_size: pageSize, name: state.name, use_regex: state.regex});
    if (state.sort) { query.set("sort", state.sort); query.set("sort_reverse", state.reverse); }
    let data;
    try {
      data = await get(`${path}?${query}`);
    } catch (e) {
      if (e.body && e.body.error === "page_out_of_range") { state.page = 1; return load(); }
      replace(body, h("p", {class: "error"}, e.message));
      return;
    }
    prev.disabled = state.page <= 1;
    next.disabled = state.page >= data.page_count;
    info.textContent = `page ${data.page} of ${Math.max(1, data.page_count)} · ${data.filtered_count} of ${data.total_count}`;
    const sortIndex = columns.findIndex((c) => c[2] && c[2].sort === state.sort);
    replace(body, table(columns, data.items, {
      empty,
      sortState: {column: sortIndex >= 0 ? sortIndex : null, reverse: state.reverse},
      onSort: (i) => {
        const key = columns[i][2] && columns[i][2].sort;
        if (!key) return;
        if (state.sort === key) state.reverse = !state.reverse; else { state.sort = key; state.reverse = false; }
        load();
      },
    }));
  }
  return load;
}

// A form whose submit runs `fn(data)` through act()
function actionForm(cls, children, what, fn, options = {}) {
  const form = h("form", {class: cls}, children);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const ok = await act(what, () => fn(formData(form), form), options);
    if (ok && options.reset !== false) form.reset();
  });
  return form;
}

// "key=value" lines (values JSON when they parse: numbers, booleans) -> object
function parseArgs(text) {
  const out = {};
  for (const line of (text || "").split("\n")) {
    const i = line.indexOf("=");
    if (i <= 0) continue;
    const key = line.slice(0, i).trim(), raw = line.slice(i + 1).trim();
    try { out[key] = JSON.parse(raw); } catch (e) { out[key] = raw; }
  }
  return out;
}

function downloadBlob(blob, filename) {
  const url = URL.createObjectURL(blob);
  const a = h("a", {href: url, download: filename});
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
