package main

import (
	"flag"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ttl-dlx: a direct DLX "<prefix>.dlx" with "<prefix>.dlq" bound by -dl-routing-key, and a work queue
// "<prefix>.work" with x-dead-letter-exchange, x-dead-letter-routing-key and (unless -queue-ttl < 0)
// x-message-ttl. One message with headers is published to the work queue (optionally with a
// per-message -expiration); nobody consumes it there, so it expires and is dead-lettered. The DLQ's
// delivery is printed with typed headers, x-death decoded as amqp091-go gives it.
//
// data: names, published_headers, delivery (see deliveryInfo), x_death (typed list), elapsed_ms
// (publish to dead-letter delivery), now_unix (when the delivery arrived), work_ready_after.
func ttlDLXFlags(fs *flag.FlagSet) func(r *run) error {
	queueTTL := fs.Int("queue-ttl", 200, "x-message-ttl of the work queue in ms (negative: no queue TTL)")
	expiration := fs.String("expiration", "", "per-message expiration property in ms (empty: none)")
	dlKey := fs.String("dl-routing-key", "dead", "x-dead-letter-routing-key and the DLQ's binding key")
	return func(r *run) error { return ttlDLX(r, *queueTTL, *expiration, *dlKey) }
}

// dlxTopology declares the DLX, the DLQ and the work queue, and consumes the DLQ.
func dlxTopology(r *run, conn *amqp.Connection, ch *amqp.Channel, queueTTL int, dlKey string) (
	work string, deliveries <-chan amqp.Delivery, err error) {
	dlx, dlq := r.name("dlx"), r.name("dlq")
	work = r.name("work")
	r.set("names", map[string]string{"dlx": dlx, "dlq": dlq, "work": work, "dl_routing_key": dlKey})
	r.deleteLater(conn, []string{work, dlq}, []string{dlx})

	r.step("exchange.declare %s", dlx)
	if err = ch.ExchangeDeclare(dlx, "direct", false, false, false, false, nil); err != nil {
		return "", nil, fmt.Errorf("exchange.declare %s: %w", dlx, err)
	}
	r.step("queue.declare %s", dlq)
	if _, err = ch.QueueDeclare(dlq, false, false, false, false, nil); err != nil {
		return "", nil, fmt.Errorf("queue.declare %s: %w", dlq, err)
	}
	r.step("queue.bind %s -> %s (%s)", dlx, dlq, dlKey)
	if err = ch.QueueBind(dlq, dlKey, dlx, false, nil); err != nil {
		return "", nil, fmt.Errorf("queue.bind: %w", err)
	}
	args := amqp.Table{"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": dlKey}
	if queueTTL >= 0 {
		args["x-message-ttl"] = int32(queueTTL)
	}
	r.step("queue.declare %s %v", work, args)
	if _, err = ch.QueueDeclare(work, false, false, false, false, args); err != nil {
		return "", nil, fmt.Errorf("queue.declare %s: %w", work, err)
	}
	r.step("basic.consume %s", dlq)
	deliveries, err = ch.Consume(dlq, "go-e2e-dlq", false, false, false, false, nil)
	if err != nil {
		return "", nil, fmt.Errorf("basic.consume %s: %w", dlq, err)
	}
	return work, deliveries, nil
}

// publishConfirmed publishes one message in confirm mode and waits for its ack.
func publishConfirmed(r *run, ch *amqp.Channel, exchange, key string, msg amqp.Publishing) error {
	r.step("confirm.select")
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm.select: %w", err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	r.step("publish to %q with key %q", exchange, key)
	if err := ch.PublishWithContext(r.ctx, exchange, key, false, false, msg); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	r.step("wait for confirm")
	select {
	case c := <-confirms:
		r.check(c.Ack, "publish was nacked")
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
	return nil
}

// receive waits for one delivery.
func receive(r *run, deliveries <-chan amqp.Delivery, what string) (amqp.Delivery, error) {
	r.step("wait for %s", what)
	select {
	case d, ok := <-deliveries:
		if !ok {
			return d, fmt.Errorf("delivery channel closed while waiting for %s", what)
		}
		return d, nil
	case <-r.ctx.Done():
		return amqp.Delivery{}, r.ctx.Err()
	}
}

func ttlDLX(r *run, queueTTL int, expiration, dlKey string) error {
	conn, err := r.dial()
	if err != nil {
		return err
	}
	ch, err := r.channel(conn)
	if err != nil {
		return err
	}
	work, deliveries, err := dlxTopology(r, conn, ch, queueTTL, dlKey)
	if err != nil {
		return err
	}
	headers := amqp.Table{"x-e2e-origin": "go", "attempt": int32(3), "trace": amqp.Table{"id": int64(42)}}
	r.set("published_headers", typedTable(headers))
	published := time.Now()
	err = publishConfirmed(r, ch, "", work, amqp.Publishing{
		ContentType: "text/plain",
		MessageId:   "ttl-1",
		Expiration:  expiration,
		Headers:     headers,
		Body:        []byte("expire me"),
	})
	if err != nil {
		return err
	}
	d, err := receive(r, deliveries, "the dead-lettered message")
	if err != nil {
		return err
	}
	r.set("elapsed_ms", time.Since(published).Milliseconds())
	r.set("now_unix", time.Now().Unix())
	r.set("delivery", deliveryInfo(d))
	if err := d.Ack(false); err != nil {
		return fmt.Errorf("basic.ack: %w", err)
	}
	checkXDeath(r, d.Headers)

	r.step("queue.declare passive %s", work)
	q, err := ch.QueueDeclarePassive(work, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("passive declare %s: %w", work, err)
	}
	r.set("work_ready_after", q.Messages)
	r.check(q.Messages == 0, "%d messages still ready in %s", q.Messages, work)
	return nil
}

// checkXDeath stores x-death under data["x_death"] and checks the Go types amqp091-go must produce:
// []interface{} of amqp.Table with count int64, time time.Time, routing-keys []interface{} of string,
// reason/queue/exchange string.
func checkXDeath(r *run, headers amqp.Table) {
	raw, found := headers["x-death"]
	if !r.check(found, "no x-death header (headers: %v)", sortedKeys(headers)) {
		return
	}
	r.set("x_death", typed(raw))
	deaths, isArray := raw.([]interface{})
	if !r.check(isArray && len(deaths) > 0, "x-death is %T %v, want a non-empty []interface{}", raw, raw) {
		return
	}
	for i, item := range deaths {
		death, isTable := item.(amqp.Table)
		if !r.check(isTable, "x-death[%d] is %T, want amqp.Table", i, item) {
			continue
		}
		_, ok := death["count"].(int64)
		r.check(ok, "x-death[%d].count is %T, want int64", i, death["count"])
		_, ok = death["time"].(time.Time)
		r.check(ok, "x-death[%d].time is %T, want time.Time", i, death["time"])
		for _, key := range []string{"reason", "queue", "exchange"} {
			_, ok = death[key].(string)
			r.check(ok, "x-death[%d].%s is %T, want string", i, key, death[key])
		}
		keys, ok := death["routing-keys"].([]interface{})
		if r.check(ok, "x-death[%d].routing-keys is %T, want []interface{}", i, death["routing-keys"]) {
			for j, k := range keys {
				_, ok = k.(string)
				r.check(ok, "x-death[%d].routing-keys[%d] is %T, want string", i, j, k)
			}
		}
	}
}
