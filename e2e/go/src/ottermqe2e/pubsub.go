package main

import (
	"flag"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// pubsub: publish -count messages with publisher confirms (wait for every ack), then consume them
// with manual acks and QoS -prefetch. Before acking anything it checks that exactly -prefetch messages
// arrive and nothing more within -quiet; then it acks the window and the rest one by one, checking
// order, bodies, properties and delivery tags.
//
// data: queue, declare_ok, confirms (tags in arrival order), nacks, ready_after_confirms,
// prefetch_window, extra_in_window, received, first/last delivery, ready_after_acks,
// consumers_after_acks, purged_on_delete.
func pubsubFlags(fs *flag.FlagSet) func(r *run) error {
	count := fs.Int("count", 100, "messages to publish")
	prefetch := fs.Int("prefetch", 10, "basic.qos prefetch-count")
	quiet := fs.Duration("quiet", 100*time.Millisecond, "how long to check that no delivery beyond the prefetch window arrives")
	return func(r *run) error { return pubsub(r, *count, *prefetch, *quiet) }
}

func pubsub(r *run, count, prefetch int, quiet time.Duration) error {
	conn, err := r.dial()
	if err != nil {
		return err
	}
	ch, err := r.channel(conn)
	if err != nil {
		return err
	}
	queue := r.name("")
	r.set("queue", queue)
	r.deleteLater(conn, []string{queue}, nil)

	r.step("queue.declare %s", queue)
	q, err := ch.QueueDeclare(queue, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("queue.declare: %w", err)
	}
	r.set("declare_ok", map[string]interface{}{"queue": q.Name, "messages": q.Messages, "consumers": q.Consumers})
	r.check(q.Name == queue && q.Messages == 0 && q.Consumers == 0, "declare-ok %+v", q)

	r.step("confirm.select")
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm.select: %w", err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, count))

	for i := 0; i < count; i++ {
		r.step("publish %d", i+1)
		err := ch.PublishWithContext(r.ctx, "", queue, false, false, amqp.Publishing{
			ContentType: "text/plain",
			MessageId:   fmt.Sprintf("m%d", i),
			Headers:     amqp.Table{"seq": int32(i)},
			Body:        []byte(fmt.Sprintf("msg-%03d", i)),
		})
		if err != nil {
			return fmt.Errorf("publish %d: %w", i, err)
		}
	}
	tags := make([]uint64, 0, count)
	nacks := 0
	for len(tags) < count {
		r.step("wait for confirm %d of %d", len(tags)+1, count)
		select {
		case c, ok := <-confirms:
			if !ok {
				return fmt.Errorf("confirm channel closed after %d confirms", len(tags))
			}
			tags = append(tags, c.DeliveryTag)
			if !c.Ack {
				nacks++
			}
		case <-r.ctx.Done():
			r.set("confirms", tags)
			return r.ctx.Err()
		}
	}
	r.set("confirms", tags)
	r.set("nacks", nacks)
	r.check(nacks == 0, "%d nacks", nacks)
	for i, tag := range tags {
		if !r.check(tag == uint64(i+1), "confirm %d has tag %d", i+1, tag) {
			break
		}
	}

	r.step("queue.declare passive after confirms")
	q, err = ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("passive declare: %w", err)
	}
	r.set("ready_after_confirms", q.Messages)
	r.check(q.Messages == count, "%d ready after all confirms, want %d", q.Messages, count)

	r.step("basic.qos %d", prefetch)
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return fmt.Errorf("basic.qos: %w", err)
	}
	r.step("basic.consume")
	deliveries, err := ch.Consume(queue, "go-e2e", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("basic.consume: %w", err)
	}

	received := 0
	next := func() (amqp.Delivery, error) {
		r.step("wait for delivery %d of %d", received+1, count)
		select {
		case d, ok := <-deliveries:
			if !ok {
				return d, fmt.Errorf("delivery channel closed after %d deliveries", received)
			}
			return d, nil
		case <-r.ctx.Done():
			return amqp.Delivery{}, r.ctx.Err()
		}
	}
	verify := func(d amqp.Delivery) {
		i := received
		received++
		if received == 1 {
			r.set("first", deliveryInfo(d))
		}
		if received == count {
			r.set("last", deliveryInfo(d))
		}
		want := fmt.Sprintf("msg-%03d", i)
		r.check(string(d.Body) == want, "delivery %d body %q, want %q", i+1, d.Body, want)
		r.check(d.DeliveryTag == uint64(i+1), "delivery %d has tag %d", i+1, d.DeliveryTag)
		r.check(!d.Redelivered, "delivery %d redelivered", i+1)
		r.check(d.MessageId == fmt.Sprintf("m%d", i) && d.ContentType == "text/plain",
			"delivery %d properties message_id=%q content_type=%q", i+1, d.MessageId, d.ContentType)
		r.check(d.ConsumerTag == "go-e2e" && d.Exchange == "" && d.RoutingKey == queue,
			"delivery %d consumer_tag=%q exchange=%q routing_key=%q", i+1, d.ConsumerTag, d.Exchange, d.RoutingKey)
		seq, isInt32 := d.Headers["seq"].(int32)
		r.check(isInt32 && seq == int32(i), "delivery %d header seq %T %v", i+1, d.Headers["seq"], d.Headers["seq"])
	}

	window := prefetch
	if window > count {
		window = count
	}
	for received < window {
		d, err := next()
		if err != nil {
			return err
		}
		verify(d)
	}
	r.set("prefetch_window", received)
	r.step("check that nothing beyond the prefetch window arrives within %s", quiet)
	extra := 0
	select {
	case d, ok := <-deliveries:
		if ok {
			extra = 1
			r.set("extra_delivery", deliveryInfo(d))
		}
	case <-time.After(quiet):
	}
	r.set("extra_in_window", extra)
	r.check(extra == 0, "a delivery beyond prefetch %d arrived before any ack", prefetch)
	if extra != 0 {
		return nil
	}
	if window > 0 {
		r.step("ack window (multiple)")
		if err := ch.Ack(uint64(window), true); err != nil {
			return fmt.Errorf("basic.ack: %w", err)
		}
	}
	for received < count {
		d, err := next()
		if err != nil {
			r.set("received", received)
			return err
		}
		verify(d)
		if err := d.Ack(false); err != nil {
			return fmt.Errorf("basic.ack %d: %w", d.DeliveryTag, err)
		}
	}
	r.set("received", received)

	r.step("queue.declare passive after acks")
	q, err = ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("passive declare after acks: %w", err)
	}
	r.set("ready_after_acks", q.Messages)
	r.set("consumers_after_acks", q.Consumers)
	r.check(q.Messages == 0 && q.Consumers == 1, "after acks: %d ready, %d consumers", q.Messages, q.Consumers)

	r.step("basic.cancel")
	if err := ch.Cancel("go-e2e", false); err != nil {
		return fmt.Errorf("basic.cancel: %w", err)
	}
	r.step("queue.delete")
	purged, err := ch.QueueDelete(queue, false, false, false)
	if err != nil {
		return fmt.Errorf("queue.delete: %w", err)
	}
	r.set("purged_on_delete", purged)
	r.check(purged == 0, "queue.delete-ok message_count %d", purged)
	return nil
}
