package client

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// Stats counts a failover as it happened: the owner dies holding a
// publish, probes find nobody serving, the new owner's notice has the
// attempt probed and abandoned, and the retry goes to the new owner. A
// first publish to a live owner is one attempt and nothing else.
func TestStatsCountAFailover(t *testing.T) {
	url := startNATS(t)
	a := startOwner(t, url, 1)
	c := connectClient(t, url, WithRequestTimeout(3*time.Second), WithBackoff(time.Second, time.Second))
	if pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("one")); err != nil || pc.Epoch != 1 {
		t.Fatalf("first publish: %+v %v", pc, err)
	}
	first := c.Stats()
	if first.PublishAttempts != 1 || first.Retries != 0 || first.Probes != 0 || first.StatusChecks != 0 || first.Notices != 0 {
		t.Fatalf("after one confirmed publish: %+v, want one attempt and nothing else", first)
	}
	a.holdNext()
	started := make(chan *standInOwner, 1)
	go func() {
		<-a.held
		time.Sleep(400 * time.Millisecond)
		b := startOwner(t, url, 2)
		announce(t, b, "h2")
		started <- b
	}()
	if pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("two")); err != nil || pc.Epoch != 2 {
		t.Fatalf("publish across the failover: %+v %v", pc, err)
	}
	<-started
	d := c.Stats().Sub(first)
	if d.PublishAttempts < 2 || d.Retries != d.PublishAttempts-1 {
		t.Errorf("across the failover: %d attempts and %d retries, want at least 2 attempts, each but the first a retry", d.PublishAttempts, d.Retries)
	}
	if d.Probes < 1 {
		t.Errorf("across the failover: %d probes, want at least 1 (the held attempt was abandoned by one)", d.Probes)
	}
	if d.RetriesOwnerLost < 1 || d.RetriesOwnerLost+d.RetriesNoResponders+d.RetriesTimedOut > d.Retries {
		t.Errorf("across the failover: %+v, want the abandoned attempt's retry counted as owner lost, and no more reasons than retries", d)
	}
	if d.StatusChecks > d.Retries {
		t.Errorf("across the failover: %d status checks for %d retries, want at most one each", d.StatusChecks, d.Retries)
	}
	if d.Notices != 1 {
		t.Errorf("across the failover: %d notices heard, want 1", d.Notices)
	}
	if c.Stats().NoticeSubscribes < 1 {
		t.Errorf("no notice subscription counted: %+v", c.Stats())
	}
}

// Stats counts the retries of a request about a stream in Retries and its
// questions to the coordinators in StatusChecks, each as often as the
// stand-in services saw them; the retries of an admin request go to
// AdminRetries, not Retries.
func TestStatsCountRetriesAndStatusChecks(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	attempts, infos := recoveringStream(t, svc)
	var clusterInfos atomic.Int32
	subscribe(t, svc, wire.AdminSubject(wire.VerbClusterInfo), func(m *nats.Msg) {
		if clusterInfos.Add(1) <= 2 {
			respondError(t, m, wire.Errorf(wire.CodeUnavailable, "no leader"))
			return
		}
		respondJSON(t, m, wire.ClusterInfo{})
	})
	c := connectClient(t, url, WithRetry(4, 0), WithBackoff(time.Millisecond, 2*time.Millisecond),
		WithBatching(0, 0, 0))
	c.opts.infoInterval = time.Millisecond

	if _, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("r")); !errors.Is(err, ErrRecovering) {
		t.Fatalf("publish to a recovering stream: %v, want ErrRecovering after 4 attempts", err)
	}
	st := c.Stats()
	a, i := uint64(attempts.Load()), uint64(infos.Load())
	if a != 4 || st.PublishAttempts != a || st.Retries != a-1 {
		t.Errorf("%d attempts reached the host; counted %d attempts and %d retries, want 4 and 3", a, st.PublishAttempts, st.Retries)
	}
	if i < 1 || st.StatusChecks != i {
		t.Errorf("%d stream.info requests reached the coordinator; counted %d, want as many and at least 1", i, st.StatusChecks)
	}
	if st.AdminRetries != 0 {
		t.Errorf("%d admin retries counted before any admin request", st.AdminRetries)
	}
	if st.RetriesNoResponders+st.RetriesTimedOut+st.RetriesOwnerLost != 0 || st.RetriesOther != st.Retries {
		t.Errorf("retries after refusals (recovering) counted as no responders, timed out or owner lost: %+v", st)
	}

	before := c.Stats()
	if _, err := c.ClusterInfo(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("cluster.info after two unavailable answers: %v", err)
	}
	d := c.Stats().Sub(before)
	if d.AdminRetries != 2 || d.Retries != 0 || d.StatusChecks != 0 {
		t.Errorf("cluster.info answered unavailable twice: %+v, want 2 admin retries and no stream retries or status checks", d)
	}
}

// Stats says why each retry went: the attempts before a stream's owner
// subscribed were answered no responders, and an attempt its owner
// swallowed timed out.
func TestStatsCountRetriesByReason(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	c := connectClient(t, url, WithRequestTimeout(200*time.Millisecond), WithBackoff(5*time.Millisecond, 5*time.Millisecond),
		WithBatching(0, 0, 0))

	done := make(chan error, 1)
	go func() {
		_, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("x"))
		done <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); c.Stats().RetriesNoResponders < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nobody serves the stream, and after 5 s: %+v; want 3 retries after no responders", c.Stats())
		}
	}
	var n atomic.Int32
	subscribe(t, svc, wire.PublishSubject("s"), func(m *nats.Msg) {
		if n.Add(1) == 1 {
			return // swallowed: no reply
		}
		respondJSON(t, m, wire.PublishConfirm{Offset: 1, Copies: 2})
	})
	if err := <-done; err != nil {
		t.Fatalf("publish: %v", err)
	}
	// Each attempt that reached the owner but the last timed out: the
	// first it swallowed, and any answered after the 200 ms timeout on a
	// loaded machine.
	st, reached := c.Stats(), uint64(n.Load())
	if reached < 2 || st.RetriesTimedOut != reached-1 || st.RetriesOwnerLost != 0 || st.RetriesNoResponders+st.RetriesTimedOut != st.Retries || st.Retries != st.PublishAttempts-1 {
		t.Fatalf("%+v after %d attempts reached the owner; want every retry after no responders but those after the attempts that reached it and timed out", st, reached)
	}
}

// Snapshots taken while retries are counted, and their differences,
// never hold more reasons than retries.
func TestStatsNeverShowMoreReasonsThanRetries(t *testing.T) {
	c := &Client{}
	r := &retrier{c: c, stream: "s"}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for _, err := range []error{nats.ErrNoResponders, ErrTimeout, ErrOwnerLost, nats.ErrDisconnected} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				r.countRetry(err)
			}
		}()
	}
	defer wg.Wait()
	defer stop.Store(true)
	prev := c.Stats()
	for range 200000 {
		s := c.Stats()
		for _, st := range []Stats{s, s.Sub(prev)} {
			if st.RetriesNoResponders+st.RetriesTimedOut+st.RetriesOwnerLost > st.Retries {
				t.Fatalf("more reasons than retries: %+v", st)
			}
		}
		prev = s
	}
}

// An admin write answered outcome_unknown (its proposal may yet commit)
// is not repeated: a repeat of a committed create would come back
// "exists" and tell the caller its create failed.
func TestWriteNotRepeatedOnOutcomeUnknown(t *testing.T) {
	if writeRetryable(wire.Errorf(wire.CodeOutcomeUnknown, "propose stream.create: timeout")) {
		t.Fatal("outcome_unknown is repeated")
	}
	if !writeRetryable(wire.Errorf(wire.CodeUnavailable, "no quorum")) {
		t.Fatal("unavailable is not repeated")
	}
}

// Add sums every field (a field added to Stats and left out of Add fails
// here), and Sub undoes it.
func TestStatsAddSumsEveryField(t *testing.T) {
	var a, b Stats
	av, bv := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for i := range av.NumField() {
		av.Field(i).SetUint(uint64(100 + i))
		bv.Field(i).SetUint(uint64(1000 * (i + 1)))
	}
	sum := a.Add(b)
	sv := reflect.ValueOf(sum)
	for i := range sv.NumField() {
		if got, want := sv.Field(i).Uint(), uint64(100+i)+uint64(1000*(i+1)); got != want {
			t.Errorf("%s: %d, want %d", sv.Type().Field(i).Name, got, want)
		}
	}
	if back := sum.Sub(b); back != a {
		t.Errorf("Add then Sub: %+v, want %+v", back, a)
	}
}

// TestStatusCheckCutBeforeItIsSentIsNotCounted: StatusChecks counts the
// stream.info questions sent. One cut before it is asked (its context
// ended, or the new owner's notice heard before the question) sends
// nothing and counts nothing.
func TestStatusCheckCutBeforeItIsSentIsNotCounted(t *testing.T) {
	url := startNATS(t)
	var asked atomic.Int32
	subscribe(t, responderConn(t, url), wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
		asked.Add(1)
		respondJSON(t, m, wire.StreamInfo{Stream: "s", StreamID: 1, Status: wire.StatusServing})
	})
	c := connectClient(t, url)

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.streamStatus(ended, "s"); !errors.Is(err, context.Canceled) {
		t.Fatalf("status on an ended context: %v", err)
	}
	noticed := make(chan struct{})
	close(noticed)
	r := c.newRetrier("publish", "s", 0)
	if _, err := r.statusUnlessNoticed(context.Background(), noticed); err == nil {
		t.Fatal("a question with its notice heard already was answered")
	}
	// One asked for real, so the responder is known to work.
	if _, err := c.streamStatus(context.Background(), "s"); err != nil {
		t.Fatalf("status: %v", err)
	}
	if n, got := asked.Load(), c.Stats().StatusChecks; n != 1 || got != 1 {
		t.Fatalf("%d questions reached the coordinators and %d were counted, want 1 and 1", n, got)
	}
}
