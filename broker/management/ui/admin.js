/* OtterMQ web UI: virtual hosts, users and permissions, policies, definitions. */
"use strict";

NAV.push(["#/admin", "Admin", ["administrator"]], ["#/policies", "Policies", ["administrator", "policymaker"]],
  ["#/definitions", "Definitions", ["administrator"]]);

ROUTES.push([/^#\/admin$/, "Admin", async (main) => {
  const vhostsEl = h("div"), usersEl = h("div"), permsEl = h("div");
  const vhostOptions = h("span"), userOptions = h("span");
  append(main, [h("h1", {}, "Admin"),
    h("h2", {}, "Virtual hosts"), vhostsEl,
    actionForm("inline", [field("Name", h("input", {name: "name", required: true})),
      field("Description", h("input", {name: "description"})), h("button", {type: "submit", class: "primary"}, "Add virtual host")],
    "Add virtual host", (d) => api("PUT", `/vhosts/${enc(d.name)}`, {description: d.description})),
    h("h2", {}, "Users"), usersEl,
    actionForm("inline", [field("Username", h("input", {name: "name", required: true})),
      field("Password", h("input", {name: "password", type: "password", autocomplete: "new-password",
        placeholder: "empty: no password (certificate login)"})),
      field("Tags (comma-separated)", h("input", {name: "tags", placeholder: "management"})),
      h("button", {type: "submit", class: "primary"}, "Add / update user")],
    // an empty password never logs in: an empty field makes a user without one (password_hash "",
    // RabbitMQ's form for a user who logs in with a client certificate only)
    "Add user", (d) => api("PUT", `/users/${enc(d.name)}`,
      d.password ? {password: d.password, tags: d.tags} : {password_hash: "", tags: d.tags})),
    h("h2", {}, "Permissions"), permsEl,
    actionForm("inline", [field("User", userOptions), field("Virtual host", vhostOptions),
      field("Configure regexp", h("input", {name: "configure", value: ".*"})),
      field("Write regexp", h("input", {name: "write", value: ".*"})),
      field("Read regexp", h("input", {name: "read", value: ".*"})),
      h("button", {type: "submit", class: "primary"}, "Set permission")],
    "Set permission", (d) => api("PUT", `/permissions/${enc(d.vhost)}/${enc(d.user)}`,
      {configure: d.configure, write: d.write, read: d.read}), {reset: false}),
  ]);
  async function refresh() {
    const [vhosts, users, perms] = await Promise.all([get("/vhosts"), get("/users"), get("/permissions")]);
    replace(vhostsEl, table([["Name", (v) => v.name], ["Description", (v) => v.description || ""],
      ["Messages", (v) => fmtNum(v.messages || 0), {num: true}],
      ["", (v) => h("button", {type: "button", class: "danger", onclick: () => act("Delete virtual host",
        () => api("DELETE", `/vhosts/${enc(v.name)}`), {confirmText: `Delete virtual host '${v.name}' and everything in it?`})}, "Delete")]], vhosts));
    replace(usersEl, table([["Name", (u) => u.name], ["Tags", (u) => (Array.isArray(u.tags) ? u.tags : String(u.tags || "").split(",")).filter(Boolean).map((t) => h("span", {class: "tag"}, t))],
      ["Can access virtual hosts", (u) => perms.filter((p) => p.user === u.name).map((p) => p.vhost).join(", ") || "No access"],
      ["Has password", (u) => (u.password_hash ? "yes" : "no (certificate login)")],
      ["", (u) => h("button", {type: "button", class: "danger", onclick: () => act("Delete user",
        () => api("DELETE", `/users/${enc(u.name)}`), {confirmText: `Delete user '${u.name}'?`})}, "Delete")]], users));
    replace(permsEl, table([["User", (p) => p.user], ["Virtual host", (p) => p.vhost], ["Configure", (p) => p.configure],
      ["Write", (p) => p.write], ["Read", (p) => p.read],
      ["", (p) => h("button", {type: "button", onclick: () => act("Clear permission",
        () => api("DELETE", `/permissions/${enc(p.vhost)}/${enc(p.user)}`), {confirmText: `Clear ${p.user}'s permissions on '${p.vhost}'?`})}, "Clear")]], perms));
    const keepUser = userOptions.querySelector("select"), keepVhost = vhostOptions.querySelector("select");
    replace(userOptions, select("user", users.map((u) => u.name), keepUser ? keepUser.value : undefined));
    replace(vhostOptions, select("vhost", vhosts.map((v) => v.name), keepVhost ? keepVhost.value : undefined));
  }
  await refresh();
  return {refresh};
}]);

// -- policies ---------------------------------------------------------------------------------------
const POLICY_KEYS = ["message-ttl", "expires", "max-length", "max-length-bytes", "overflow", "dead-letter-exchange",
  "dead-letter-routing-key", "delivery-limit", "consumer-timeout", "alternate-exchange", "ottermq-exact-ttl"];

ROUTES.push([/^#\/policies$/, "Policies", async (main) => {
  const user = h("div"), operator = h("div");
  const vhosts = await vhostNames();
  const admin = hasTag("administrator");
  const editor = policyEditor("policies", vhosts);
  const operatorEditor = admin ? policyEditor("operator-policies", vhosts) : null;
  append(main, [h("h1", {}, "Policies"), user, h("h2", {}, "Add / update a policy"), editor.form,
    admin ? [h("h2", {}, "Operator policies"), operator, h("h2", {}, "Add / update an operator policy"),
      operatorEditor.form] : null]);
  function policyTable(kind, rows, edit) {
    return table([["Virtual host", (p) => p.vhost], ["Name", (p) => p.name], ["Pattern", (p) => h("code", {}, p.pattern)],
      ["Apply to", (p) => p["apply-to"]], ["Priority", (p) => p.priority, {num: true}],
      ["Definition", (p) => h("code", {}, JSON.stringify(p.definition))],
      ["", (p) => [h("button", {type: "button", onclick: () => edit(p)}, "Edit"), " ",
        h("button", {type: "button", class: "danger", onclick: () => act("Delete policy",
          () => api("DELETE", `/${kind}/${vhostPath(p.vhost, p.name)}`), {confirmText: `Delete policy '${p.name}'?`})}, "Delete")]]],
    rows, {empty: "No policies."});
  }
  async function refresh() {
    replace(user, policyTable("policies", await get("/policies"), editor.fill));
    if (admin) replace(operator, policyTable("operator-policies", await get("/operator-policies"), operatorEditor.fill));
  }
  await refresh();
  return {refresh};
}]);

function policyEditor(kind, vhosts) {
  const form = actionForm("stack", [
    field("Virtual host", select("vhost", vhosts, vhosts[0])),
    field("Name", h("input", {name: "name", required: true})),
    field("Pattern", h("input", {name: "pattern", required: true, placeholder: "^orders\\."})),
    field("Apply to", select("apply_to", kind === "policies" ? ["all", "queues", "exchanges", "classic_queues"] : ["queues"], kind === "policies" ? "all" : "queues")),
    field("Priority", h("input", {name: "priority", type: "number", value: 0})),
    field("Definition (key=value per line)", h("textarea", {name: "definition", rows: 4,
      placeholder: "message-ttl=60000\ndead-letter-exchange=dlx", title: "keys: " + POLICY_KEYS.join(", ")})),
    h("div", {class: "actions"}, h("button", {type: "submit", class: "primary"}, "Save policy")),
  ], "Save policy", (d) => api("PUT", `/${kind}/${vhostPath(d.vhost, d.name)}`, {pattern: d.pattern,
    "apply-to": d.apply_to, priority: Number(d.priority || 0), definition: parseArgs(d.definition)}), {reset: false});
  function fill(p) {
    form.vhost.value = p.vhost; form.name.value = p.name; form.pattern.value = p.pattern;
    form.apply_to.value = p["apply-to"]; form.priority.value = p.priority;
    form.definition.value = Object.entries(p.definition).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join("\n");
    form.scrollIntoView();
  }
  return {form, fill};
}

// -- definitions --------------------------------------------------------------------------------------
// An import's report (POST /definitions answers 200 with one when something was skipped; the overview
// carries the start-up file's): counts, then the skipped items with their reasons.
function importReport(title, report) {
  const counts = (c) => Object.entries(c || {}).filter(([, n]) => n).map(([k, n]) => `${n} ${k.replace(/_/g, " ")}`).join(", ");
  const names = (item) => Object.entries(item).filter(([k]) => k !== "section" && k !== "reason")
    .map(([k, v]) => `${k} ${v}`).join(", ");
  return h("div", {class: "import-report"}, h("h2", {}, title),
    h("p", {}, `Applied: ${counts(report.applied) || "nothing"}.` +
      (counts(report.unchanged) ? ` Left as they were: ${counts(report.unchanged)}.` : "") +
      ` Skipped: ${report.skipped.length}.`),
    report.skipped.length ? table([["Section", (s) => s.section], ["Item", names], ["Reason", (s) => s.reason]],
      report.skipped) : null);
}

ROUTES.push([/^#\/definitions$/, "Definitions", async (main) => {
  const file = h("input", {type: "file", name: "file", accept: ".json,application/json", required: true});
  const uploaded = h("div", {});
  const startup = (await get("/overview")).definitions_file;
  append(main, [h("h1", {}, "Definitions"),
    h("p", {}, "Users, virtual hosts, permissions, queues, exchanges, bindings and policies, in RabbitMQ's definitions format."),
    h("div", {class: "toolbar"}, h("button", {type: "button", class: "primary", onclick: () => act("Download definitions", async () => {
      const response = await api("GET", "/definitions", undefined, {raw: true});
      downloadBlob(await response.blob(), `ottermq-definitions-${new Date().toISOString().slice(0, 10)}.json`);
    })}, "Download broker definitions")),
    h("h2", {}, "Upload definitions"),
    actionForm("inline", [field("Definitions file", file), h("button", {type: "submit", class: "primary"}, "Upload")],
      "Upload definitions", async () => {
        const text = await file.files[0].text();
        let data;
        try { data = JSON.parse(text); } catch (e) { throw new Error("the file is not JSON"); }
        return api("POST", "/definitions", data);
      }, {after: (report) => replace(uploaded, report ? importReport("Upload: some items were skipped", report) : "")}),
    uploaded,
    startup ? importReport(`Start-up file ${startup.file}`, startup) : null,
  ]);
}]);
