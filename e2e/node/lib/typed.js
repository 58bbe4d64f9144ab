// How the scenarios print values as amqplib decoded them, keeping their JavaScript types
// (the Node twin of e2e/go/src/ottermqe2e/typed.go).
//
// amqplib 2.x decodes field tables (lib/codec.js decodeFields) into plain JavaScript values:
//   b B s u I i l f d -> number        ('l' goes through Number(BigInt): exact only below 2^53)
//   S -> string   t -> boolean   V -> null   x -> Buffer   A -> Array   F -> plain object
//   T -> {'!': 'timestamp', value: <Unix seconds as number>}
//   D -> {'!': 'decimal', value: {places, digits}}          (digits read as an unsigned 32-bit int)
// so the wire's integer width is lost and a table is an object like any other.
//
// typed(v) renders:
//   {"type": "number", "value": 1}
//   {"type": "string" | "boolean", "value": ...}
//   {"type": "null", "value": null}
//   {"type": "Buffer", "value": "00ff"}                           (hex)
//   {"type": "Array", "value": [typed, ...]}
//   {"type": "object", "value": {"k": typed, ...}}                (a nested table)
//   {"type": "object", "!": "timestamp", "value": 1700000000}     (amqplib's tagged values, as given)
//   {"type": "object", "!": "decimal", "value": {"places": 2, "digits": 12345}}
//   {"type": "bigint", "value": "123"}                            (not produced by amqplib's decoder)
'use strict';

const crypto = require('node:crypto');

function typed(v) {
  if (v === null) return { type: 'null', value: null };
  if (v === undefined) return { type: 'undefined', value: null };
  if (Buffer.isBuffer(v)) return { type: 'Buffer', value: v.toString('hex') };
  if (Array.isArray(v)) return { type: 'Array', value: v.map(typed) };
  switch (typeof v) {
    case 'number':
      if (!Number.isFinite(v)) return { type: 'number', value: String(v) };
      return { type: 'number', value: v };
    case 'bigint':
      return { type: 'bigint', value: v.toString() };
    case 'object':
      if (Object.hasOwn(v, '!')) return { type: 'object', '!': v['!'], value: v.value };
      return { type: 'object', value: typedTable(v) };
    default:
      return { type: typeof v, value: v };
  }
}

/** Every field of a table rendered with typed (undefined or null gives null). */
function typedTable(table) {
  if (table === undefined || table === null) return null;
  const out = {};
  for (const key of Object.keys(table)) out[key] = typed(table[key]);
  return out;
}

function sha256(buffer) {
  return crypto.createHash('sha256').update(buffer).digest('hex');
}

/** What a consumer sees of a message (same for both APIs): fields, properties, typed headers, body. */
function deliveryInfo(msg) {
  const { fields, properties, content } = msg;
  const text = content.length <= 256 && isUtf8(content) ? content.toString('utf8') : null;
  return {
    exchange: fields.exchange,
    routing_key: fields.routingKey,
    delivery_tag: fields.deliveryTag,
    redelivered: fields.redelivered,
    consumer_tag: fields.consumerTag === undefined ? null : fields.consumerTag,
    message_count: fields.messageCount === undefined ? null : fields.messageCount,
    body: text,
    body_size: content.length,
    body_sha256: sha256(content),
    properties: {
      content_type: nullable(properties.contentType),
      content_encoding: nullable(properties.contentEncoding),
      delivery_mode: nullable(properties.deliveryMode),
      priority: nullable(properties.priority),
      correlation_id: nullable(properties.correlationId),
      reply_to: nullable(properties.replyTo),
      expiration: nullable(properties.expiration),
      message_id: nullable(properties.messageId),
      timestamp: nullable(properties.timestamp),
      type: nullable(properties.type),
      user_id: nullable(properties.userId),
      app_id: nullable(properties.appId),
    },
    headers: typedTable(properties.headers),
  };
}

function nullable(v) {
  return v === undefined ? null : v;
}

function isUtf8(buffer) {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(buffer);
    return true;
  } catch {
    return false;
  }
}

/** The JavaScript type name typed() would print for v (for failure messages). */
function jsType(v) {
  const t = typed(v);
  return t['!'] ? `{'!': '${t['!']}'}` : t.type;
}

module.exports = { typed, typedTable, deliveryInfo, sha256, jsType };
