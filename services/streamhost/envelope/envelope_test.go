package envelope

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestRoundTrip(t *testing.T) {
	for name, c := range map[string]Record{
		"plain":          {Payload: []byte("hello")},
		"plain empty":    {Payload: []byte{}},
		"producer":       {Producer: "p1", Seq: 7, Payload: []byte("x")},
		"producer empty": {Producer: "p", Seq: 0, Payload: []byte{}},
		"long producer":  {Producer: strings.Repeat("q", MaxProducer), Seq: 1<<64 - 1, Payload: []byte("y")},
		"binary payload": {Producer: "p", Seq: 300, Payload: []byte{0, 1, 0xff, 0}},
	} {
		t.Run(name, func(t *testing.T) {
			enc := Append([]byte("pre"), c.Producer, c.Seq, c.Payload)
			if !bytes.HasPrefix(enc, []byte("pre")) {
				t.Fatal("Append dropped dst")
			}
			enc = enc[3:]
			if len(enc) != Size(c.Producer, c.Seq, c.Payload) {
				t.Fatalf("Size %d, encoded %d bytes", Size(c.Producer, c.Seq, c.Payload), len(enc))
			}
			got, err := Decode(enc)
			if err != nil {
				t.Fatal(err)
			}
			if got.Producer != c.Producer || got.Seq != c.Seq || !bytes.Equal(got.Payload, c.Payload) {
				t.Fatalf("decoded %+v, want %+v", got, c)
			}
			p, err := Payload(enc)
			if err != nil || !bytes.Equal(p, c.Payload) {
				t.Fatalf("Payload %q %v", p, err)
			}
			producer, seq, err := Producer(enc)
			if err != nil || string(producer) != c.Producer || seq != c.Seq || (c.Producer == "") != (producer == nil) {
				t.Fatalf("Producer %q %d %v", producer, seq, err)
			}
		})
	}
}

// TestLayout pins the stored bytes: they are on disk and in replication
// batches, so a change must be deliberate.
func TestLayout(t *testing.T) {
	if got, want := Append(nil, "", 0, []byte("ab")), []byte{0x00, 'a', 'b'}; !bytes.Equal(got, want) {
		t.Fatalf("plain: % x, want % x", got, want)
	}
	got := Append(nil, "p1", 300, []byte("ab"))
	want := []byte{0x01, 0x02, 'p', '1', 0xAC, 0x02, 'a', 'b'}
	if !bytes.Equal(got, want) {
		t.Fatalf("producer: % x, want % x", got, want)
	}
}

func TestDecodeRejects(t *testing.T) {
	for name, p := range map[string][]byte{
		"empty":               nil,
		"unknown flag":        {0x02, 'a'},
		"no producer length":  {0x01},
		"zero producer":       {0x01, 0x00, 0x01},
		"producer past end":   {0x01, 0x05, 'a', 'b'},
		"producer over limit": append([]byte{0x01, 0x81, 0x02}, bytes.Repeat([]byte("a"), 257)...),
		"no sequence":         {0x01, 0x01, 'a'},
		"truncated sequence":  {0x01, 0x01, 'a', 0x80},
		"non-minimal length":  {0x01, 0x81, 0x00, 'a', 0x00},
		"non-minimal seq":     {0x01, 0x01, 'a', 0x80, 0x00},
		"overflowing seq":     append([]byte{0x01, 0x01, 'a'}, bytes.Repeat([]byte{0xff}, 10)...),
	} {
		t.Run(name, func(t *testing.T) {
			r, err := Decode(p)
			if err == nil {
				t.Fatalf("decoded %+v, want an error", r)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			if producer, seq, err := Producer(p); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Producer %q %d %v, want ErrMalformed", producer, seq, err)
			}
		})
	}
}

func TestPropertyRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		producer := rapid.OneOf(rapid.Just(""), rapid.StringN(1, MaxProducer, MaxProducer)).Draw(t, "producer")
		if len(producer) > MaxProducer {
			t.Skip("multi-byte runes made the producer too long")
		}
		seq := rapid.Uint64().Draw(t, "seq")
		payload := rapid.SliceOfN(rapid.Byte(), 0, 100).Draw(t, "payload")
		got, err := Decode(Append(nil, producer, seq, payload))
		if err != nil {
			t.Fatal(err)
		}
		wantSeq := seq
		if producer == "" {
			wantSeq = 0
		}
		if got.Producer != producer || got.Seq != wantSeq || !bytes.Equal(got.Payload, payload) {
			t.Fatalf("decoded %+v", got)
		}
	})
}

// Payload allocates nothing: a fetch strips every record it returns.
func TestPayloadDoesNotAllocate(t *testing.T) {
	stored := Append(nil, "producer-1", 300, []byte("payload"))
	if n := testing.AllocsPerRun(100, func() {
		if p, err := Payload(stored); err != nil || string(p) != "payload" {
			t.Fatalf("Payload %q, %v", p, err)
		}
	}); n != 0 {
		t.Fatalf("Payload allocated %v times per call", n)
	}
}

// Producer allocates nothing: a follower reads every record's producer.
func TestProducerDoesNotAllocate(t *testing.T) {
	stored := Append(nil, "producer-1", 300, []byte("payload"))
	if n := testing.AllocsPerRun(100, func() {
		if p, seq, err := Producer(stored); err != nil || string(p) != "producer-1" || seq != 300 {
			t.Fatalf("Producer %q, %d, %v", p, seq, err)
		}
	}); n != 0 {
		t.Fatalf("Producer allocated %v times per call", n)
	}
}

// FuzzDecode: any input decodes or fails with ErrMalformed, and what
// decodes re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{0x00, 'a'})
	f.Add(Append(nil, "p1", 300, []byte("ab")))
	f.Add([]byte{0x01, 0x81, 0x00})
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := Decode(p)
		// Payload checks exactly what Decode checks.
		if payload, perr := Payload(p); (perr == nil) != (err == nil) || !bytes.Equal(payload, r.Payload) {
			t.Fatalf("Payload %q, %v; Decode %q, %v", payload, perr, r.Payload, err)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if re := Append(nil, r.Producer, r.Seq, r.Payload); !bytes.Equal(re, p) {
			t.Fatalf("re-encodes differently\n in % x\nout % x", p, re)
		}
	})
}
