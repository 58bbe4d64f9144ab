package main

import (
	"flag"

	amqp "github.com/rabbitmq/amqp091-go"
)

// flow-secret: Connection.UpdateSecret (RabbitMQ 3.8+, OAuth 2 token refresh) must be answered with
// update-secret-ok and leave the connection usable; Channel.Flow(true) is answered; Channel.Flow(false)
// is refused by RabbitMQ 3.x with 540 NOT_IMPLEMENTED, a connection error, which amqp091-go's own
// TestIntegrationConsumeFlow relies on to skip itself (it type-asserts the error to *amqp.Error).
//
// data: update_secret_error, declare_after_update_error, flow_true_error, flow_false_error,
// connection_close (the error NotifyClose delivered), connection_is_closed.
func flowSecretFlags(fs *flag.FlagSet) func(r *run) error {
	secret := fs.String("secret", "guest", "new secret to send in connection.update-secret")
	return func(r *run) error { return flowSecretScenario(r, *secret) }
}

func flowSecretScenario(r *run, secret string) error {
	conn, err := r.dial()
	if err != nil {
		return err
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))

	r.step("connection.update-secret")
	err = conn.UpdateSecret(secret, "e2e token refresh")
	r.set("update_secret_error", amqpError(err))
	r.check(err == nil, "UpdateSecret failed: %v", err)

	ch, err := r.channel(conn)
	if err != nil {
		return err
	}
	r.step("queue.declare after update-secret")
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	r.set("declare_after_update_error", amqpError(err))
	r.check(err == nil && q.Name != "", "declare after UpdateSecret failed: %v", err)

	r.step("channel.flow active=true")
	err = ch.Flow(true)
	r.set("flow_true_error", amqpError(err))
	r.check(err == nil, "Flow(true) failed: %v", err)

	r.step("channel.flow active=false")
	err = ch.Flow(false)
	r.set("flow_false_error", amqpError(err))
	e, ok := err.(*amqp.Error)
	r.check(ok && e.Code == amqp.NotImplemented, "Flow(false) gave %v, want *amqp.Error 540", err)

	r.step("wait for connection NotifyClose")
	select {
	case e := <-closed:
		r.set("connection_close", amqpError(e))
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
	r.set("connection_is_closed", conn.IsClosed())
	return nil
}
