package main

import (
	"flag"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// crossing-close: amqp091-go's TestChannelExceptionWithCloseIssue43, -rounds times on fresh
// connections. Channel 1 publishes to the missing exchange "<prefix>.missing" and is closed at once,
// so the broker's channel.close (404) and the client's cross on the wire (either may go first); then
// channel 2 declares (and deletes) an exchange, which must work: the connection survives the crossing.
//
// data: rounds, declare_errors (channel 2's errors), connection_errors (connection NotifyClose values
// before the graceful close), close_errors (errors from channel 1's Close).
func crossingFlags(fs *flag.FlagSet) func(r *run) error {
	rounds := fs.Int("rounds", 20, "connections to run the crossing on")
	return func(r *run) error { return crossingScenario(r, *rounds) }
}

func crossingScenario(r *run, rounds int) error {
	missing := r.name("missing")
	declareErrors := []interface{}{}
	connectionErrors := []interface{}{}
	closeErrors := []interface{}{}
	for i := 0; i < rounds; i++ {
		conn, err := r.dial()
		if err != nil {
			return err
		}
		connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
		c1, err := r.channel(conn)
		if err != nil {
			return err
		}
		c2, err := r.channel(conn)
		if err != nil {
			return err
		}
		r.step("round %d: publish to %s on channel 1, then close it", i+1, missing)
		if err := c1.PublishWithContext(r.ctx, missing, "", false, false, amqp.Publishing{}); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		if err := c1.Close(); err != nil && err != amqp.ErrClosed {
			closeErrors = append(closeErrors, amqpError(err))
		}
		r.step("round %d: exchange.declare on channel 2", i+1)
		still := r.name(fmt.Sprintf("still-%d", i))
		if err := c2.ExchangeDeclare(still, "direct", false, true, false, false, nil); err != nil {
			declareErrors = append(declareErrors, amqpError(err))
		} else if err := c2.ExchangeDelete(still, false, false); err != nil {
			declareErrors = append(declareErrors, amqpError(err))
		}
		select {
		case e := <-connClosed:
			connectionErrors = append(connectionErrors, amqpError(e))
		default:
			if err := conn.Close(); err != nil {
				connectionErrors = append(connectionErrors, amqpError(err))
			}
		}
	}
	r.set("rounds", rounds)
	r.set("declare_errors", declareErrors)
	r.set("connection_errors", connectionErrors)
	r.set("close_errors", closeErrors)
	r.check(len(declareErrors) == 0, "channel 2 failed after the crossing: %v", declareErrors)
	r.check(len(connectionErrors) == 0, "the connection was closed: %v", connectionErrors)
	return nil
}
