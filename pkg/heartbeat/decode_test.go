package heartbeat

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

func testCopies(n int, tail uint64) []wire.CopyStatus {
	out := make([]wire.CopyStatus, n)
	for i := range out {
		out[i] = wire.CopyStatus{Stream: fmt.Sprintf("s%03d", i), StreamID: uint64(i + 1), Role: wire.RoleFollower,
			Epoch: 2, RecordTail: tail, CursorTail: 1, Confirmed: tail, Sealed: i == 3}
	}
	return out
}

func mustMarshal(t testing.TB, hb wire.Heartbeat) []byte {
	data, err := json.Marshal(hb)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// checkDecode decodes data with d and with json.Unmarshal and fails unless
// both agree (the same heartbeat, or both an error).
func checkDecode(t *testing.T, d *Decoder, sender string, data []byte) wire.Heartbeat {
	t.Helper()
	var want wire.Heartbeat
	werr := json.Unmarshal(data, &want)
	got, err := d.Decode(sender, data)
	if (err != nil) != (werr != nil) || (err == nil && !reflect.DeepEqual(got, want)) {
		t.Fatalf("decode %q:\n got %+v (%v)\nwant %+v (%v)", data, got, err, want, werr)
	}
	return got
}

// The Decoder returns what json.Unmarshal returns, for new copies, for the
// same copies again (reused, not decoded) with other fields after them, and
// after they change.
func TestDecoderMatchesUnmarshal(t *testing.T) {
	d := NewDecoder()
	first := checkDecode(t, d, "a", mustMarshal(t, wire.Heartbeat{Node: "h1", Incarnation: 7, Copies: testCopies(5, 10), AtMS: 1, Beat: 1}))
	again := checkDecode(t, d, "a", mustMarshal(t, wire.Heartbeat{Node: "h1", Incarnation: 7, Copies: testCopies(5, 10), AtMS: 2, Beat: 2, Part: 1, Parts: 3}))
	if &again.Copies[0] != &first.Copies[0] {
		t.Fatal("the same copies were decoded again, not reused")
	}
	for _, data := range [][]byte{
		mustMarshal(t, wire.Heartbeat{Node: "h1", Incarnation: 7, Copies: testCopies(5, 11), AtMS: 3, Beat: 3, Leaving: true}),
		mustMarshal(t, wire.Heartbeat{Node: "h1", Incarnation: 7, Copies: testCopies(5, 11)}),
		mustMarshal(t, wire.Heartbeat{Node: "h2", Incarnation: 1, Copies: []wire.CopyStatus{}, AtMS: 5}),
		mustMarshal(t, wire.Heartbeat{Node: "h2", Incarnation: 1, AtMS: 6}),
		[]byte(`{"node":"h3","incarnation":1}`),
		// The same start, then a trailing comma, a second copies, fields
		// set again, nulls, bad types: each as json.Unmarshal has it.
		[]byte(`{"node":"h1","incarnation":7,"copies":[],"at_ms":1}`),
		[]byte(`{"node":"h1","incarnation":7,"copies":[],}`),
		[]byte(`{"node":"h1","incarnation":7,"copies":[],"copies":[{"stream":"x"}]}`),
		[]byte(`{"node":"h1","incarnation":7,"copies":[],"node":"h9","Incarnation":8,"beat":null}`),
		[]byte(`{"node":"h1","incarnation":7,"copies":[],"beat":"x"}`),
		[]byte(`{"node":"h1","incarnation":7,"copies":[]} x`),
		[]byte(`{"node":"h1","incarnation":7,"copies":[]}  `),
		// Keys with escapes that encoding/json takes for the copies.
		[]byte(`{"copies":[{"stream":"a"}],"c\u006fpies":[{"stream":"b"}]}`),
		[]byte(`{"copies":[{"stream":"a"}],"copie\u017f":[{"stream":"b"}]}`),
		[]byte(`{"c\u006fpies":[{"stream":"b","epoch":7}],"copies":[{"stream":"a"}]}`),
		[]byte(`{"node":`), []byte(`{"node":"h1","copies":[{"stream":1}]}`), []byte(`{"node":"h1","copies":{}}`), []byte(`[]`),
	} {
		checkDecode(t, d, "a", data)
	}
}

// decodeCopies takes every array of copies json.Marshal writes, and
// decodes it as json.Unmarshal does; any other array it either decodes as
// json.Unmarshal does or leaves to it (reports false).
func TestDecodeCopiesAsUnmarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		copies := make([]wire.CopyStatus, rng.IntN(5))
		for i := range copies {
			copies[i] = wire.CopyStatus{Stream: fmt.Sprintf("s-%d_X", rng.IntN(1000)), StreamID: rng.Uint64(), Role: []string{wire.RoleOwner, wire.RoleFollower, wire.RoleNone, ""}[rng.IntN(4)],
				Epoch: rng.Uint64N(3), RecordTail: math.MaxUint64 - rng.Uint64N(2), CursorTail: rng.Uint64N(11), Confirmed: rng.Uint64N(2), Sealed: rng.IntN(2) == 0, Gone: rng.IntN(2) == 0}
		}
		data, err := json.Marshal(copies)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := decodeCopies(data)
		if !ok {
			t.Fatalf("decodeCopies refused what json.Marshal wrote: %s", data)
		}
		if !reflect.DeepEqual(got, copies) {
			t.Fatalf("decodeCopies(%s) = %+v, want %+v", data, got, copies)
		}
	}
	for _, data := range []string{
		`[]`, `[{}]`, `[{"stream":"a"},{}]`, `[{"epoch":0}]`, `[{"epoch":18446744073709551615}]`,
		`[{"epoch":18446744073709551616}]`, `[{"epoch":01}]`, `[{"epoch":1.0}]`, `[{"epoch":1e3}]`, `[{"epoch":-1}]`,
		`[{"epoch":null}]`, `[{"stream":"a\"b"}]`, `[{"stream":"a\u0041"}]`, `[{"stream":"é"}]`, `[{"Stream":"a"}]`,
		`[{"stream":"a","stream":"b"}]`, `[{"other":1}]`, `[{"sealed":true,"gone":false}]`, `[{"sealed":tru}]`,
		`[{"sealed":null}]`, `[ {"stream":"a"}]`, `[{"stream": "a"}]`, `[{"stream":"a"},]`, `[{"stream":"a"}`, `[{"stream":"a"}]x`,
		`null`, `[null]`, `[1]`, `["a"]`, `[[]]`, `[{"stream":1}]`, `[{"epoch":"1"}]`, `[`, `]`, ``,
	} {
		var want []wire.CopyStatus
		werr := json.Unmarshal([]byte(data), &want)
		got, ok := decodeCopies([]byte(data))
		if ok && (werr != nil || !reflect.DeepEqual(got, want)) {
			t.Errorf("decodeCopies(%s) = %+v, json.Unmarshal gives %+v (%v)", data, got, want, werr)
		}
	}
}

// FuzzDecodeCopies: decodeCopies never disagrees with json.Unmarshal.
func FuzzDecodeCopies(f *testing.F) {
	f.Add([]byte(`[{"stream":"a","stream_id":1,"role":"owner","epoch":2,"record_tail":3,"cursor_tail":4,"confirmed":3,"sealed":false,"gone":true}]`))
	f.Add([]byte(`[{"epoch":18446744073709551616}]`))
	f.Add([]byte(`[{},{"stream":"x"}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := decodeCopies(data)
		if !ok {
			return
		}
		var want []wire.CopyStatus
		if err := json.Unmarshal(data, &want); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeCopies(%q) = %+v, json.Unmarshal gives %+v (%v)", data, got, want, err)
		}
	})
}

// FuzzDecoder: after any message from a sender, the Decoder decodes any
// next message from it as json.Unmarshal does.
func FuzzDecoder(f *testing.F) {
	base := mustMarshal(f, wire.Heartbeat{Node: "h1", Incarnation: 7, Copies: testCopies(2, 10), AtMS: 1, Beat: 1})
	f.Add(base, mustMarshal(f, wire.Heartbeat{Node: "h1", Incarnation: 7, Copies: testCopies(2, 10), AtMS: 2, Beat: 2}))
	f.Add(base, append(base[:len(base)-1:len(base)-1], []byte(`,"copies":null}`)...))
	f.Add(base, append(base[:len(base)-1:len(base)-1], []byte(`,}`)...))
	f.Add([]byte(`{"copies":[],"node":"a"}`), []byte(`{"copies":[],"NODE":"b","Leaving":true}`))
	f.Add([]byte(`{"copies":[{"stream":"a"}],"Copies":[{"stream":"b"}]}`), []byte(`{"node":"a","copies":[{"stream":"a","epoch":1}],"delta":true,"beat":"x"}`))
	f.Add([]byte(`{"c\u006fpies":[{"stream":"b","epoch":7}],"copies":[{"stream":"a"}]}`), []byte(`{"copies":[{"stream":"a"}],"copie\u017f":[]}`))
	f.Add([]byte(`{"copies":[{"stream":"a","epoch":18446744073709551616}]}`), []byte(`{"copies":[{"stream":"a\u0041"}],"delta":true}`))
	f.Fuzz(func(t *testing.T, prev, next []byte) {
		d := NewDecoder()
		checkDecode(t, d, "s", prev)
		checkDecode(t, d, "s", next)
		checkDecode(t, d, "s", next)
	})
}

// The Decoder forgets everything past maxDecoderEntries instead of growing.
func TestDecoderIsBounded(t *testing.T) {
	d := NewDecoder()
	for i := range maxDecoderEntries + 10 {
		if _, err := d.Decode(fmt.Sprint(i), []byte(`{"node":"n","copies":[]}`)); err != nil {
			t.Fatal(err)
		}
		if len(d.last) > maxDecoderEntries {
			t.Fatalf("%d entries after %d senders", len(d.last), i+1)
		}
	}
}

func BenchmarkDecodeHeartbeat(b *testing.B) {
	hb := wire.Heartbeat{Node: "h1", Incarnation: 1, AtMS: 1, Copies: testCopies(1000, 123456)}
	data := mustMarshal(b, hb)
	hb.AtMS, hb.Beat = 2, 2
	next := mustMarshal(b, hb)
	b.Run("unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var out wire.Heartbeat
			if err := json.Unmarshal(data, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoder-changed", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := NewDecoder().Decode("h1", data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoder-unchanged", func(b *testing.B) {
		d := NewDecoder()
		if _, err := d.Decode("h1", data); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := d.Decode("h1", next); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Liveness beats between full beats decode as such and do not displace
// the full beats' remembered prefix.
func TestDecoderLivenessBeats(t *testing.T) {
	d := NewDecoder()
	full := wire.Heartbeat{Node: "h1", Incarnation: 1, Copies: []wire.CopyStatus{{Stream: "a", Role: wire.RoleOwner}}, Beat: 1}
	live := wire.Heartbeat{Node: "h1", Incarnation: 1, Copies: []wire.CopyStatus{}, Beat: 2, Live: true}
	for i := range 3 {
		full.Beat, live.Beat = uint64(2*i+1), uint64(2*i+2)
		for _, hb := range []wire.Heartbeat{full, live} {
			data, err := json.Marshal(hb)
			if err != nil {
				t.Fatal(err)
			}
			got, err := d.Decode("brook.hb.h1", data)
			if err != nil {
				t.Fatal(err)
			}
			if got.Live != hb.Live || got.Beat != hb.Beat || len(got.Copies) != len(hb.Copies) {
				t.Fatalf("decoded %+v, want %+v", got, hb)
			}
		}
		if p := d.last["brook.hb.h1"]; p == nil || len(p.hb.Copies) != 1 {
			t.Fatalf("remembered prefix after a liveness beat: %+v", p)
		}
	}
}
