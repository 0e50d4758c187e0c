package streamlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brook-streams/brook/pkg/wire"
)

// ErrDeleted is returned by a Copy's methods after the copy was deleted.
var ErrDeleted = errors.New("streamlog: copy was deleted")

// defaultSnapshotEvery is how many cursor events may follow the cursor
// snapshot's boundary before a new snapshot is written. It bounds how many
// events Open and CutToHistory replay.
const defaultSnapshotEvery = 1024

// maxGroupBytes caps one group commit's weight in the memtable
// (request.memCost), so that a flood of appends still commits in batches
// below Pebble's large batch threshold (about half of memTableSize).
const maxGroupBytes = 4 << 20

// memTableSize is the size of Pebble's memtables. Pebble starts a store at
// 256 KiB and doubles each memtable up to this size, and from then on
// reuses the last flushed memtable's arena. Until then every memtable is
// memory fresh from the system, whose first touch is a page fault on the
// write path: with 64 MiB memtables a host's first 128 MiB of writes paid
// it, and in a short run that was every write (about 1 µs of 3 a record in
// a follower's memtable apply, issue 16).
const memTableSize = 16 << 20

// formatMajorVersion is the Pebble format a store is opened at; Open
// ratchets an older store up to it. It is the first with value
// separation. A variable so that a test can make a store at an older
// format.
var formatMajorVersion = pebble.FormatValueSeparation

// valueSeparation is the store's Pebble value separation policy. A record
// batch (up to 64 KiB, batch.go) is written once and never changes: with
// its value in a blob file, written once at the flush, compactions move
// its key and a handle to it instead of rewriting the batch at every
// level. Compactions of batches inline took about a tenth of a host's CPU
// at window 256 (issue 16; docs/benchmarks.md, session 55). Values below
// MinimumSize (metadata, cursor snapshots, batches of a record or a few)
// stay in the tables, where they cost no indirection to read.
//
// Space: a blob file is deleted once no table references any of its
// values. Once the unreferenced share of all blob files passes
// TargetGarbageRatio, Pebble rewrites blob files at least
// RewriteMinimumAge old, so values of copies retained longer than their
// neighbours in the same flush keep the rest of a blob file alive until
// the store's garbage as a whole is worth a rewrite.
//
// A batch value read from an iterator may come from a blob file, so it is
// read with ValueAndErr: a failed read is the read's error, not a batch
// found malformed (batch.go, recordIter.load).
func valueSeparation() pebble.ValueSeparationPolicy {
	return pebble.ValueSeparationPolicy{
		Enabled:     true,
		MinimumSize: 1 << 10,
		// A compaction whose output would reference more than this many
		// overlapping blob files writes the values anew instead, so that
		// reads stay local.
		MaxBlobReferenceDepth: 10,
		RewriteMinimumAge:     5 * time.Minute,
		TargetGarbageRatio:    0.2,
	}
}

// blockCacheSize is the size of the store's block cache (Pebble's
// default is 8 MiB). An owner serves each fetch of a reader at the tail
// with a new iterator, which seeks every table that overlaps the copy and
// so reads each one's index block; with 8 MiB most of those reads missed
// the cache and went to the file, two thirds of the fetches' CPU and 7% of
// the owner's at window 256. With 64 MiB the owner's profile shows no
// block read at all (issue 16, session 55). The cache holds up to this
// much of a host's memory.
const blockCacheSize = 64 << 20

// tableBlockSize is the size of the store's table blocks (Pebble's default
// is 4 KiB); see Open.
const tableBlockSize = 32 << 10

type impl struct {
	db  *pebble.DB
	log *slog.Logger

	// snapEvery is defaultSnapshotEvery; tests lower it.
	snapEvery uint64
	// holdMax is defaultHoldMax; benchmarks vary it.
	holdMax time.Duration
	// uncleanStart: the process before this one left the open mark
	// (UncleanStart); set by load, read-only after.
	uncleanStart bool

	// mu guards the copy set, the id counter and the marks below. It is
	// not held across a wait for an fsync: a delete drops it for its
	// synced batch, a create for its WAL sync. A create's batch is
	// committed under it without fsync (so that ids reach the WAL in
	// order); such a commit almost never waits on the disk, but can when
	// it rotates the WAL (about once per 16 MiB written, the memtable
	// size) or meets a write stall.
	mu     sync.Mutex
	byName map[string]*Copy
	nextID uint64
	// creating holds the creates written and waiting for their fsync, by
	// stream name; the channel is closed when the create ends.
	creating map[string]chan struct{}
	// deleting holds the deletes in progress (waiting for the copy's
	// writes and for their own synced batch), by stream name; the channel
	// is closed when the delete ends. The copy stays in byName until its
	// deletion is durable.
	deleting map[string]chan struct{}

	// life guards closed and active: every public operation enters and
	// leaves, so Close can wait for operations in progress (including
	// appends waiting for their group commit) before stopping the
	// committer.
	life     sync.Mutex
	lifeCond *sync.Cond
	closed   bool
	active   int
	// failed is set when a write to the database failed; the store is then
	// unusable, since its in-memory tails may be ahead of the database,
	// and after a failed fsync not even what was written before it can be
	// trusted to reach the disk by a later one (fail-stop; Store.Failure).
	failed    error
	onFailure func(error)
	// onGroupCommit is Options.OnGroupCommit.
	onGroupCommit func(writes int, took time.Duration)
	// onChange is Options.OnChange.
	onChange func(stream string)

	// The group commit queue (commit.go).
	qmu       sync.Mutex
	queue     []*request
	stopping  bool
	kick      chan struct{} // wakes the committer (capacity 1)
	committed chan struct{} // closed when the committer exits

	stopSync chan struct{}
	syncDone chan struct{}
	// unsynced holds the copies whose owner cursor events may not be
	// durable yet (AppendCursor adds them), for cursorSyncLoop: what it
	// visits follows the copies written, not the copies held. A leaf
	// lock: taken under a copy's mu, nothing is taken under it.
	unsyncedMu sync.Mutex
	unsynced   map[*copyImpl]struct{}

	stats commitStats
	// beforeCommit, if set, runs in the committer before it applies each
	// group; tests use it to hold a group back (not one already applied
	// and waiting for its fsync).
	beforeCommit func()
}

// pebbleLogger routes Pebble's log lines to slog. s, once set, is the
// store a fatal error breaks.
type pebbleLogger struct {
	l *slog.Logger
	s *impl
}

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("pebble: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// Fatalf must not return: Pebble calls it when continuing could corrupt
// data, for example after a failed WAL write or sync of a batch committed
// with Commit ("pebble: fatal commit error"; a group commit's failed sync
// comes back from Batch.SyncWait instead, and guard breaks the store with
// it). It breaks the store first and then panics with a *fatalError.
// When Pebble calls it from a commit the store made (every write goes
// through guard), the panic is recovered there and the write fails with
// the latched error: the commit pipeline is wedged, but the store never
// commits again, and the host stays up to say so. From one of Pebble's
// own goroutines (a flush writing the MANIFEST) the panic ends the
// process, with this line logged: fail-stop either way.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, args...))
	if !strings.HasPrefix(msg, "pebble: ") {
		msg = "pebble: " + msg
	}
	p.l.Error(msg)
	fe := &fatalError{msg: msg}
	if p.s != nil {
		p.s.fail(fe)
	}
	panic(fe)
}

// fatalError is the panic of pebbleLogger.Fatalf.
type fatalError struct{ msg string }

func (e *fatalError) Error() string { return e.msg }

// guard runs one write to the database (a batch commit, a Set) and turns
// Pebble's fatal panic during it into the write's error; any other panic
// goes on. An error latches the store's failure (see impl.failed).
func (s *impl) guard(write func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(*fatalError)
			if !ok {
				panic(r)
			}
			err = fe
		}
		if err != nil {
			s.fail(err)
		}
	}()
	return write()
}

func open(opts Options) (*Store, error) { return openWith(opts, nil) }

// openWith opens the store, letting tests adjust it before its goroutines
// start.
func openWith(opts Options, configure func(*impl)) (*Store, error) {
	if opts.Dir == "" {
		return nil, errors.New("streamlog: open: Options.Dir is empty")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "streamlog", "dir", opts.Dir)
	interval := opts.CursorSyncInterval
	if interval <= 0 {
		interval = 50 * time.Millisecond
	}
	// The directory is the user's alone whatever the umask: the records
	// are the streams' data. Files get the mode the umask leaves them
	// (services restrict it with svcconfig.RestrictFileModes). A directory
	// that already exists keeps its mode, but a loose one is reported.
	fs := opts.FS
	if fs == nil {
		fs = writtenOnceFS{vfs.Default}
	}
	if err := fs.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("streamlog: create %s: %w", opts.Dir, err)
	}
	if fi, err := fs.Stat(opts.Dir); err == nil && runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("store directory is accessible to other users; chmod 700 it", "mode", fmt.Sprintf("%#o", fi.Mode().Perm()))
	}
	s := &Store{}
	s.log = log
	s.onFailure = opts.OnFailure
	s.onGroupCommit = opts.OnGroupCommit
	s.onChange = opts.OnChange
	popts := &pebble.Options{
		FS:                 fs,
		Logger:             pebbleLogger{l: log, s: &s.impl},
		MemTableSize:       memTableSize,
		FormatMajorVersion: formatMajorVersion,
		CacheSize:          blockCacheSize,
	}
	popts.Experimental.ValueSeparationPolicy = valueSeparation
	// Record payloads are mostly opaque bytes that block compression
	// barely shrinks, and compressing them on every flush and compaction
	// costs the CPU that synced appends share on a small host.
	popts.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	popts.L0CompactionThreshold = 8
	// A reader catching up loads every block of the records it reads,
	// one pread each: with Pebble's 4 KiB blocks (about 14 records of 256
	// bytes) the system calls took a third of a catch-up read's CPU.
	// 32 KiB blocks took the store's CPU per record read from about 600
	// to about 350 ns (BenchmarkReadCatchUp, issue 16); the second
	// session measured appends alike with either size.
	for i := range popts.Levels {
		popts.Levels[i].BlockSize = tableBlockSize
	}
	db, err := pebble.Open(opts.Dir, popts)
	if err != nil {
		return nil, fmt.Errorf("streamlog: open pebble in %s: %w", opts.Dir, err)
	}
	s.db = db
	s.snapEvery = defaultSnapshotEvery
	s.holdMax = defaultHoldMax
	s.byName = make(map[string]*Copy)
	s.creating = make(map[string]chan struct{})
	s.deleting = make(map[string]chan struct{})
	s.lifeCond = sync.NewCond(&s.life)
	s.kick = make(chan struct{}, 1)
	s.committed = make(chan struct{})
	s.stopSync = make(chan struct{})
	s.syncDone = make(chan struct{})
	if configure != nil {
		configure(&s.impl)
	}
	if err := s.load(); err != nil {
		_ = db.Close()
		return nil, err
	}
	go s.commitLoop()
	go s.cursorSyncLoop(interval)
	return s, nil
}

// setLayoutVersion records that the database has layoutVersion's layout.
func (s *impl) setLayoutVersion() error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], layoutVersion)
	if err := s.guard(func() error { return s.db.Set(versionKey, b[:], pebble.Sync) }); err != nil {
		return fmt.Errorf("streamlog: write layout version: %w", err)
	}
	return nil
}

// moveReopenEvery is how many batches moveLayoutOne writes before it opens
// its iterator again (a variable for tests).
var moveReopenEvery = 1024

// moveLayoutOne moves the records of a database of layout 1, a key per
// record, to batches (batch.go): each run of records a batch can hold
// becomes one batch key, written in one atomic Pebble batch with the
// deletion of the records' layout-1 keys. load sets the version to 2 and
// the move mark before it starts, so a build of layout 1 refuses the store
// from then on. A crash part way leaves some records in batches and the
// rest in layout-1 keys, which the next Open moves (the mark is still
// there); the mark goes once every record is moved, with a synced write
// that makes every move durable too.
func (s *impl) moveLayoutOne() (err error) {
	lo, hi := []byte{prefixCopy}, []byte{prefixCopy + 1}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("streamlog: move layout 1: %w", err)
	}
	defer func() {
		if it != nil {
			closeIter(it, &err, "move layout 1")
		}
	}()
	var (
		id, first, next uint64
		data            [][]byte
		times           []int64
		metas           []recordMeta
		size            int
		moved           int
		sinceOpen       int // batches written since the iterator opened
		reopenErr       error
	)
	// advance moves to the next key. An iterator keeps every table it
	// can see, the moved keys' too: every moveReopenEvery batches it is
	// opened again past the current key, so that a large store's move
	// does not hold its whole old layout on disk beside the new one.
	advance := func() bool {
		if sinceOpen < moveReopenEvery {
			return it.Next()
		}
		from := append(slices.Clone(it.Key()), 0)
		if err := it.Close(); err != nil {
			reopenErr = err
		}
		nit, nerr := s.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: hi})
		if nerr != nil {
			it, reopenErr = nil, errors.Join(reopenErr, nerr)
			return false
		}
		it = nit
		sinceOpen = 0
		return reopenErr == nil && it.First()
	}
	flush := func() error {
		if len(data) == 0 {
			return nil
		}
		var c copyImpl
		r := c.prepareRecords(data, times, 0)
		if len(r.kvs) != 1 {
			return fmt.Errorf("streamlog: move layout 1: %d records made %d batches", len(data), len(r.kvs))
		}
		for i, e := range r.vals {
			putChain(e, metas[i].digest, metas[i].cum)
		}
		putBatchKey(r.kvs[0].k, id, next-1)
		b := s.db.NewBatch()
		defer releaseBatch(b)
		_ = b.Set(r.kvs[0].k, r.kvs[0].v, nil)
		_ = b.DeleteRange(offsetKey(id, tagRecordV1, first), offsetKey(id, tagRecordV1, next), nil)
		if err := s.guard(func() error { return b.Commit(pebble.NoSync) }); err != nil {
			return fmt.Errorf("streamlog: move layout 1: copy %d records %d-%d: %w", id, first, next-1, err)
		}
		moved += len(data)
		sinceOpen++
		data, times, metas, size = data[:0], times[:0], metas[:0], batchCountLen
		return nil
	}
	for valid := it.First(); valid; valid = advance() {
		k := it.Key()
		if len(k) != offsetKeyLen || k[9] != tagRecordV1 {
			continue
		}
		kid, off := binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint64(k[10:])
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("streamlog: move layout 1: copy %d record %d: %w", kid, off, err)
		}
		rm, d, err := decodeRecordValue(v)
		if err != nil {
			return fmt.Errorf("streamlog: move layout 1: copy %d record %d: %w", kid, off, err)
		}
		if len(data) > 0 && (kid != id || off != next || batchFull(len(data), size, d)) {
			if err := flush(); err != nil {
				return err
			}
		}
		if len(data) == 0 {
			id, first, size = kid, off, batchCountLen
		}
		data = append(data, slices.Clone(d))
		times = append(times, rm.timeNS)
		metas = append(metas, rm)
		size += entrySize(d)
		next = off + 1
	}
	if reopenErr != nil {
		return fmt.Errorf("streamlog: move layout 1: %w", reopenErr)
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("streamlog: move layout 1: %w", err)
	}
	if err := flush(); err != nil {
		return err
	}
	if err := s.guard(func() error { return s.db.Delete(movingKey, pebble.Sync) }); err != nil {
		return fmt.Errorf("streamlog: end the move from layout 1: %w", err)
	}
	s.log.Info("store moved from layout 1 (a key per record) to record batches", "records", moved)
	return nil
}

// load checks the layout version and loads every copy.
func (s *impl) load() error {
	v, err := getValue(s.db, versionKey)
	if err != nil {
		return fmt.Errorf("streamlog: read layout version: %w", err)
	}
	switch {
	case v == nil:
		if err := s.setLayoutVersion(); err != nil {
			return err
		}
	case len(v) == 8 && binary.BigEndian.Uint64(v) == 1:
		// The version changes first, with the mark of a move under way:
		// a build of layout 1 must not open a store part moved.
		b := s.db.NewBatch()
		var ver [8]byte
		binary.BigEndian.PutUint64(ver[:], layoutVersion)
		_ = b.Set(versionKey, ver[:], nil)
		_ = b.Set(movingKey, []byte{1}, nil)
		err := s.commitSync(b)
		releaseBatch(b)
		if err != nil {
			return fmt.Errorf("streamlog: begin the move from layout 1: %w", err)
		}
	case len(v) != 8 || binary.BigEndian.Uint64(v) != layoutVersion:
		return fmt.Errorf("streamlog: database layout version %x is not %d (nor 1, which Open moves to %d)", v, layoutVersion, layoutVersion)
	}
	if v, err := getValue(s.db, movingKey); err != nil {
		return fmt.Errorf("streamlog: read the layout move mark: %w", err)
	} else if v != nil {
		if err := s.moveLayoutOne(); err != nil {
			return err
		}
	}
	// The open mark: found, the process before this one did not close
	// the store (it crashed, or its store failed); set, until close
	// deletes it.
	if v, err := getValue(s.db, openKey); err != nil {
		return fmt.Errorf("streamlog: read open mark: %w", err)
	} else {
		s.uncleanStart = v != nil
	}
	if err := s.guard(func() error { return s.db.Set(openKey, []byte{1}, pebble.Sync) }); err != nil {
		return fmt.Errorf("streamlog: write open mark: %w", err)
	}
	if v, err := getValue(s.db, nextIDKey); err != nil {
		return fmt.Errorf("streamlog: read next copy id: %w", err)
	} else if len(v) == 8 {
		s.nextID = binary.BigEndian.Uint64(v)
	}
	lo, hi := nameRange()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("streamlog: list copies: %w", err)
	}
	type entry struct {
		name string
		id   uint64
	}
	var entries []entry
	for it.First(); it.Valid(); it.Next() {
		if len(it.Value()) != 8 {
			_ = it.Close()
			return fmt.Errorf("streamlog: name index entry %q is corrupt", it.Key())
		}
		entries = append(entries, entry{string(it.Key()[1:]), binary.BigEndian.Uint64(it.Value())})
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("streamlog: list copies: %w", err)
	}
	for _, e := range entries {
		c, err := s.loadCopy(e.name, e.id)
		if err != nil {
			return err
		}
		s.byName[e.name] = c
		if e.id >= s.nextID {
			s.nextID = e.id + 1
		}
	}
	return nil
}

// closeIter closes it as its function returns. Pebble iterators keep the
// errors they meet and report them again on Close, so one that only Close
// sees becomes the function's error, after prefix, unless it already
// returns one.
func closeIter(it *pebble.Iterator, errp *error, prefix string) {
	if err := it.Close(); err != nil && *errp == nil {
		*errp = fmt.Errorf("%s: %w", prefix, err)
	}
}

// releaseBatch returns b to pebble's pool. Batch.Close fails only on a
// batch already closed, which no caller does, so there is nothing to handle.
func releaseBatch(b *pebble.Batch) { _ = b.Close() }

// getValue reads one key; a missing key is (nil, nil).
func getValue(db *pebble.DB, k []byte) ([]byte, error) {
	v, closer, err := db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := slices.Clone(v)
	if out == nil {
		out = []byte{}
	}
	return out, closer.Close()
}

// enter registers an operation in progress; it fails once the store is
// closed or broken.
func (s *impl) enter() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.failed != nil {
		return fmt.Errorf("streamlog: store failed earlier: %w", s.failed)
	}
	s.active++
	return nil
}

func (s *impl) leave() {
	s.life.Lock()
	s.active--
	if s.active == 0 {
		s.lifeCond.Broadcast()
	}
	s.life.Unlock()
}

// fail records a write failure; see impl.failed.
func (s *impl) fail(err error) {
	s.life.Lock()
	first := s.failed == nil
	if first {
		s.failed = err
		s.log.Error("store failed; refusing further operations", "err", err)
	}
	s.life.Unlock()
	if first && s.onFailure != nil {
		go s.onFailure(err)
	}
}

func (s *impl) failure() error {
	s.life.Lock()
	defer s.life.Unlock()
	return s.failed
}

func (s *impl) close() error {
	s.life.Lock()
	if s.closed {
		s.life.Unlock()
		return ErrClosed
	}
	s.closed = true
	for s.active > 0 {
		s.lifeCond.Wait()
	}
	s.life.Unlock()

	close(s.stopSync)
	<-s.syncDone
	s.qmu.Lock()
	s.stopping = true
	s.kickLocked()
	s.qmu.Unlock()
	<-s.committed

	var errs []error
	if s.failure() == nil {
		// Cursor events were written without fsync; one synced write makes
		// every earlier WAL entry durable. It is the open mark's removal:
		// every record written is durable now, so the next process finds
		// the store closed cleanly.
		if err := s.guard(func() error { return s.db.Delete(openKey, pebble.Sync) }); err != nil {
			errs = append(errs, fmt.Errorf("streamlog: sync cursor events and clear the open mark on close: %w", err))
		}
	}
	if err := s.db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("streamlog: close pebble: %w", err))
	}
	return errors.Join(errs...)
}

func (s *impl) copies() []*Copy {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Copy, 0, len(s.byName))
	for _, name := range slices.Sorted(maps.Keys(s.byName)) {
		out = append(out, s.byName[name])
	}
	return out
}

func (s *impl) get(stream string) *Copy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byName[stream]
}

func (s *impl) create(stream string, streamID uint64, ret wire.Retention) (*Copy, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if stream == "" {
		return nil, errors.New("streamlog: create: empty stream name")
	}
	s.mu.Lock()
	// A create of the same name still waiting for its sync is waited for:
	// then it is held (the same stream id is handed that copy, another is
	// ErrExists) or it failed. So is a delete of the name: the dying copy
	// is not handed out, and the new copy's batch follows the deletion's.
	s.awaitMarksLocked(stream)
	if err := s.failure(); err != nil {
		// What it waited for may have failed (the store is broken for good).
		s.mu.Unlock()
		return nil, fmt.Errorf("streamlog: create %s: store failed: %w", stream, err)
	}
	if c := s.byName[stream]; c != nil {
		s.mu.Unlock()
		if c.sid == streamID {
			return c, nil
		}
		return nil, fmt.Errorf("streamlog: create %s with stream id %d: held with id %d: %w", stream, streamID, c.sid, ErrExists)
	}
	id := s.nextID
	m := meta{Stream: stream, StreamID: streamID, Retention: ret}
	b := s.db.NewBatch()
	defer releaseBatch(b)
	var idv [8]byte
	binary.BigEndian.PutUint64(idv[:], id)
	_ = b.Set(nameKey(stream), idv[:], nil)
	_ = b.Set(metaKey(id), encodeMeta(m), nil)
	_ = b.Set(snapshotKey(id), encodeSnapshot(0, nil), nil)
	var next [8]byte
	binary.BigEndian.PutUint64(next[:], id+1)
	_ = b.Set(nextIDKey, next[:], nil)
	// Written under s.mu without fsync, so the batches, and the id
	// counter in them, reach the WAL in id order (the commit almost never
	// waits on the disk; see impl.mu); the fsync is waited for
	// without s.mu (issue 17: a create held it across its own fsync, so a
	// host's creates took one fsync each in turn and every Get, Copies and
	// heartbeat waited behind them). The copy is not handed out before it
	// is durable: a lookup meanwhile finds no copy of that name.
	if err := s.guard(func() error { return b.Commit(pebble.NoSync) }); err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("streamlog: create %s: %w", stream, err)
	}
	s.nextID = id + 1
	done := make(chan struct{})
	s.creating[stream] = done
	s.mu.Unlock()

	err := s.syncWAL()

	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.creating, stream)
	close(done)
	if err != nil {
		return nil, fmt.Errorf("streamlog: create %s: %w", stream, err)
	}
	c := newCopy(s, id, m, 0)
	s.byName[stream] = c
	return c, nil
}

// syncWAL makes every WAL entry written so far durable: a synced commit
// of an empty log entry, which Pebble's commit pipeline syncs together
// with the other synced commits in flight (other creates', the group
// commit's).
func (s *impl) syncWAL() error {
	b := s.db.NewBatch()
	defer releaseBatch(b)
	_ = b.LogData(nil, nil)
	return s.guard(func() error { return b.Commit(pebble.Sync) })
}

// awaitMarksLocked waits, with s.mu held on entry and on return (dropped
// while waiting), until no create and no delete of stream is in progress.
func (s *impl) awaitMarksLocked(stream string) {
	for {
		done := s.creating[stream]
		if done == nil {
			done = s.deleting[stream]
		}
		if done == nil {
			return
		}
		s.mu.Unlock()
		<-done
		s.mu.Lock()
	}
}

func (s *impl) delete(stream string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	// A create of the name waiting for its fsync ends first, and so does
	// another delete of it (then the copy is gone, or the store failed).
	s.mu.Lock()
	s.awaitMarksLocked(stream)
	if err := s.failure(); err != nil {
		// The delete waited for failed (the store is broken for good).
		s.mu.Unlock()
		return fmt.Errorf("streamlog: delete %s: store failed: %w", stream, err)
	}
	c := s.byName[stream]
	if c == nil {
		s.mu.Unlock()
		return nil
	}
	// The mark makes a Create of the same name wait until the old copy
	// is gone instead of being handed the dying copy; s.mu itself is not
	// held while the copy's queued writes commit and the deletion syncs
	// (issue 17: every Get, Copies and Create on the host waited behind
	// each delete's fsync). Meanwhile the copy is still found, as it is
	// on disk until the deletion is durable.
	done := make(chan struct{})
	s.deleting[stream] = done
	s.mu.Unlock()

	err := c.exclusive(func() error {
		b := s.db.NewBatch()
		defer releaseBatch(b)
		_ = b.DeleteRange(copyPrefix(c.id), copyPrefix(c.id+1), nil)
		_ = b.Delete(nameKey(stream), nil)
		if err := s.guard(func() error { return b.Commit(pebble.Sync) }); err != nil {
			return err
		}
		c.mu.Lock()
		c.deleted = true
		c.signalLocked()
		c.mu.Unlock()
		return nil
	})

	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.deleting, stream)
	close(done)
	if err != nil {
		return fmt.Errorf("streamlog: delete %s: %w", stream, err)
	}
	delete(s.byName, stream)
	return nil
}
