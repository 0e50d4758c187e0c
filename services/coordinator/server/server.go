package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/brook-streams/brook/pkg/connwatch"
	"github.com/brook-streams/brook/pkg/heartbeat"
	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/svcconfig"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/controller"
	"github.com/brook-streams/brook/services/coordinator/liveness"
	"github.com/brook-streams/brook/services/coordinator/raftstore"
	"github.com/brook-streams/brook/services/coordinator/recovery"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// DisconnectSubject carries the system account's advisories for client
// connections of account BROOK that closed.
const DisconnectSubject = "$SYS.ACCOUNT.BROOK.DISCONNECT"

// HostConnPrefix is how a stream host names its NATS connection.
const HostConnPrefix = "brook-streamhost:"

// Options configure a Server.
type Options struct {
	ReplicaID uint64
	RaftAddr  string
	Peers     map[uint64]string
	DataDir   string
	// NATSURL connects to account BROOK; NATSSystemURL (optional) to the
	// system account, for disconnect advisories.
	NATSURL       string
	NATSSystemURL string
	// NATSAuth is the nkey seed file and TLS files of the connection to
	// BROOK; NATSSystemNkey is the seed file of the system-account
	// connection, which uses NATSAuth's TLS files. Empty: none.
	NATSAuth       svcconfig.NATSAuth
	NATSSystemNkey string
	// HostKeys maps each node to the public nkey its stream host
	// authenticates with. When not nil, a disconnect advisory counts only
	// if the closed connection authenticated with the key of the node its
	// name claims; nil keeps the name rule (no credentials).
	HostKeys map[string]string

	TTL             time.Duration
	DisconnectGrace time.Duration
	// ProbeTimeout bounds the wait for a host's answer to the liveness
	// probe the leader sends before a TTL expiry (default
	// wire.DefaultProbeTimeout): the wait adapts to how late beats arrive
	// lately, from controller.ProbeWaitFloor up to this (probe.go).
	ProbeTimeout  time.Duration
	ReplaceAfter  time.Duration
	SealTimeout   time.Duration
	DefaultPolicy string
	// MaxStreams and MaxCopiesPerHost limit creates (default
	// state.DefaultMaxStreams, state.DefaultMaxCopiesPerHost).
	MaxStreams       int
	MaxCopiesPerHost int
	// MaxInflight caps the admin requests this replica serves at once,
	// and apart from them the hosts' assignment pulls and leaves (default
	// DefaultMaxInflight each); one more is answered overloaded at once,
	// which clients and hosts retry after a backoff. Clients' requests
	// never take the hosts' slots.
	MaxInflight int
	// Balance configures the owner balancer (controller.Balance); the zero
	// value is on with the defaults.
	Balance        controller.BalanceParams
	RTTMillisecond uint64
	// RaftTLS, when set, runs the Raft transport over mutual TLS.
	RaftTLS *raftstore.TLSFiles
	// HTTPAddr serves GET /healthz when set, and with PProf the runtime
	// profiles under /debug/pprof/.
	HTTPAddr string
	PProf    bool
	// prober replaces the NATS liveness probe (tests).
	prober prober
	// confirmQuorum replaces the quorum check's read-index round,
	// Store.ConfirmQuorum (tests).
	confirmQuorum func(budget time.Duration) error
	// ControlInterval is the leader's planning period (default 100ms); the
	// loop also runs at once on notable heartbeats and advisories.
	ControlInterval time.Duration

	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
	// MeterProvider makes the coordinator's metrics (metrics.go); nil
	// records nothing. MetricsHandler, when set, is served at GET
	// /metrics on HTTPAddr.
	MeterProvider  metric.MeterProvider
	MetricsHandler http.Handler
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o *Options) defaults() error {
	if o.TTL <= 0 {
		o.TTL = wire.DefaultHostTTL
	}
	if o.DisconnectGrace <= 0 {
		o.DisconnectGrace = wire.DefaultDisconnectGrace
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = wire.DefaultProbeTimeout
	}
	if o.ReplaceAfter <= 0 {
		o.ReplaceAfter = controller.DefaultReplaceAfter
	}
	if o.SealTimeout <= 0 {
		o.SealTimeout = recovery.DefaultSealTimeout
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = state.DefaultMaxStreams
	}
	if o.MaxCopiesPerHost <= 0 {
		o.MaxCopiesPerHost = state.DefaultMaxCopiesPerHost
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = DefaultMaxInflight
	}
	// Stamped on assignments as is, so in canonical form.
	dp, err := policy.Normalize(o.DefaultPolicy)
	if err != nil {
		return fmt.Errorf("default policy: %w", err)
	}
	if dp == "" {
		dp = policy.Default
	}
	o.DefaultPolicy = dp
	o.Balance = o.Balance.WithDefaults()
	if o.ControlInterval <= 0 {
		o.ControlInterval = 100 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.TracerProvider == nil {
		o.TracerProvider = noop.NewTracerProvider()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// Server is one running coordinator.
type Server struct {
	opt    Options
	log    *slog.Logger
	tracer trace.Tracer
	store  *raftstore.Store
	live   *liveness.Tracker
	// hbMu guards hbDec, which decodes heartbeats.
	hbMu  sync.Mutex
	hbDec *heartbeat.Decoder
	// reports queues the heartbeats to decode (reportLoop); reportsDone
	// closes when that loop has ended.
	stallDone chan struct{}
	reports   chan heard
	// asked is when reportLoop last asked each host for a full report.
	asked          map[string]time.Time
	reportsDone    chan struct{}
	reportsDropped atomic.Uint64
	// stalls counts the stalls stallWatch saw.
	stalls atomic.Uint64
	nc     *nats.Conn
	sysnc  *nats.Conn
	// bus watches nc for Ready (/healthz) without waiting for its lock;
	// set with nc.
	bus *connwatch.Watch
	// seals batches the recovery workers' seals per host (sealbatch.go);
	// set with nc.
	seals  *sealBatcher
	subs   []*nats.Subscription
	params controller.Params
	// hearing tracks this coordinator's own NATS connections, so that it
	// never expires hosts for a silence that was its own.
	hearing hearing

	kick     chan struct{}
	cancel   context.CancelFunc
	loopDone chan struct{}
	handlers sync.WaitGroup // admin and pull handlers in flight
	inflight atomic.Int32   // the same, counted: logs and tests
	// slots counts the requests in flight by origin, for admission
	// (MaxInflight each).
	slots [origins]atomic.Int32
	// reqCtx is the parent of every request's context; shutdown cancels
	// it, so a request waiting on a Raft quorum that will not come ends
	// (and replies unavailable) instead of holding the process.
	reqCtx    context.Context
	reqCancel context.CancelFunc
	// limits bound each step of shutdown; closeStore closes the Raft
	// store (tests replace both).
	limits     shutdownLimits
	closeStore func()
	workerWG   sync.WaitGroup
	// prober asks a host whether it is alive before a TTL expiry
	// (probe.go): Options.prober, or one over nc.
	prober   prober
	httpSrv  *http.Server
	httpAddr string
	metrics  *metrics

	// waits summarizes the workers' repeated waits (recovery.WaitLog, its
	// own mutex); the control loop flushes it every waitSummaryEvery.
	waits *recovery.WaitLog

	mu      sync.Mutex
	workers map[string]*workerRun
	// moves is what this replica's planned moves keep (admin_move.go);
	// balancedAt is when the balancer last ran, settling what it last saw
	// change (controller.Settling: it moves only after a quiet period).
	moves      moves
	balancedAt time.Time
	settling   controller.Settling
	// movesSeen is, per stream, when this leader first saw its planned
	// move's pending recovery (moverRuns).
	movesSeen map[string]seenMove
	// probing are the nodes whose liveness probe runs (startProbe).
	probing map[string]bool
	leading bool
	// leaderSince is when this replica last became leader.
	leaderSince time.Time
	// noticed is the AssignVersion last announced by this leader.
	noticed uint64
	// readFailing is owned by the control loop: it quiets repeated
	// read failures during an outage.
	readFailing bool
	// lastFullPlan is owned by the control loop: when it last planned
	// over the whole state (zero: never while leading). lastSealedScan and
	// sealed are when it last looked at every copy the hosts reported, and
	// the streams of which one was sealed (see sealedEvery).
	lastFullPlan   time.Time
	lastSealedScan time.Time
	sealed         []string
	// waitsFlushed belongs to the control loop too: when it last logged
	// the summary of waits (flushWaits).
	waitsFlushed time.Time

	closeOnce sync.Once
	closed    atomic.Bool
	serving   atomic.Bool
}

// shutdownLimits bound the steps of a shutdown, so that a coordinator
// exits in time even when nothing answers: when every process stops at
// once, the last coordinator has no Raft quorum, its requests in flight wait
// for one, and Dragonboat's NodeHost close can block. Every step is also
// bounded by the context given to Close.
type shutdownLimits struct {
	// step bounds stopping the control loop, the workers, NATS and HTTP,
	// each of which ends at once unless something is stuck.
	step time.Duration
	// handlers is how long a graceful shutdown lets requests in flight
	// finish before cancelling them; cancelled is how long it then waits
	// for their (error) replies.
	handlers  time.Duration
	cancelled time.Duration
	// transfer bounds the leadership hand-over.
	transfer time.Duration
	// store bounds closing the Raft NodeHost; past it the process goes on
	// (and exits) without it: Raft's log is durable as it is written, so
	// this is no worse than a kill.
	store time.Duration
}

var defaultShutdownLimits = shutdownLimits{
	step:      time.Second,
	handlers:  500 * time.Millisecond,
	cancelled: 200 * time.Millisecond,
	transfer:  time.Second,
	store:     3 * time.Second,
}

type workerRun struct {
	transition uint64
	cancel     context.CancelFunc
}

// Start opens the Raft replica, connects to NATS, subscribes, and starts
// the control loop and the health endpoint.
func Start(ctx context.Context, opt Options) (*Server, error) {
	if err := opt.defaults(); err != nil {
		return nil, err
	}
	s := &Server{
		opt:         opt,
		log:         opt.Logger.With("replica_id", opt.ReplicaID),
		tracer:      opt.TracerProvider.Tracer("github.com/brook-streams/brook/services/coordinator"),
		live:        liveness.New(),
		hbDec:       heartbeat.NewDecoder(),
		reports:     make(chan heard, maxQueuedReports),
		reportsDone: make(chan struct{}),
		asked:       map[string]time.Time{},
		stallDone:   make(chan struct{}),
		kick:        make(chan struct{}, 1),
		workers:     map[string]*workerRun{},
		movesSeen:   map[string]seenMove{},
		probing:     map[string]bool{},
		params: controller.Params{TTL: opt.TTL, DisconnectGrace: opt.DisconnectGrace,
			ReplaceAfter: opt.ReplaceAfter, DefaultPolicy: opt.DefaultPolicy},
		limits: defaultShutdownLimits,
	}
	s.waits = &recovery.WaitLog{Logger: s.log.With("component", "recovery")}
	met, err := newMetrics(opt.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("coordinator metrics: %w", err)
	}
	s.metrics = met
	store, err := raftstore.Open(raftstore.Config{
		ReplicaID: opt.ReplicaID, RaftAddr: opt.RaftAddr, Peers: opt.Peers, DataDir: opt.DataDir,
		RTTMillisecond: opt.RTTMillisecond, TLS: opt.RaftTLS, Logger: s.log, OnPropose: met.proposed,
	})
	if err != nil {
		return nil, err
	}
	s.store = store
	if err := met.observe(s); err != nil {
		store.Close()
		return nil, fmt.Errorf("coordinator metrics: %w", err)
	}
	s.closeStore = store.Close
	// From here every failure goes through shutdown, which stops the
	// heartbeat decoding loop: started earlier, a failed Start left it
	// running.
	s.reqCtx, s.reqCancel = context.WithCancel(context.Background())
	go s.reportLoop(s.reqCtx)
	if err := s.connect(); err != nil {
		s.shutdown(context.Background(), false)
		return nil, err
	}
	s.bus = connwatch.New(s.nc, connwatch.Interval, connwatch.Stale)
	go s.bus.Run(s.reqCtx)
	go connwatch.Losses(s.reqCtx, s.nc, s.bus.Lost)
	if opt.HTTPAddr != "" {
		if err := s.serveHTTP(opt.HTTPAddr); err != nil {
			s.shutdown(context.Background(), false)
			return nil, err
		}
	}
	s.prober = opt.prober
	if s.prober == nil {
		s.prober = natsProber{nc: s.nc}
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.loopDone = make(chan struct{})
	go s.controlLoop(loopCtx)
	go func() {
		defer close(s.stallDone)
		t := time.NewTicker(stallCheck)
		defer t.Stop()
		s.stallWatch(loopCtx, t.C, time.Now)
	}()
	go s.serveWhenReady(loopCtx)
	s.log.Info("coordinator started", "raft_addr", opt.RaftAddr, "nats_url", redact(opt.NATSURL),
		"advisories", opt.NATSSystemURL != "", "nkey", opt.NATSAuth.Nkey != "", "tls", opt.NATSAuth.CA != "" || opt.NATSAuth.Cert != "",
		"host_keys", len(opt.HostKeys), "ttl", opt.TTL.String(), "default_policy", opt.DefaultPolicy)
	return s, nil
}

// redact hides the password of each NATS URL of a list in logs.
func redact(u string) string { return svcconfig.RedactURLs(u) }

// natsOptions are a coordinator connection's options; up is called when
// the connection is made (again).
func natsOptions(name string, log *slog.Logger, up func(*nats.Conn)) []nats.Option {
	return append(connwatch.PingOptions(),
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond),
		nats.ReconnectJitter(150*time.Millisecond, 150*time.Millisecond),
		// Start even if NATS is not up yet; subscriptions are sent once
		// the connection is made.
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "conn", name, "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			up(c)
			log.Info("nats reconnected", "conn", name, "url", redact(c.ConnectedUrl()))
		}),
		// The first connection made by retrying (NATS was not up at
		// start) counts as a reconnect: nothing was heard before it.
		nats.ConnectHandler(func(c *nats.Conn) { up(c) }),
	)
}

// hearing is what the controller needs to know about this coordinator's
// own NATS connections: when they last came back, and whether the
// connection heartbeats arrive on has come back since it last dropped;
// and when this process last came back from a stall (stallWatch).
type hearing struct {
	mu sync.Mutex
	// since is the latest (re)connect of either connection, or end of a
	// stall of this process.
	since time.Time
	// noted is the reconnect count of the heartbeat connection when its
	// latest (re)connect was noted.
	noted uint64
}

// up notes that c (re)connected at at; main says c carries heartbeats.
func (h *hearing) up(c *nats.Conn, main bool, at time.Time) {
	reconnects := c.Stats().Reconnects // before h.mu: see view
	h.mu.Lock()
	defer h.mu.Unlock()
	if at.After(h.since) {
		h.since = at
	}
	if main {
		h.noted = max(h.noted, reconnects)
	}
}

// stalled notes that this process ran nothing for a while, up to at:
// heartbeats that arrived meanwhile were not read, so the silence was its
// own, as for a reconnect.
func (h *hearing) stalled(at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if at.After(h.since) {
		h.since = at
	}
}

// stallCheck is how often stallWatch looks at the clock.
const stallCheck = 50 * time.Millisecond

// stallGap is the gap between two of stallWatch's looks past which this
// process is taken to have stalled: a quarter of the TTL, at least 200 ms.
func stallGap(ttl time.Duration) time.Duration { return max(ttl/4, 200*time.Millisecond) }

// stallWatch looks at the clock every stallCheck until ctx ends; a look
// later than stallGap after the previous one means this process (or the
// whole machine) ran nothing in between: a loaded two-core machine left
// every process unscheduled for seconds, and the leader then expired every
// host whose beats were waiting, unread, in its socket (issue 17). The
// stall counts as not hearing (hearing.stalled), so no host is expired for
// it until a TTL after it ended.
// The gap is measured by clock (time.Now, monotonic) when each tick is
// received, not by the tick's own time: a ticker's buffered tick carries
// the time it fired, before the stall.
func (s *Server) stallWatch(ctx context.Context, ticks <-chan time.Time, clock func() time.Time) {
	gap := stallGap(s.opt.TTL)
	last := clock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		now := clock()
		if d := now.Sub(last); d > gap {
			s.hearing.stalled(s.opt.Now())
			s.live.Stalled(d, s.opt.Now())
			if n := s.stalls.Add(1); n == 1 || n%20 == 0 {
				s.log.Warn("this coordinator was stalled (not scheduled); no host is expired for the silence until a ttl after it",
					"stalled", d.Round(time.Millisecond).String(), "stalls_so_far", n)
			}
		}
		last = now
	}
}

// view returns since, and whether nc cannot be heard on now: it is not
// connected, or it reconnected and the handler that notes it has not run
// yet (it runs on NATS's callback goroutine, after the connection is up).
func (h *hearing) view(nc *nats.Conn) (since time.Time, deaf bool) {
	// The connection is read before h.mu is taken: both calls wait for
	// the connection's lock, which a write to a full socket holds, and
	// stalled and up must not wait behind that. Reconnects only grows and
	// up raises noted to it, so a read before the lock can only be older.
	connected, reconnects := nc.IsConnected(), nc.Stats().Reconnects
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.since, !connected || reconnects > h.noted
}

func (s *Server) connect() error {
	name := "brook-coordinator:" + strconv.FormatUint(s.opt.ReplicaID, 10)
	auth, err := s.opt.NATSAuth.Options(wire.InboxCoordinator)
	if err != nil {
		return fmt.Errorf("nats credentials: %w", err)
	}
	nc, err := nats.Connect(s.opt.NATSURL, append(auth, natsOptions(name, s.log, func(c *nats.Conn) {
		s.hearing.up(c, true, s.opt.Now())
	})...)...)
	if err != nil {
		return fmt.Errorf("connect to nats %s: %w", redact(s.opt.NATSURL), err)
	}
	s.nc = nc
	s.seals = newSealBatcher(nc, s.log.With("component", "seals"), s.nodeGone)
	// Every coordinator hears every heartbeat (no queue group). Admin
	// requests and pulls go to any one of them: see serveWhenReady.
	if err := s.subscribe("heartbeats", wire.HeartbeatWildcard, "", s.onHeartbeat); err != nil {
		return err
	}
	if s.opt.NATSSystemURL != "" {
		sysAuth := s.opt.NATSAuth
		sysAuth.Nkey = s.opt.NATSSystemNkey
		auth, err := sysAuth.Options(wire.InboxCoordinatorSys)
		if err != nil {
			return fmt.Errorf("nats system account credentials: %w", err)
		}
		sysnc, err := nats.Connect(s.opt.NATSSystemURL, append(auth, natsOptions(name, s.log, func(c *nats.Conn) {
			s.hearing.up(c, false, s.opt.Now())
		})...)...)
		if err != nil {
			return fmt.Errorf("connect to nats system account %s: %w", redact(s.opt.NATSSystemURL), err)
		}
		s.sysnc = sysnc
		if _, err := sysnc.Subscribe(DisconnectSubject, s.onDisconnect); err != nil {
			return fmt.Errorf("subscribe disconnect advisories: %w", err)
		}
	}
	return nil
}

func (s *Server) subscribe(what, subject, queue string, h nats.MsgHandler) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil // shutting down: subscribing now would outlive it
	}
	sub, err := s.nc.QueueSubscribe(subject, queue, h)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", what, err)
	}
	s.subs = append(s.subs, sub)
	return nil
}

// serveWhenReady joins the queue group of admin requests and assignment
// pulls once this replica knows a Raft leader. Until then NATS routes those
// requests to the other coordinators, instead of to a replica that has just
// started and could only stall them.
func (s *Server) serveWhenReady(ctx context.Context) {
	for {
		if _, ok := s.store.Leader(); ok {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := s.subscribe("admin", wire.AdminPrefix+">", wire.AdminQueue, s.onAdmin); err != nil {
		s.log.Error("admin requests not served", "err", err)
	}
	if err := s.subscribe("assignment pulls", wire.AssignPull, wire.AdminQueue, s.onPull); err != nil {
		s.log.Error("assignment pulls not served", "err", err)
	}
	if err := s.subscribe("host leaves", wire.HostLeaveWildcard, wire.AdminQueue, s.onHostLeave); err != nil {
		s.log.Error("host leaves not served", "err", err)
	}
	// Serving means the server has the interest: a subscription is sent
	// by the connection's flusher, and a request that reached the server
	// before it found no responders (TestHostLeaveSubject did, now and
	// then, right after Serving).
	if err := s.nc.FlushTimeout(5 * time.Second); err != nil {
		s.log.Warn("subscriptions not yet confirmed by the server", "err", err)
	}
	s.serving.Store(true)
	s.log.Info("serving admin requests, assignment pulls and host leaves")
}

// Serving reports whether this replica answers admin requests and pulls.
func (s *Server) Serving() bool { return s.serving.Load() }

// maxQueuedReports bounds the heartbeats received and not yet decoded
// (reportLoop); past it a heartbeat is dropped after its proof of life is
// noted. A dropped full report leaves the host's copies as they were until
// the next one, a dropped delta until the next full report.
const maxQueuedReports = 64

// heard is one heartbeat message as received, with its arrival time.
type heard struct {
	subject string
	data    []byte
	at      time.Time
}

// onHeartbeat notes a host's heartbeat as proof of life at once and queues
// it for reportLoop to decode and record. The subscription delivers
// messages one after another: decoding a full report of thousands of copies
// on a loaded machine took long enough that the liveness beats behind it
// were read past the TTL, and the leader expired live hosts (issue 17). The
// time noted is the arrival's, not the decode's.
func (s *Server) onHeartbeat(m *nats.Msg) {
	at := s.opt.Now()
	node, ok := strings.CutPrefix(m.Subject, wire.HeartbeatSubject(""))
	if !ok || wire.ValidName("node", node) != nil {
		s.log.Debug("heartbeat on the wrong subject", "subject", m.Subject)
		return
	}
	s.live.Touch(node, at)
	select {
	case s.reports <- heard{subject: m.Subject, data: m.Data, at: at}:
	default:
		if n := s.reportsDropped.Add(1); n%100 == 1 {
			s.log.Warn("heartbeat dropped after its proof of life: too many waiting to be decoded", "node", node,
				"queued", maxQueuedReports, "dropped_so_far", n)
		}
	}
}

// reportLoop decodes and records the queued heartbeats until ctx ends; a
// notable one wakes the leader's loop so a leaving host fails over
// without waiting for the next tick.
func (s *Server) reportLoop(ctx context.Context) {
	defer close(s.reportsDone)
	for {
		select {
		case <-ctx.Done():
			return
		case h := <-s.reports:
			s.record(h)
		}
	}
}

// record decodes and records one heartbeat.
func (s *Server) record(h heard) {
	s.hbMu.Lock()
	hb, err := s.hbDec.Decode(h.subject, h.data)
	s.hbMu.Unlock()
	if err != nil {
		s.log.Debug("bad heartbeat", "subject", h.subject, "err", err)
		return
	}
	if hb.Node == "" || h.subject != wire.HeartbeatSubject(hb.Node) || wire.ValidName("node", hb.Node) != nil {
		s.log.Debug("heartbeat on the wrong subject", "subject", h.subject, "node", hb.Node)
		return
	}
	if s.live.Heartbeat(hb, h.at) {
		s.poke()
	}
	if hb.Delta && (hb.Parts <= 1 || hb.Part == hb.Parts-1) && !s.live.Synced(hb.Node) {
		s.askFullReport(hb.Node, h.at)
	}
}

// askFullEvery is the least time between two asks of one host for a full
// report.
const askFullEvery = time.Second

// askFullReport asks node for a full report in its next heartbeat (on its
// notice subject), at most once per askFullEvery: this coordinator has its
// deltas but no base to apply them to. Only reportLoop calls it.
func (s *Server) askFullReport(node string, at time.Time) {
	if last, ok := s.asked[node]; ok && at.Sub(last) < askFullEvery {
		return
	}
	if len(s.asked) >= maxAskedNodes {
		clear(s.asked) // forged subjects must not grow it without end
	}
	s.asked[node] = at
	data, _ := json.Marshal(wire.AssignNotice{FullReport: true})
	if err := s.nc.Publish(wire.AssignNoticeSubject(node), data); err != nil {
		s.log.Debug("ask for a full report", "node", node, "err", err)
		return
	}
	s.log.Debug("asked a host for a full report: a delta came without a base", "node", node)
}

// maxAskedNodes bounds askFullReport's memory of the hosts it asked.
const maxAskedNodes = 4096

// disconnectAdvisory is the part of the server's disconnect event read here.
type disconnectAdvisory struct {
	Server struct {
		ID string `json:"id"`
	} `json:"server"`
	Client struct {
		ID   uint64 `json:"id"`
		Name string `json:"name"`
		// User is what the connection authenticated as: for an nkey
		// user, nats-server puts its public nkey here (ClientInfo.User,
		// from the key whose signature the server checked).
		User string `json:"user"`
	} `json:"client"`
}

// advisoryHost tells which stream host a disconnect advisory is about. A
// connection that does not name itself brook-streamhost:<node> is no
// host's (ok false, why empty). With hostKeys (not nil), the name is only a
// claim: the advisory counts only if the connection authenticated with the
// node's own key, since any client may pick any name; otherwise ok is false
// and why says why.
func advisoryHost(ev disconnectAdvisory, hostKeys map[string]string) (node, why string, ok bool) {
	node, named := strings.CutPrefix(ev.Client.Name, HostConnPrefix)
	if !named || wire.ValidName("node", node) != nil {
		return "", "", false
	}
	if hostKeys == nil {
		return node, "", true
	}
	key, known := hostKeys[node]
	switch {
	case !known:
		return node, "the node has no key in --host-keys", false
	case ev.Client.User == "":
		return node, "the connection authenticated with no nkey", false
	case ev.Client.User != key:
		return node, "the connection authenticated with another key than the node's", false
	}
	return node, "", true
}

// onDisconnect notes that a stream host's connection closed; if no
// heartbeat arrives within the grace, the leader expires it.
func (s *Server) onDisconnect(m *nats.Msg) {
	var ev disconnectAdvisory
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		s.log.Debug("bad disconnect advisory", "err", err)
		return
	}
	node, why, ok := advisoryHost(ev, s.opt.HostKeys)
	if !ok {
		if why != "" {
			s.log.Warn("disconnect advisory naming a stream host ignored: "+why, "node", node,
				"user", ev.Client.User, "server", ev.Server.ID, "client_id", ev.Client.ID)
		}
		return
	}
	conn := liveness.Conn{Server: ev.Server.ID, ID: ev.Client.ID}
	if !s.live.Disconnected(node, conn, s.opt.Now()) {
		s.log.Info("disconnect advisory about an older connection of a stream host; ignored", "node", node,
			"server", conn.Server, "client_id", conn.ID)
		return
	}
	s.log.Info("stream host disconnected", "node", node, "server", conn.Server, "client_id", conn.ID)
	// The plan expires the host once the grace has passed since this
	// advisory was stamped (above); a millisecond's slack is enough for
	// the timer to fire after it, and every millisecond here is one of
	// the failover's write gap.
	time.AfterFunc(s.advisoryGrace(s.opt.Now())+time.Millisecond, s.poke)
}

// advisoryGrace is the disconnect grace at now: --disconnect-grace,
// stretched with how late beats arrive lately (controller.AdvisoryGrace).
func (s *Server) advisoryGrace(now time.Time) time.Duration {
	return controller.AdvisoryGrace(s.opt.DisconnectGrace, s.live.RecentLateness(now), s.opt.ProbeTimeout)
}

// poke wakes the control loop without blocking.
func (s *Server) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Server) serveHTTP(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if s.opt.MetricsHandler != nil {
		mux.Handle("GET /metrics", s.opt.MetricsHandler)
	}
	if s.opt.PProf {
		svcconfig.HandlePProf(mux)
	}
	s.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.httpAddr = l.Addr().String()
	go func() {
		if err := s.httpSrv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("health endpoint stopped", "err", err)
		}
	}()
	return nil
}

// HTTPAddr is the address the health endpoint listens on ("" if off).
func (s *Server) HTTPAddr() string { return s.httpAddr }

// Ready reports why the coordinator cannot serve yet, or nil: it is ready
// once NATS is connected and the Raft shard has a leader. It never waits
// for the NATS connection (connwatch).
func (s *Server) Ready() error {
	if s.closed.Load() {
		return errors.New("shutting down")
	}
	if err := s.bus.Err(); err != nil {
		return err
	}
	if _, ok := s.store.Leader(); !ok {
		return errors.New("raft shard has no leader")
	}
	return nil
}

// IsLeader reports whether this replica leads the Raft shard.
func (s *Server) IsLeader() bool { return s.store.IsLeader() }

// Close shuts down gracefully: it stops the control loop and the recovery
// workers, stops taking requests, lets those in flight finish for a moment,
// hands Raft leadership to another replica, and stops the replica. Every
// step is bounded (see shutdownLimits) and so is the whole by ctx: a step
// that does not finish in time is logged and left behind, so Close returns
// even without a Raft quorum.
func (s *Server) Close(ctx context.Context) {
	s.shutdown(ctx, true)
}

// endedGrace is how long a step still gets once the shutdown's context has
// ended, so that one that takes no time (closing a connection) completes
// rather than being reported as left behind.
const endedGrace = 25 * time.Millisecond

// bounded runs f and waits for it up to limit or until ctx ends. It reports
// whether f finished; if not, it logs the step and leaves f running, since
// the process is stopping anyway.
func (s *Server) bounded(ctx context.Context, step string, limit time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	if ctx.Err() != nil {
		limit = min(limit, endedGrace)
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
	case <-ctx.Done():
		g := time.NewTimer(min(limit, endedGrace))
		defer g.Stop()
		select {
		case <-done:
			return true
		case <-g.C:
		}
	}
	s.log.Warn("shutdown: step did not finish in time; going on without it", "step", step, "limit", limit.String())
	return false
}

// shutdown stops everything, each step bounded; graceful also lets
// requests in flight finish and transfers leadership.
func (s *Server) shutdown(ctx context.Context, graceful bool) {
	s.closeOnce.Do(func() {
		began := time.Now()
		var unfinished []string
		step := func(c context.Context, name string, limit time.Duration, f func()) {
			if !s.bounded(c, name, limit, f) {
				unfinished = append(unfinished, name)
			}
		}
		s.mu.Lock()
		s.closed.Store(true)
		s.mu.Unlock()
		lim := s.limits
		if s.cancel != nil {
			s.cancel()
			step(ctx, "control loop", lim.step, func() { <-s.loopDone })
			step(ctx, "stall watch", lim.step, func() { <-s.stallDone })
		}
		s.stopWorkers()
		step(ctx, "recovery workers", lim.step, s.workerWG.Wait)
		s.waits.Flush(s.opt.Now()) // the last summary of waits, not lost
		// Stop taking requests; those in flight still reply below.
		s.mu.Lock()
		for _, sub := range s.subs {
			_ = sub.Unsubscribe()
		}
		s.mu.Unlock()
		// Until the NATS server has read the UNSUBs it still routes
		// requests to this replica's queue subscriptions, and one routed
		// here from now on is lost: its caller waits out its timeout
		// instead of reaching another replica. A PING round trip behind
		// them makes sure the server has.
		if s.nc != nil {
			step(ctx, "unsubscribe at the server", lim.step, func() { _ = s.nc.FlushTimeout(lim.step) })
		}
		if graceful && !s.bounded(ctx, "requests in flight", lim.handlers, s.handlers.Wait) {
			s.log.Warn("shutdown: cancelling requests still in flight", "requests", s.inflight.Load())
		}
		// Requests still running end now: they reply (unavailable) while
		// NATS is still connected. The wait for those replies is short and
		// not bounded by ctx, so that they go out even if ctx has ended.
		s.reqCancel()
		step(context.Background(), "replies of cancelled requests", lim.cancelled, s.handlers.Wait)
		// No worker or move seals any more: end the seal batches.
		if s.seals != nil {
			step(ctx, "seal batches", lim.step, s.seals.close)
		}
		step(ctx, "heartbeat decoding", lim.step, func() { <-s.reportsDone })
		if graceful && s.store != nil {
			tctx, cancel := context.WithTimeout(ctx, lim.transfer)
			step(tctx, "leadership transfer", lim.transfer, func() {
				if err := s.store.TransferLeadership(tctx); err != nil {
					s.log.Warn("leadership transfer on shutdown failed", "err", err)
				}
			})
			cancel()
		}
		if s.nc != nil {
			step(ctx, "nats connection", lim.step, s.nc.Close)
		}
		if s.sysnc != nil {
			step(ctx, "nats system connection", lim.step, s.sysnc.Close)
		}
		if s.httpSrv != nil {
			step(ctx, "health endpoint", lim.step, func() {
				hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lim.step)
				defer cancel()
				_ = s.httpSrv.Shutdown(hctx)
			})
		}
		if s.closeStore != nil {
			step(ctx, "raft node host", lim.store, s.closeStore)
		}
		if len(unfinished) > 0 {
			s.log.Warn("coordinator stopped; some steps did not finish", "graceful", graceful,
				"unfinished", unfinished, "took", time.Since(began).String())
			return
		}
		s.log.Info("coordinator stopped", "graceful", graceful, "took", time.Since(began).String())
	})
}
