// Command ottermq-bench is an independent load generator for `make bench` (issue 18): the same
// scenarios as benchmarks/run.py, driven with the amqp091-go client library instead of our own
// Python wire code, so the numbers are what a Go user would see. One publisher connection and one
// consumer connection (fanout10: one consumer connection per queue), 100-byte bodies.
//
// Build (GOPATH mode, Debian's golang-go and golang-github-rabbitmq-amqp091-go-dev, no network):
//
//	GO111MODULE=off GOFLAGS= GOPATH=$PWD/benchmarks/go:/usr/share/gocode go build -o /tmp/ottermq-bench ottermqbench
//
// Usage:
//
//	ottermq-bench <scenario> -url amqp://guest:guest@127.0.0.1:5672/%2F -count 200000 -prefix bench.go.1
//
// Scenarios: noack, ack-each, ack-multiple50, confirms, confirms-consumed, fanout10, dlx, latency.
// Prints one JSON object: {"scenario": ..., "msgs_per_s": ..., "p50_ms": ..., "p99_ms": ..., "error": ...}.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

type result struct {
	Scenario  string  `json:"scenario"`
	Count     int     `json:"count"`
	MsgsPerS  float64 `json:"msgs_per_s,omitempty"`
	P50Ms     float64 `json:"p50_ms,omitempty"`
	P99Ms     float64 `json:"p99_ms,omitempty"`
	Seconds   float64 `json:"seconds"`
	Error     string  `json:"error,omitempty"`
	Delivered int     `json:"delivered"`
}

type bench struct {
	url    string
	prefix string
	count  int
	size   int
	rate   int
	dur    time.Duration
	stall  time.Duration
	conns  []*amqp.Connection

	queues, consumers, connections, backlog int
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ottermq-bench <scenario> [-url URL] [-count N] [-prefix P]")
		os.Exit(2)
	}
	name := os.Args[1]
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	b := &bench{}
	fs.StringVar(&b.url, "url", "amqp://guest:guest@127.0.0.1:5672/%2F", "AMQP URL")
	fs.StringVar(&b.prefix, "prefix", "bench.go", "queue/exchange name prefix")
	fs.IntVar(&b.count, "count", 100000, "messages to publish")
	fs.IntVar(&b.size, "size", 100, "body bytes")
	fs.IntVar(&b.rate, "rate", 2000, "latency: messages per second")
	fs.DurationVar(&b.dur, "duration", 10*time.Second, "latency: how long to publish")
	fs.DurationVar(&b.stall, "stall", 15*time.Second, "give up after this long without progress")
	fs.IntVar(&b.queues, "queues", 1, "scale: queues the messages are spread over")
	fs.IntVar(&b.consumers, "consumers", 1, "scale: no-ack consumers per queue")
	fs.IntVar(&b.connections, "connections", 1, "scale: client connections (each publishes to and consumes from its queues)")
	fs.IntVar(&b.backlog, "backlog", 0, "scale: messages queued before the timed run starts")
	_ = fs.Parse(os.Args[2:])

	scenarios := map[string]func() (result, error){
		"noack":             func() (result, error) { return b.oneQueue(name, true, 0, 0) },
		"ack-each":          func() (result, error) { return b.oneQueue(name, false, 100, 1) },
		"ack-multiple50":    func() (result, error) { return b.oneQueue(name, false, 100, 50) },
		"confirms":          func() (result, error) { return b.confirms(name, false) },
		"confirms-consumed": func() (result, error) { return b.confirms(name, true) },
		"fanout10":          func() (result, error) { return b.fanout(name, 10) },
		"dlx":               func() (result, error) { return b.dlx(name) },
		"latency":           func() (result, error) { return b.latency(name) },
		"scale":             func() (result, error) { return b.scale(name) },
	}
	run, ok := scenarios[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown scenario %q\n", name)
		os.Exit(2)
	}
	res, err := run()
	res.Scenario = name
	if err != nil {
		res.Error = err.Error()
	}
	for _, c := range b.conns {
		_ = c.Close()
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	if err != nil {
		os.Exit(1)
	}
}

func (b *bench) dial() (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.DialConfig(b.url, amqp.Config{Heartbeat: 0, Locale: "en_US"})
	if err != nil {
		return nil, nil, fmt.Errorf("dial: %w", err)
	}
	b.conns = append(b.conns, conn)
	ch, err := conn.Channel()
	if err != nil {
		return nil, nil, fmt.Errorf("channel: %w", err)
	}
	return conn, ch, nil
}

func (b *bench) body() []byte {
	return make([]byte, b.size)
}

// queue declares a fresh queue (deleted first, auto-deleted with its consumer gone is not wanted).
func (b *bench) queue(ch *amqp.Channel, suffix string, durable bool, args amqp.Table) (string, error) {
	name := fmt.Sprintf("%s.%s", b.prefix, suffix)
	_, _ = ch.QueueDelete(name, false, false, false)
	if _, err := ch.QueueDeclare(name, durable, false, false, false, args); err != nil {
		return "", fmt.Errorf("queue.declare %s: %w", name, err)
	}
	return name, nil
}

// publishAll publishes count messages as fast as the client allows.
func (b *bench) publishAll(ch *amqp.Channel, exchange, key string, count int, persistent bool) error {
	msg := amqp.Publishing{Body: b.body()}
	if persistent {
		msg.DeliveryMode = amqp.Persistent
	}
	ctx := context.Background()
	for i := 0; i < count; i++ {
		if err := ch.PublishWithContext(ctx, exchange, key, false, false, msg); err != nil {
			return fmt.Errorf("publish %d: %w", i, err)
		}
	}
	return nil
}

// watchdog tells a receive loop that nothing moved for b.stall. It is one timer per loop, not a
// time.After per message: 100k pending timers would make the generator measure its own timer heap.
type watchdog struct {
	C     <-chan time.Time
	t     *time.Timer
	stall time.Duration
	last  int
}

func (b *bench) watchdog() *watchdog {
	t := time.NewTimer(b.stall)
	return &watchdog{C: t.C, t: t, stall: b.stall}
}

// stalled is called when C fires: true when progress has not moved since the previous firing
// (a stall is then reported after between one and two stall periods); otherwise it re-arms.
func (w *watchdog) stalled(progress int) bool {
	if progress != w.last {
		w.last = progress
		w.t.Reset(w.stall)
		return false
	}
	return true
}

// drain receives until n deliveries arrived (acking as asked); it gives up after b.stall without one.
func (b *bench) drain(ch *amqp.Channel, deliveries <-chan amqp.Delivery, n, ackEvery int) (int, error) {
	got := 0
	wd := b.watchdog()
	defer wd.t.Stop()
	for got < n {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return got, fmt.Errorf("consumer closed after %d deliveries", got)
			}
			got++
			if ackEvery > 0 && got%ackEvery == 0 {
				if err := ch.Ack(d.DeliveryTag, ackEvery > 1); err != nil {
					return got, fmt.Errorf("ack: %w", err)
				}
			}
		case <-wd.C:
			if wd.stalled(got) {
				return got, fmt.Errorf("stalled after %d of %d deliveries", got, n)
			}
		}
	}
	return got, nil
}

func (b *bench) oneQueue(name string, noAck bool, prefetch, ackEvery int) (result, error) {
	_, cch, err := b.dial()
	if err != nil {
		return result{}, err
	}
	q, err := b.queue(cch, name, false, nil)
	if err != nil {
		return result{}, err
	}
	if prefetch > 0 {
		if err := cch.Qos(prefetch, 0, false); err != nil {
			return result{}, err
		}
	}
	deliveries, err := cch.Consume(q, "", noAck, false, false, false, nil)
	if err != nil {
		return result{}, err
	}
	_, pch, err := b.dial()
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	pubErr := make(chan error, 1)
	go func() { pubErr <- b.publishAll(pch, "", q, b.count, false) }()
	if noAck {
		ackEvery = 0
	} else if ackEvery < 1 {
		ackEvery = 1
	}
	got, err := b.drain(cch, deliveries, b.count, ackEvery)
	elapsed := time.Since(start).Seconds()
	if perr := <-pubErr; perr != nil && err == nil {
		err = perr
	}
	_, _ = cch.QueueDelete(q, false, false, false)
	return result{Count: b.count, Delivered: got, Seconds: elapsed, MsgsPerS: float64(got) / elapsed}, err
}

func (b *bench) confirms(name string, consumed bool) (result, error) {
	_, pch, err := b.dial()
	if err != nil {
		return result{}, err
	}
	q, err := b.queue(pch, name, true, nil)
	if err != nil {
		return result{}, err
	}
	var deliveries <-chan amqp.Delivery
	var cch *amqp.Channel
	if consumed {
		_, cch, err = b.dial()
		if err != nil {
			return result{}, err
		}
		if deliveries, err = cch.Consume(q, "", true, false, false, false, nil); err != nil {
			return result{}, err
		}
	}
	if err := pch.Confirm(false); err != nil {
		return result{}, err
	}
	confirms := pch.NotifyPublish(make(chan amqp.Confirmation, 2000))
	start := time.Now()
	var wg sync.WaitGroup
	var drainErr error
	got := 0
	if consumed {
		wg.Add(1)
		go func() { defer wg.Done(); got, drainErr = b.drain(cch, deliveries, b.count, 0) }()
	}
	// at most 1000 outstanding confirms, as benchmarks/run.py
	msg := amqp.Publishing{Body: b.body(), DeliveryMode: amqp.Persistent}
	acked, nacked, sent := 0, 0, 0
	wd := b.watchdog()
	defer wd.t.Stop()
	for acked+nacked < b.count {
		for sent < b.count && sent-(acked+nacked) < 1000 {
			if err := pch.PublishWithContext(context.Background(), "", q, false, false, msg); err != nil {
				return result{}, err
			}
			sent++
		}
		select {
		case c := <-confirms:
			if c.Ack {
				acked++
			} else {
				nacked++
			}
		case <-wd.C:
			if wd.stalled(acked + nacked) {
				return result{}, fmt.Errorf("stalled at %d confirms", acked+nacked)
			}
		}
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	_, _ = pch.QueueDelete(q, false, false, false)
	res := result{Count: b.count, Delivered: got, Seconds: elapsed, MsgsPerS: float64(b.count) / elapsed}
	if nacked > 0 {
		return res, fmt.Errorf("%d nacks", nacked)
	}
	return res, drainErr
}

func (b *bench) fanout(name string, n int) (result, error) {
	_, pch, err := b.dial()
	if err != nil {
		return result{}, err
	}
	exchange := b.prefix + "." + name
	if err := pch.ExchangeDeclare(exchange, "fanout", false, true, false, false, nil); err != nil {
		return result{}, err
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	counts := make([]int, n)
	for i := 0; i < n; i++ {
		_, cch, err := b.dial()
		if err != nil {
			return result{}, err
		}
		q, err := b.queue(cch, fmt.Sprintf("%s.%d", name, i), false, amqp.Table{"x-expires": int32(60000)})
		if err != nil {
			return result{}, err
		}
		if err := cch.QueueBind(q, "", exchange, false, nil); err != nil {
			return result{}, err
		}
		deliveries, err := cch.Consume(q, "", true, false, false, false, nil)
		if err != nil {
			return result{}, err
		}
		wg.Add(1)
		go func(i int, cch *amqp.Channel) {
			defer wg.Done()
			got, err := b.drain(cch, deliveries, b.count, 0)
			counts[i] = got
			errs <- err
		}(i, cch)
	}
	start := time.Now()
	if err := b.publishAll(pch, exchange, "", b.count, false); err != nil {
		return result{}, err
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	close(errs)
	total := 0
	for _, c := range counts {
		total += c
	}
	var firstErr error
	for err := range errs {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return result{Count: b.count, Delivered: total, Seconds: elapsed, MsgsPerS: float64(total) / elapsed}, firstErr
}

func (b *bench) dlx(name string) (result, error) {
	_, ch, err := b.dial()
	if err != nil {
		return result{}, err
	}
	dead := b.prefix + ".dlx"
	if err := ch.ExchangeDeclare(dead, "fanout", false, true, false, false, nil); err != nil {
		return result{}, err
	}
	dlq, err := b.queue(ch, "dlq", false, nil)
	if err != nil {
		return result{}, err
	}
	if err := ch.QueueBind(dlq, "", dead, false, nil); err != nil {
		return result{}, err
	}
	src, err := b.queue(ch, "src", false, amqp.Table{"x-message-ttl": int32(1), "x-dead-letter-exchange": dead})
	if err != nil {
		return result{}, err
	}
	_, pch, err := b.dial()
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	if err := b.publishAll(pch, "", src, b.count, false); err != nil {
		return result{}, err
	}
	seen, changed := 0, time.Now()
	for {
		q, err := ch.QueueDeclarePassive(dlq, false, false, false, false, nil)
		if err != nil {
			return result{}, err
		}
		if q.Messages >= b.count {
			elapsed := time.Since(start).Seconds()
			_, _ = ch.QueueDelete(src, false, false, false)
			_, _ = ch.QueueDelete(dlq, false, false, false)
			return result{Count: b.count, Delivered: q.Messages, Seconds: elapsed,
				MsgsPerS: float64(b.count) / elapsed}, nil
		}
		if q.Messages != seen {
			seen, changed = q.Messages, time.Now()
		} else if time.Since(changed) > b.stall {
			return result{Delivered: seen}, fmt.Errorf("stalled at %d dead letters", seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// latency publishes at b.rate for b.dur with a send timestamp in the body; p50/p99 of publish->deliver.
func (b *bench) latency(name string) (result, error) {
	_, cch, err := b.dial()
	if err != nil {
		return result{}, err
	}
	q, err := b.queue(cch, name, false, nil)
	if err != nil {
		return result{}, err
	}
	deliveries, err := cch.Consume(q, "", true, false, false, false, nil)
	if err != nil {
		return result{}, err
	}
	_, pch, err := b.dial()
	if err != nil {
		return result{}, err
	}
	total := int(float64(b.rate) * b.dur.Seconds())
	samples := make([]float64, 0, total)
	done := make(chan error, 1)
	go func() {
		wd := b.watchdog()
		defer wd.t.Stop()
		for len(samples) < total {
			select {
			case d := <-deliveries:
				sent := int64(binary.BigEndian.Uint64(d.Body[:8]))
				samples = append(samples, float64(time.Now().UnixNano()-sent)/1e6)
			case <-wd.C:
				if wd.stalled(len(samples)) {
					done <- fmt.Errorf("stalled after %d of %d deliveries", len(samples), total)
					return
				}
			}
		}
		done <- nil
	}()
	interval := time.Second / time.Duration(b.rate)
	body := b.body()
	next := time.Now()
	for i := 0; i < total; i++ {
		if wait := time.Until(next); wait > 0 {
			time.Sleep(wait)
		}
		next = next.Add(interval)
		binary.BigEndian.PutUint64(body[:8], uint64(time.Now().UnixNano()))
		msg := amqp.Publishing{Body: append([]byte(nil), body...)}
		if err := pch.PublishWithContext(context.Background(), "", q, false, false, msg); err != nil {
			return result{}, err
		}
	}
	err = <-done
	_, _ = cch.QueueDelete(q, false, false, false)
	sort.Float64s(samples)
	res := result{Count: total, Delivered: len(samples)}
	if len(samples) > 0 {
		res.P50Ms = samples[len(samples)/2]
		i := len(samples) * 99 / 100
		if i > len(samples)-1 {
			i = len(samples) - 1
		}
		res.P99Ms = samples[i]
	}
	return res, err
}

// scale: -count messages spread round-robin over -queues queues, each with -consumers no-ack
// consumers, the queues split over -connections connections (each publishes to and consumes from its
// own queues), after -backlog messages were queued (spread the same way) before the clock starts.
// msgs_per_s = (backlog + count) deliveries / time from the first timed publish to the last delivery.
func (b *bench) scale(name string) (result, error) {
	type side struct {
		ch     *amqp.Channel
		queues []string
	}
	if b.queues < b.connections { // every connection publishes to and consumes from a queue of its own
		b.queues = b.connections
	}
	sides := make([]side, b.connections)
	for i := range sides {
		_, ch, err := b.dial()
		if err != nil {
			return result{}, err
		}
		sides[i].ch = ch
	}
	for q := 0; q < b.queues; q++ {
		s := &sides[q%b.connections]
		name, err := b.queue(s.ch, fmt.Sprintf("scale.%d", q), false, nil)
		if err != nil {
			return result{}, err
		}
		s.queues = append(s.queues, name)
	}
	publish := func(n int) error {
		var wg sync.WaitGroup
		errs := make(chan error, len(sides))
		for i := range sides {
			s := sides[i]
			share := n / len(sides)
			if i < n%len(sides) {
				share++
			}
			if len(s.queues) == 0 || share == 0 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				msg := amqp.Publishing{Body: b.body()}
				for k := 0; k < share; k++ {
					q := s.queues[k%len(s.queues)]
					if err := s.ch.PublishWithContext(context.Background(), "", q, false, false, msg); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	if b.backlog > 0 {
		if err := publish(b.backlog); err != nil {
			return result{}, err
		}
		for _, s := range sides { // wait until the backlog is queued
			for _, q := range s.queues {
				for {
					st, err := s.ch.QueueDeclarePassive(q, false, false, false, false, nil)
					if err != nil {
						return result{}, err
					}
					if st.Messages >= b.backlog/b.queues {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
	}
	total := b.backlog + b.count
	var received int64
	var mu sync.Mutex
	done := make(chan struct{})
	last := time.Now()
	for i := range sides {
		s := sides[i]
		for _, q := range s.queues {
			for c := 0; c < b.consumers; c++ {
				deliveries, err := s.ch.Consume(q, "", true, false, false, false, nil)
				if err != nil {
					return result{}, err
				}
				go func() {
					for range deliveries {
						mu.Lock()
						received++
						last = time.Now()
						if received == int64(total) {
							close(done)
						}
						mu.Unlock()
					}
				}()
			}
		}
	}
	start := time.Now()
	if err := publish(b.count); err != nil {
		return result{}, err
	}
	for {
		select {
		case <-done:
			mu.Lock()
			elapsed := last.Sub(start).Seconds()
			mu.Unlock()
			for _, s := range sides {
				for _, q := range s.queues {
					_, _ = s.ch.QueueDelete(q, false, false, false)
				}
			}
			return result{Count: total, Delivered: total, Seconds: elapsed, MsgsPerS: float64(total) / elapsed}, nil
		case <-time.After(b.stall):
			mu.Lock()
			got := received
			mu.Unlock()
			if time.Since(last) > b.stall {
				return result{Delivered: int(got)}, fmt.Errorf("stalled after %d of %d deliveries", got, total)
			}
		}
	}
}
