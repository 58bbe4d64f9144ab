package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// publish: publish one message to an existing -exchange/-routing-key (default: the default exchange
// and the prefix as queue name) in confirm mode with mandatory set, for e2e/test_mixed_clients.py. Its
// headers hold every field type amqp091-go writes (table-roundtrip's sent values: t B b s I l f d S x
// D T F A V), every basic property is set except expiration, and the body is -body-size bytes with
// byte i = i % 251 (larger than a 128 KiB frame_max by default, so it spans body frames).
// Declares and deletes nothing.
//
// data: exchange, routing_key, headers (typed, as sent), properties, body_size, body_sha256,
// acked, returned.
func publishFlags(fs *flag.FlagSet) func(r *run) error {
	exchange := fs.String("exchange", "", "exchange to publish to")
	key := fs.String("routing-key", "", "routing key (default: the prefix)")
	messageID := fs.String("message-id", "mixed-1", "message-id property")
	bodySize := fs.Int("body-size", 200000, "body length in bytes")
	return func(r *run) error {
		if *key == "" {
			*key = r.name("")
		}
		return publishOne(r, *exchange, *key, *messageID, *bodySize)
	}
}

func publishOne(r *run, exchange, key, messageID string, bodySize int) error {
	conn, err := r.dial()
	if err != nil {
		return err
	}
	ch, err := r.channel(conn)
	if err != nil {
		return err
	}
	headers := amqp.Table{}
	for _, f := range tableFields() {
		headers[f.name] = f.sent
	}
	if err := headers.Validate(); err != nil {
		return fmt.Errorf("headers do not validate: %w", err)
	}
	body := make([]byte, bodySize)
	for i := range body {
		body[i] = byte(i % 251)
	}
	sum := sha256.Sum256(body)
	msg := amqp.Publishing{
		Headers:         headers,
		ContentType:     "application/octet-stream",
		ContentEncoding: "identity",
		DeliveryMode:    amqp.Persistent,
		Priority:        5,
		CorrelationId:   "corr-" + messageID,
		ReplyTo:         "reply." + messageID,
		MessageId:       messageID,
		Timestamp:       time.Unix(1700000001, 0),
		Type:            "mixed.test",
		UserId:          "guest",
		AppId:           "ottermq-e2e-go",
		Body:            body,
	}
	r.set("exchange", exchange)
	r.set("routing_key", key)
	r.set("headers", typedTable(headers))
	r.set("properties", map[string]interface{}{
		"content_type": msg.ContentType, "content_encoding": msg.ContentEncoding,
		"delivery_mode": msg.DeliveryMode, "priority": msg.Priority, "correlation_id": msg.CorrelationId,
		"reply_to": msg.ReplyTo, "message_id": msg.MessageId, "timestamp": msg.Timestamp.Unix(),
		"type": msg.Type, "user_id": msg.UserId, "app_id": msg.AppId,
	})
	r.set("body_size", len(body))
	r.set("body_sha256", hex.EncodeToString(sum[:]))

	r.step("confirm.select")
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm.select: %w", err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	r.step("publish to %q with key %q (mandatory)", exchange, key)
	if err := ch.PublishWithContext(r.ctx, exchange, key, true, false, msg); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	r.step("wait for confirm")
	select {
	case c := <-confirms:
		r.set("acked", c.Ack)
		r.check(c.Ack, "publish was nacked")
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
	// The broker sends basic.return before the confirm, and amqp091-go hands both over in that order.
	select {
	case ret := <-returns:
		r.set("returned", true)
		r.check(false, "message returned: %d %s", ret.ReplyCode, ret.ReplyText)
	default:
		r.set("returned", false)
	}
	return nil
}
