package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/conngen"
	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// Errors callers branch on with errors.Is. Errors returned by the client
// wrap them together with the cause (the last *wire.Error or NATS error), so
// errors.As to *wire.Error keeps working.
var (
	// ErrRecovering means the stream is failing over (its recovery is
	// pending or waiting) and the retry limits ran out: retry later.
	ErrRecovering = errors.New("brook: stream is recovering, retry")
	// ErrNoSuchStream means the coordinators know no stream of that name.
	ErrNoSuchStream = errors.New("brook: no such stream")
	// ErrTimeout means one attempt got no reply within the request timeout.
	ErrTimeout = errors.New("brook: request timed out")
	// ErrClosed is returned by an AsyncPublisher or Consumer after Close,
	// by a publish that would join a batch after Client.Close, and by a
	// request whose retry came after Client.Close began, wrapping its last
	// attempt's error (a timed-out publish's record may have been written).
	ErrClosed = errors.New("brook: closed")
	// ErrOwnerLost means a publish attempt was abandoned because the owner
	// it went to no longer serves the stream (see WithOwnerProbe); it is
	// retried at once, since an owner that serves answered the probe.
	ErrOwnerLost = errors.New("brook: the owner the request went to is gone")
	// ErrStreamReplaced means the stream this client meant (the id it is
	// pinned to, or the one a request named) was deleted, and the name
	// may now hold another stream: nothing of that other stream is
	// returned. Unpin the stream to go on with whatever holds the name.
	// It is never retried.
	ErrStreamReplaced = errors.New("brook: the stream was deleted and its name may hold another stream")
)

// Defaults of the options.
const (
	DefaultRequestTimeout = 6 * time.Second // above the hosts' default 5s confirm timeout
	DefaultAdminTimeout   = 5 * time.Second
	DefaultMaxAttempts    = 0 // unbounded; the retry time bounds instead
	DefaultMaxRetryTime   = 30 * time.Second
	DefaultBackoffMin     = 5 * time.Millisecond
	DefaultBackoffMax     = 250 * time.Millisecond
	// DefaultInfoInterval is how long a retrying request waits after its
	// first stream.info before the next; the wait doubles, up to 8 times,
	// and is 32 times once a coordinator said the stream is recovering.
	DefaultInfoInterval = 250 * time.Millisecond
)

// options are the settings of a Client.
type options struct {
	name           string
	user, password string
	requestTimeout time.Duration
	adminTimeout   time.Duration
	maxAttempts    int
	maxRetryTime   time.Duration
	backoffMin     time.Duration
	backoffMax     time.Duration
	infoInterval   time.Duration
	probeAfter     time.Duration
	noPinning      bool
	logger         *slog.Logger
	natsOpts       []nats.Option
	nkeySeedFile   string
	inboxPrefix    string
	tlsCA          string
	tlsCert        string
	tlsKey         string
	tls            bool
	// Publish batching (WithBatching; batch.go).
	linger       time.Duration
	batchRecords int
	batchBytes   int
	// directLink: publish batches on the client link (WithDirectLink).
	directLink bool
}

// Option configures a Client.
type Option func(*options)

// WithName sets the NATS connection name (default "brook-client").
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithUserInfo sets the NATS user and password, for URLs that carry none.
func WithUserInfo(user, password string) Option {
	return func(o *options) { o.user, o.password = user, password }
}

// WithRequestTimeout bounds one attempt of a data-plane request (publish,
// fetch, commit). Keep it above the hosts' confirm timeout, or a publish
// that would have been confirmed late is retried (and written twice).
func WithRequestTimeout(d time.Duration) Option {
	return func(o *options) { o.requestTimeout = d }
}

// WithAdminTimeout bounds one admin request.
func WithAdminTimeout(d time.Duration) Option { return func(o *options) { o.adminTimeout = d } }

// WithRetry bounds the retries of a request across a failover: at most
// maxAttempts attempts (0 = unbounded) and at most maxTime from the first
// attempt (0 = bounded by the context only). The caller's context bounds it
// too.
func WithRetry(maxAttempts int, maxTime time.Duration) Option {
	return func(o *options) { o.maxAttempts, o.maxRetryTime = maxAttempts, maxTime }
}

// WithBackoff sets the bounds of the exponential backoff between attempts.
func WithBackoff(minDelay, maxDelay time.Duration) Option {
	return func(o *options) { o.backoffMin, o.backoffMax = minDelay, maxDelay }
}

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithNkeySeedFile authenticates the connection with the nkey whose seed
// is in the file at path (as brook-auth writes them: .brook-auth/client.nk
// for applications, admin.nk for operators). Connect reads the file; the
// seed is never logged. Pair it with WithInboxPrefix: nats-server lets each
// brook principal receive replies on its own inboxes only.
func WithNkeySeedFile(path string) Option { return func(o *options) { o.nkeySeedFile = path } }

// WithInboxPrefix makes every reply to this client's requests (publishes,
// fetches, commits, admin requests, an AsyncPublisher's confirms) come to
// subjects under prefix: wire.InboxClient ("_INBOX.client") for
// applications, wire.InboxAdmin for operators. The default is nats.go's
// "_INBOX".
func WithInboxPrefix(prefix string) Option { return func(o *options) { o.inboxPrefix = prefix } }

// WithTLS connects over TLS: caFile (PEM) holds the certificates that may
// sign the server's ("" keeps the system's roots); certFile and keyFile
// are the client's certificate and key, both or neither.
func WithTLS(caFile, certFile, keyFile string) Option {
	return func(o *options) { o.tls, o.tlsCA, o.tlsCert, o.tlsKey = true, caFile, certFile, keyFile }
}

// WithNATSOptions adds options to the NATS connection Connect makes. A
// publish the connection refuses while it reconnects, its reconnect buffer
// full (nats.ReconnectBufSize), is retried within WithRetry's limits.
func WithNATSOptions(opts ...nats.Option) Option {
	return func(o *options) { o.natsOpts = append(o.natsOpts, opts...) }
}

func defaultOptions() options {
	return options{
		name:           "brook-client",
		requestTimeout: DefaultRequestTimeout,
		adminTimeout:   DefaultAdminTimeout,
		maxAttempts:    DefaultMaxAttempts,
		maxRetryTime:   DefaultMaxRetryTime,
		backoffMin:     DefaultBackoffMin,
		backoffMax:     DefaultBackoffMax,
		infoInterval:   DefaultInfoInterval,
		probeAfter:     DefaultProbeAfter,
		linger:         DefaultLinger,
		batchRecords:   DefaultBatchRecords,
		batchBytes:     DefaultBatchBytes,
	}
}

// Client talks to a brook cluster over one NATS connection. It is safe for
// concurrent use.
type Client struct {
	nc      *nats.Conn
	ownConn bool
	opts    options
	log     *slog.Logger

	// watches hold, per stream published to, the owner watch of the
	// attempts in flight (ownerwatch.go).
	watchMu      sync.Mutex
	watches      map[string]*ownerWatch
	watchPruneAt int // look for idle watches to drop at this many

	// notices are the new owners' announcements requests retrying wait
	// for (notices.go).
	notices notices
	// confirmRTT estimates how long confirms take, for the owner watch's
	// probe delay (confirmrtt.go).
	confirmRTT confirmRTT

	// stats counts requests by kind (Stats).
	stats stats

	// gen ends with each connection Connect made (a reconnect); requests
	// in flight on it are retried at once.
	gen *conngen.Generation

	// pins maps a stream name to the id this client is pinned to
	// (pins.go).
	pinMu sync.Mutex
	pins  map[string]uint64

	// batchers gather publishes into batches, one per stream
	// (batch.go); closing is set under batchMu as Close begins, so that
	// no batcher is made after it (batcherFor reads it under batchMu),
	// and read without the lock by the retrier, which then retries
	// nothing (retry.go). batchPruneAt is how many
	// batchers make the next new one look for idle ones to drop, and
	// batcherIdle how long one must have been idle (batcherIdleTTL).
	batchMu      sync.Mutex
	batchers     map[string]*batcher
	closing      atomic.Bool
	batchPruneAt int
	batcherIdle  time.Duration
	// sends puts the batchers' batches on nc one goroutine at a time
	// (sendqueue.go).
	sends sendQueue
	// batchStats counts the publish batches sent and their records.
	// replies and rttNS count the batch replies taken and their round
	// trips (sent to reply received), for BatchRoundTrips.
	batchStats struct {
		batches, records, replies atomic.Uint64
		rttNS                     atomic.Int64
		// linked counts the batches sent on the client link.
		linked atomic.Uint64
	}
	// link is the client link (WithDirectLink; link.go), nil without.
	link *clientLink
	// testHooks are a test's (retry.go); zero otherwise.
	testHooks testHooks
}

// Connect connects to the NATS server(s) at urls (comma separated, as
// nats.Connect takes them) and returns a Client that owns the connection.
// The connection reconnects forever, waiting 100-250ms between attempts, so
// a client rides out a NATS restart.
func Connect(ctx context.Context, urls string, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	gen := conngen.New()
	nopts := []nats.Option{
		nats.Name(o.name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		nats.ReconnectJitter(150*time.Millisecond, 150*time.Millisecond),
		// A request in flight when the connection went is lost with it
		// (its server may be gone): give it up at once and retry,
		// rather than wait out the request timeout.
		nats.ReconnectHandler(func(*nats.Conn) { gen.Replaced() }),
	}
	if o.user != "" {
		nopts = append(nopts, nats.UserInfo(o.user, o.password))
	}
	auth, err := o.authOptions()
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", urls, err)
	}
	nopts = append(nopts, auth...)
	if deadline, ok := ctx.Deadline(); ok {
		nopts = append(nopts, nats.Timeout(time.Until(deadline)))
	}
	nopts = append(nopts, o.natsOpts...)
	// nats.Connect takes no context; a dead context is honoured up front
	// and its deadline bounds the dial above.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", urls, err)
	}
	nc, err := nats.Connect(urls, nopts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", urls, err)
	}
	c := newClient(nc, o, gen)
	c.ownConn = true
	return c, nil
}

// authOptions are the NATS options of WithNkeySeedFile, WithInboxPrefix
// and WithTLS.
func (o *options) authOptions() ([]nats.Option, error) {
	var nopts []nats.Option
	if o.inboxPrefix != "" {
		nopts = append(nopts, nats.CustomInboxPrefix(o.inboxPrefix))
	}
	if o.nkeySeedFile != "" {
		opt, err := nats.NkeyOptionFromSeed(o.nkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nkey seed file %s: %w", o.nkeySeedFile, err)
		}
		nopts = append(nopts, opt)
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, errors.New("tls: give the client certificate and its key together")
	}
	if o.tlsCA != "" {
		nopts = append(nopts, nats.RootCAs(o.tlsCA))
	}
	if o.tlsCert != "" {
		nopts = append(nopts, nats.ClientCert(o.tlsCert, o.tlsKey))
	}
	if o.tls && o.tlsCA == "" && o.tlsCert == "" {
		nopts = append(nopts, nats.Secure())
	}
	return nopts, nil
}

// New returns a Client over an existing connection, which the caller keeps
// owning (Close does not close it).
func New(nc *nats.Conn, opts ...Option) *Client {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	// A connection the caller owns keeps its own reconnect handler: its
	// generation never ends, and requests lost in a reconnect wait for
	// their timeout.
	return newClient(nc, o, conngen.New())
}

// newClient builds a Client over nc whose connections gen follows.
func newClient(nc *nats.Conn, o options, gen *conngen.Generation) *Client {
	log := o.logger
	if log == nil {
		log = slog.Default()
	}
	c := &Client{nc: nc, opts: o, log: log.With("component", "brook-client"), watches: map[string]*ownerWatch{}, pins: map[string]uint64{}, gen: gen,
		batchers: map[string]*batcher{}, batcherIdle: batcherIdleTTL, sends: sendQueue{nc: nc}}
	c.notices.subscribe = nc.Subscribe
	if o.directLink {
		c.link = newClientLink(c)
	}
	return c
}

// Conn returns the underlying NATS connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Close drains and closes the connection if Connect made it. A connection
// that is reconnecting (its server is away) is closed without draining and
// without an error: nothing could be drained and nothing is lost by it.
func (c *Client) Close() error {
	// Open batches go out first: their records are waited for like any
	// request in flight.
	c.closeBatchers()
	c.sends.flush()
	// The client link closes last: replies to batches on it still come
	// while the connection drains. Batches still in flight on it then fail
	// (a retry finds the client closed and ends with ErrClosed), as those
	// on the bus whose replies come after the drain go unanswered.
	if c.link != nil {
		defer c.link.close()
	}
	if !c.ownConn {
		return nil
	}
	err := c.nc.Drain()
	switch {
	case err == nil, errors.Is(err, nats.ErrConnectionClosed):
		return nil
	case errors.Is(err, nats.ErrConnectionReconnecting):
		// Nothing can be drained while the server is away; there is
		// nothing to report either: close it.
		c.nc.Close()
		return nil
	default:
		c.nc.Close()
		return fmt.Errorf("close nats connection: %w", err)
	}
}

// replyKind says how a reply body is encoded.
type replyKind int

const (
	replyJSON   replyKind = iota // JSON result or {"error":...}
	replyBinary                  // binary frame, errors flagged by frame.HeaderError
)

// request makes one attempt: it sends msg and waits at most timeout (and
// at most until ctx is done) for the reply. It returns nats.ErrNoResponders
// when nobody subscribes, ErrTimeout when this attempt timed out, a
// *wire.Error when the service answered with an error, or the reply.
func (c *Client) request(ctx context.Context, msg *nats.Msg, timeout time.Duration, kind replyKind) (*nats.Msg, error) {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn := c.gen.Current()
	stop := context.AfterFunc(conn, cancel)
	defer stop()
	injectTrace(ctx, msg)
	reply, err := c.nc.RequestMsgWithContext(actx, msg)
	if err != nil {
		// The attempt's own deadline is a retryable timeout, and so is a
		// reconnect that lost it; the caller's context ending is not.
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%s: no reply in %v: %w", msg.Subject, timeout, ErrTimeout)
		}
		if ctx.Err() == nil && conn.Err() != nil {
			return nil, fmt.Errorf("%s: the connection was replaced while waiting: %w", msg.Subject, nats.ErrDisconnected)
		}
		return nil, fmt.Errorf("%s: %w", msg.Subject, err)
	}
	if werr := replyError(reply, kind); werr != nil {
		return nil, namedError(requestStreamID(msg), werr)
	}
	return reply, nil
}

// replyError decodes an error reply, or returns nil for a result. A
// binary result is never read as JSON: without the header it is one.
func replyError(m *nats.Msg, kind replyKind) *wire.Error {
	code := m.Header.Get(frame.HeaderError)
	if code == "" && kind == replyBinary {
		return nil
	}
	return wire.DecodeErrorReply(code, m.Data)
}

// IsConfirmTimeout reports whether err says a publish was not confirmed in
// time (the record may or may not have been kept).
func IsConfirmTimeout(err error) bool { return wire.CodeOf(err) == wire.CodeConfirmTimeout }
