// Package streamlog stores the copies of streams that one stream host holds,
// all in one Pebble database: per copy a record log and a cursor event log
// keyed by offset, plus the copy's metadata (log epochs, seal, retained head,
// cursor snapshot, running digest).
//
// THIS FILE IS THE API CONTRACT other packages build against. The
// implementation may add to it but must not change these signatures.
package streamlog

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brook-streams/brook/pkg/wire"
)

// Errors callers branch on. Wrapped errors carry context; test with errors.Is.
var (
	ErrSealed     = errors.New("streamlog: copy is sealed")
	ErrStaleFence = errors.New("streamlog: fence epoch or transition is older than the copy's")
	ErrGap        = errors.New("streamlog: records do not start at the copy's tail")
	ErrDiverged   = errors.New("streamlog: overlapping record differs from the one held")
	ErrExists     = errors.New("streamlog: copy exists with another stream id")
	ErrClosed     = errors.New("streamlog: store is closed")
	ErrBelowHead  = errors.New("streamlog: offset is below the retained head")
)

// Options configure a Store.
type Options struct {
	Dir    string
	Logger *slog.Logger
	// CursorSyncInterval is how often written cursor events are made
	// durable; 0 means 50ms.
	CursorSyncInterval time.Duration
	// FS is the file system the database lives on; nil means the
	// operating system's, with the files a flush or a compaction wrote
	// dropped from the page cache once written (writtenOnceFS). Tests
	// inject errors with Pebble's vfs/errorfs.
	FS vfs.FS
	// OnFailure, if set, is called once, in a goroutine of its own, when
	// the store fails (see Store.Failure).
	OnFailure func(error)
	// OnGroupCommit, if set, is called after each group commit that
	// reached the disk, with the number of writes (appends, applies,
	// cursor syncs) that shared it and how long its synced commit took,
	// from the batch's build to its fsync's end: the write-ahead log write
	// and its fsync, and any wait behind the group applied before it (so
	// the times of groups in flight together overlap). It runs on the
	// goroutine that answers the groups, so it must return at once (record
	// a metric).
	OnGroupCommit func(writes int, took time.Duration)
	// OnChange, if set, is called with a copy's stream name whenever
	// anything Changed signals happens to the copy: records written or
	// made durable, cursor events written or synced, its metadata (epoch,
	// seal, head) changed, or the copy deleted. It is called with the
	// copy's lock held, so it must return at once and not call the store
	// (the host marks the copy for its next heartbeat).
	OnChange func(stream string)
}

// Record is one record of a copy's record log.
type Record struct {
	Offset uint64
	TimeNS int64 // when the owner appended it, unix nanoseconds
	Data   []byte
}

// CursorEvent records that Cursor has consumed everything below Position.
// Offset is the event's place in the cursor event log.
type CursorEvent struct {
	Offset   uint64
	Cursor   string
	Position uint64
}

// Tails are a copy's log bounds. Record is the durable record tail (the next
// offset to write once every queued write is durable); RecordWritten is the
// record tail written: Record plus the records queued for a group commit,
// which ReadWritten serves before they are durable. CursorWritten counts events written, CursorDurable those
// fsynced (<= CursorWritten). HeadDigest and RecordDigest are the running
// digest at Head and at Record, read together with them.
type Tails struct {
	Head          uint64 // retained record head
	HeadDigest    uint64
	Record        uint64
	RecordDigest  uint64
	RecordWritten uint64 // >= Record
	// WrittenDigest is the running digest at RecordWritten (RecordDigest
	// when nothing is queued).
	WrittenDigest uint64
	CursorHead    uint64 // cursor snapshot boundary
	CursorWritten uint64
	CursorDurable uint64
}

// Seal is a copy's persisted fence.
type Seal struct {
	FenceEpoch uint64
	Transition uint64
	// Replaced are the log epochs the copy had when it was sealed: the owner
	// history it followed, which a history cut uses.
	Replaced []wire.LogEpoch
}

// SealState is what a seal answers with, read from metadata only.
type SealState struct {
	Seal      Seal
	Tails     Tails
	LogEpochs []wire.LogEpoch
	Digest    string // hex
}

// CutResult says what CutToHistory did.
type CutResult struct {
	Cut        bool   // false if the copy was already on the target history
	RecordTail uint64 // tails after the cut
	CursorTail uint64
	Removed    uint64 // records removed
}

// Store is one Pebble database holding many copies.
type Store struct{ impl }

// Copy is one stream's copy. Its methods are safe for concurrent use.
type Copy struct{ copyImpl }

// Open opens (creating if needed) the store in opts.Dir. On open every
// copy's record tail comes down to its record log end and any cursor above
// it is clamped to it.
func Open(opts Options) (*Store, error) { return open(opts) }

// Failure returns the error that broke the store, or nil. The store is
// fail-stop: the first write or sync error Pebble reports is latched, and
// from then on every operation that writes (Append, Apply, Seal, Create,
// ...) fails at once with it, and no tail moves again. Nothing is
// confirmed after the error: after a failed fsync the file system may have
// dropped the pages it failed to write, and a later fsync that succeeds
// says nothing about them. A failed store stays failed until the process
// reopens it.
func (s *Store) Failure() error { return s.failure() }

// Close flushes cursor events and closes the database.
func (s *Store) Close() error { return s.close() }

// UncleanStart reports whether the process that had the store open before
// this one did not close it: it crashed, or its store failed. Records it
// had written but not synced are gone then, though it may have replicated
// them (an owner serves written records before its fsync). A store that
// Close closed, or a new one, starts clean.
func (s *Store) UncleanStart() bool { return s.uncleanStart }

// Copies lists the copies held, by stream name.
func (s *Store) Copies() []*Copy { return s.copies() }

// Get returns the copy of stream, or nil.
func (s *Store) Get(stream string) *Copy { return s.get(stream) }

// Create creates an empty copy, or returns the existing one if it has the
// same stream id (ErrExists if another).
func (s *Store) Create(stream string, streamID uint64, ret wire.Retention) (*Copy, error) {
	return s.create(stream, streamID, ret)
}

// Delete removes every key of the copy of stream; deleting a name with no
// copy does nothing. Get and Copies still find the copy until its
// deletion is durable; a Create or Delete of the same name meanwhile
// waits for it.
func (s *Store) Delete(stream string) error { return s.delete(stream) }

// Stream and StreamID name the copy.
func (c *Copy) Stream() string   { return c.stream() }
func (c *Copy) StreamID() uint64 { return c.streamID() }

// Append writes records as the owner, assigning offsets from the tail, and
// returns the first offset once they are durable. Concurrent appends, across
// all copies of the store, share one synced batch (group commit).
func (c *Copy) Append(ctx context.Context, data [][]byte) (first uint64, err error) {
	return c.append(ctx, data)
}

// AppendWritten writes records as the owner, as Append does, but returns
// once they are written: offsets assigned, queued for the next group
// commit and readable with ReadWritten (Tails().RecordWritten covers
// them), not yet durable. durable waits for their group commit (the error
// Append would return) and must be called exactly once, also when the
// caller no longer cares, since the store's Close waits for it. Appends of
// one copy become durable in the order they were written, so a caller may
// write the next batch while an earlier one's fsync runs.
func (c *Copy) AppendWritten(ctx context.Context, data [][]byte) (first uint64, durable func(context.Context) error, err error) {
	return c.appendWritten(ctx, data)
}

// Apply writes records as a follower at the owner's offsets, durably. recs
// must be contiguous; an overlap with identical content is skipped, one with
// other content is ErrDiverged; a start past the tail is ErrGap.
func (c *Copy) Apply(ctx context.Context, recs []Record) error { return c.apply(ctx, recs) }

// ApplyWritten writes records as a follower, as Apply does, but returns
// once they are written (queued for the next group commit, the written
// tail past them), not yet durable, so that a follower can ask for its
// next batch while this one's fsync runs. durable waits for their group
// commit (the error Apply would return) and must be called exactly once,
// also when the caller no longer cares, since the store's Close waits for
// it; for records the copy already held it returns nil at once. Applies of
// one copy become durable in the order they were written. A batch that
// overlaps records still queued waits for them to be durable before it is
// compared, as in Apply.
func (c *Copy) ApplyWritten(ctx context.Context, recs []Record) (durable func(context.Context) error, err error) {
	return c.applyWritten(ctx, recs)
}

// AppendCursor writes a cursor event as the owner, without fsync.
func (c *Copy) AppendCursor(cursor string, position uint64) (eventOffset uint64, err error) {
	return c.appendCursor(cursor, position)
}

// ApplyCursorEvents writes cursor events as a follower at the owner's
// offsets, durably, with the same overlap rules as Apply.
func (c *Copy) ApplyCursorEvents(ctx context.Context, evs []CursorEvent) error {
	return c.applyCursorEvents(ctx, evs)
}

// SyncCursors makes every written cursor event durable now.
func (c *Copy) SyncCursors() error { return c.syncCursors() }

// Read returns records from offset from, below offset below, at most
// maxRecords and about maxBytes (at least one record if any). A from below
// the head is ErrBelowHead.
func (c *Copy) Read(from uint64, maxRecords, maxBytes int, below uint64) ([]Record, error) {
	return c.read(from, maxRecords, maxBytes, below)
}

// ReadWritten is Read up to the written record tail (Tails.RecordWritten)
// rather than the durable one: records queued for a group commit are
// returned before they are durable, for an owner to replicate while its own
// fsync runs. They may still be lost if the store fails or the process
// dies before the commit, so nothing that must only expose durable data
// (readers, seals) may use it. The data of such records aliases the
// queued write and must not be modified.
func (c *Copy) ReadWritten(from uint64, maxRecords, maxBytes int, below uint64) ([]Record, error) {
	return c.readWritten(from, maxRecords, maxBytes, below)
}

// ReadFunc visits the records Read would return, in offset order, without
// copying them: data aliases the store's buffers and is valid only until
// visit returns. It returns how many records it visited. An error from
// visit stops the read and is returned.
func (c *Copy) ReadFunc(from uint64, maxRecords, maxBytes int, below uint64, visit func(offset uint64, timeNS int64, data []byte) error) (int, error) {
	return c.readFunc(from, maxRecords, maxBytes, below, visit)
}

// ReadCursorEvents returns cursor events from offset from, below below.
func (c *Copy) ReadCursorEvents(from uint64, max int, below uint64) ([]CursorEvent, error) {
	return c.readCursorEvents(from, max, below)
}

// Cursor returns a cursor's position (next offset to read).
func (c *Copy) Cursor(name string) (uint64, bool) { return c.cursor(name) }

// Tails returns the copy's current bounds.
func (c *Copy) Tails() Tails { return c.tails() }

// Changed returns a channel closed at the next change of the tails, for
// long polls.
func (c *Copy) Changed() <-chan struct{} { return c.changed() }

// WrittenChanged returns a channel closed at the next change of the tails
// other than the durable record tail moving up over records already
// written (a group commit of records only): records or cursor events
// written or applied, cursor events made durable, the head, a cut, a
// reset, a seal or a failure. An owner's replication long poll, which
// serves written records, waits on it, so that it is woken once per
// append, not again when the append becomes durable.
func (c *Copy) WrittenChanged() <-chan struct{} { return c.writtenChanged() }

// LogEpochs returns which owner history each range of the logs followed.
func (c *Copy) LogEpochs() []wire.LogEpoch { return c.logEpochs() }

// Epoch is the epoch of the copy's last log epoch (0 if none).
func (c *Copy) Epoch() uint64 { return c.epoch() }

// Seal fences the copy at fence for transition, persisting the seal before
// it returns. A fence at or below the copy's epoch (its last log epoch: a
// seal at fence e+1 is valid only while the copy has not begun epoch e+1),
// below an existing seal's fence, or the same fence as the seal's with an
// older transition, is ErrStaleFence; the same fence with a newer (or the
// same) transition takes the seal over.
func (c *Copy) Seal(fence, transition uint64) (SealState, error) { return c.seal(fence, transition) }

// SealInfo returns the seal, if sealed.
func (c *Copy) SealInfo() (Seal, bool) { return c.sealInfo() }

// Digest is the hex running digest of the records below the record tail.
func (c *Copy) Digest() string { return c.digest() }

// DigestAt is the running digest of the records below offset: the value
// stored with the record at offset-1, or the head's digest at offset ==
// head. An offset below the head is ErrBelowHead; one past the written
// record tail (Tails.RecordWritten) is an error; one past the durable tail
// is the digest of a queued record (see ReadWritten). Tails carries the digests at head and tail.
func (c *Copy) DigestAt(offset uint64) (uint64, error) { return c.digestAt(offset) }

// CutToHistory brings the copy onto the owner history of target, as the
// seed's 'Copies with a longer tail' defines. Among the starts recorded for
// an epoch after the copy's own (a sealed copy: the epoch its seal
// replaced) and up to target, the record log is cut at the lowest record
// tail and the cursor event log, independently, at the lowest cursor event
// tail (cursor tails need not rise with record tails across starts). Both
// cuts are one batch, never below the head; a cursor snapshot past the cut
// keeps its state with its boundary lowered; cursors above the new tail are
// clamped. A copy already on the target history is left alone; repeating
// is harmless.
func (c *Copy) CutToHistory(target uint64, starts []wire.HistoryStart) (CutResult, error) {
	return c.cutToHistory(target, starts)
}

// BeginEpoch starts the copy's history at epoch: a seal with a fence at or
// below epoch is released, and a log epoch (epoch, tails) is appended if
// epoch is newer than the copy's. Call CutToHistory first. An epoch below
// the seal's fence is ErrStaleFence.
func (c *Copy) BeginEpoch(epoch uint64) error { return c.beginEpoch(epoch) }

// BeginEpochAsync is BeginEpoch without the wait for its write to be
// durable: the copy is at the new epoch (its seal released) when it
// returns, its write is in the store's WAL ahead of every later write (so
// any later synced write of the store, a record's group commit included,
// makes it durable too), and durable is closed once it is durable. A
// failed sync fails the store and leaves durable open. The caller must
// let nothing of the new epoch leave the host before durable is closed: a
// crash before then may lose the begin while keeping nothing written
// after it (docs/failover.md, "The new owner's epoch begins before it is
// durable"). A call that changes nothing returns the pending channel of
// an earlier async begin, if any, else a closed one.
func (c *Copy) BeginEpochAsync(epoch uint64) (durable <-chan struct{}, err error) {
	return c.beginEpochWith(epoch, true)
}

// EnforceRetention advances the head by the copy's retention. It never
// removes a record at or above keepFrom (the caller passes the lowest offset
// a follower or reader still needs, or the tail).
func (c *Copy) EnforceRetention(now time.Time, keepFrom uint64) error {
	return c.enforceRetention(now, keepFrom)
}

// SetRetention changes the copy's retention.
func (c *Copy) SetRetention(ret wire.Retention) error { return c.setRetention(ret) }

// ResetTo empties a follower copy that is behind the owner's retained head
// and restarts both its head and tail at offset (and its cursor event log
// at cursorOffset), so that it can apply the owner's records from there.
// The digest restarts from 0 at that point; ResetToDigest keeps the chain
// equal to the owner's.
func (c *Copy) ResetTo(offset, cursorOffset uint64) error { return c.resetTo(offset, cursorOffset, 0) }

// ResetToDigest is ResetTo with the running digest at offset set to digest,
// the owner's digest there (its DigestAt(offset)), so that the follower's
// digest chain goes on matching the owner's and a replication request can
// prove, by its tail digest, that the follower's log matches the owner's.
func (c *Copy) ResetToDigest(offset, cursorOffset, digest uint64) error {
	return c.resetTo(offset, cursorOffset, digest)
}
