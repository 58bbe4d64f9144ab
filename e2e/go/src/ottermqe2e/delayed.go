package main

import (
	"flag"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// delayed-dedup (ottermq extensions of issue 19, the plugins' wire behaviour):
//
//  1. an x-delayed-message exchange (x-delayed-type direct) bound to "<prefix>.delayed"; in confirm
//     mode three messages with x-delay 600, 200, 400 (int32): all acked at once, delivered in due
//     order, each with x-delay = -delay (int32), none before its delay;
//  2. a direct exchange with x-message-deduplication true and x-cache-size 2 bound to
//     "<prefix>.dedup"; mandatory publishes with x-deduplication-header a, a, b, c, a: the second
//     "a" is returned (312 NO_ROUTE) and still acked, "c" evicts the first "a", so the queue gets
//     a, b, c, a.
//
// data: delayed (body, x-delay, ms after publish), acks, returns, dedup_bodies.
func delayedFlags(fs *flag.FlagSet) func(r *run) error {
	return func(r *run) error { return delayedDedup(r) }
}

func delayedDedup(r *run) error {
	conn, err := r.dial()
	if err != nil {
		return err
	}
	ch, err := r.channel(conn)
	if err != nil {
		return err
	}
	dx, dq := r.name("dx"), r.name("delayed")
	ux, uq := r.name("ux"), r.name("dedup")
	r.deleteLater(conn, []string{dq, uq}, []string{dx, ux})

	r.step("declare the delayed exchange")
	if err := ch.ExchangeDeclare(dx, "x-delayed-message", false, true, false, false,
		amqp.Table{"x-delayed-type": "direct"}); err != nil {
		return fmt.Errorf("declare %s: %w", dx, err)
	}
	if _, err := ch.QueueDeclare(dq, false, true, false, false, nil); err != nil {
		return fmt.Errorf("declare %s: %w", dq, err)
	}
	if err := ch.QueueBind(dq, "k", dx, false, nil); err != nil {
		return fmt.Errorf("bind %s: %w", dq, err)
	}
	r.step("declare the deduplicating exchange")
	if err := ch.ExchangeDeclare(ux, "direct", false, true, false, false,
		amqp.Table{"x-message-deduplication": true, "x-cache-size": int32(2)}); err != nil {
		return fmt.Errorf("declare %s: %w", ux, err)
	}
	if _, err := ch.QueueDeclare(uq, false, true, false, false, nil); err != nil {
		return fmt.Errorf("declare %s: %w", uq, err)
	}
	if err := ch.QueueBind(uq, "k", ux, false, nil); err != nil {
		return fmt.Errorf("bind %s: %w", uq, err)
	}

	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm.select: %w", err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 16))
	returned := ch.NotifyReturn(make(chan amqp.Return, 16))
	deliveries, err := ch.Consume(dq, "", true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}

	start := time.Now()
	for _, delay := range []int32{600, 200, 400} {
		r.step("publish delayed %d", delay)
		if err := ch.PublishWithContext(r.ctx, dx, "k", false, false, amqp.Publishing{
			Headers: amqp.Table{"x-delay": delay}, Body: []byte(fmt.Sprint(delay)),
		}); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	keys := []string{"a", "a", "b", "c", "a"}
	for i, key := range keys {
		r.step("publish dedup %s", key)
		if err := ch.PublishWithContext(r.ctx, ux, "k", true, false, amqp.Publishing{
			Headers: amqp.Table{"x-deduplication-header": key}, Body: []byte(fmt.Sprintf("%d:%s", i, key)),
		}); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	acks, returns := 0, []string{}
	for acks < 8 {
		r.step("wait for confirms (%d so far)", acks)
		select {
		case c := <-confirms:
			r.check(c.Ack, "publish %d was nacked", c.DeliveryTag)
			acks++
		case ret := <-returned:
			returns = append(returns, fmt.Sprintf("%d %s %s", ret.ReplyCode, ret.ReplyText, ret.Body))
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
	}
	r.set("acks", acks)

	got := []map[string]interface{}{}
	for len(got) < 3 {
		r.step("wait for delayed deliveries (%d so far)", len(got))
		select {
		case d := <-deliveries:
			got = append(got, map[string]interface{}{
				"body": string(d.Body), "x-delay": typed(d.Headers["x-delay"]),
				"ms": time.Since(start).Milliseconds(),
			})
		case <-r.ctx.Done():
			r.set("delayed", got)
			return r.ctx.Err()
		}
	}
	r.set("delayed", got)
	for i, want := range []int32{200, 400, 600} {
		r.check(got[i]["body"] == fmt.Sprint(want), "delivery %d is %v, want %d", i, got[i]["body"], want)
		r.check(got[i]["ms"].(int64) >= int64(want)-5, "delivery %d came after %v ms, before its delay", i, got[i]["ms"])
		x := got[i]["x-delay"].(map[string]interface{})
		r.check(x["type"] == "int32" && x["value"] == -want, "x-delay of %d is %v, want int32 %d", want, x, -want)
	}

	// let the returns arrive (they precede the acks of their publishes)
	r.set("returns", returns)
	r.check(len(returns) == 1 && returns[0] == "312 NO_ROUTE 1:a", "returns %v, want [312 NO_ROUTE 1:a]", returns)
	bodies := []string{}
	for {
		d, ok, err := ch.Get(uq, true)
		if err != nil {
			return fmt.Errorf("get: %w", err)
		}
		if !ok {
			break
		}
		bodies = append(bodies, string(d.Body))
	}
	r.set("dedup_bodies", bodies)
	want := []string{"0:a", "2:b", "3:c", "4:a"}
	r.check(fmt.Sprint(bodies) == fmt.Sprint(want), "deduplicated queue holds %v, want %v", bodies, want)
	return nil
}
