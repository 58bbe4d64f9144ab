package main

import (
	"flag"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// close: a passive queue.declare of the missing queue "<prefix>.missing" must close the channel with
// 404 and RabbitMQ's text; Channel.NotifyClose delivers that error once and is then closed, the
// channel reports IsClosed, further calls fail with amqp.ErrClosed, and the connection stays usable
// (its NotifyClose does not fire; a new channel works and gets its own 404 for a missing exchange).
// A graceful Connection.Close then closes the connection's NotifyClose without an error; this is
// repeated on -graceful-closes more connections because it is a race inside amqp091-go: Close()
// marks the connection closed only after Close-Ok arrives, so a broker that drops the socket right
// after sending Close-Ok (RabbitMQ waits for the client to close it) often makes the reader goroutine
// report 501 "EOF" to NotifyClose listeners first.
//
// data: missing_queue, missing_exchange, declare_error, notify_close, notify_closed_after,
// channel_is_closed, call_after_close_error, connection_notified, second_channel_ok,
// exchange_error, graceful_close_error, graceful_closes, graceful_close_notified (errors seen).
func closeFlags(fs *flag.FlagSet) func(r *run) error {
	closes := fs.Int("graceful-closes", 10, "extra connections to open and close gracefully")
	return func(r *run) error { return closeScenario(r, *closes) }
}

func closeScenario(r *run, gracefulCloses int) error {
	conn, err := r.dial()
	if err != nil {
		return err
	}
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := r.channel(conn)
	if err != nil {
		return err
	}
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	missing := r.name("missing")
	r.set("missing_queue", missing)

	r.step("queue.declare passive %s", missing)
	_, err = ch.QueueDeclarePassive(missing, false, false, false, false, nil)
	r.set("declare_error", amqpError(err))
	r.check(err != nil, "passive declare of a missing queue succeeded")

	r.step("wait for channel NotifyClose")
	select {
	case e, ok := <-chClosed:
		if r.check(ok && e != nil, "channel NotifyClose closed without an error") {
			r.set("notify_close", amqpError(e))
		}
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
	r.step("check that channel NotifyClose is closed after the error")
	select {
	case e, ok := <-chClosed:
		r.set("notify_closed_after", !ok)
		r.check(!ok, "second NotifyClose value %v", e)
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
	r.set("channel_is_closed", ch.IsClosed())
	r.check(ch.IsClosed(), "channel not closed after the error")

	r.step("call on the closed channel")
	_, err = ch.QueueDeclarePassive(missing, false, false, false, false, nil)
	r.set("call_after_close_error", amqpError(err))
	r.check(err == amqp.ErrClosed, "call on closed channel gave %v, want amqp.ErrClosed", err)

	r.step("second channel on the same connection")
	select {
	case e := <-connClosed:
		r.set("connection_notified", amqpError(e))
		r.check(false, "connection NotifyClose fired: %v", e)
		return nil
	default:
		r.set("connection_notified", nil)
	}
	r.check(!conn.IsClosed(), "connection closed after a channel error")
	ch2, err := r.channel(conn)
	if err != nil {
		return err
	}
	r.step("exchange.declare passive amq.direct")
	err = ch2.ExchangeDeclarePassive("amq.direct", "direct", true, false, false, false, nil)
	r.set("second_channel_ok", err == nil)
	r.check(err == nil, "passive declare of amq.direct on a new channel: %v", err)

	missingX := r.name("missing-exchange")
	r.set("missing_exchange", missingX)
	ch3, err := r.channel(conn)
	if err != nil {
		return err
	}
	r.step("exchange.declare passive %s", missingX)
	err = ch3.ExchangeDeclarePassive(missingX, "direct", false, false, false, false, nil)
	r.set("exchange_error", amqpError(err))
	r.check(err != nil, "passive declare of a missing exchange succeeded")

	r.step("connection.close")
	err = conn.Close()
	r.set("graceful_close_error", amqpError(err))
	r.check(err == nil, "connection.close: %v", err)
	notified := []interface{}{}
	if e := closeNotification(r, connClosed); e != nil {
		notified = append(notified, e)
	}
	for i := 0; i < gracefulCloses; i++ {
		conn, err := r.dial()
		if err != nil {
			return err
		}
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		r.step("graceful connection.close %d of %d", i+1, gracefulCloses)
		if err := conn.Close(); err != nil {
			return fmt.Errorf("connection.close %d: %w", i+1, err)
		}
		if e := closeNotification(r, closed); e != nil {
			notified = append(notified, e)
		}
	}
	r.set("graceful_closes", gracefulCloses+1)
	r.set("graceful_close_notified", notified)
	r.check(len(notified) == 0, "%d of %d graceful closes notified an error: %v", len(notified), gracefulCloses+1, notified)
	return nil
}

// closeNotification waits for a connection's NotifyClose channel after a graceful Close: it must be
// closed without a value. It returns what was notified instead (nil if nothing).
func closeNotification(r *run, closed chan *amqp.Error) interface{} {
	r.step("wait for NotifyClose after a graceful close")
	select {
	case e, ok := <-closed:
		if ok {
			return amqpError(e)
		}
		return nil
	case <-time.After(time.Second):
		return "NotifyClose not closed within 1 s"
	}
}
