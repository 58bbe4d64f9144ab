package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// reconnect: the reconnect loop amqp091-go's users write (the library does not reconnect by itself),
// across a broker restart or a failover, for e2e/test_postgres_ha.py. It publishes persistent messages
// with confirms, one at a time, to the durable queue named by -prefix, dialling again every 100 ms
// while the broker is away; prints "ready" after -before confirms, keeps publishing until a line
// arrives on stdin (the test has restarted the broker meanwhile), then until -after more confirms
// came over a connection opened after "ready", and finally gets every message back from the queue
// (and deletes it).
//
// data: confirmed (how many), reconnects, missing (confirmed ids not in the queue), stored.
func reconnectFlags(fs *flag.FlagSet) func(r *run) error {
	before := fs.Int("before", 50, "confirms before printing ready")
	after := fs.Int("after", 50, "confirms over a new connection once the broker was restarted")
	return func(r *run) error { return reconnectLoop(r, *before, *after) }
}

// publisher is one connection's channel in confirm mode, replaced when the connection drops.
type publisher struct {
	r        *run
	queue    string
	conn     *amqp.Connection
	ch       *amqp.Channel
	confirms chan amqp.Confirmation
	dials    int
}

// connect dials until the broker answers, then opens a confirm-mode channel and declares the queue.
func (p *publisher) connect() error {
	for {
		if err := p.r.ctx.Err(); err != nil {
			return err
		}
		conn, err := p.r.dial()
		if err == nil {
			var ch *amqp.Channel
			if ch, err = conn.Channel(); err == nil {
				if err = ch.Confirm(false); err == nil {
					if _, err = ch.QueueDeclare(p.queue, true, false, false, false, nil); err == nil {
						p.conn, p.ch, p.dials = conn, ch, p.dials+1
						p.confirms = ch.NotifyPublish(make(chan amqp.Confirmation, 1))
						return nil
					}
				}
			}
			_ = conn.Close()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// publish sends id and waits for its confirm: true on an ack; false on a nack or a lost connection
// (after which the caller connects again).
func (p *publisher) publish(id int) bool {
	msg := amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(strconv.Itoa(id))}
	if err := p.ch.PublishWithContext(p.r.ctx, "", p.queue, false, false, msg); err != nil {
		return false
	}
	select {
	case c, ok := <-p.confirms:
		return ok && c.Ack
	case <-p.r.ctx.Done():
		return false
	}
}

func reconnectLoop(r *run, before, after int) error {
	p := &publisher{r: r, queue: r.name("")}
	if err := p.connect(); err != nil {
		return err
	}
	restarted := make(chan struct{})
	confirmed := []int{}
	next := 0
	send := func() error {
		if p.publish(next) {
			confirmed = append(confirmed, next)
		} else if p.conn.IsClosed() {
			r.step("reconnecting after %d confirms", len(confirmed))
			if err := p.connect(); err != nil {
				return err
			}
		}
		next++
		return nil
	}
	r.step("publishing before the restart")
	for len(confirmed) < before {
		if err := send(); err != nil {
			return err
		}
	}
	dialsAtReady := p.dials
	fmt.Println("ready")
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		close(restarted)
	}()
	waiting := true
	for waiting {
		select {
		case <-restarted:
			waiting = false
		default:
			if err := send(); err != nil {
				return err
			}
		}
	}
	r.step("publishing after the restart")
	counted := 0
	for counted < after {
		n := len(confirmed)
		if err := send(); err != nil {
			return err
		}
		if len(confirmed) > n && p.dials > dialsAtReady {
			counted++
		} else if len(confirmed) > n {
			// the connection of before the restart still answers: the restart has not reached it yet
			time.Sleep(10 * time.Millisecond)
		}
	}
	r.step("reading the queue back")
	stored := map[int]bool{}
	for {
		d, ok, err := p.ch.Get(p.queue, true)
		if err != nil {
			return fmt.Errorf("get: %w", err)
		}
		if !ok {
			break
		}
		id, _ := strconv.Atoi(string(d.Body))
		stored[id] = true
	}
	missing := []int{}
	for _, id := range confirmed {
		if !stored[id] {
			missing = append(missing, id)
		}
	}
	_, _ = p.ch.QueueDelete(p.queue, false, false, false)
	r.set("confirmed", len(confirmed))
	r.set("reconnects", p.dials-1)
	r.set("missing", missing)
	r.set("stored", len(stored))
	r.check(len(missing) == 0, "%d confirmed messages are not in the queue: %v", len(missing), missing)
	r.check(p.dials > dialsAtReady, "no new connection after the restart")
	return nil
}
