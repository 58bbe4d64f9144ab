/* OtterMQ web UI: dynamic shovels, like RabbitMQ's "Shovel Status" and "Shovel Management" pages. */
"use strict";

NAV.push(["#/shovels", "Shovels", ["administrator", "monitoring", "policymaker"]]);

// The ends of a shovel as its status shows them: "queue q" or "exchange x (key k)"
function shovelEnd(s, side) {
  if (s[`${side}_queue`] !== undefined) return `queue ${s[`${side}_queue`]}`;
  if (s[`${side}_exchange`] !== undefined) {
    const key = s[`${side}_exchange_key`];
    return `exchange ${s[`${side}_exchange`]}` + (key ? ` (key ${key})` : "");
  }
  return "";
}

// A parameter's end: "queue q" / "exchange x (key k)" from its value
function definitionEnd(v, side) {
  if (v[`${side}-queue`] !== undefined) return `queue ${v[`${side}-queue`]}`;
  if (v[`${side}-exchange`] !== undefined) {
    const key = v[`${side}-exchange-key`];
    return `exchange ${v[`${side}-exchange`]}` + (key ? ` (key ${key})` : "");
  }
  return "";
}

ROUTES.push([/^#\/shovels$/, "Shovels", async (main) => {
  const statusEl = h("div"), paramsEl = h("div");
  const monitor = hasTag("administrator", "monitoring");
  const manage = hasTag("administrator", "policymaker");
  const vhosts = manage ? await vhostNames() : [];
  append(main, [h("h1", {}, "Shovels"),
    monitor ? [h("h2", {}, "Shovel status"), statusEl] : null,
    manage ? [h("h2", {}, "Shovel management"), paramsEl, h("h2", {}, "Add a new shovel"), shovelForm(vhosts)] : null]);
  async function refresh() {
    const [status, params] = await Promise.all([monitor ? get("/shovels") : [], manage ? get("/parameters/shovel") : []]);
    if (monitor) {
      replace(statusEl, table([
        ["Name", (s) => s.name], ["Virtual host", (s) => s.vhost],
        ["State", (s) => h("span", {class: `state-${s.state}`}, s.state)],
        ["Source", (s) => [s.src_uri || "", " ", shovelEnd(s, "src")]],
        ["Destination", (s) => [s.dest_uri || "", " ", shovelEnd(s, "dest")]],
        ["Last changed", (s) => s.timestamp], ["Reason", (s) => s.reason || ""],
        ["", (s) => [h("button", {type: "button", onclick: () => act("Restart shovel",
          () => api("DELETE", `/shovels/vhost/${vhostPath(s.vhost, s.name)}/restart`))}, "Restart")]],
      ], status, {empty: "No shovels are running."}));
    }
    if (manage) {
      replace(paramsEl, table([
        ["Name", (p) => p.name], ["Virtual host", (p) => p.vhost],
        ["Source", (p) => [show(p.value["src-uri"]), " ", definitionEnd(p.value, "src")]],
        ["Destination", (p) => [show(p.value["dest-uri"]), " ", definitionEnd(p.value, "dest")]],
        ["Ack mode", (p) => p.value["ack-mode"] || "on-confirm"],
        ["Delete after", (p) => show(p.value["src-delete-after"] || "never")],
        ["", (p) => h("button", {type: "button", class: "danger", onclick: () => act("Delete shovel",
          () => api("DELETE", `/parameters/shovel/${vhostPath(p.vhost, p.name)}`),
          {confirmText: `Delete shovel '${p.name}'?`})}, "Delete")],
      ], params, {empty: "No shovels."}));
    }
  }
  await refresh();
  return {refresh};
}]);

function shovelForm(vhosts) {
  const kinds = [["queue", "Queue"], ["exchange", "Exchange"]];
  return actionForm("stack", [
    field("Virtual host", select("vhost", vhosts, vhosts[0])),
    field("Name", h("input", {name: "name", required: true})),
    field("Source URI", h("input", {name: "src_uri", required: true, value: "amqp://", placeholder: "amqp://user:password@host:5672/vhost"})),
    field("Source", select("src_kind", kinds, "queue")),
    field("Source queue or exchange", h("input", {name: "src_name", required: true})),
    field("Source routing key (exchange)", h("input", {name: "src_key"})),
    field("Prefetch count", h("input", {name: "prefetch", type: "number", value: 1000, min: 0})),
    field("Delete after", select("delete_after", [["never", "Never"], ["queue-length", "After initial length transferred"]], "never")),
    field("Destination URI", h("input", {name: "dest_uri", required: true, value: "amqp://"})),
    field("Destination", select("dest_kind", kinds, "queue")),
    field("Destination queue or exchange", h("input", {name: "dest_name", required: true})),
    field("Destination routing key (exchange)", h("input", {name: "dest_key"})),
    field("Add forwarding headers", h("input", {name: "forward", type: "checkbox"})),
    field("Add timestamp header", h("input", {name: "stamp", type: "checkbox"})),
    field("Acknowledgement mode", select("ack_mode", [["on-confirm", "On confirm"], ["on-publish", "On publish"], ["no-ack", "No ack"]], "on-confirm")),
    field("Reconnect delay (s)", h("input", {name: "reconnect", type: "number", value: 5, min: 0})),
    h("div", {class: "actions"}, h("button", {type: "submit", class: "primary"}, "Add shovel")),
  ], "Add shovel", (d) => {
    const value = {"src-uri": d.src_uri, "dest-uri": d.dest_uri, "ack-mode": d.ack_mode,
      "src-prefetch-count": Number(d.prefetch || 0), "src-delete-after": d.delete_after,
      "reconnect-delay": Number(d.reconnect || 0),
      "dest-add-forward-headers": d.forward, "dest-add-timestamp-header": d.stamp};
    value[`src-${d.src_kind}`] = d.src_name;
    if (d.src_kind === "exchange") value["src-exchange-key"] = d.src_key || "";
    value[`dest-${d.dest_kind}`] = d.dest_name;
    if (d.dest_kind === "exchange" && d.dest_key) value["dest-exchange-key"] = d.dest_key;
    return api("PUT", `/parameters/shovel/${vhostPath(d.vhost, d.name)}`, {value});
  }, {reset: false});
}
