package linkconn

import (
	"bufio"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestQueueWritesFramesInOrder: frames appended by Append come out of
// WriteLoop as ReadFrame reads them, in order, with their kinds, ids and
// bodies; an oversized frame is refused and leaves nothing behind.
func TestQueueWritesFramesInOrder(t *testing.T) {
	a, b := net.Pipe()
	defer func() { _ = a.Close(); _ = b.Close() }()
	q := NewQueue(HeaderLen+100, 1<<20)
	done := make(chan struct{})
	wrote := make(chan error, 1)
	go func() { wrote <- q.WriteLoop(a, done, time.Second) }()
	if err := q.Append(9, 1, func(p []byte) []byte { return append(p, strings.Repeat("x", 200)...) }); err == nil || errors.Is(err, ErrClosed) {
		t.Fatalf("an oversized frame: %v", err)
	}
	for i := range 3 {
		if err := q.Append(byte(i), uint64(10+i), func(p []byte) []byte { return append(p, byte('a'+i)) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Append(7, 0, nil); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(b)
	for i := range 3 {
		kind, id, body, err := ReadFrame(r, 1<<10)
		if err != nil || kind != byte(i) || id != uint64(10+i) || string(body) != string(rune('a'+i)) {
			t.Fatalf("frame %d: kind %d id %d body %q err %v", i, kind, id, body, err)
		}
	}
	if kind, _, body, err := ReadFrame(r, 1<<10); err != nil || kind != 7 || len(body) != 0 {
		t.Fatalf("empty frame: kind %d body %q err %v", kind, body, err)
	}
	close(done)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	q.Close()
	if err := q.Append(1, 1, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
}

// TestQueueBacklog: an Append that leaves more than the limit queued
// reports ErrBacklog.
func TestQueueBacklog(t *testing.T) {
	q := NewQueue(1<<20, 100)
	body := func(p []byte) []byte { return append(p, make([]byte, 60)...) }
	if err := q.Append(1, 0, body); err != nil {
		t.Fatal(err)
	}
	if err := q.Append(1, 0, body); !errors.Is(err, ErrBacklog) {
		t.Fatalf("second frame over the limit: %v", err)
	}
}

// TestReadFrameRejectsBadLengths: a length below the kind and id, or over
// the limit, is an error before anything is allocated for it.
func TestReadFrameRejectsBadLengths(t *testing.T) {
	for _, n := range []uint32{0, HeaderLen - 5, 1 << 30} {
		p := binary.BigEndian.AppendUint32(nil, n)
		p = append(p, make([]byte, HeaderLen)...)
		if _, _, _, err := ReadFrame(strings.NewReader(string(p)), 1<<20); err == nil {
			t.Errorf("length %d was read", n)
		}
	}
}

func TestCertificateFingerprint(t *testing.T) {
	c, fp, err := Certificate("x", x509.ExtKeyUsageClientAuth)
	if err != nil {
		t.Fatal(err)
	}
	if len(fp) != 64 || Fingerprint(c.Certificate[0]) != fp {
		t.Fatalf("fingerprint %q", fp)
	}
	_, fp2, _ := Certificate("x")
	if fp2 == fp {
		t.Fatal("two certificates with one fingerprint")
	}
}
