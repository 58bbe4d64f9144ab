package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// table-roundtrip: publish one message whose headers hold every field type amqp091-go can write,
// consume it back and compare each header with the value amqp091-go should decode, Go type included.
// Expected values differ from sent ones where amqp091-go's codec is lossy: Go int is written as a
// 32-bit 'I' (comes back int32) and time.Time as whole Unix seconds 'T'.
//
// Without -via-dlx the message goes straight to "<prefix>" and the broker only forwards the header
// bytes. With -via-dlx it goes to a work queue with x-message-ttl 0 and is dead-lettered to a DLQ
// (see ttl-dlx), so the broker must decode and re-encode the table keeping every type tag.
//
// data: mode, fields {name: {sent, expected, got, equal}}, extra_headers (names the broker added).
func tableFlags(fs *flag.FlagSet) func(r *run) error {
	viaDLX := fs.Bool("via-dlx", false, "route the message through dead-lettering (x-message-ttl 0)")
	return func(r *run) error { return tableRoundtrip(r, *viaDLX) }
}

type tableField struct {
	name           string
	sent, expected interface{}
}

func tableFields() []tableField {
	ts := time.Unix(1700000000, 0)
	return []tableField{
		{"bool_true", true, true},
		{"bool_false", false, false},
		{"uint8", byte(200), byte(200)},
		{"int8", int8(-100), int8(-100)},
		{"int16", int16(-30000), int16(-30000)},
		{"int", int(123456), int32(123456)},
		{"int32", int32(-2000000000), int32(-2000000000)},
		{"int64", int64(-9000000000000000000), int64(-9000000000000000000)},
		{"float32", float32(1.5), float32(1.5)},
		{"float64", float64(-2.718281828459045), float64(-2.718281828459045)},
		{"string", "héllo wörld ✓", "héllo wörld ✓"},
		{"string_empty", "", ""},
		{"bytes", []byte{0, 1, 2, 0xfe, 0xff}, []byte{0, 1, 2, 0xfe, 0xff}},
		{"decimal", amqp.Decimal{Scale: 2, Value: -12345}, amqp.Decimal{Scale: 2, Value: -12345}},
		{"timestamp", ts, ts},
		{"timestamp_ns", time.Unix(1700000000, 987654321), ts},
		{"table", amqp.Table{"a": int32(1), "b": "two", "c": amqp.Table{"deep": true}},
			amqp.Table{"a": int32(1), "b": "two", "c": amqp.Table{"deep": true}}},
		{"table_empty", amqp.Table{}, amqp.Table{}},
		{"array", []interface{}{int32(1), "two", true, nil, []interface{}{int64(3)}, amqp.Table{"k": "v"}, float64(0.5)},
			[]interface{}{int32(1), "two", true, nil, []interface{}{int64(3)}, amqp.Table{"k": "v"}, float64(0.5)}},
		{"array_empty", []interface{}{}, []interface{}{}},
		{"void", nil, nil},
	}
}

func tableRoundtrip(r *run, viaDLX bool) error {
	conn, err := r.dial()
	if err != nil {
		return err
	}
	ch, err := r.channel(conn)
	if err != nil {
		return err
	}
	var deliveries <-chan amqp.Delivery
	var key string
	if viaDLX {
		r.set("mode", "via-dlx")
		if key, deliveries, err = dlxTopology(r, conn, ch, 0, "dead"); err != nil {
			return err
		}
	} else {
		r.set("mode", "direct")
		key = r.name("")
		r.deleteLater(conn, []string{key}, nil)
		r.step("queue.declare %s", key)
		if _, err = ch.QueueDeclare(key, false, false, false, false, nil); err != nil {
			return fmt.Errorf("queue.declare: %w", err)
		}
		r.step("basic.consume %s", key)
		if deliveries, err = ch.Consume(key, "go-e2e-table", false, false, false, false, nil); err != nil {
			return fmt.Errorf("basic.consume: %w", err)
		}
	}

	fields := tableFields()
	headers := amqp.Table{}
	for _, f := range fields {
		headers[f.name] = f.sent
	}
	if err := headers.Validate(); err != nil {
		return fmt.Errorf("headers do not validate: %w", err)
	}
	err = publishConfirmed(r, ch, "", key, amqp.Publishing{MessageId: "table-1", Headers: headers, Body: []byte("table")})
	if err != nil {
		return err
	}
	d, err := receive(r, deliveries, "the message back")
	if err != nil {
		return err
	}
	_ = d.Ack(false)

	results := map[string]interface{}{}
	for _, f := range fields {
		got, found := d.Headers[f.name]
		entry := map[string]interface{}{"sent": typed(f.sent), "expected": typed(f.expected), "found": found}
		equal := found && sameField(f.expected, got)
		if found {
			entry["got"] = typed(got)
		}
		entry["equal"] = equal
		results[f.name] = entry
		r.check(equal, "header %s: sent %T %v, want %T %v, got %T %v (found %v)",
			f.name, f.sent, f.sent, f.expected, f.expected, got, got, found)
	}
	r.set("fields", results)
	extra := []string{}
	for _, k := range sortedKeys(d.Headers) {
		if _, sent := headers[k]; !sent {
			extra = append(extra, k)
		}
	}
	r.set("extra_headers", extra)
	if viaDLX {
		for _, k := range extra {
			r.check(k == "x-death" || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-"),
				"unexpected header %q added by dead-lettering", k)
		}
	} else {
		r.check(len(extra) == 0, "broker added headers %v", extra)
	}
	return nil
}
