package main

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"reflect"
	"sort"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// typed renders a field value as amqp091-go decoded it, keeping its Go type:
//
//	{"type": "int64", "value": 1}
//	{"type": "time.Time", "value": 1700000000, "utc": "2023-11-14T22:13:20Z"}   (value: Unix seconds)
//	{"type": "[]uint8", "value": "00ff"}                                          (value: hex)
//	{"type": "amqp091.Decimal", "value": {"scale": 2, "value": 12345}}
//	{"type": "amqp091.Table", "value": {"k": {"type": ..., "value": ...}}}
//	{"type": "[]interface {}", "value": [{"type": ..., "value": ...}]}
//	{"type": "<nil>", "value": null}
func typed(v interface{}) map[string]interface{} {
	out := map[string]interface{}{"type": fmt.Sprintf("%T", v)}
	switch x := v.(type) {
	case amqp.Table:
		out["value"] = typedTable(x)
	case []interface{}:
		items := make([]interface{}, len(x))
		for i, item := range x {
			items[i] = typed(item)
		}
		out["value"] = items
	case time.Time:
		out["value"] = x.Unix()
		out["utc"] = x.UTC().Format(time.RFC3339Nano)
	case []byte:
		out["value"] = hex.EncodeToString(x)
	case amqp.Decimal:
		out["value"] = map[string]interface{}{"scale": x.Scale, "value": x.Value}
	case float32:
		out["value"] = float64(x)
	default:
		out["value"] = x
	}
	return out
}

// typedTable renders every field of a table with typed (a nil table gives an empty map).
func typedTable(t amqp.Table) map[string]interface{} {
	out := make(map[string]interface{}, len(t))
	for k, v := range t {
		out[k] = typed(v)
	}
	return out
}

// sameField reports whether got is want with the same Go type all the way down. Times compare with
// time.Time.Equal (amqp091-go decodes timestamps in the local zone), tables by key set.
func sameField(want, got interface{}) bool {
	if reflect.TypeOf(want) != reflect.TypeOf(got) {
		return false
	}
	switch w := want.(type) {
	case time.Time:
		return w.Equal(got.(time.Time))
	case []byte:
		return bytes.Equal(w, got.([]byte))
	case amqp.Table:
		g := got.(amqp.Table)
		if len(w) != len(g) {
			return false
		}
		for k, wv := range w {
			gv, found := g[k]
			if !found || !sameField(wv, gv) {
				return false
			}
		}
		return true
	case []interface{}:
		g := got.([]interface{})
		if len(w) != len(g) {
			return false
		}
		for i := range w {
			if !sameField(w[i], g[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(want, got)
}

// sortedKeys returns a table's keys in order.
func sortedKeys(t amqp.Table) []string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// deliveryInfo renders what a consumer sees of a delivery (headers typed).
func deliveryInfo(d amqp.Delivery) map[string]interface{} {
	return map[string]interface{}{
		"exchange":       d.Exchange,
		"routing_key":    d.RoutingKey,
		"delivery_tag":   d.DeliveryTag,
		"redelivered":    d.Redelivered,
		"body":           string(d.Body),
		"content_type":   d.ContentType,
		"delivery_mode":  d.DeliveryMode,
		"expiration":     d.Expiration,
		"message_id":     d.MessageId,
		"headers":        typedTable(d.Headers),
		"headers_is_nil": d.Headers == nil,
	}
}
