package main

import (
	"flag"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// return: in confirm mode, three unroutable publishes (no queue "<prefix>" exists, nothing is bound
// to amq.direct with that key):
//
//  1. default exchange, not mandatory        -> only an ack
//  2. default exchange, mandatory            -> basic.return 312 NO_ROUTE, then the ack
//  3. amq.direct, mandatory                  -> basic.return 312 NO_ROUTE, then the ack
//
// NotifyReturn and NotifyPublish use unbuffered Go channels, so the client's reader goroutine hands
// over each event before reading the next frame and "events" is the order in which the broker sent
// them ("ack:<tag>", "nack:<tag>", "return:<message id>").
//
// data: routing_key, events, returns (reply code/text, exchange, routing key, body, properties).
func returnFlags(fs *flag.FlagSet) func(r *run) error {
	return func(r *run) error { return returns(r) }
}

func returns(r *run) error {
	conn, err := r.dial()
	if err != nil {
		return err
	}
	ch, err := r.channel(conn)
	if err != nil {
		return err
	}
	key := r.name("")
	r.set("routing_key", key)

	r.step("confirm.select")
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm.select: %w", err)
	}
	returned := ch.NotifyReturn(make(chan amqp.Return))
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation))

	publishes := []struct {
		exchange  string
		mandatory bool
		id        string
	}{{"", false, "plain"}, {"", true, "mandatory"}, {"amq.direct", true, "mandatory-amq.direct"}}
	for _, p := range publishes {
		r.step("publish %s", p.id)
		err := ch.PublishWithContext(r.ctx, p.exchange, key, p.mandatory, false, amqp.Publishing{
			ContentType: "text/plain",
			MessageId:   p.id,
			Headers:     amqp.Table{"kind": p.id},
			Body:        []byte("body of " + p.id),
		})
		if err != nil {
			return fmt.Errorf("publish %s: %w", p.id, err)
		}
	}

	events := []string{}
	rets := []map[string]interface{}{}
	acks := 0
	for acks < len(publishes) {
		r.step("wait for confirms/returns (events so far: %v)", events)
		select {
		case c := <-confirms:
			acks++
			if c.Ack {
				events = append(events, fmt.Sprintf("ack:%d", c.DeliveryTag))
			} else {
				events = append(events, fmt.Sprintf("nack:%d", c.DeliveryTag))
			}
		case ret := <-returned:
			events = append(events, "return:"+ret.MessageId)
			rets = append(rets, map[string]interface{}{
				"reply_code":   ret.ReplyCode,
				"reply_text":   ret.ReplyText,
				"exchange":     ret.Exchange,
				"routing_key":  ret.RoutingKey,
				"body":         string(ret.Body),
				"message_id":   ret.MessageId,
				"content_type": ret.ContentType,
				"headers":      typedTable(ret.Headers),
			})
		case <-r.ctx.Done():
			r.set("events", events)
			r.set("returns", rets)
			return r.ctx.Err()
		}
	}
	r.set("events", events)
	r.set("returns", rets)
	want := []string{"ack:1", "return:mandatory", "ack:2", "return:mandatory-amq.direct", "ack:3"}
	r.check(fmt.Sprint(events) == fmt.Sprint(want), "events %v, want %v", events, want)
	for _, ret := range rets {
		r.check(ret["reply_code"] == uint16(312) && ret["reply_text"] == "NO_ROUTE",
			"return %v: %v %q, want 312 NO_ROUTE", ret["message_id"], ret["reply_code"], ret["reply_text"])
	}
	return nil
}
