// # Storage layout
//
// One Pebble database per host holds every copy. Integers in keys and
// values are big-endian, so byte order is numeric order and each log is a
// contiguous, ordered key range. Each copy gets a numeric copy id at
// create (never reused: the counter is persisted), and every key of the
// copy starts with "c" + id, so deleting a copy is one range deletion.
//
//	key                              value
//	"v"                              layout version (uint64, currently 2;
//	                                 Open moves layout 1, a key per record
//	                                 under "r", to batches)
//	"g"                              next copy id (uint64)
//	"o"                              open mark (one byte): set by Open, deleted
//	                                 by a clean Close (Store.UncleanStart)
//	"l"                              move mark (one byte): present while Open
//	                                 moves layout 1 to batches (store.go)
//	"n" + stream name                copy id (uint64): the name index
//	"c" + id(8) + "e" + offset(8)    cursor event: position(8) + cursor name
//	"c" + id(8) + "k"                cursor snapshot: boundary(8), count(4),
//	                                 then per cursor in name order:
//	                                 name length(2), name, position(8)
//	"c" + id(8) + "m"                copy metadata (JSON): stream, stream id,
//	                                 retention, log epochs, seal (fence epoch,
//	                                 transition, replaced log epochs), retained
//	                                 head with the digest and byte count there,
//	                                 cursor log start
//	"c" + id(8) + "b" + offset(8)    batch of records ending at offset:
//	                                 count(4), then per record length(4)
//	                                 and entry: digest(8), cum(8), time
//	                                 ns(8), data (batch.go)
//
// A copy's key space is ["c"+id, "c"+(id+1)); its record log is
// ["c"+id+"b", "c"+id+"c") and its cursor event log ["c"+id+"e",
// "c"+id+"f").
//
// The database is at Pebble's FormatValueSeparation with value separation
// on (store.go, valueSeparation): batch values of 1 KiB or more live in
// blob files from their flush on, so compactions do not rewrite them
// (unless a table would reference more than MaxBlobReferenceDepth of
// them). The blob files and tables a flush or a compaction writes leave
// the page cache once written (pagecache.go, writtenOnceFS).
//
// # Running digest
//
// Each record's entry stores the running digest after it: d(o+1) = xxhash64(d(o) ||
// o || data) with d at offset 0 equal to 0 (after ResetToDigest, the
// owner's digest at the reset offset, so owner and follower chains agree;
// after ResetTo, 0). It also stores cum, the running count of data bytes. The digest
// and byte count at the retained head are kept in the metadata, so the
// digest at any held offset is one point read, the digest at the tail is
// kept in memory (a seal reads no log), a cut restores the digest at the
// cut, and retention by bytes is a subtraction.
//
// # Writes and durability
//
// Records (Append, Apply) and applied cursor events (ApplyCursorEvents) go
// through one committer goroutine: callers assign offsets and encode under
// their copy's lock and enqueue in the same critical section, and the
// committer writes everything queued, across all copies, in one batch
// committed with pebble.Sync; a second goroutine (completeLoop) waits for
// each batch's fsync and publishes tails in queue order. A caller is
// answered only after its batch is durable, and a copy's durable tail
// never passes a hole. While one batch's fsync runs the committer may
// apply the next behind it (at most two in flight), so that its write and
// memtable insert overlap that fsync and Pebble syncs it as soon as the
// first ends (commit.go, takeGroup). The committer and completeLoop run no
// code of their callers but Options.OnGroupCommit and OnChange, which
// must return at once: whatever a caller does once its write is durable
// (a follower's ack) it does on a goroutine of its own, so that nothing
// it waits for can hold up the next group of every copy. With no batch in
// flight the committer waits briefly (at most 300µs) for as many requests
// as the previous group had, since those callers usually come straight
// back; otherwise closed-loop writers split into cohorts that take turns
// at the disk.
//
// Owner cursor events (AppendCursor) are written with pebble.NoSync. Pebble
// has one write-ahead log, so any later synced commit makes them durable:
// a background loop issues one every Options.CursorSyncInterval while some
// copy has unsynced events (it looks only at the copies AppendCursor wrote
// since its last tick, not at every copy held), and Seal, BeginEpoch, CutToHistory and Close
// sync as part of their own writes. Tails reports CursorWritten and
// CursorDurable separately.
//
// BeginEpochAsync writes an epoch's begin like BeginEpoch but does not
// wait for its WAL sync (pebble's ApplyNoSyncWait): the copy is at the new
// epoch when it returns, and one goroutine per such call waits for the
// sync, closes the returned channel once it is durable, and holds the
// store open (Close waits for it) until then. Every later synced write of
// the store makes the begin durable too, since it is earlier in the one
// WAL; what the caller may let leave the host before the channel closes
// is its business (the stream host lets nothing of the epoch leave).
//
// Every few cursor events (1024) the fold of all cursor events, one
// position per cursor, is written as the cursor snapshot in the same batch
// as the event that completes it, so Open replays only the events above
// the snapshot boundary. Cursor events below the boundary are kept (a
// lagging follower may still read them).
//
// A Create writes its copy's keys without fsync while it holds the
// store's copy-set lock (so copy ids reach the WAL in order and the
// persisted counter only grows), then waits for a synced commit without
// it: concurrent creates share their fsyncs, and lookups (Get, Copies) do
// not wait behind them. The copy is found by lookups once it is durable.
// That unsynced commit under the lock almost never waits on the disk; it
// can when it rotates the WAL (with the memtable, about once per 16 MiB
// written) or meets a write stall.
//
// A Delete marks the name as being deleted and runs without the copy-set
// lock: lookups go on and still find the copy until its deletion is
// durable, and a Create or another Delete of the same name waits for it
// (so a Create is never handed the dying copy, and its keys follow the
// deletion in the WAL).
//
// Metadata changes (seal, epochs, cuts, retention, reset, delete) run as
// exclusive operations on their copy: new writes to that copy wait, writes
// already queued commit first, and the change is one synced batch. That is
// what makes a seal's reported tails final: no write from before the seal
// can land after it.
//
// # Locks and goroutines
//
// Goroutines, who starts each and how it stops:
//   - commitLoop (commit.go), started by Open: takes and applies groups.
//     Close waits for every operation in progress, then sets stopping and
//     waits on committed, which commitLoop closes once the queue is empty
//     and completeLoop has ended.
//   - completeLoop, started by commitLoop: waits for each applied group's
//     fsync and answers it, in order. It ends when commitLoop closes its
//     channel, after answering every group handed to it.
//   - cursorSyncLoop, started by Open: syncs owner cursor events every
//     Options.CursorSyncInterval; Close stops it first (stopSync).
//   - one goroutine per BeginEpochAsync, until its sync ends; it holds the
//     store open, so Close waits for it.
//   - Options.OnFailure, called once on a goroutine of its own.
//
// On the write path a caller enqueues under its copy's mu (a copy's mu,
// then qmu); the committer holds qmu only to take a group, and
// completeLoop takes each touched copy's mu to publish its tails, with no
// other lock held. Neither holds a lock while Pebble writes or syncs, and
// a caller waits for its group with none held. life (entered and left by
// every public operation; failure reads it) is a leaf.
package streamlog
