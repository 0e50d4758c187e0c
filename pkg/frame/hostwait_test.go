package frame_test

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/brook-streams/brook/pkg/frame"
)

var (
	hostWaitHdr = []byte{frame.Magic, frame.Version, frame.KindHostWait}
	hostWakeHdr = []byte{frame.Magic, frame.Version, frame.KindHostWake}
	hostRecsHdr = []byte{frame.Magic, frame.Version, frame.KindHostWakeRecords}
)

// sampleHostWakeRecords is a host wake with records for two copies.
func sampleHostWakeRecords() *frame.HostWake {
	return &frame.HostWake{StreamIDs: []uint64{4}, Batches: []frame.HostWakeBatch{
		{StreamID: 7, Batch: sampleBatch()},
		{StreamID: 9000, Batch: &frame.Batch{Epoch: 1, Head: 0, Tail: 3, Next: 3,
			Records: []frame.Record{{Offset: 2, TimeNS: 5, Data: []byte("xyz")}}}},
	}}
}

func sampleHostWait() *frame.HostWait {
	return &frame.HostWait{Node: "h2", WaitMS: 4000, Copies: []frame.HostWaitCopy{
		{StreamID: 7, Epoch: 3, RecordTail: 1200, CursorTail: 4, KnownHead: 1100},
		{StreamID: 9000, Epoch: 1, RecordTail: 0, CursorTail: 0, KnownHead: 0},
	}}
}

func TestHostWaitRoundTrip(t *testing.T) {
	for name, w := range map[string]*frame.HostWait{
		"sample": sampleHostWait(),
		"max": {Node: strings.Repeat("n", 64), WaitMS: math.MaxUint32, Copies: []frame.HostWaitCopy{
			{StreamID: math.MaxUint64, Epoch: math.MaxUint64, RecordTail: math.MaxUint64, CursorTail: math.MaxUint64, KnownHead: math.MaxUint64}}},
		"empty": {Node: "a", Copies: []frame.HostWaitCopy{}},
	} {
		t.Run(name, func(t *testing.T) {
			enc := frame.AppendHostWait(nil, w)
			got, err := frame.DecodeHostWait(enc)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got, w) {
				t.Fatalf("want %+v, got %+v", *w, *got)
			}
			size := 3 + 1 + len(w.Node) + len(uv(uint64(w.WaitMS))) + len(uv(uint64(len(w.Copies))))
			for i := range w.Copies {
				size += w.Copies[i].Size()
			}
			if size != len(enc) {
				t.Fatalf("sizes add up to %d, encoded %d bytes", size, len(enc))
			}
		})
	}
}

func TestHostWakeRoundTrip(t *testing.T) {
	for name, w := range map[string]*frame.HostWake{
		"some":         {StreamIDs: []uint64{1, 300, math.MaxUint64}},
		"none":         {},
		"records":      sampleHostWakeRecords(),
		"records only": {Batches: sampleHostWakeRecords().Batches},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := frame.DecodeHostWake(frame.AppendHostWake(nil, w))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got, w) {
				t.Fatalf("want %+v, got %+v", *w, *got)
			}
		})
	}
}

func TestDecodeHostWaitRejects(t *testing.T) {
	good := frame.AppendHostWait(nil, sampleHostWait())
	for name, p := range map[string][]byte{
		"nil":             nil,
		"other kind":      frame.AppendReplRequest(nil, sampleRepl()),
		"truncated":       good[:len(good)-1],
		"trailing":        cat(good, []byte{0}),
		"no node":         cat(hostWaitHdr, uv(0, 0, 0)),
		"bad node byte":   cat(hostWaitHdr, uv(1), []byte("."), uv(0, 0)),
		"wait too large":  cat(hostWaitHdr, uv(1), []byte("n"), uv(math.MaxUint32+1, 0)),
		"count over rest": cat(hostWaitHdr, uv(1), []byte("n"), uv(0, 2, 1, 1, 1, 1, 1)),
		"four fields":     cat(hostWaitHdr, uv(1), []byte("n"), uv(0, 1, 1, 1, 1, 1)),
		"count over max":  cat(hostWaitHdr, uv(1), []byte("n"), uv(0, frame.MaxHostWaitCopies+1)),
		"padded varint":   cat(hostWaitHdr, uv(1), []byte("n"), uv(0, 1), []byte{0x81, 0x00}, uv(1, 1, 1, 1)),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := frame.DecodeHostWait(p); !errors.Is(err, frame.ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
}

func TestDecodeHostWakeRejects(t *testing.T) {
	for name, p := range map[string][]byte{
		"nil":             nil,
		"other kind":      frame.AppendHostWait(nil, sampleHostWait()),
		"count over rest": cat(hostWakeHdr, uv(3, 1, 2)),
		"trailing":        cat(hostWakeHdr, uv(1, 1, 1)),
		"count over max":  cat(hostWakeHdr, uv(frame.MaxHostWaitCopies+1)),
		// A wake with records and none: written as a plain wake.
		"records kind, no batch": cat(hostRecsHdr, uv(0, 0)),
		"batch of another kind":  cat(hostRecsHdr, uv(0, 1, 7, 25), frame.AppendHostWait(nil, &frame.HostWait{Node: "aaaaaaaaaaaaaaa"})),
		"batch cut short":        cat(hostRecsHdr, uv(0, 1, 7, 40), frame.AppendBatch(nil, &frame.Batch{})),
		"bad batch":              cat(hostRecsHdr, uv(0, 1, 7, 22), frame.AppendBatch(nil, &frame.Batch{}), []byte{1, 2, 3, 4, 5}),
		"records trailing":       cat(frame.AppendHostWake(nil, sampleHostWakeRecords()), []byte{0}),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := frame.DecodeHostWake(p); !errors.Is(err, frame.ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
}

// FuzzDecodeHostWait is FuzzDecodeBatch for host waits.
func FuzzDecodeHostWait(f *testing.F) {
	f.Add(frame.AppendHostWait(nil, sampleHostWait()))
	f.Add(frame.AppendHostWait(nil, &frame.HostWait{Node: "a"}))
	f.Add(cat(hostWaitHdr, uv(1), []byte("n"), uv(0, 1, 0, 0, 0, 0, 0)))
	f.Add(cat(hostWaitHdr, uv(1), []byte("n"), uv(0, 5, 0, 0, 0, 0, 0)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		w, err := frame.DecodeHostWait(p)
		if err != nil {
			if !errors.Is(err, frame.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if re := frame.AppendHostWait(nil, w); !bytes.Equal(re, p) {
			t.Fatalf("decoded host wait re-encodes differently\n in % x\nout % x", p, re)
		}
	})
}

// FuzzDecodeHostWake is FuzzDecodeBatch for host wakes.
func FuzzDecodeHostWake(f *testing.F) {
	f.Add(frame.AppendHostWake(nil, &frame.HostWake{StreamIDs: []uint64{1, 2, 1 << 40}}))
	f.Add(frame.AppendHostWake(nil, &frame.HostWake{}))
	f.Add(cat(hostWakeHdr, uv(2, 1)))
	f.Add(frame.AppendHostWake(nil, sampleHostWakeRecords()))
	f.Add(cat(hostRecsHdr, uv(0, 0)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		w, err := frame.DecodeHostWake(p)
		if err != nil {
			if !errors.Is(err, frame.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if re := frame.AppendHostWake(nil, w); !bytes.Equal(re, p) {
			t.Fatalf("decoded host wake re-encodes differently\n in % x\nout % x", p, re)
		}
	})
}

var hostChgHdr = []byte{frame.Magic, frame.Version, frame.KindHostWaitChange}

func sampleHostWaitChange() *frame.HostWaitChange {
	return &frame.HostWaitChange{Node: "h2", WaitMS: 4000, Base: 41, Gen: 42, Left: []uint64{5, 1 << 40},
		Copies: sampleHostWait().Copies}
}

func TestHostWaitChangeRoundTrip(t *testing.T) {
	for name, w := range map[string]*frame.HostWaitChange{
		"sample":  sampleHostWaitChange(),
		"nothing": {Node: "a", Base: 7, Gen: 8, Left: []uint64{}, Copies: []frame.HostWaitCopy{}},
		"max": {Node: strings.Repeat("n", 64), WaitMS: math.MaxUint32, Base: math.MaxUint64, Gen: math.MaxUint64,
			Left: []uint64{math.MaxUint64}, Copies: []frame.HostWaitCopy{
				{StreamID: math.MaxUint64, Epoch: math.MaxUint64, RecordTail: math.MaxUint64, CursorTail: math.MaxUint64, KnownHead: math.MaxUint64}}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := frame.DecodeHostWaitChange(frame.AppendHostWaitChange(nil, w))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got, w) {
				t.Fatalf("want %+v, got %+v", *w, *got)
			}
		})
	}
}

func TestDecodeHostWaitChangeRejects(t *testing.T) {
	good := frame.AppendHostWaitChange(nil, sampleHostWaitChange())
	start := cat(hostChgHdr, uv(1), []byte("n"), uv(0, 1, 2))
	for name, p := range map[string][]byte{
		"nil":                  nil,
		"a whole host wait":    frame.AppendHostWait(nil, sampleHostWait()),
		"truncated":            good[:len(good)-1],
		"trailing":             cat(good, []byte{0}),
		"no generations":       cat(hostChgHdr, uv(1), []byte("n"), uv(0)),
		"left count over rest": cat(start, uv(3, 1, 1, 0)),
		"left count over max":  cat(start, uv(frame.MaxHostWaitCopies+1)),
		"no copy count":        cat(start, uv(1, 9)),
		"copy of four fields":  cat(start, uv(0, 1, 1, 1, 1, 1)),
		"padded left id":       cat(start, uv(1), []byte{0x81, 0x00}, uv(0)),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := frame.DecodeHostWaitChange(p); !errors.Is(err, frame.ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
	if _, err := frame.DecodeHostWait(good); !errors.Is(err, frame.ErrMalformed) {
		t.Fatalf("the host wait decoder took a change: %v", err)
	}
}

// FuzzDecodeHostWaitChange is FuzzDecodeBatch for host wait changes.
func FuzzDecodeHostWaitChange(f *testing.F) {
	f.Add(frame.AppendHostWaitChange(nil, sampleHostWaitChange()))
	f.Add(frame.AppendHostWaitChange(nil, &frame.HostWaitChange{Node: "a"}))
	f.Add(cat(hostChgHdr, uv(1), []byte("n"), uv(0, 1, 2, 1, 9, 1, 0, 0, 0, 0, 0)))
	f.Add(cat(hostChgHdr, uv(1), []byte("n"), uv(0, 1, 2, 4, 9)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		w, err := frame.DecodeHostWaitChange(p)
		if err != nil {
			if !errors.Is(err, frame.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if re := frame.AppendHostWaitChange(nil, w); !bytes.Equal(re, p) {
			t.Fatalf("decoded host wait change re-encodes differently\n in % x\nout % x", p, re)
		}
	})
}
