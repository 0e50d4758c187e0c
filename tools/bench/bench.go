// Package bench is the cluster bench behind brook-bench: a publish workload
// with a bounded number of outstanding publishes, an optional SIGKILL of the
// stream's owner (or, for the peer comparison, JetStream's stream leader) at
// a set second, a reader that follows the stream while it runs, and a
// read-back that verifies every confirmed record.
//
// A Target adapts one system under test; the workload, the statistics and
// the verification are shared, so brook and its peer are measured and
// judged by the same code in the same run.
package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Target is one system under test, with its stream already created.
type Target interface {
	// Name is shown in reports ("brook", "jetstream").
	Name() string
	// Publish writes one record and returns its offset once the system
	// confirms it. Retrying across a failover is the target's job, bounded
	// by ctx; an error means "not confirmed".
	Publish(ctx context.Context, data []byte) (offset uint64, err error)
	// Kill SIGKILLs the process that owns (leads) the stream now and
	// returns its name.
	Kill(ctx context.Context) (victim string, err error)
	// Follow delivers records in offset order from the start of the stream
	// until ctx ends, the way a durable reader sees them during the run.
	Follow(ctx context.Context, fn func(offset uint64, data []byte)) error
	// ReadAll delivers every record the stream holds now, in offset order.
	ReadAll(ctx context.Context, fn func(offset uint64, data []byte)) error
	// After reports target-specific facts once the run is over (for brook:
	// the failover trace id, whether the old owner rejoined as a follower
	// without another recovery).
	After(ctx context.Context) map[string]any
}

// Config is the workload.
type Config struct {
	Duration        time.Duration
	RecordSize      int
	Publishers      int // concurrent publish loops
	Window          int // outstanding publishes per publisher
	KillAt          time.Duration
	Kill            bool
	FollowReaders   int
	ProgressEvery   time.Duration
	Progress        func(p Progress)
	Logger          *slog.Logger
	SettleAfterStop time.Duration // how long the follower may catch up after publishing stops
	// DataDir is a directory on the device that holds the run's data:
	// its counters are read around the publishing (Result.Disk), after
	// the machine's dirty pages are written out. Empty: no disk figures.
	DataDir string
}

// Progress is reported while the bench runs.
type Progress struct {
	Elapsed   time.Duration
	Confirmed int64
	Errors    int64
	Killed    bool
}

// idLen is the size of the record header that names the record: publisher
// and sequence. The rest of a record is padding up to the record size.
const idLen = 12

// recordID identifies a record by the publisher loop and its sequence.
type recordID struct {
	pub uint32
	seq uint64
}

func encodeRecord(id recordID, size int) []byte {
	b := make([]byte, max(size, idLen))
	binary.BigEndian.PutUint32(b[0:4], id.pub)
	binary.BigEndian.PutUint64(b[4:12], id.seq)
	for i := idLen; i < len(b); {
		i += copy(b[i:], padding[i%len(padding):])
	}
	return b
}

// padding is the pattern a record's padding repeats: byte i of a record is
// byte(i).
var padding = func() (p [256]byte) {
	for i := range p {
		p[i] = byte(i)
	}
	return p
}()

func decodeRecord(b []byte) (recordID, bool) {
	if len(b) < idLen {
		return recordID{}, false
	}
	return recordID{pub: binary.BigEndian.Uint32(b[0:4]), seq: binary.BigEndian.Uint64(b[4:12])}, true
}

type confirm struct {
	offset  uint64
	sent    time.Time
	at      time.Time
	latency time.Duration
}

// idConfirm is a confirm in a publisher's own log.
type idConfirm struct {
	id recordID
	confirm
}

// offsetLog is what one follow reader saw: the record at each offset, and
// how many offsets it saw twice with different records. Offsets are dense
// (brook's from 0, JetStream's from 1), so it is a slice indexed by
// offset; one far beyond the slice goes to a map, so a sparse offset
// cannot make the slice huge. The map holds only offsets past the slice.
type offsetLog struct {
	ids    []recordID
	has    []bool
	sparse map[uint64]recordID
	dup    int
}

// maxOffsetGap is how far past the slice's end an offset may be and still
// grow it.
const maxOffsetGap = 1 << 20

func (l *offsetLog) add(off uint64, id recordID) {
	if off >= uint64(len(l.ids))+maxOffsetGap {
		if l.sparse == nil {
			l.sparse = map[uint64]recordID{}
		}
		if prev, ok := l.sparse[off]; ok && prev != id {
			l.dup++
		}
		l.sparse[off] = id
		return
	}
	if off >= uint64(len(l.ids)) {
		n := int(off) + 1
		l.ids = slices.Grow(l.ids, n-len(l.ids))[:n]
		l.has = slices.Grow(l.has, n-len(l.has))[:n]
		// The map holds only offsets past the slice: those it has now
		// grown over move into it, so no offset is kept twice.
		for o, id := range l.sparse {
			if o < uint64(n) {
				l.ids[o], l.has[o] = id, true
				delete(l.sparse, o)
			}
		}
	}
	if l.has[off] && l.ids[off] != id {
		l.dup++
	}
	l.ids[off], l.has[off] = id, true
}

// each visits every offset seen, with the last record seen there.
func (l *offsetLog) each(fn func(uint64, recordID)) {
	for off, ok := range l.has {
		if ok {
			fn(uint64(off), l.ids[off])
		}
	}
	for off, id := range l.sparse {
		fn(off, id)
	}
}

// Run runs the workload against t and verifies the result.
func Run(ctx context.Context, t Target, cfg Config) (*Result, error) {
	if cfg.Publishers < 1 || cfg.Window < 1 || cfg.Duration <= 0 {
		return nil, errors.New("bench: publishers, window and duration must be positive")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	var (
		mu       sync.Mutex
		errCount atomic.Int64
		okCount  atomic.Int64
		killedAt time.Time
		victim   string
		killErr  error
		// Each publisher and each follow reader keeps what it saw to
		// itself while the run goes, and hands it over when it stops: no
		// lock and no shared map on the path the bench measures, whose
		// CPU is the machine's.
		confirmLogs = make([][]idConfirm, cfg.Publishers*cfg.Window)
		followLogs  = make([]*offsetLog, cfg.FollowReaders)
	)
	if cfg.DataDir != "" {
		unix.Sync() // the last run's writeback is not this one's (Disk)
	}
	// The CPU clocks are read around the publishing only; a machine
	// without them (not Linux) reports no CPU figures.
	cpuStart, cpuErr := sampleCPU()
	diskStart, diskErr := sampleDataDisk(cfg.DataDir)
	start := time.Now()
	runCtx, stopPublishing := context.WithTimeout(ctx, cfg.Duration)
	defer stopPublishing()

	// Readers follow the stream while it runs; what they see must still be
	// there, at the same offset, at the end.
	followCtx, stopFollow := context.WithCancel(ctx)
	defer stopFollow()
	var followWG sync.WaitGroup
	for r := 0; r < cfg.FollowReaders; r++ {
		followWG.Add(1)
		seen := &offsetLog{}
		followLogs[r] = seen
		go func() {
			defer followWG.Done()
			err := t.Follow(followCtx, func(off uint64, data []byte) {
				id, _ := decodeRecord(data)
				seen.add(off, id)
			})
			if err != nil && followCtx.Err() == nil {
				log.Warn("follow reader stopped", "err", err)
			}
		}()
	}

	// A publish may be retried by the target across a failover; it gets
	// until the end of the run plus a grace to confirm. One context for
	// every publish, not one each: the bench's own cost per record is on
	// the machine it measures.
	pctx, cancelPublishes := context.WithDeadline(ctx, start.Add(cfg.Duration+5*time.Second))
	defer cancelPublishes()
	var pubWG sync.WaitGroup
	for p := 0; p < cfg.Publishers*cfg.Window; p++ {
		pubWG.Add(1)
		go func(pub uint32) {
			defer pubWG.Done()
			var log []idConfirm
			for seq := uint64(0); runCtx.Err() == nil; seq++ {
				id := recordID{pub: pub, seq: seq}
				sent := time.Now()
				off, err := t.Publish(pctx, encodeRecord(id, cfg.RecordSize))
				now := time.Now()
				if err != nil {
					errCount.Add(1)
					continue
				}
				okCount.Add(1)
				log = append(log, idConfirm{id, confirm{offset: off, sent: sent, at: now, latency: now.Sub(sent)}})
			}
			confirmLogs[pub] = log
		}(uint32(p))
	}

	if cfg.Kill {
		go func() {
			select {
			case <-time.After(cfg.KillAt):
			case <-runCtx.Done():
				return
			}
			v, err := t.Kill(ctx)
			mu.Lock()
			killedAt, victim, killErr = time.Now(), v, err
			mu.Unlock()
			log.Info("killed", "victim", v, "err", err, "at", time.Since(start).Round(time.Millisecond))
		}()
	}

	if cfg.Progress != nil {
		go func() {
			every := cfg.ProgressEvery
			if every <= 0 {
				every = time.Second
			}
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-tick.C:
					mu.Lock()
					k := !killedAt.IsZero()
					mu.Unlock()
					cfg.Progress(Progress{Elapsed: time.Since(start), Confirmed: okCount.Load(), Errors: errCount.Load(), Killed: k})
				}
			}
		}()
	}

	pubWG.Wait()
	end := time.Now()
	cpuEnd, cpuEndErr := sampleCPU()
	diskEnd, diskEndErr := sampleDataDisk(cfg.DataDir)
	if cfg.SettleAfterStop > 0 {
		time.Sleep(cfg.SettleAfterStop)
	}
	stopFollow()
	followWG.Wait()
	confirms := map[recordID]confirm{}
	for _, log := range confirmLogs {
		for _, x := range log {
			confirms[x.id] = x.confirm
		}
	}
	followed := map[uint64]recordID{}
	followDup := 0
	for _, seen := range followLogs {
		followDup += seen.dup
		seen.each(func(off uint64, id recordID) {
			if prev, ok := followed[off]; ok && prev != id {
				followDup++
			}
			followed[off] = id
		})
	}

	res := &Result{
		Target:     t.Name(),
		Config:     cfg,
		Start:      start,
		End:        end,
		Confirmed:  len(confirms),
		Errors:     int(errCount.Load()),
		Victim:     victim,
		KillError:  errString(killErr),
		FollowedAt: len(followed),
	}
	if !killedAt.IsZero() {
		res.KilledAtMS = killedAt.Sub(start).Milliseconds()
	}
	res.summarize(confirms, killedAt)
	if cpuErr == nil && cpuEndErr == nil {
		res.CPU = cpuBetween(cpuStart, cpuEnd, res.Confirmed)
	} else {
		log.Info("no CPU figures", "err", errors.Join(cpuErr, cpuEndErr))
	}
	if cfg.DataDir != "" {
		err := errors.Join(diskErr, diskEndErr)
		if err == nil {
			res.Disk, err = diskBetween(diskStart, diskEnd, res.Confirmed)
		}
		if err != nil {
			log.Info("no disk figures", "err", err)
		}
	}

	// Read everything back and judge.
	delivered := map[recordID][]uint64{}
	byOffset := map[uint64]recordID{}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := t.ReadAll(rctx, func(off uint64, data []byte) {
		id, ok := decodeRecord(data)
		if !ok {
			res.Verify.Malformed++
			return
		}
		delivered[id] = append(delivered[id], off)
		byOffset[off] = id
	}); err != nil {
		return res, fmt.Errorf("bench: read back: %w", err)
	}
	res.verify(confirms, delivered, byOffset, followed, followDup)
	res.After = t.After(ctx)
	return res, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Result is one run's figures and verdict.
type Result struct {
	Target     string    `json:"target"`
	Config     Config    `json:"-"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	Confirmed  int       `json:"confirmed"`
	Errors     int       `json:"publish_errors"`
	Victim     string    `json:"victim,omitempty"`
	KillError  string    `json:"kill_error,omitempty"`
	KilledAtMS int64     `json:"killed_at_ms,omitempty"`
	Before     Phase     `json:"before_kill"`
	AfterKill  Phase     `json:"after_kill"`
	Whole      Phase     `json:"whole_run"`
	// UnavailableMS is the time from the kill to the first confirm of a
	// publish begun after the kill.
	UnavailableMS int64          `json:"write_unavailable_ms"`
	FirstAfterMS  int64          `json:"first_confirm_after_kill_ms,omitempty"`
	Buckets       []int          `json:"confirms_per_100ms"`
	FollowedAt    int            `json:"followed_offsets"`
	Verify        Verification   `json:"verification"`
	After         map[string]any `json:"after,omitempty"`
	// CPU is the machine's and the bench process's CPU over the
	// publishing (nil where it cannot be read).
	CPU *CPU `json:"cpu,omitempty"`
	// Disk is what the data's block device did while the run published,
	// the whole device's counters (nil without Config.DataDir, or where
	// they cannot be read).
	Disk *Disk `json:"disk,omitempty"`
}

// Phase is throughput and confirm latency over part of the run.
type Phase struct {
	Records   int     `json:"records"`
	PerSecond float64 `json:"records_per_s"`
	P50MS     float64 `json:"p50_ms"`
	P99MS     float64 `json:"p99_ms"`
	P999MS    float64 `json:"p999_ms"`
}

// Verification is the verdict on the read-back.
type Verification struct {
	Delivered int `json:"delivered"`
	// Lost counts confirmed records missing from the read-back.
	Lost int `json:"lost_confirmed"`
	// Moved counts confirmed records delivered at another offset than the
	// one their confirm named.
	Moved int `json:"moved_confirmed"`
	// Duplicates counts records delivered at more than one offset.
	Duplicates int `json:"duplicates"`
	// Cut counts offsets a follow reader saw during the run that hold
	// another record (or none) at the end: a delivered record later cut.
	Cut int `json:"delivered_then_cut"`
	// Unconfirmed counts delivered records whose publish got no confirm
	// (at-least-once: allowed, reported).
	Unconfirmed int  `json:"delivered_unconfirmed"`
	Malformed   int  `json:"malformed"`
	OK          bool `json:"ok"`
}

func (r *Result) summarize(c map[recordID]confirm, killedAt time.Time) {
	var before, after, all []time.Duration
	var firstAfter time.Time
	nb := int(r.End.Sub(r.Start)/(100*time.Millisecond)) + 1
	r.Buckets = make([]int, nb)
	for _, x := range c {
		all = append(all, x.latency)
		if b := int(x.at.Sub(r.Start) / (100 * time.Millisecond)); b >= 0 && b < nb {
			r.Buckets[b]++
		}
		if killedAt.IsZero() || x.at.Before(killedAt) {
			before = append(before, x.latency)
			continue
		}
		after = append(after, x.latency)
		// Writes are available again once a publish begun after the kill
		// is confirmed; replies already in flight at the kill do not count.
		if x.sent.After(killedAt) && (firstAfter.IsZero() || x.at.Before(firstAfter)) {
			firstAfter = x.at
		}
	}
	if killedAt.IsZero() {
		r.Before = phase(before, r.End.Sub(r.Start))
	} else {
		r.Before = phase(before, killedAt.Sub(r.Start))
		r.AfterKill = phase(after, r.End.Sub(killedAt))
		if !firstAfter.IsZero() {
			r.UnavailableMS = firstAfter.Sub(killedAt).Milliseconds()
			r.FirstAfterMS = firstAfter.Sub(r.Start).Milliseconds()
		} else {
			r.UnavailableMS = r.End.Sub(killedAt).Milliseconds()
		}
	}
	r.Whole = phase(all, r.End.Sub(r.Start))
}

func phase(lat []time.Duration, span time.Duration) Phase {
	p := Phase{Records: len(lat)}
	if span > 0 {
		p.PerSecond = float64(len(lat)) / span.Seconds()
	}
	if len(lat) == 0 {
		return p
	}
	q := func(f float64) float64 { return float64(Quantile(lat, f).Microseconds()) / 1000 }
	p.P50MS, p.P99MS, p.P999MS = q(0.50), q(0.99), q(0.999)
	return p
}

// Quantile returns the q-quantile (0..1) of lat by the nearest rank below;
// lat is sorted in place. Zero for no samples. The bench, the demo and the
// mass failover all report their latencies with it.
func Quantile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	i := int(q * float64(len(lat)-1))
	return lat[min(max(i, 0), len(lat)-1)]
}

func (r *Result) verify(c map[recordID]confirm, delivered map[recordID][]uint64, byOffset map[uint64]recordID, followed map[uint64]recordID, followDup int) {
	v := &r.Verify
	for _, offs := range delivered {
		v.Delivered += len(offs)
		if len(offs) > 1 {
			v.Duplicates++
		}
	}
	for id, x := range c {
		offs, ok := delivered[id]
		if !ok {
			v.Lost++
			continue
		}
		if offs[0] != x.offset {
			v.Moved++
		}
	}
	for id := range delivered {
		if _, ok := c[id]; !ok {
			v.Unconfirmed++
		}
	}
	for off, id := range followed {
		if got, ok := byOffset[off]; !ok || got != id {
			v.Cut++
		}
	}
	v.Cut += followDup
	v.OK = v.Lost == 0 && v.Moved == 0 && v.Duplicates == 0 && v.Cut == 0 && v.Malformed == 0
}
