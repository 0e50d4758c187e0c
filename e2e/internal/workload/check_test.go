package workload

import (
	"errors"
	"strings"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

func TestPayloadRoundTrip(t *testing.T) {
	for _, size := range []int{0, 8, 64, 300} {
		id := ID{Producer: "run-p3", Seq: 12345}
		p := Payload(id, size)
		if size > 0 && len(p) < size {
			t.Fatalf("size %d: payload of %d bytes", size, len(p))
		}
		got, err := ParsePayload(p)
		if err != nil || got != id {
			t.Fatalf("size %d: parse %q = %v, %v", size, p, got, err)
		}
	}
	p := Payload(ID{Producer: "x", Seq: 1}, 32)
	p[20] ^= 1
	if _, err := ParsePayload(p); err == nil {
		t.Fatal("a damaged filler parsed")
	}
	for _, bad := range []string{"", "nohash", "x#", "x#abc#", "#1#"} {
		if _, err := ParsePayload([]byte(bad)); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
}

// fixture builds outcomes and deliveries by hand.
type fixture struct {
	outcomes []Outcome
	data     map[uint64][]byte
}

func newFixture() *fixture { return &fixture{data: map[uint64][]byte{}} }

func (f *fixture) confirmed(prod string, seq, off, epoch uint64) ID {
	id := ID{Producer: prod, Seq: seq}
	f.outcomes = append(f.outcomes, Outcome{ID: id, Data: Payload(id, 16), Confirmed: true,
		Confirm: wire.PublishConfirm{Offset: off, Epoch: epoch, Copies: 2, W: 2}})
	return id
}

func (f *fixture) failed(prod string, seq uint64) ID {
	id := ID{Producer: prod, Seq: seq}
	f.outcomes = append(f.outcomes, Outcome{ID: id, Data: Payload(id, 16), Err: &wire.Error{Code: wire.CodeConfirmTimeout}})
	return id
}

func (f *fixture) deliver(off uint64, id ID) { f.data[off] = Payload(id, 16) }

func (f *fixture) check(cfg CheckConfig) (Report, error) {
	return Check(f.outcomes, Delivered{Data: f.data}, cfg)
}

func wantErr(t *testing.T, err error, sub string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), sub) {
		t.Fatalf("error %v, want one containing %q", err, sub)
	}
}

func TestCheckAllDelivered(t *testing.T) {
	f := newFixture()
	a := f.confirmed("p", 0, 0, 1)
	b := f.failed("p", 1) // kept although not confirmed
	c := f.confirmed("p", 2, 2, 2)
	d := f.failed("q", 0) // lost, as it may be
	_ = d
	f.deliver(0, a)
	f.deliver(1, b)
	f.deliver(2, c)
	rep, err := f.check(CheckConfig{MinCopies: func(uint64) int { return 2 }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Confirmed != 2 || rep.UnconfirmedDelivered != 1 || rep.Offsets != 3 || rep.RetryCopies != 0 {
		t.Fatalf("report %+v", rep)
	}
}

func TestCheckLostConfirm(t *testing.T) {
	f := newFixture()
	a := f.confirmed("p", 0, 0, 1)
	f.confirmed("p", 1, 1, 1)
	f.deliver(0, a)
	_, err := f.check(CheckConfig{})
	wantErr(t, err, "p#1 confirmed at offset 1 (epoch 1, duplicate=false) was never delivered")
}

func TestCheckConfirmedOffsetHoldsAnother(t *testing.T) {
	f := newFixture()
	f.confirmed("p", 0, 0, 1)
	x := f.failed("q", 7)
	f.deliver(0, x)
	_, err := f.check(CheckConfig{})
	wantErr(t, err, "p#0 confirmed at offset 0 (epoch 1) but that offset was delivered holding")
}

func TestCheckAcceptedLoss(t *testing.T) {
	f := newFixture()
	a := f.confirmed("p", 0, 0, 1)
	f.confirmed("p", 1, 1, 1) // lost and its offset reused
	f.confirmed("p", 2, 2, 1) // lost, never delivered
	n := f.confirmed("n", 0, 1, 3)
	f.deliver(0, a)
	f.deliver(1, n)
	lose := func(o Outcome) bool { return o.Confirm.Epoch < 3 && o.Confirm.Offset >= 1 }
	rep, err := f.check(CheckConfig{MayLose: lose})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lost != 2 {
		t.Fatalf("report %+v, want 2 lost", rep)
	}
	// Without the acceptance the same deliveries are a loss.
	_, err = f.check(CheckConfig{})
	wantErr(t, err, "p#2 confirmed at offset 2")
}

func TestCheckRetryCopies(t *testing.T) {
	f := newFixture()
	a := f.confirmed("p", 0, 1, 2) // its first attempt survived at offset 0
	f.deliver(0, a)
	f.deliver(1, a)
	rep, err := f.check(CheckConfig{})
	wantErr(t, err, "was also delivered at offset 0")
	if rep.RetryCopies != 1 {
		t.Fatalf("report %+v; want one earlier retry copy counted", rep)
	}
	// An unconfirmed publish kept twice is a duplicate too.
	f = newFixture()
	u := f.failed("p", 1)
	f.deliver(0, u)
	f.deliver(1, u)
	_, err = f.check(CheckConfig{})
	wantErr(t, err, "delivered at 2 offsets")
	// A copy after the confirmed offset is a second delivery.
	f = newFixture()
	a = f.confirmed("p", 0, 0, 1)
	f.deliver(0, a)
	f.deliver(1, a)
	_, err = f.check(CheckConfig{})
	wantErr(t, err, "delivered again at offset 1")
}

func TestCheckTwoConfirmsOneOffset(t *testing.T) {
	f := newFixture()
	a := f.confirmed("p", 0, 5, 1)
	f.confirmed("q", 0, 5, 1) // a stale owner confirmed the same offset
	f.deliver(5, a)
	_, err := f.check(CheckConfig{})
	wantErr(t, err, "offset 5 was confirmed for p#0 and for q#0")
}

func TestCheckUnknownAndDamaged(t *testing.T) {
	f := newFixture()
	f.deliver(0, ID{Producer: "ghost", Seq: 1})
	f.data[1] = []byte("garbage")
	_, err := f.check(CheckConfig{})
	wantErr(t, err, "ghost#1 delivered at offsets [0] was never published")
	wantErr(t, err, "offset 1:")
}

func TestCheckBelowW(t *testing.T) {
	f := newFixture()
	a := f.confirmed("p", 0, 0, 1)
	f.deliver(0, a)
	_, err := f.check(CheckConfig{MinCopies: func(uint64) int { return 3 }})
	wantErr(t, err, "below the W=3 its assignment asks")
}

func TestCheckReaderProblems(t *testing.T) {
	_, err := Check(nil, Delivered{Problems: []string{"offsets 3 to 4 were skipped"}}, CheckConfig{})
	wantErr(t, err, "reader: offsets 3 to 4 were skipped")
}

func TestLedger(t *testing.T) {
	l := NewLedger()
	id := ID{Producer: "p", Seq: 0}
	if err := l.Record(Outcome{ID: id, Confirmed: true, Confirm: wire.PublishConfirm{Epoch: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(Outcome{ID: id}); err == nil {
		t.Fatal("an id recorded twice was accepted")
	}
	if err := l.Record(Outcome{ID: ID{Producer: "p", Seq: 1}, Err: errors.New("x")}); err != nil {
		t.Fatal(err)
	}
	if n := l.Count(ConfirmedAt(2)); n != 1 {
		t.Fatalf("confirmed at 2: %d", n)
	}
	if n := l.Count(ConfirmedAt(3)); n != 0 {
		t.Fatalf("confirmed at 3: %d", n)
	}
	s := l.Stats()
	if s.Published != 2 || s.Confirmed != 1 || s.Failed != 1 || s.Errors[wire.CodeInternal] != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestCheckCopiesBelowNamedW(t *testing.T) {
	f := newFixture()
	a := f.confirmed("p", 0, 0, 1)
	f.outcomes[0].Confirm.Copies, f.outcomes[0].Confirm.W = 1, 2
	f.deliver(0, a)
	_, err := f.check(CheckConfig{})
	wantErr(t, err, "by 1 copies under W=2")
}
