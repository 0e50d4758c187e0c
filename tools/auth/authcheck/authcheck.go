// Package authcheck probes what a NATS connection may do: it tells an
// operation the server allowed from one it refused by two independent
// signals, the "Permissions Violation" error the server sends back and
// whether a witness connection saw the message. A security suite lists
// Checks (principal, operation, subject, wanted outcome), runs them and
// reports every one whose outcome differs.
package authcheck

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
)

// Outcome of an operation.
type Outcome int

const (
	// Inconclusive: the two signals disagree (e.g. a violation reported
	// and the message delivered anyway), or neither came.
	Inconclusive Outcome = iota
	// Allowed: no violation, and the message went through.
	Allowed
	// Refused: a violation, and nothing went through.
	Refused
)

func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Refused:
		return "refused"
	default:
		return "inconclusive"
	}
}

// DefaultTimeout bounds the wait for a signal.
const DefaultTimeout = 2 * time.Second

// grace is how long an allowed operation waits for a late violation (the
// error handler runs asynchronously).
const grace = 50 * time.Millisecond

// queued is how long a message is awaited after the flushes, which leave
// one the server delivered already queued.
const queued = 20 * time.Millisecond

// Conn is a NATS connection that collects the server's permission
// violations.
type Conn struct {
	Name string
	NC   *nats.Conn

	mu     sync.Mutex
	errs   []error
	signal chan struct{}
}

// Connect connects to url as name (a label for reports), with opts (the
// principal's credentials), collecting asynchronous errors. opts must not
// set an ErrorHandler.
func Connect(url, name string, opts ...nats.Option) (*Conn, error) {
	c := &Conn{Name: name, signal: make(chan struct{}, 1)}
	opts = append(opts, nats.Name(name), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { c.add(err) }))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	c.NC = nc
	return c, nil
}

func (c *Conn) add(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// Close closes the connection.
func (c *Conn) Close() { c.NC.Close() }

// Errors returns the errors not yet taken by a Violation wait.
func (c *Conn) Errors() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errs...)
}

// take removes and reports the first collected permission violation for
// op ("Publish" or "Subscription") on subject.
func (c *Conn) take(op, subject string) bool {
	want := strings.ToLower(fmt.Sprintf("permissions violation for %s to %q", op, subject))
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, err := range c.errs {
		if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(strings.ToLower(err.Error()), want) {
			c.errs = append(c.errs[:i], c.errs[i+1:]...)
			return true
		}
	}
	return false
}

// WaitViolation waits up to d for a permission violation for op
// ("Publish" or "Subscription") on subject, and takes it.
func (c *Conn) WaitViolation(op, subject string, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		if c.take(op, subject) {
			return true
		}
		select {
		case <-c.signal:
		case <-deadline.C:
			return c.take(op, subject)
		}
	}
}

// Prober runs operations; Timeout defaults to DefaultTimeout.
type Prober struct {
	Timeout time.Duration
}

func (p Prober) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return DefaultTimeout
}

// judge turns the two signals into an outcome.
func judge(violation, through bool) Outcome {
	switch {
	case violation && !through:
		return Refused
	case !violation && through:
		return Allowed
	default:
		return Inconclusive
	}
}

// Publish has from publish to subject while witness (which must be allowed
// to subscribe to subject) listens.
func (p Prober) Publish(from *Conn, subject string, witness *Conn) (Outcome, string) {
	sub, err := witness.NC.SubscribeSync(subject)
	if err != nil {
		return Inconclusive, "witness subscribe: " + err.Error()
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := witness.NC.Flush(); err != nil {
		return Inconclusive, "witness flush: " + err.Error()
	}
	if witness.take("Subscription", subject) {
		return Inconclusive, "the witness may not subscribe to " + subject
	}
	body := []byte("probe from " + from.Name)
	if err := from.NC.Publish(subject, body); err != nil {
		return Inconclusive, "publish: " + err.Error()
	}
	return p.settle(from, "Publish", subject, sub, witness, body)
}

// Subscribe has who subscribe to subject, then witness publish to sample
// (a subject subject matches).
func (p Prober) Subscribe(who *Conn, subject, sample string, witness *Conn) (Outcome, string) {
	sub, err := who.NC.SubscribeSync(subject)
	if err != nil {
		return Inconclusive, "subscribe: " + err.Error()
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := who.NC.Flush(); err != nil {
		return Inconclusive, "flush: " + err.Error()
	}
	body := []byte("probe to " + who.Name)
	if err := witness.NC.Publish(sample, body); err != nil {
		return Inconclusive, "witness publish: " + err.Error()
	}
	if err := witness.NC.Flush(); err != nil {
		return Inconclusive, "witness flush: " + err.Error()
	}
	if witness.take("Publish", sample) {
		return Inconclusive, "the witness may not publish to " + sample
	}
	return p.settle(who, "Subscription", subject, sub, who, body)
}

// settle flushes actor and receiver (the server handles a connection's
// protocol in order, so a message delivered before the flushes is in
// sub's queue after them) and reads both signals.
func (p Prober) settle(actor *Conn, op, subject string, sub *nats.Subscription, receiver *Conn, body []byte) (Outcome, string) {
	if err := actor.NC.Flush(); err != nil {
		return Inconclusive, "flush: " + err.Error()
	}
	if err := receiver.NC.Flush(); err != nil {
		return Inconclusive, "receiver flush: " + err.Error()
	}
	through := false
	wait := queued
	for {
		m, err := sub.NextMsg(wait)
		if err != nil {
			break
		}
		if string(m.Data) == string(body) {
			through = true
			break
		}
	}
	wait = p.timeout()
	if through {
		wait = grace
	}
	violation := actor.WaitViolation(op, subject, wait)
	detail := fmt.Sprintf("violation=%v delivered=%v", violation, through)
	return judge(violation, through), detail
}

// Request has from request subject, answered by responder (which must be
// allowed to subscribe to it): allowed when the answer arrives.
func (p Prober) Request(from *Conn, subject string, responder *Conn) (Outcome, string) {
	answer := []byte("answer from " + responder.Name)
	sub, err := responder.NC.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(answer) })
	if err != nil {
		return Inconclusive, "responder subscribe: " + err.Error()
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := responder.NC.Flush(); err != nil {
		return Inconclusive, "responder flush: " + err.Error()
	}
	if responder.take("Subscription", subject) {
		return Inconclusive, "the responder may not subscribe to " + subject
	}
	m, err := from.NC.Request(subject, []byte("request from "+from.Name), p.timeout())
	through := err == nil && string(m.Data) == string(answer)
	// A refused request's violation came back before the timeout ran out.
	violation := from.WaitViolation("Publish", subject, grace)
	detail := fmt.Sprintf("violation=%v answered=%v", violation, through)
	if err != nil {
		detail += " err=" + err.Error()
	}
	return judge(violation, through), detail
}

// Check is one line of a permission table.
type Check struct {
	Principal string
	Op        string // "pub", "sub", "request", "reply", ...
	Subject   string
	Want      Outcome
	Got       Outcome
	Detail    string
}

// OK tells whether the outcome is the wanted one.
func (c Check) OK() bool { return c.Got == c.Want }

// Table formats checks, one line each, failures marked.
func Table(checks []Check) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "\tprincipal\top\tsubject\twant\tgot\tdetail")
	for _, c := range checks {
		mark := "ok"
		if !c.OK() {
			mark = "FAIL"
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", mark, c.Principal, c.Op, c.Subject, c.Want, c.Got, c.Detail)
	}
	_ = w.Flush()
	return b.String()
}
