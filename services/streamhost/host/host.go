package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/brook-streams/brook/pkg/conngen"
	"github.com/brook-streams/brook/pkg/connwatch"
	"github.com/brook-streams/brook/pkg/heartbeat"
	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// Defaults of the Config fields left zero.
const (
	DefaultMaxPayload        = 1 << 20
	DefaultConfirmTimeout    = 5 * time.Second
	DefaultPullInterval      = 5 * time.Second
	DefaultPullGap           = 25 * time.Millisecond
	DefaultReplWait          = time.Second
	DefaultReplIdleWait      = 4 * time.Second
	DefaultRetentionInterval = 2 * time.Second
	DefaultAckWait           = time.Second
	DefaultSealLinger        = 3 * time.Second
	// The duplicate window of a new owner is rebuilt from at most this
	// many of the newest records of its log, and about this many bytes.
	DefaultDedupeRebuildRecords = 64 << 10
	DefaultDedupeRebuildBytes   = 64 << 20
)

// Config configures a Host.
type Config struct {
	Node    string
	DataDir string
	// HeartbeatInterval is how often heartbeats are published
	// (wire.DefaultHeartbeatInterval when zero).
	HeartbeatInterval time.Duration
	// FullReportInterval is the longest time between two heartbeats that
	// list every copy (full reports); the heartbeats between list only
	// the copies that changed (package heartbeat).
	// wire.DefaultFullReportInterval when zero.
	FullReportInterval time.Duration
	// LivenessInterval is how often a liveness beat (wire.Heartbeat.Live:
	// the heartbeat's header, no copies) is published between the full
	// heartbeats; negative turns liveness beats off.
	LivenessInterval time.Duration
	// BeatConn is the NATS connection the heartbeats and liveness beats
	// are published on; nil: the main one (New's nc). A connection of
	// their own keeps the proof of life out of the main connection's
	// lock, write buffer and socket, which replication, pulls and
	// requests share: under load a beat queued behind them went out late
	// enough that coordinators expired a running host (issue 17). The
	// beats still name the main connection (wire.Heartbeat.ConnID), the
	// one whose loss matters, and none is sent while the main connection
	// is down. The host owns BeatConn once New returns: Run flushes and
	// closes it after the last (leaving) beat of a graceful stop (the
	// caller's own Close after Run covers the rest).
	BeatConn *nats.Conn
	// MaxPayload is the largest record accepted (payload_too_large above).
	MaxPayload int
	// ConfirmTimeout is how long a publish waits for W copies.
	ConfirmTimeout time.Duration
	// PullInterval is how often the assignment snapshot is pulled even
	// without a notice.
	PullInterval time.Duration
	// PullGap is the least time from the start of one pull to the start
	// of the next one a notice asks for (DefaultPullGap), except a
	// recovery's notice, which is pulled at once. Notices that arrive
	// meanwhile share one pull. It was 200 ms while every pull read every
	// stream; a pull of changes costs what changed, and a create waits
	// for this gap before its owner serves, so it is 25 ms.
	PullGap time.Duration
	// PullPage is the most streams one page of a pull asks for
	// (wire.MaxAssignmentPage when 0).
	PullPage int
	// ReplWait is how long a follower's request may wait at the owner
	// for new data. After each request that brought nothing the follower
	// doubles its wait, up to ReplIdleWait (at least ReplWait, at most the
	// owner's limit of 5 s), and goes back to ReplWait when data comes or
	// a request fails: an idle copy costs a request every few seconds
	// instead of every second, and a long poll returns as soon as data is
	// written whatever its wait. A copy whose request came back empty
	// then sleeps on its host's one host wait to the owner's host
	// (idlewait.go), whose wait is ReplIdleWait.
	ReplWait     time.Duration
	ReplIdleWait time.Duration
	// RetentionInterval is how often retention is enforced.
	RetentionInterval time.Duration
	// AckWait bounds how long a graceful shutdown waits for followers to
	// acknowledge the owner's tail.
	AckWait time.Duration
	// SealLinger bounds how long a leaving host keeps answering seals
	// while it still owns streams in the latest snapshot.
	SealLinger time.Duration
	// CursorSyncInterval is passed to the store (0: its default).
	CursorSyncInterval time.Duration
	// StoreFS is the file system of the store (nil: the operating
	// system's); tests inject storage faults with Pebble's vfs/errorfs.
	StoreFS vfs.FS
	// ReplListener, if set, is where the host takes its followers' hosts'
	// direct replication connections (link_direct.go): replication then
	// travels on one TLS connection per pair of hosts, and over the bus
	// only where no connection is up. The host owns it once New returns
	// and closes it when Run ends. ReplAdvertise is the address other
	// hosts dial (the listener's address if empty).
	ReplListener  net.Listener
	ReplAdvertise string
	// DedupeRebuildRecords and DedupeRebuildBytes bound how much of the
	// tail of its log a new owner reads to rebuild its duplicate window
	// (the producer ids and sequences stored with the records) before it
	// takes publishes. A retry of a record older than that is written
	// again.
	DedupeRebuildRecords int
	DedupeRebuildBytes   int64
	// MaxFetchWaits caps the fetches that wait for records (long polls)
	// at once on this host, across its streams; one more is answered
	// overloaded. A fetch that finds records to return takes no slot.
	MaxFetchWaits int
	// MaxInflight caps the request goroutines of each of three kinds at
	// once on this host: readers' requests (fetches and cursor commits
	// waiting for the watermark), other hosts' host waits, and the
	// coordinators' seals. The kinds are counted apart, so that readers
	// never take the slots followers need to confirm publishes, and
	// followers' waits never hold off the seals of a failover. One more
	// of a kind is answered overloaded. Followers' replication requests
	// are bounded per owned stream instead (replSlotsPerFollower per
	// follower): each follower copy parks a long poll at its owner, so
	// their number grows with the streams owned.
	MaxInflight int
	Logger      *slog.Logger
	// TracerProvider makes the "host.apply" spans; nil means no tracing.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the host's metrics (metrics.go); nil records
	// nothing.
	MeterProvider metric.MeterProvider
}

func (c *Config) fill() {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = wire.DefaultHeartbeatInterval
	}
	if c.FullReportInterval <= 0 {
		c.FullReportInterval = wire.DefaultFullReportInterval
	}
	if c.LivenessInterval == 0 {
		c.LivenessInterval = wire.DefaultLivenessInterval
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	if c.ConfirmTimeout <= 0 {
		c.ConfirmTimeout = DefaultConfirmTimeout
	}
	if c.PullInterval <= 0 {
		c.PullInterval = DefaultPullInterval
	}
	if c.PullGap <= 0 {
		c.PullGap = DefaultPullGap
	}
	if c.ReplWait <= 0 {
		c.ReplWait = DefaultReplWait
	}
	if c.ReplIdleWait <= 0 {
		c.ReplIdleWait = DefaultReplIdleWait
	}
	c.ReplIdleWait = min(max(c.ReplIdleWait, c.ReplWait), maxReplWait)
	c.ReplWait = min(c.ReplWait, c.ReplIdleWait)
	if c.RetentionInterval <= 0 {
		c.RetentionInterval = DefaultRetentionInterval
	}
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.SealLinger <= 0 {
		c.SealLinger = DefaultSealLinger
	}
	if c.DedupeRebuildRecords <= 0 {
		c.DedupeRebuildRecords = DefaultDedupeRebuildRecords
	}
	if c.DedupeRebuildBytes <= 0 {
		c.DedupeRebuildBytes = DefaultDedupeRebuildBytes
	}
	if c.MaxFetchWaits <= 0 {
		c.MaxFetchWaits = DefaultMaxFetchWaits
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
}

// Host is one stream host. Create it with New and run it with Run.
type Host struct {
	cfg         Config
	log         *slog.Logger
	tracer      trace.Tracer
	nc          *nats.Conn
	store       *streamlog.Store
	incarnation uint64
	metrics     *metrics

	mu       sync.Mutex
	replicas map[string]*replica
	// applied is the version of the last applied snapshot; known is
	// every assignment that includes this node as the pulls so far give
	// it (applied, or only recorded while leaving), by stream: a full
	// pull replaces it, a pull of changes updates it.
	applied uint64
	known   map[string]*wire.AssignedStream
	// pull is the pull loop's own state (only that goroutine uses it).
	pull pullState
	// recheck asks the next pull to re-apply every known assignment, not
	// only the changed ones (requestPull: a role in trouble).
	recheck atomic.Bool

	ready   atomic.Bool // the first snapshot is applied
	leaving atomic.Bool // graceful shutdown has begun
	pullNow chan struct{}
	// pullUrgent asks for a pull without the gap (requestPullNow).
	pullUrgent chan struct{}
	// created are the assignments create notices carried, for the pull
	// loop to apply before its pull (applyCreated).
	created chan createdNotice
	beatNow chan struct{}
	// beatMu serializes the heartbeats that report copies (the loop's and
	// shutdown's), so their numbers follow the order they were built in
	// and the parts of two of them do not interleave. Liveness beats do
	// not take it: building and encoding a report of thousands of copies
	// under load took long enough that liveness beats waiting behind it
	// went out late, and a coordinator expired the host (issue 17).
	beatMu   sync.Mutex
	reporter heartbeat.Reporter // full reports and deltas; guarded by beatMu
	// changed names the copies whose reported status may have changed
	// since the last heartbeat (changes.go): a delta lists only those.
	changed changeSet
	// retained are the replicas the retention loop visits (changes.go).
	retained replicaSet
	// beat is the last number given to a heartbeat of either kind;
	// reported is set once the first report of this incarnation is out.
	beat     atomic.Uint64
	reported atomic.Bool
	// fullAsked says a reader asked for a full report (onNotice);
	// lastAsked is when the last one asked for went out (beatMu).
	fullAsked atomic.Bool
	lastAsked time.Time
	// beatNC publishes the beats (Config.BeatConn, or nc). With a beat
	// connection of their own, mainSeen is the main connection as last
	// seen (mainWatch, Reconnected, Disconnected): the beats read it
	// instead of asking nc, whose lock a stalled write holds.
	beatNC *nats.Conn
	// link carries replication between copies (transport.go): the
	// direct link when the host has one, else the bus.
	link     replLink
	direct   *directLink // nil without Config.ReplListener
	mainSeen atomic.Pointer[mainConn]
	bgCtx    context.Context
	// conn ends with each NATS connection (Reconnected): a follower's
	// request in flight on it is asked again at once; its Began is when
	// the connection was last replaced (wire.HeaderServingFor).
	conn *conngen.Generation
	// bus watches nc for Health (/healthz), which must not wait for the
	// connection's lock (connwatch), and keeps mainSeen current for the
	// beats (mainWatch); it runs in the background group.
	bus      *connwatch.Watch
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
	reqs     tracker // request goroutines (seals, hand-offs, watchDrain)
	// pool runs the short jobs of reqs, of the appliers and of every
	// owner's requests on workers that keep their grown stacks (pool.go).
	pool *pool
	// drainForces counts the reconnects watchDrain asked for.
	drainForces atomic.Uint64
	// drains are the ended roles' drains watchDrain still watches.
	drains drainWatch

	// Caps on requests in flight (limits.go): readers' requests (fetches,
	// commit waits), followers' replication requests, seals, and among
	// the readers' the fetches waiting for records.
	readerReqs *budget
	replReqs   *budget
	sealReqs   *budget
	fetchWaits *budget

	// One long poll per pair of hosts (idlewait.go): idle holds this
	// host's sleeping follower copies per owner node, parked the host
	// waits of other hosts' followers, ownedIDs the owners by stream id.
	idle     idleWaits
	parked   hostWaiters
	ownedIDs ownerIndex
}

// tracker runs goroutines that a shutdown waits for, refusing new ones
// once it is closed (a WaitGroup alone may not grow while it is waited on).
type tracker struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	pool   *pool // runs the goroutines; nil: one goroutine each
}

// Go runs f unless the tracker is closed.
func (t *tracker) Go(f func()) bool {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return false
	}
	t.wg.Add(1)
	t.mu.Unlock()
	t.pool.Go(func() {
		defer t.wg.Done()
		f()
	})
	return true
}

// Close refuses new goroutines and waits for the running ones.
func (t *tracker) Close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}

// New opens the host's store in cfg.DataDir. The host uses nc, which the
// caller keeps owning (and closes after Run returns).
func New(cfg Config, nc *nats.Conn) (*Host, error) {
	cfg.fill()
	if err := wire.ValidName("node", cfg.Node); err != nil {
		return nil, fmt.Errorf("new host: %w", err)
	}
	log := cfg.Logger.With("node", cfg.Node)
	met, err := newMetrics(cfg.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("new host: metrics: %w", err)
	}
	// The store reports its failure once; the host is built only after
	// Open returns, and a failure during Open fails New anyway.
	var self atomic.Pointer[Host]
	st, err := streamlog.Open(streamlog.Options{
		Dir:                cfg.DataDir,
		Logger:             log,
		CursorSyncInterval: cfg.CursorSyncInterval,
		FS:                 cfg.StoreFS,
		OnGroupCommit:      met.groupCommit,
		OnChange: func(stream string) {
			if h := self.Load(); h != nil {
				h.changed.mark(stream)
				h.parked.changed(stream)
			}
		},
		OnFailure: func(err error) {
			if h := self.Load(); h != nil {
				h.storeFailed(err)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("open store in %s: %w", cfg.DataDir, err)
	}
	bgCtx, bgCancel := context.WithCancel(context.Background())
	workers := newPool()
	h := &Host{
		pool:        workers,
		reqs:        tracker{pool: workers},
		cfg:         cfg,
		log:         log,
		tracer:      cfg.TracerProvider.Tracer("github.com/brook-streams/brook/services/streamhost/host"),
		nc:          nc,
		beatNC:      nc,
		store:       st,
		metrics:     met,
		incarnation: uint64(time.Now().UnixNano()),
		replicas:    make(map[string]*replica),
		known:       map[string]*wire.AssignedStream{},
		pullNow:     make(chan struct{}, 1),
		pullUrgent:  make(chan struct{}, 1),
		created:     make(chan createdNotice, maxCreatedNotices),
		beatNow:     make(chan struct{}, 1),
		reporter:    heartbeat.Reporter{FullEvery: cfg.FullReportInterval},
		bgCtx:       bgCtx,
		conn:        conngen.New(),
		bgCancel:    bgCancel,
		readerReqs:  newBudget("reader requests", "in flight", cfg.MaxInflight),
		replReqs:    newBudget("replication requests", "in flight", cfg.MaxInflight),
		sealReqs:    newBudget("seals", "in flight", cfg.MaxInflight),
		fetchWaits:  newBudget("long-poll fetches", "waiting", cfg.MaxFetchWaits),
	}
	h.link = natsLink{h: h}
	if cfg.ReplListener != nil {
		dl, err := newDirectLink(bgCtx, h, cfg.ReplListener, cfg.ReplAdvertise)
		if err != nil {
			bgCancel()
			return nil, errors.Join(fmt.Errorf("new host: %w", err), st.Close())
		}
		h.direct, h.link = dl, dl
	}
	// One watch asks the main connection: for Health, and with a beat
	// connection of their own for the beats too (mainWatch).
	watchEvery := connwatch.Interval
	if cfg.BeatConn != nil {
		h.beatNC = cfg.BeatConn
		h.seeMainConn()
		watchEvery = beatConnWatchInterval
	}
	h.bus = connwatch.New(mainWatch{h}, watchEvery, connwatch.Stale)
	self.Store(h)
	if err := met.observe(h); err != nil {
		return nil, errors.Join(fmt.Errorf("new host: metrics: %w", err), st.Close())
	}
	if err := st.Failure(); err != nil {
		// It failed between Open and now.
		go h.storeFailed(err)
	}
	return h, nil
}

// Ready reports whether the host has applied its first assignment snapshot,
// is not shutting down, its store has not failed and its NATS connection is
// up; /healthz answers 200 only then.
func (h *Host) Ready() bool { return h.Health() == nil }

// Health says why the host is not Ready, or nil. It never waits: the NATS
// connection's state is its watch's last answer (connwatch), not the
// connection's, whose lock a write to a blocked socket holds for up to a
// minute.
func (h *Host) Health() error {
	switch {
	case h.store.Failure() != nil:
		return fmt.Errorf("store failed: %w", h.store.Failure())
	case h.leaving.Load():
		return errors.New("shutting down")
	case !h.ready.Load():
		return errors.New("the first assignment snapshot has not been applied yet")
	}
	return h.bus.Err()
}

// StoreFailure is the error that broke the host's store, or nil (see
// streamlog.Store.Failure). /healthz reports it.
func (h *Host) StoreFailure() error { return h.store.Failure() }

// storeFailed is called once when the store fails. The store is fail-stop
// (nothing written after the error is confirmed, and no operation succeeds
// any more), so the host stops pretending: it stops every role (publishes
// waiting for their confirm fail with shutting_down, which clients retry
// at the new owner), takes no new ones, and beats leaving with the error,
// so the coordinators fail its streams over at once, as from a host that
// leaves, and attention lists the host with the error. It keeps running,
// answering nothing but heartbeats, until it is stopped; a restart
// reopens the store, which then works or fails at once.
func (h *Host) storeFailed(err error) {
	h.log.Error("store failed: confirming and serving nothing more; beating leaving so the streams fail over; restart the host once its disk is fixed",
		"err", err, "data_dir", h.cfg.DataDir)
	h.leaving.Store(true)
	for _, r := range h.allReplicas() {
		r.mu.Lock()
		r.stopRole(wire.CodeShuttingDown)
		r.mu.Unlock()
	}
	h.requestBeat()
}

// Reconnected tells the host its NATS connection came back: it publishes
// a liveness beat naming the new connection at once, and pulls the
// assignment snapshot at once, since the streams it owned may have moved
// while it was cut off, and it must not keep serving them for a whole
// PullInterval.
//
// The beat is what ends the disconnect on the coordinators: the server
// that closed the old connection published an advisory, and a host not
// heard on a newer connection within the disconnect grace (100 ms) is
// expired. The full heartbeat requestBeat asks for waits for minBeatGap
// after the previous one and for beatMu (a report being built), and the
// next periodic liveness beat up to LivenessInterval (100 ms): on a loaded
// machine the first beat naming the new connection came after the grace
// (e2e TestHostConnectionKicked), so this one goes out from here, on
// neither path.
func (h *Host) Reconnected() {
	h.seeMainConn()
	h.publishLiveness(h.leaving.Load())
	h.conn.Replaced()
	h.requestPull()
	h.requestBeat()
}

// Disconnected tells the host that its main NATS connection is down, from
// the connection's disconnect handler, so that a beat connection of its
// own stops beating at once (beatsOff); Reconnected, from the reconnect
// handler, starts the beats again. Both run on the connection's callback
// goroutine, so they come in the order of the connection's changes, which
// the beats need: a loss heard after the reconnect that followed it would
// stop the beat naming the new connection, and the coordinators expire a
// host not heard on it within their disconnect grace. Health hears of a
// loss from connwatch.Losses alone (started by Run, which also hears a
// connection already down as it starts): the disconnect handler may wait
// behind a Reconnected that waits for the connection's lock, which an
// attempt to connect again holds.
func (h *Host) Disconnected() {
	h.mainSeen.Store(&mainConn{})
}

// mainConn is the main NATS connection as the beats name it: whether it
// is up, its server's id and its client id (both empty when unknown).
type mainConn struct {
	up     bool
	server string
	id     uint64
}

// readMainConn reads the main connection's state from nc (its lock).
func (h *Host) readMainConn() mainConn {
	c := mainConn{up: h.nc.IsConnected()}
	// The server id and the client id are read separately: a reconnect in
	// between would name a connection that never existed, so the beat
	// names one only if the server did not change meanwhile.
	srv := h.nc.ConnectedServerId()
	if cid, err := h.nc.GetClientID(); err == nil && srv != "" && h.nc.ConnectedServerId() == srv {
		c.server, c.id = srv, cid
	}
	return c
}

// seeMainConn records the main connection's state for the beats.
func (h *Host) seeMainConn() { h.mainSeen.Store(new(h.readMainConn())) }

// currentMainConn is the main connection's state for a beat: read from nc
// when the beats share it, as last seen otherwise.
func (h *Host) currentMainConn() mainConn {
	if h.beatNC == h.nc {
		return h.readMainConn()
	}
	return *h.mainSeen.Load()
}

// beatConnWatchInterval is how often the host's watch asks the main
// connection when the beats have a connection of their own: they name the
// main connection as last seen (mainSeen), so it is asked ten times as
// often as for Health alone.
const beatConnWatchInterval = 50 * time.Millisecond

// mainWatch is what the host's connection watch asks (connwatch.Conn):
// whether the main connection is up and, with a beat connection of their
// own (between the Reconnected and Disconnected calls, which may not
// come, as in tests), its state for the beats. A read that waits for the
// main connection's lock holds up the watch alone.
type mainWatch struct{ h *Host }

func (w mainWatch) IsConnected() bool {
	if w.h.beatNC == w.h.nc {
		return w.h.nc.IsConnected()
	}
	seen := w.h.mainSeen.Load()
	c := w.h.readMainConn()
	// Disconnected's store while the read waited stands: the read may
	// have been made before the disconnect. (Each store is a new pointer,
	// so an older one never compares equal.)
	w.h.mainSeen.CompareAndSwap(seen, &c)
	return c.up
}

// every calls f every d until ctx is done.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// Incarnation is the id of this run of the host, sent in heartbeats.
func (h *Host) Incarnation() uint64 { return h.incarnation }

// Run serves until ctx is done, then shuts down gracefully and closes the
// store. It returns once everything it started has stopped.
func (h *Host) Run(ctx context.Context) error {
	defer h.metrics.unobserve()
	// Both returns below go through stop, which closes the parked waits
	// and cancels the background context.
	h.parked.start()
	// Seals are answered from the start, before the first snapshot: a seal
	// only fences storage, and a restarted host that can answer one lets a
	// waiting recovery finish.
	// The leader's liveness probe is answered from the start too: it asks
	// only about an incarnation that has beaten.
	var subs []func() // each ends a subscription
	if h.direct != nil {
		h.goBG(func() { h.direct.run(h.bgCtx) })
	}
	for _, sub := range []struct {
		subject string
		handle  nats.MsgHandler
	}{
		{wire.SealSubject(h.cfg.Node), h.onSeal},
		{wire.SealBatchSubject(h.cfg.Node), h.onSeals},
		{wire.HostProbeSubject(h.cfg.Node), h.onProbe},
		{wire.AssignNoticeSubject(h.cfg.Node), h.onNotice},
		{wire.HandoffSubject(h.cfg.Node), h.onHandoff},
	} {
		s, err := h.nc.Subscribe(sub.subject, sub.handle)
		if err != nil {
			// What the subscriptions made so far started (a notice's
			// roles, the pool's workers) stops before the store closes.
			h.stop(subs)
			return h.closeStore(fmt.Errorf("subscribe %s: %w", sub.subject, err))
		}
		subs = append(subs, func() { _ = s.Unsubscribe() })
	}
	stopWaits, err := h.link.serveHostWaits(h.onHostWait)
	if err != nil {
		h.stop(subs)
		return h.closeStore(fmt.Errorf("serve host waits: %w", err))
	}
	subs = append(subs, stopWaits)
	h.goBG(func() { h.pullLoop(h.bgCtx) })
	h.goBG(func() { h.bus.Run(h.bgCtx) })
	h.goBG(func() { connwatch.Losses(h.bgCtx, h.nc, h.bus.Lost) })
	h.goBG(func() { h.heartbeatLoop(h.bgCtx) })
	if h.cfg.LivenessInterval > 0 && h.cfg.LivenessInterval < h.cfg.HeartbeatInterval {
		h.goBG(func() { h.livenessLoop(h.bgCtx) })
	}
	h.goBG(func() { h.retentionLoop(h.bgCtx) })
	h.log.Info("stream host started", "incarnation", h.incarnation, "copies", len(h.store.Copies()))

	<-ctx.Done()
	h.shutdown()
	h.stop(subs)
	if err := h.nc.FlushTimeout(time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.log.Warn("flush nats on shutdown", "err", err)
	}
	h.closeBeatConn()
	h.log.Info("stream host stopped")
	return h.closeStore(nil)
}

// stop ends what Run started, in order: the subscriptions subs (the last
// first; the host waits' is last), the parked host waits, the requests in
// flight, the background loops, every role (answering shutting_down), the
// idle waits and the pool's workers. Run calls it after its graceful
// shutdown, or when a subscription failed (what the earlier ones started
// then stops before the store closes).
func (h *Host) stop(subs []func()) {
	for i := len(subs) - 1; i >= 0; i-- {
		subs[i]()
	}
	h.parked.close()
	h.reqs.Close()
	h.bgCancel()
	h.bg.Wait()
	for _, r := range h.allReplicas() {
		r.mu.Lock()
		r.stopRole(wire.CodeShuttingDown)
		r.mu.Unlock()
	}
	h.idle.wg.Wait()
	h.pool.close()
}

// onProbe answers the coordinator leader's liveness probe
// (wire.HostProbeSubject), sent when this host's TTL ran out there, with a
// liveness beat naming this incarnation. It waits for no lock held across
// the store's I/O (LivenessBeat reads the main connection's state, and
// store.Failure, which takes the store's life lock briefly), so a host
// that runs at all answers at once.
func (h *Host) onProbe(m *nats.Msg) {
	data, err := json.Marshal(h.LivenessBeat(h.leaving.Load()))
	if err != nil {
		return
	}
	if err := m.Respond(data); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.log.Debug("answer liveness probe", "err", err)
	}
}

// closeBeatConn flushes and closes the beat connection if it is not the
// main one (the background loops that beat have stopped).
func (h *Host) closeBeatConn() {
	if h.beatNC == h.nc {
		return
	}
	if err := h.beatNC.FlushTimeout(time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.log.Warn("flush the beat connection on shutdown", "err", err)
	}
	h.beatNC.Close()
}

// beatsOff reports whether beats are to be skipped now: with a beat
// connection of their own, while either connection is down. A beat while
// the main one is down would prove the life of a host that can serve
// nothing; one while the beat connection is down would only wait in its
// reconnect buffer and arrive late (with one connection for all, beats
// wait in its buffer as before).
func (h *Host) beatsOff() bool {
	return h.beatNC != h.nc && (!h.mainSeen.Load().up || !h.beatNC.IsConnected())
}

func (h *Host) closeStore(prior error) error {
	if err := h.store.Close(); err != nil {
		return errors.Join(prior, fmt.Errorf("close store: %w", err))
	}
	return prior
}

func (h *Host) goBG(f func()) {
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		f()
	}()
}

// shutdown is the graceful part of stopping: stop taking publishes, give
// in-flight confirms and followers a moment, flush cursor events, say that
// the host is leaving, and keep answering seals while the coordinators move
// the streams this host owns.
func (h *Host) shutdown() {
	h.leaving.Store(true)
	h.log.Info("shutting down: stopping publishes")
	owners := h.owners()
	for _, o := range owners {
		o.stopIntake(wire.CodeShuttingDown)
	}

	// Let in-flight confirms finish and followers catch up with each
	// owner's tail, briefly: a follower holding the tail makes the coming
	// failover lose nothing that was written.
	deadline := time.Now().Add(h.cfg.AckWait)
	tick := time.NewTicker(10 * time.Millisecond)
	for time.Now().Before(deadline) {
		settled := true
		for _, o := range owners {
			if !o.settled() {
				settled = false
				break
			}
		}
		if settled {
			break
		}
		<-tick.C
	}
	tick.Stop()
	for _, o := range owners {
		o.failPending(wire.CodeShuttingDown)
	}

	for _, c := range h.store.Copies() {
		if err := c.SyncCursors(); err != nil {
			h.log.Warn("flush cursor events", "stream", c.Stream(), "err", err)
		}
	}

	// Best effort both: the coordinators also notice a silent host.
	h.publishHeartbeat(true)
	leave, _ := json.Marshal(wire.NodeRef{Node: h.cfg.Node})
	if _, err := h.nc.Request(wire.HostLeaveSubject(h.cfg.Node), leave, 500*time.Millisecond); err != nil {
		h.log.Warn("tell coordinators this node leaves", "err", err)
	}

	// Keep answering seals (and followers) until no stream in the latest
	// snapshot is owned here any more, or the linger runs out.
	h.requestPull()
	linger := time.NewTimer(h.cfg.SealLinger)
	defer linger.Stop()
	check := time.NewTicker(25 * time.Millisecond)
	defer check.Stop()
	for h.ownsAnyInLatest() {
		select {
		case <-linger.C:
			h.log.Warn("stopping while still owner of streams in the latest snapshot")
			return
		case <-check.C:
		}
	}
}

// ownsAnyInLatest reports whether the assignments pulled so far name this
// node as the owner of any stream.
func (h *Host) ownsAnyInLatest() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, as := range h.known {
		if as.Assignment.Owner == h.cfg.Node {
			return true
		}
	}
	return false
}

// replica returns the runtime state of stream, creating it if needed.
func (h *Host) replica(stream string) *replica {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.replicas[stream]
	if !ok {
		r = &replica{h: h, stream: stream}
		r.status.Store(&roleStatus{role: wire.RoleNone})
		h.replicas[stream] = r
	}
	return r
}

// lookupReplica returns the runtime state of stream, or nil.
func (h *Host) lookupReplica(stream string) *replica {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.replicas[stream]
}

func (h *Host) allReplicas() []*replica {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*replica, 0, len(h.replicas))
	for _, r := range h.replicas {
		out = append(out, r)
	}
	return out
}

// owners returns the owner roles running now.
func (h *Host) owners() []*owner {
	var out []*owner
	for _, r := range h.allReplicas() {
		if st := r.status.Load(); st.own != nil {
			out = append(out, st.own)
		}
	}
	return out
}

// requestPull asks the pull loop for a pull soon that re-applies every
// known assignment (a role in trouble, a reconnection), without blocking.
func (h *Host) requestPull() {
	h.recheck.Store(true)
	h.requestNoticePull()
}

// requestNoticePull asks the pull loop for a pull soon, of what changed
// (a notice of a newer version), without blocking.
func (h *Host) requestNoticePull() {
	select {
	case h.pullNow <- struct{}{}:
	default:
	}
}

// requestPullNow asks the pull loop for a pull now, without the gap
// between notice-asked pulls (a recovery's commit), without blocking.
func (h *Host) requestPullNow() {
	select {
	case h.pullUrgent <- struct{}{}:
	default:
	}
}

// requestBeat asks for a heartbeat now, after a role change.
func (h *Host) requestBeat() {
	select {
	case h.beatNow <- struct{}{}:
	default:
	}
}

// minBeatGap is the least time between a heartbeat and one asked for by a
// role change. Role changes come in bursts (a host taking over hundreds of
// streams applies them over a few hundred milliseconds), and every beat
// built every copy's status (and, before deltas, listed every copy): one
// beat per role change made the host and every coordinator encode and
// decode the whole list hundreds of times in the middle of a failover. The
// first change of a burst is still reported at once; the rest share a beat
// at most minBeatGap later.
const minBeatGap = 50 * time.Millisecond

func (h *Host) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(h.cfg.HeartbeatInterval)
	defer t.Stop()
	gap := time.NewTimer(0)
	defer gap.Stop()
	for {
		// This beat carries every role change asked about so far.
		select {
		case <-h.beatNow:
		default:
		}
		h.publishHeartbeat(h.leaving.Load())
		gap.Reset(minBeatGap)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.beatNow:
			select {
			case <-ctx.Done():
				return
			case <-gap.C:
			}
		}
	}
}

// livenessLoop publishes a liveness beat every LivenessInterval: proof of
// life that costs the same whatever the host holds, so the coordinators'
// TTL can be short without the full heartbeat (every copy) being sent more
// often.
func (h *Host) livenessLoop(ctx context.Context) {
	every(ctx, h.cfg.LivenessInterval, func() { h.publishLiveness(h.leaving.Load()) })
}

// LivenessBeat builds a liveness beat: the heartbeat's header (node,
// incarnation, leaving, store error, connection), Live, and no copies.
func (h *Host) LivenessBeat(leaving bool) wire.Heartbeat {
	hb := wire.Heartbeat{
		Node:        h.cfg.Node,
		Incarnation: h.incarnation,
		Leaving:     leaving,
		Copies:      []wire.CopyStatus{},
		AtMS:        time.Now().UnixMilli(),
		Live:        true,
	}
	c := h.currentMainConn()
	hb.ConnServer, hb.ConnID = c.server, c.id
	if err := h.store.Failure(); err != nil {
		hb.Leaving = true
		hb.StoreError = wire.CutStoreError(err.Error())
	}
	return hb
}

// publishLiveness publishes a liveness beat, numbered with the full
// heartbeats but not behind them (it does not take beatMu). It waits for
// the first full heartbeat of this incarnation, so that no reader hears of
// the incarnation before its copies.
func (h *Host) publishLiveness(leaving bool) {
	if !h.reported.Load() || h.beatsOff() {
		return
	}
	hb := h.LivenessBeat(leaving)
	hb.Beat = h.beat.Add(1)
	data, err := json.Marshal(hb)
	if err != nil {
		h.log.Error("encode liveness beat", "err", err)
		return
	}
	if err := h.beatNC.Publish(wire.HeartbeatSubject(h.cfg.Node), data); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.log.Debug("publish liveness beat", "err", err)
	}
}

// Heartbeat builds the host's heartbeat from the copies' current state.
func (h *Host) Heartbeat(leaving bool) wire.Heartbeat {
	hb := h.LivenessBeat(leaving)
	hb.Live = false
	for _, c := range h.store.Copies() {
		hb.Copies = append(hb.Copies, h.copyStatus(c, hb.StoreError != ""))
	}
	return hb
}

// changedHeartbeat builds a heartbeat that lists the copies named (their
// current state, or Gone for one no longer held): the candidates of a
// delta (heartbeat.Reporter.ReportChanged).
func (h *Host) changedHeartbeat(leaving bool, names []string) wire.Heartbeat {
	hb := h.LivenessBeat(leaving)
	hb.Live = false
	for _, name := range names {
		c := h.store.Get(name)
		if c == nil {
			hb.Copies = append(hb.Copies, wire.CopyStatus{Stream: name, Gone: true})
			continue
		}
		hb.Copies = append(hb.Copies, h.copyStatus(c, hb.StoreError != ""))
	}
	return hb
}

// copyStatus is copy c's status for a heartbeat; storeFailed says the
// beat reports a failed store.
func (h *Host) copyStatus(c *streamlog.Copy, storeFailed bool) wire.CopyStatus {
	t := c.Tails()
	_, sealed := c.SealInfo()
	cs := wire.CopyStatus{
		Stream:     c.Stream(),
		StreamID:   c.StreamID(),
		Role:       wire.RoleNone,
		Epoch:      c.Epoch(),
		RecordTail: t.Record,
		CursorTail: t.CursorDurable,
		Sealed:     sealed,
	}
	// A failed store holds no role, even in the moment between the
	// failure and storeFailed's stop of the roles: a beat that says
	// leaving with the error never also says owner.
	if r := h.lookupReplica(c.Stream()); r != nil && !storeFailed {
		st := r.status.Load()
		if st.role != wire.RoleNone && st.streamID == c.StreamID() {
			cs.Role = st.role
			if st.own != nil {
				cs.Confirmed = st.own.confirmed()
			}
		}
	}
	return cs
}

// publishHeartbeat publishes the host's heartbeat: a full report of every
// copy every FullReportInterval, otherwise a delta of the copies that
// changed since the previous report (those marked in h.changed whose
// status differs from what was reported); in as many parts as the
// server's payload limit requires (see package heartbeat). Only the full
// report walks every copy; a change the marks missed is reported by it.
func (h *Host) publishHeartbeat(leaving bool) {
	h.beatMu.Lock()
	defer h.beatMu.Unlock()
	// Skipped before it is numbered and reported, so the deltas that
	// follow still follow the last report sent.
	if h.beatsOff() {
		return
	}
	now := time.Now()
	if h.fullAsked.Load() && now.Sub(h.lastAsked) >= wire.MinAskedFullReportGap {
		h.fullAsked.Store(false)
		h.lastAsked = now
		h.reporter.AskFull()
	}
	// The marks are taken before the statuses are read: a change after
	// this is marked again, for the next beat.
	names := h.changed.take()
	var hb wire.Heartbeat
	if h.reporter.FullDue(now) {
		hb = h.Heartbeat(leaving)
		hb.Beat = h.beat.Add(1)
		hb = h.reporter.Report(hb, now)
	} else {
		hb = h.changedHeartbeat(leaving, names)
		hb.Beat = h.beat.Add(1)
		// No full report is due at now (above), so this is a delta.
		hb, _ = h.reporter.ReportChanged(hb, now)
	}
	defer h.reported.Store(true)
	parts := heartbeat.Split(hb, int(h.beatNC.MaxPayload()))
	if parts == nil {
		h.log.Error("heartbeat does not fit the server's payload limit even in parts",
			"copies", len(hb.Copies), "max_payload", h.beatNC.MaxPayload())
		return
	}
	for _, p := range parts {
		data, err := json.Marshal(p)
		if err != nil {
			h.log.Error("encode heartbeat", "err", err)
			return
		}
		if err := h.beatNC.Publish(wire.HeartbeatSubject(h.cfg.Node), data); err != nil {
			if !errors.Is(err, nats.ErrConnectionClosed) {
				h.log.Warn("publish heartbeat", "part", p.Part, "parts", p.Parts, "err", err)
			}
			return
		}
	}
}

// retentionLoop advances each copy's head by its retention. An owner keeps
// what its live followers have not acknowledged yet, so that a follower that
// lags is not cut off needlessly; a follower keeps what its owner keeps. It
// visits only the copies with a role and a retention that bounds something
// (h.retained), not every copy held.
func (h *Host) retentionLoop(ctx context.Context) {
	t := time.NewTicker(h.cfg.RetentionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		for _, r := range h.retained.list() {
			st := r.status.Load()
			if !hasBound(st.retention) {
				continue
			}
			var keepFrom uint64
			var c *streamlog.Copy
			switch {
			case st.own != nil:
				c, keepFrom = st.own.c, st.own.retentionKeepFrom(now)
			case st.fol != nil:
				c, keepFrom = st.fol.c, st.fol.retentionKeepFrom()
			default:
				continue
			}
			if err := c.EnforceRetention(now, keepFrom); err != nil {
				h.log.Warn("enforce retention", "stream", r.stream, "err", err)
			}
		}
	}
}
