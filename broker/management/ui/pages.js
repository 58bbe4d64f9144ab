/* OtterMQ web UI: overview, queues, exchanges, connections and channels. */
"use strict";

NAV.push(["#/", "Overview"], ["#/queues", "Queues"], ["#/exchanges", "Exchanges"],
  ["#/connections", "Connections"], ["#/channels", "Channels"]);

// -- overview --------------------------------------------------------------------------------------
const HISTORY_MS = 10 * 60 * 1000;
const history = {rates: [], queued: [], dead: [], lastDead: null};  // kept while the tab lives

function keep(list, point) {
  list.push(point);
  while (list.length && list[0][0] < Date.now() - HISTORY_MS) list.shift();
}

ROUTES.push([/^#\/?$/, "Overview", async (main) => {
  const rates = chartBlock("Message rates (/s)", ["publish", "deliver / get", "acknowledge", "redelivered"]);
  const queued = chartBlock("Queued messages", ["ready", "unacknowledged", "total"]);
  const reasons = ["expired", "rejected", "maxlen", "delivery_limit"];
  const dead = chartBlock("Dead-letter rates by reason (/s)", reasons);
  const cards = h("div", {class: "cards"});
  const details = h("div");
  append(main, [h("h1", {}, "Overview"), cards, h("div", {class: "charts"}, rates.el, queued.el, dead.el), details]);

  function series(list, n) {
    return Array.from({length: n}, (_, i) => ({points: list.map((p) => [p[0], p[1][i]])}));
  }

  async function refresh() {
    const [ov, nodes] = await Promise.all([get("/overview"), hasTag("administrator", "monitoring") ? get("/nodes") : Promise.resolve([])]);
    const now = Date.now();
    const ms = ov.message_stats || {};
    const rate = (k) => (ms[k + "_details"] || {}).rate || 0;
    keep(history.rates, [now, [rate("publish"), rate("deliver_get"), rate("ack"), rate("redeliver")]]);
    const qt = ov.queue_totals || {};
    keep(history.queued, [now, [qt.messages_ready || 0, qt.messages_unacknowledged || 0, qt.messages || 0]]);
    const deadNow = ov.dead_letter_stats || {};
    if (history.lastDead) {
      const seconds = Math.max(0.001, (now - history.lastDead[0]) / 1000);
      keep(history.dead, [now, reasons.map((r) => Math.max(0, ((deadNow[r] || 0) - (history.lastDead[1][r] || 0)) / seconds))]);
    }
    history.lastDead = [now, deadNow];
    rates.update(series(history.rates, 4));
    queued.update(series(history.queued, 3));
    dead.update(series(history.dead, 4));
    const ot = ov.object_totals || {};
    replace(cards, [
      ["Ready", qt.messages_ready], ["Unacked", qt.messages_unacknowledged], ["Total", qt.messages],
      ["Connections", ot.connections], ["Channels", ot.channels], ["Exchanges", ot.exchanges],
      ["Queues", ot.queues], ["Consumers", ot.consumers],
      ...reasons.map((r) => [`Dead-lettered: ${r}`, deadNow[r] || 0]),
    ].map(([label, n]) => h("div", {class: "card"}, h("div", {class: "n"}, fmtNum(n || 0)), h("div", {class: "l"}, label))));
    const alarms = [];
    for (const node of nodes) {
      if (node.mem_alarm) alarms.push(`${node.name}: memory alarm (${fmtBytes(node.mem_used)} used, limit ${fmtBytes(node.mem_limit)})`);
      if (node.disk_free_alarm) alarms.push(`${node.name}: disk alarm (${fmtBytes(node.disk_free)} free, limit ${fmtBytes(node.disk_free_limit)})`);
    }
    replace(details,
      h("h2", {}, "Alarms"),
      nodes.length ? (alarms.length ? h("ul", {class: "error"}, alarms.map((a) => h("li", {}, a))) : h("p", {class: "ok"}, "No alarms.")) :
        h("p", {class: "muted"}, "Only administrators and monitoring users see node alarms."),
      h("h2", {}, "Listeners"),
      table([["Protocol", (l) => l.protocol], ["Interface", (l) => l.ip_address], ["Port", (l) => l.port, {num: true}]], ov.listeners || []),
      h("h2", {}, "Node"),
      kvTable([["Node", ov.node], ["Product", `${ov.product_name} ${ov.product_version}`],
        ["API compatible with RabbitMQ", ov.rabbitmq_version],
        ...nodes.map((n) => ["Memory / file descriptors", `${fmtBytes(n.mem_used)} · ${n.fd_used} of ${n.fd_total}`])]),
    );
  }
  await refresh();
  return {refresh};
}]);

// -- queues -------------------------------------------------------------------------------------------
const QUEUE_COLUMNS = [
  ["Virtual host", (q) => q.vhost, {sort: "vhost"}],
  ["Name", (q) => link(queueHash(q.vhost, q.name), q.name), {sort: "name"}],
  ["Type", (q) => q.type || "classic"],  // as RabbitMQ's UI: classic, quorum, stream
  ["Features", (q) => features(q)],
  ["Policy", (q) => [q.policy || "", q.operator_policy ? h("span", {class: "tag"}, "op: " + q.operator_policy) : null], {sort: "policy"}],
  ["State", (q) => q.state || ""],
  ["Ready", (q) => fmtNum(q.messages_ready), {num: true, sort: "messages_ready"}],
  ["Unacked", (q) => fmtNum(q.messages_unacknowledged), {num: true, sort: "messages_unacknowledged"}],
  ["Total", (q) => fmtNum(q.messages), {num: true, sort: "messages"}],
  ["Incoming", (q) => fmtRate((q.message_stats || {}).publish_details), {num: true}],
  ["Deliver / get", (q) => fmtRate((q.message_stats || {}).deliver_get_details), {num: true}],
  ["Ack", (q) => fmtRate((q.message_stats || {}).ack_details), {num: true}],
  ["Consumers", (q) => fmtNum(q.consumers), {num: true, sort: "consumers"}],
];

function features(q) {
  const tags = [];
  if (q.durable) tags.push("D");
  if (q.auto_delete) tags.push("AD");
  if (q.exclusive) tags.push("Excl");
  for (const key of Object.keys(q.arguments || {})) tags.push(key.replace(/^x-/, ""));
  return tags.map((t) => h("span", {class: "tag"}, t));
}

ROUTES.push([/^#\/queues$/, "Queues", async (main) => {
  const list = h("div");
  const vhosts = await vhostNames();
  append(main, [h("h1", {}, "Queues"), list, h("h2", {}, "Add a queue"),
    actionForm("inline", [
      field("Virtual host", select("vhost", vhosts, vhosts[0])),
      field("Name", h("input", {name: "name", required: true})),
      field("Durable", select("durable", [["true", "durable"], ["false", "transient"]], "true")),
      field("Auto delete", select("auto_delete", [["false", "no"], ["true", "yes"]], "false")),
      field("Arguments (key=value per line)", h("textarea", {name: "arguments", rows: 2, placeholder: "x-message-ttl=60000"})),
      h("button", {type: "submit", class: "primary"}, "Add queue"),
    ], "Add queue", (d) => api("PUT", `/queues/${vhostPath(d.vhost, d.name)}`,
      {durable: d.durable === "true", auto_delete: d.auto_delete === "true", arguments: parseArgs(d.arguments)})),
  ]);
  const load = pagedList(list, "/queues", QUEUE_COLUMNS, {empty: "No queues."});
  await load();
  return {refresh: load};
}]);

ROUTES.push([/^#\/queues\/([^/]+)\/([^/]+)$/, "Queue", async (main, vhost, name) => {
  const path = `/queues/${vhostPath(vhost, name)}`;
  const summary = h("div"), bindingsEl = h("div"), consumersEl = h("div"), got = h("div");
  append(main, [
    h("h1", {}, "Queue ", h("code", {}, name), h("span", {class: "muted"}, ` in ${vhost}`)),
    summary,
    h("p", {}, link(`#/dead-letters/${vhostPath(vhost, name)}`, "Dead letters in this queue →")),
    h("h2", {}, "Consumers"), consumersEl,
    h("h2", {}, "Bindings"), bindingsEl,
    actionForm("inline", [
      field("From exchange", h("input", {name: "source", required: true})),
      field("Routing key", h("input", {name: "routing_key"})),
      field("Arguments", h("textarea", {name: "arguments", rows: 1})),
      h("button", {type: "submit"}, "Bind"),
    ], "Bind", (d) => api("POST", `/bindings/${enc(vhost)}/e/${enc(d.source)}/q/${enc(name)}`,
      {routing_key: d.routing_key, arguments: parseArgs(d.arguments)})),
    h("h2", {}, "Get messages"),
    h("p", {class: "muted"}, "Getting messages is destructive unless the ack mode requeues them."),
    actionForm("inline", [
      field("Ack mode", select("ackmode", [["ack_requeue_true", "Nack message requeue true"],
        ["ack_requeue_false", "Automatic ack"], ["reject_requeue_true", "Reject requeue true"],
        ["reject_requeue_false", "Reject requeue false"]], "ack_requeue_true")),
      field("Encoding", select("encoding", [["auto", "Auto string / base64"], ["base64", "base64"]], "auto")),
      field("Messages", h("input", {name: "count", type: "number", min: 1, value: 1})),
      field("Truncate at (bytes)", h("input", {name: "truncate", type: "number", min: 0, value: 50000})),
      h("button", {type: "submit"}, "Get message(s)"),
    ], "Get messages", async (d) => {
      const messages = await api("POST", `${path}/get`, {count: Number(d.count), ackmode: d.ackmode,
        encoding: d.encoding, truncate: d.truncate === "" ? undefined : Number(d.truncate)});
      replace(got, messages.length ? messages.map((m, i) => h("div", {class: "message"},
        h("h3", {}, `Message ${i + 1}`),
        kvTable([["Exchange", m.exchange], ["Routing key", m.routing_key], ["Redelivered", String(m.redelivered)],
          ["Remaining messages", m.message_count], ["Properties", h("pre", {}, JSON.stringify(m.properties, null, 2))],
          ["Payload", h("div", {}, h("span", {class: "muted"}, `${m.payload_bytes} bytes, ${m.payload_encoding}`), h("pre", {class: "payload"}, m.payload))]]))) :
        h("p", {class: "muted"}, "Queue is empty."));
    }, {reset: false, after: () => refresh()}),
    got,
    h("h2", {}, "Publish message"),
    publishForm(vhost, "", name),
    h("h2", {}, "Purge and delete"),
    h("div", {class: "toolbar"},
      h("button", {type: "button", class: "danger", onclick: () => act("Purge", () => api("DELETE", `${path}/contents`),
        {confirmText: `Purge every ready message of queue '${name}'?`})}, "Purge messages"),
      h("button", {type: "button", class: "danger", onclick: () => act("Delete queue", () => api("DELETE", path),
        {confirmText: `Delete queue '${name}' and its messages?`, after: () => { location.hash = "#/queues"; }})}, "Delete queue")),
  ]);

  async function refresh() {
    const [q, bindings] = await Promise.all([get(path), get(`${path}/bindings`)]);
    const ms = q.message_stats || {};
    replace(summary, h("div", {class: "cards"}, [["Ready", q.messages_ready], ["Unacked", q.messages_unacknowledged],
      ["Total", q.messages], ["Consumers", q.consumers], ["Bytes", fmtBytes(q.message_bytes)],
      ["Incoming", fmtRate(ms.publish_details)], ["Deliver / get", fmtRate(ms.deliver_get_details)], ["Ack", fmtRate(ms.ack_details)]]
      .map(([l, n]) => h("div", {class: "card"}, h("div", {class: "n"}, typeof n === "number" ? fmtNum(n) : (n || "0")), h("div", {class: "l"}, l)))),
    kvTable([["Type", q.type], ["State", q.state], ["Durable", String(q.durable)], ["Auto delete", String(q.auto_delete)],
      ["Exclusive", String(q.exclusive)], ["Arguments", h("pre", {}, JSON.stringify(q.arguments || {}, null, 2))],
      ["Policy", q.policy || "none"], ["Operator policy", q.operator_policy || "none"],
      ["Effective policy definition", h("pre", {}, JSON.stringify(q.effective_policy_definition || {}, null, 2))],
      ...(q.type === "quorum" ? [["Leader", q.leader], ["Members", (q.members || []).join(", ")]]
        : [["Head message timestamp", fmtTime(q.head_message_timestamp)]])]));
    replace(consumersEl, table([["Channel", (c) => (c.channel_details || {}).name || ""], ["Consumer tag", (c) => c.consumer_tag],
      ["Ack required", (c) => String(c.ack_required)], ["Prefetch", (c) => fmtNum(c.prefetch_count), {num: true}],
      ["Exclusive", (c) => String(c.exclusive)], ["Arguments", (c) => show(c.arguments)]], q.consumer_details || [], {empty: "No consumers."}));
    replace(bindingsEl, table([["From", (b) => b.source ? link(exchangeHash(vhost, b.source), b.source) : "(default exchange)"],
      ["Routing key", (b) => b.routing_key], ["Arguments", (b) => show(b.arguments)],
      ["", (b) => b.source ? h("button", {type: "button", onclick: () => act("Unbind", () =>
        api("DELETE", `/bindings/${enc(vhost)}/e/${enc(b.source)}/q/${enc(name)}/${enc(b.properties_key)}`),
      {confirmText: `Unbind '${b.routing_key}' from '${b.source}'?`})}, "Unbind") : ""]], bindings));
  }
  await refresh();
  return {refresh};
}]);

// A publish form: to `exchange`, or to a queue through the default exchange
function publishForm(vhost, exchange, queue = null) {
  return actionForm("stack", [
    queue === null ? field("Routing key", h("input", {name: "routing_key"})) : null,
    field("Delivery mode", select("delivery_mode", [["1", "1 - non-persistent"], ["2", "2 - persistent"]], "1")),
    field("Headers (key=value per line)", h("textarea", {name: "headers", rows: 2})),
    field("Properties (key=value per line)", h("textarea", {name: "props", rows: 2, placeholder: "expiration=60000\ncontent_type=text/plain"})),
    field("Payload", h("textarea", {name: "payload", rows: 4})),
    field("Payload encoding", select("payload_encoding", [["string", "String"], ["base64", "Base64"]], "string")),
    h("div", {class: "actions"}, h("button", {type: "submit", class: "primary"}, "Publish message")),
  ], "Publish", async (d) => {
    const properties = {delivery_mode: Number(d.delivery_mode), headers: parseArgs(d.headers)};
    for (const [k, v] of Object.entries(parseArgs(d.props))) properties[k] = typeof v === "number" && k !== "priority" && k !== "timestamp" ? String(v) : v;
    const result = await api("POST", `/exchanges/${vhostPath(vhost, exchange || "amq.default")}/publish`,
      {properties, routing_key: queue === null ? d.routing_key : queue, payload: d.payload, payload_encoding: d.payload_encoding});
    if (!result.routed) throw new Error("message published, but not routed to any queue");
  });
}

// -- exchanges ----------------------------------------------------------------------------------------
ROUTES.push([/^#\/exchanges$/, "Exchanges", async (main) => {
  const list = h("div");
  const vhosts = await vhostNames();
  append(main, [h("h1", {}, "Exchanges"), list, h("h2", {}, "Add an exchange"),
    actionForm("inline", [
      field("Virtual host", select("vhost", vhosts, vhosts[0])),
      field("Name", h("input", {name: "name", required: true})),
      field("Type", select("type", ["direct", "fanout", "headers", "topic", "x-consistent-hash", "x-delayed-message", "x-message-deduplication"], "direct")),
      field("Durable", select("durable", [["true", "durable"], ["false", "transient"]], "true")),
      field("Arguments", h("textarea", {name: "arguments", rows: 1, placeholder: "alternate-exchange=ae"})),
      h("button", {type: "submit", class: "primary"}, "Add exchange"),
    ], "Add exchange", (d) => api("PUT", `/exchanges/${vhostPath(d.vhost, d.name)}`,
      {type: d.type, durable: d.durable === "true", arguments: parseArgs(d.arguments)}))]);
  const load = pagedList(list, "/exchanges", [
    ["Virtual host", (x) => x.vhost, {sort: "vhost"}],
    ["Name", (x) => link(exchangeHash(x.vhost, x.name), x.name || "(AMQP default)"), {sort: "name"}],
    ["Type", (x) => x.type, {sort: "type"}],
    ["Features", (x) => [x.durable ? "D" : "", x.auto_delete ? " AD" : "", x.internal ? " I" : ""].join("")],
    ["Policy", (x) => x.policy || ""],
    ["Rate in", (x) => fmtRate((x.message_stats || {}).publish_in_details), {num: true}],
    ["Rate out", (x) => fmtRate((x.message_stats || {}).publish_out_details), {num: true}],
  ]);
  await load();
  return {refresh: load};
}]);

ROUTES.push([/^#\/exchanges\/([^/]+)\/([^/]+)$/, "Exchange", async (main, vhost, name) => {
  const isDefault = name === "amq.default";
  const path = `/exchanges/${vhostPath(vhost, name)}`;
  const info = h("div"), source = h("div"), destination = h("div");
  append(main, [h("h1", {}, "Exchange ", h("code", {}, isDefault ? "(AMQP default)" : name), h("span", {class: "muted"}, ` in ${vhost}`)),
    info, h("h2", {}, "Bindings from this exchange"), source,
    isDefault ? null : actionForm("inline", [
      field("To", select("kind", [["q", "queue"], ["e", "exchange"]], "q")),
      field("Name", h("input", {name: "destination", required: true})),
      field("Routing key", h("input", {name: "routing_key"})),
      field("Arguments", h("textarea", {name: "arguments", rows: 1})),
      h("button", {type: "submit"}, "Bind"),
    ], "Bind", (d) => api("POST", `/bindings/${enc(vhost)}/e/${enc(name)}/${d.kind}/${enc(d.destination)}`,
      {routing_key: d.routing_key, arguments: parseArgs(d.arguments)})),
    h("h2", {}, "Bindings to this exchange"), destination,
    h("h2", {}, "Publish message"), publishForm(vhost, isDefault ? "" : name),
    isDefault ? null : h("div", {class: "toolbar"}, h("button", {type: "button", class: "danger", onclick: () => act("Delete exchange",
      () => api("DELETE", path), {confirmText: `Delete exchange '${name}'?`, after: () => { location.hash = "#/exchanges"; }})}, "Delete exchange")),
  ]);
  async function refresh() {
    const x = await get(path);
    const rows = [["Type", x.type], ["Durable", String(x.durable)], ["Auto delete", String(x.auto_delete)],
      ["Internal", String(x.internal)], ["Arguments", h("pre", {}, JSON.stringify(x.arguments || {}, null, 2))], ["Policy", x.policy || "none"]];
    if (x.messages_delayed !== undefined) rows.push(["Messages delayed", fmtNum(x.messages_delayed)]);
    if (x.deduplication) rows.push(["Deduplication", `${fmtNum(x.deduplication.entries)} of ${fmtNum(x.deduplication.cache_size)} keys, ${fmtNum(x.deduplication.duplicates)} duplicates dropped`]);
    replace(info, kvTable(rows));
    if (isDefault) {
      replace(source, h("p", {class: "muted"}, "The default exchange is implicitly bound to every queue, with the queue's name as routing key."));
      return;
    }
    const [from, to] = await Promise.all([get(`${path}/bindings/source`), get(`${path}/bindings/destination`)]);
    const unbind = (b) => h("button", {type: "button", onclick: () => act("Unbind", () =>
      api("DELETE", `/bindings/${enc(vhost)}/e/${enc(b.source)}/${b.destination_type === "queue" ? "q" : "e"}/${enc(b.destination)}/${enc(b.properties_key)}`),
    {confirmText: `Remove binding '${b.routing_key}' from '${b.source}' to '${b.destination}'?`})}, "Unbind");
    replace(source, table([["To", (b) => b.destination_type === "queue" ? link(queueHash(vhost, b.destination), b.destination) :
      link(exchangeHash(vhost, b.destination), b.destination)], ["Type", (b) => b.destination_type],
    ["Routing key", (b) => b.routing_key], ["Arguments", (b) => show(b.arguments)], ["", unbind]], from, {empty: "No bindings."}));
    replace(destination, table([["From", (b) => link(exchangeHash(vhost, b.source), b.source)], ["Routing key", (b) => b.routing_key],
      ["Arguments", (b) => show(b.arguments)], ["", unbind]], to, {empty: "No bindings."}));
  }
  await refresh();
  return {refresh};
}]);

// -- connections and channels ----------------------------------------------------------------------
function closeConnection(name) {
  return act("Close connection", () => api("DELETE", `/connections/${enc(name)}`, undefined,
    {headers: {"X-Reason": "Closed via management UI"}}), {confirmText: `Close connection '${name}'?`});
}

ROUTES.push([/^#\/connections$/, "Connections", async (main) => {
  const list = h("div");
  append(main, [h("h1", {}, "Connections"), list]);
  const load = pagedList(list, "/connections", [
    ["Virtual host", (c) => c.vhost, {sort: "vhost"}],
    ["Name", (c) => link(`#/connections/${enc(c.name)}`, c.name), {sort: "name"}],
    ["User", (c) => c.user, {sort: "user"}],
    ["Client", (c) => { const p = c.client_properties || {}; return [p.product, p.version].filter(Boolean).join(" "); }],
    ["State", (c) => c.state],
    ["Channels", (c) => fmtNum(c.channels), {num: true, sort: "channels"}],
    ["From client", (c) => fmtBytes(c.recv_oct), {num: true, sort: "recv_oct"}],
    ["To client", (c) => fmtBytes(c.send_oct), {num: true, sort: "send_oct"}],
    ["", (c) => h("button", {type: "button", class: "danger", onclick: () => closeConnection(c.name)}, "Close")],
  ], {empty: "No connections."});
  await load();
  return {refresh: load};
}]);

ROUTES.push([/^#\/connections\/([^/]+)$/, "Connection", async (main, name) => {
  const info = h("div"), channels = h("div");
  append(main, [h("h1", {}, "Connection ", h("code", {}, name)), info, h("h2", {}, "Channels"), channels,
    h("div", {class: "toolbar"}, h("button", {type: "button", class: "danger", onclick: async () => {
      if (await closeConnection(name)) location.hash = "#/connections";
    }}, "Force close"))]);
  async function refresh() {
    const [c, chs] = await Promise.all([get(`/connections/${enc(name)}`), get(`/connections/${enc(name)}/channels`)]);
    replace(info, kvTable([["User", c.user], ["Virtual host", c.vhost], ["Protocol", c.protocol], ["State", c.state],
      ["Peer", `${c.peer_host}:${c.peer_port}`], ["Heartbeat", `${c.timeout} s`], ["Frame max", c.frame_max],
      ["Client properties", h("pre", {}, JSON.stringify(c.client_properties || {}, null, 2))]]));
    replace(channels, channelTable(chs));
  }
  await refresh();
  return {refresh};
}]);

function channelTable(rows) {
  return table([["Channel", (c) => c.name], ["User", (c) => c.user], ["Virtual host", (c) => c.vhost],
    ["Mode", (c) => [c.confirm ? "C" : "", c.transactional ? "T" : ""].join("")],
    ["Prefetch", (c) => fmtNum(c.prefetch_count), {num: true}], ["Unacked", (c) => fmtNum(c.messages_unacknowledged), {num: true}],
    ["Consumers", (c) => fmtNum(c.consumer_count), {num: true}],
    ["Publish", (c) => fmtRate((c.message_stats || {}).publish_details), {num: true}],
    ["Deliver / get", (c) => fmtRate((c.message_stats || {}).deliver_get_details), {num: true}]], rows, {empty: "No channels."});
}

ROUTES.push([/^#\/channels$/, "Channels", async (main) => {
  const list = h("div");
  append(main, [h("h1", {}, "Channels"), list]);
  const load = pagedList(list, "/channels", [["Channel", (c) => c.name, {sort: "name"}],
    ["Connection", (c) => link(`#/connections/${enc((c.connection_details || {}).name || "")}`, (c.connection_details || {}).name || "")],
    ["User", (c) => c.user, {sort: "user"}], ["Virtual host", (c) => c.vhost, {sort: "vhost"}],
    ["Mode", (c) => [c.confirm ? "C" : "", c.transactional ? "T" : ""].join("")],
    ["Prefetch", (c) => fmtNum(c.prefetch_count), {num: true}], ["Unacked", (c) => fmtNum(c.messages_unacknowledged), {num: true}],
    ["Consumers", (c) => fmtNum(c.consumer_count), {num: true}]], {empty: "No channels."});
  await load();
  return {refresh: load};
}]);
