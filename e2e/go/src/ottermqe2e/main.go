// Command ottermq-e2e drives an AMQP 0-9-1 broker with the amqp091-go client, one scenario per
// subcommand, for e2e/test_go_client.py. It runs the same way against ottermq and RabbitMQ.
//
// Build (GOPATH mode, no module proxy; Debian's golang-go and golang-github-rabbitmq-amqp091-go-dev):
//
//	GO111MODULE=off GOFLAGS= GOPATH=$PWD/e2e/go:/usr/share/gocode go build -o /tmp/ottermq-e2e ottermqe2e
//
// Usage:
//
//	ottermq-e2e <scenario> -url amqp://guest:guest@127.0.0.1:5672/%2F -prefix e2e.go.1234 [-timeout 5s]
//	ottermq-e2e <scenario> -url amqps://localhost:5671/%2F -ca ca.pem [-cert c.pem -key c.key -external] ...
//
// Scenarios: pubsub, ttl-dlx, return, close, table-roundtrip, publish, flow-secret, delayed-dedup,
// reconnect (run with -h for their flags).
//
// Every run prints exactly one JSON object on stdout:
//
//	{"scenario": "...", "ok": true, "failures": [], "error": "", "step": "...", "data": {...}}
//
// "failures" lists the checks that the program itself found wrong, "error" an unexpected client error
// or the timeout, "step" what it was doing last. Exit status: 0 ok, 1 failures or error, 2 usage,
// 3 the watchdog fired (the client library blocked past -timeout). Names are derived from -prefix
// (the prefix itself and "<prefix>.<suffix>"); the program deletes what it declared before exiting.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// clientTLS is the TLS configuration of -ca, -cert and -key (the server is checked against -ca).
func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-ca %s: no PEM certificate", caFile)
		}
		config.RootCAs = pool
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("-cert/-key: %w", err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config, nil
}

// result is the JSON document printed on stdout.
type result struct {
	Scenario string                 `json:"scenario"`
	OK       bool                   `json:"ok"`
	Failures []string               `json:"failures"`
	Error    string                 `json:"error,omitempty"`
	Step     string                 `json:"step"`
	Data     map[string]interface{} `json:"data"`
}

// run is the state shared by a scenario and the main function.
type run struct {
	ctx     context.Context
	url     string
	prefix  string
	timeout time.Duration

	tls      *tls.Config // amqps:// with -ca/-cert/-key
	external bool        // SASL EXTERNAL

	mu      sync.Mutex
	res     result
	printed bool
	cleanup []func()
}

// scenario is one subcommand: flags to register, then the body.
type scenario struct {
	help  string
	flags func(fs *flag.FlagSet) func(r *run) error
}

var scenarios = map[string]scenario{
	"pubsub":          {"publish with confirms, consume with manual acks and prefetch", pubsubFlags},
	"ttl-dlx":         {"queue TTL or per-message expiration dead-letters to a DLX; decode x-death", ttlDLXFlags},
	"return":          {"NotifyReturn for mandatory unroutable publishes", returnFlags},
	"close":           {"NotifyClose for a channel error (passive declare of a missing queue)", closeFlags},
	"crossing-close":  {"a channel error's close crossing the client's close (amqp091-go issue 43)", crossingFlags},
	"table-roundtrip": {"every amqp091-go field type survives a round trip in message headers", tableFlags},
	"publish":         {"publish one confirmed message with every field type in its headers", publishFlags},
	"flow-secret":     {"Connection.UpdateSecret, then Channel.Flow(true) and Flow(false) (540)", flowSecretFlags},
	"delayed-dedup":   {"x-delayed-message exchange and x-message-deduplication (ottermq extensions)", delayedFlags},
	"reconnect":       {"confirmed publishing with a reconnect loop across a broker restart or failover", reconnectFlags},
}

func usage() {
	names := make([]string, 0, len(scenarios))
	for name := range scenarios {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: ottermq-e2e <scenario> -url URL -prefix NAME [flags]\nscenarios:\n")
	for _, name := range names {
		fmt.Fprintf(os.Stderr, "  %-16s %s\n", name, scenarios[name].help)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	sc, found := scenarios[os.Args[1]]
	if !found {
		fmt.Fprintf(os.Stderr, "unknown scenario %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	url := fs.String("url", "amqp://guest:guest@127.0.0.1:5672/%2F", "AMQP URL of the broker")
	prefix := fs.String("prefix", "", "unique prefix for queue and exchange names (required)")
	timeout := fs.Duration("timeout", 5*time.Second, "overall deadline for the scenario")
	caFile := fs.String("ca", "", "amqps:// URLs: CA bundle (PEM) the server certificate is checked against")
	certFile := fs.String("cert", "", "amqps:// URLs: client certificate (PEM)")
	keyFile := fs.String("key", "", "amqps:// URLs: the client certificate's key (PEM)")
	external := fs.Bool("external", false, "log in with SASL EXTERNAL (the client certificate names the user)")
	body := sc.flags(fs)
	_ = fs.Parse(os.Args[2:])
	if *prefix == "" || fs.NArg() != 0 {
		fs.Usage()
		os.Exit(2)
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	r := &run{
		ctx: ctx, url: *url, prefix: *prefix, timeout: *timeout, external: *external,
		res: result{Scenario: os.Args[1], Failures: []string{}, Data: map[string]interface{}{}},
	}
	if *caFile != "" || *certFile != "" {
		tlsConfig, err := clientTLS(*caFile, *certFile, *keyFile)
		if err != nil {
			r.res.Error = err.Error()
			os.Exit(r.finish(1))
		}
		r.tls = tlsConfig
	}
	// amqp091-go calls such as QueueDeclare wait for the broker's reply without a deadline: if the broker
	// never answers, print what we have and exit instead of hanging the test suite.
	watchdog := time.AfterFunc(*timeout+2*time.Second, func() {
		r.mu.Lock()
		r.res.Error = fmt.Sprintf("watchdog: no progress within %s (client call blocked)", *timeout+2*time.Second)
		r.mu.Unlock()
		os.Exit(r.finish(3))
	})
	err := body(r)
	watchdog.Stop()
	if err != nil {
		r.mu.Lock()
		if ctx.Err() != nil {
			r.res.Error = fmt.Sprintf("timeout after %s during %q: %v", *timeout, r.res.Step, err)
		} else {
			r.res.Error = err.Error()
		}
		r.mu.Unlock()
	}
	r.runCleanup()
	os.Exit(r.finish(1))
}

// finish prints the result once and returns the exit status (failStatus if anything failed).
func (r *run) finish(failStatus int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.OK = r.res.Error == "" && len(r.res.Failures) == 0
	if !r.printed {
		r.printed = true
		out, err := json.Marshal(r.res)
		if err != nil {
			out = []byte(fmt.Sprintf(`{"scenario": %q, "ok": false, "error": %q}`, r.res.Scenario, err.Error()))
		}
		fmt.Println(string(out))
	}
	if r.res.OK {
		return 0
	}
	return failStatus
}

// step records what the scenario is doing (reported on timeout).
func (r *run) step(format string, args ...interface{}) {
	r.mu.Lock()
	r.res.Step = fmt.Sprintf(format, args...)
	r.mu.Unlock()
}

// set stores a value under data[key].
func (r *run) set(key string, value interface{}) {
	r.mu.Lock()
	r.res.Data[key] = value
	r.mu.Unlock()
}

// check records a failure unless cond holds; it returns cond.
func (r *run) check(cond bool, format string, args ...interface{}) bool {
	if !cond {
		r.mu.Lock()
		r.res.Failures = append(r.res.Failures, fmt.Sprintf(format, args...))
		r.mu.Unlock()
	}
	return cond
}

// name derives an entity name from the prefix ("" gives the prefix itself).
func (r *run) name(suffix string) string {
	if suffix == "" {
		return r.prefix
	}
	return r.prefix + "." + suffix
}

// dial opens a connection; it is closed after the scenario (cleanup runs in reverse order).
func (r *run) dial() (*amqp.Connection, error) {
	r.step("dial %s", redact(r.url))
	config := amqp.Config{
		Heartbeat:       10 * time.Second,
		Locale:          "en_US",
		Dial:            amqp.DefaultDial(r.timeout),
		Properties:      amqp.Table{"connection_name": "ottermq-e2e " + r.res.Scenario},
		TLSClientConfig: r.tls,
	}
	if r.external {
		config.SASL = []amqp.Authentication{&amqp.ExternalAuth{}}
	}
	conn, err := amqp.DialConfig(r.url, config)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	r.defer_(func() { _ = conn.Close() })
	return conn, nil
}

// channel opens a channel on conn.
func (r *run) channel(conn *amqp.Connection) (*amqp.Channel, error) {
	r.step("open channel")
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("channel: %w", err)
	}
	return ch, nil
}

// deleteLater deletes queues and exchanges on a fresh channel of conn after the scenario.
func (r *run) deleteLater(conn *amqp.Connection, queues []string, exchanges []string) {
	r.defer_(func() {
		if conn.IsClosed() {
			return
		}
		for _, q := range queues {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_ = ch.Close()
			}
		}
		for _, x := range exchanges {
			if ch, err := conn.Channel(); err == nil {
				_ = ch.ExchangeDelete(x, false, false)
				_ = ch.Close()
			}
		}
	})
}

func (r *run) defer_(fn func()) {
	r.mu.Lock()
	r.cleanup = append(r.cleanup, fn)
	r.mu.Unlock()
}

// runCleanup runs deferred cleanups newest first, bounded by one second in total.
func (r *run) runCleanup() {
	r.mu.Lock()
	fns := r.cleanup
	r.cleanup = nil
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		for i := len(fns) - 1; i >= 0; i-- {
			fns[i]()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}

func redact(url string) string {
	if at := strings.LastIndex(url, "@"); at >= 0 {
		if scheme := strings.Index(url, "://"); scheme >= 0 && scheme < at {
			return url[:scheme+3] + "***" + url[at:]
		}
	}
	return url
}

// amqpError describes an error for the JSON output, with *amqp.Error's fields when it is one.
func amqpError(err error) map[string]interface{} {
	if err == nil {
		return nil
	}
	if e, ok := err.(*amqp.Error); ok {
		return map[string]interface{}{
			"type": fmt.Sprintf("%T", err), "code": e.Code, "reason": e.Reason, "server": e.Server, "recover": e.Recover,
		}
	}
	return map[string]interface{}{"type": fmt.Sprintf("%T", err), "message": err.Error()}
}
