package workload

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// CheckConfig tunes Check.
type CheckConfig struct {
	// MayLose reports whether an operator accepted the loss of a confirmed
	// record (recovery.accept-loss below the confirmed prefix); such a
	// record may be missing or its offset may hold another record. Nil:
	// no loss is accepted.
	MayLose func(Outcome) bool
	// MinCopies, if set, is the least W a confirm at epoch must name and
	// the least number of copies it must report (W of that epoch's
	// assignment). Whatever it is, every confirm must have been held by at
	// least the W it names.
	MinCopies func(epoch uint64) int
}

// Report sums up a successful Check.
type Report struct {
	// Confirmed records, all delivered at their confirmed offsets
	// (except Lost ones).
	Confirmed int
	// Offsets is how many distinct offsets the reader was handed.
	Offsets int
	// UnconfirmedDelivered counts records whose publish was not confirmed
	// (timed out, or its producer gave up) but which the stream kept.
	UnconfirmedDelivered int
	// RetryCopies counts extra copies of a record: an attempt whose reply
	// was lost in a failover, written again by the retry. Publishers name a
	// producer id and sequence, and a new owner rebuilds its duplicate
	// window from its log, so any such copy fails the check.
	RetryCopies int
	// Lost counts confirmed records an operator accepted to lose.
	Lost int
}

func (r Report) String() string {
	return fmt.Sprintf("%d confirmed records delivered at their offsets, %d offsets read, %d unconfirmed records kept, %d earlier copies from retried attempts, %d accepted as lost",
		r.Confirmed, r.Offsets, r.UnconfirmedDelivered, r.RetryCopies, r.Lost)
}

// maxErrors bounds the errors Check reports.
const maxErrors = 30

// Check holds what a reader was handed against what the publishers were
// told:
//
//   - every confirmed record is delivered, at the offset it was confirmed at
//     (no confirmed record is lost or moved), unless MayLose accepts it;
//   - no offset was confirmed for two different records (two owners never
//     confirm the same offset);
//   - a record is never delivered at an offset after the one it was
//     confirmed at (a later copy would be a second delivery of a confirmed
//     record; only earlier copies, from an attempt whose confirm was lost,
//     are possible);
//   - every delivered record is one that was published, with intact bytes;
//   - the reader saw no offset change its bytes and skipped no offset
//     (d.Problems).
func Check(outcomes []Outcome, d Delivered, cfg CheckConfig) (Report, error) {
	var errs []error
	fail := func(format string, args ...any) {
		if len(errs) < maxErrors {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	for _, p := range d.Problems {
		fail("reader: %s", p)
	}
	rep := Report{Offsets: len(d.Data)}

	// Where each id was delivered, lowest offset first.
	at := map[ID][]uint64{}
	offsets := make([]uint64, 0, len(d.Data))
	for off := range d.Data {
		offsets = append(offsets, off)
	}
	slices.Sort(offsets)
	for _, off := range offsets {
		id, err := ParsePayload(d.Data[off])
		if err != nil {
			fail("offset %d: %v", off, err)
			continue
		}
		at[id] = append(at[id], off)
	}

	known := make(map[ID]bool, len(outcomes))
	confirmedAt := map[uint64]ID{}
	for _, o := range outcomes {
		known[o.ID] = true
		offs := at[o.ID]
		if !o.Confirmed {
			if len(offs) > 0 {
				rep.UnconfirmedDelivered++
				rep.RetryCopies += len(offs) - 1
			}
			if len(offs) > 1 {
				fail("%s (never confirmed) was delivered at %d offsets %v: its producer sequence was written twice", o.ID, len(offs), offs)
			}
			continue
		}
		rep.Confirmed++
		x := o.Confirm.Offset
		// The host says which rule it confirmed under; it must have met it.
		if o.Confirm.W < 1 || o.Confirm.Copies < o.Confirm.W {
			fail("%s confirmed at offset %d epoch %d by %d copies under W=%d", o.ID, x, o.Confirm.Epoch, o.Confirm.Copies, o.Confirm.W)
		}
		if cfg.MinCopies != nil {
			if w := cfg.MinCopies(o.Confirm.Epoch); o.Confirm.Copies < w || o.Confirm.W < w {
				fail("%s confirmed at offset %d epoch %d by %d copies under W=%d, below the W=%d its assignment asks", o.ID, x, o.Confirm.Epoch, o.Confirm.Copies, o.Confirm.W, w)
			}
		}
		lose := cfg.MayLose != nil && cfg.MayLose(o)
		if !lose {
			// A lost record's offset is reused by the owner that took
			// over below it, so only the kept confirms must not share.
			if other, dup := confirmedAt[x]; dup && other != o.ID {
				fail("offset %d was confirmed for %s and for %s (epoch %d)", x, other, o.ID, o.Confirm.Epoch)
			}
			confirmedAt[x] = o.ID
		}
		got, ok := d.Data[x]
		switch {
		case !ok && lose, ok && lose && string(got) != string(o.Data):
			rep.Lost++
			continue
		case !ok:
			fail("%s confirmed at offset %d (epoch %d, duplicate=%v) was never delivered: a confirmed record was lost", o.ID, x, o.Confirm.Epoch, o.Confirm.Duplicate)
			continue
		case string(got) != string(o.Data):
			fail("%s confirmed at offset %d (epoch %d) but that offset was delivered holding %.40q", o.ID, x, o.Confirm.Epoch, got)
			continue
		}
		for _, off := range offs {
			switch {
			case off > x:
				fail("%s confirmed at offset %d (epoch %d) was delivered again at offset %d", o.ID, x, o.Confirm.Epoch, off)
			case off < x:
				rep.RetryCopies++
				fail("%s confirmed at offset %d (epoch %d) was also delivered at offset %d: its producer sequence was written twice", o.ID, x, o.Confirm.Epoch, off)
			}
		}
	}
	for _, id := range sortedIDs(at) {
		if !known[id] {
			fail("%s delivered at offsets %v was never published", id, at[id])
		}
	}
	if len(errs) > 0 {
		return rep, errors.Join(errs...)
	}
	return rep, nil
}

func sortedIDs(m map[ID][]uint64) []ID {
	ids := make([]ID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		if ids[i].Producer != ids[j].Producer {
			return ids[i].Producer < ids[j].Producer
		}
		return ids[i].Seq < ids[j].Seq
	})
	return ids
}
