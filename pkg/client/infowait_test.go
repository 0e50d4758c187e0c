package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

func TestInfoWait(t *testing.T) {
	const iv = 250 * time.Millisecond
	for checks, want := range []time.Duration{iv, iv, 2 * iv, 4 * iv, 8 * iv, 8 * iv, 8 * iv} {
		if got := infoWait(iv, checks); got != want {
			t.Errorf("infoWait(%v, %d) = %v, want %v", iv, checks, got, want)
		}
	}
	if got := infoWait(0, 5); got != 0 {
		t.Errorf("infoWait(0, 5) = %v, want 0 (ask on every retry)", got)
	}
}

// A publish that keeps failing over asks the coordinators less and less
// often: a failover of thousands of streams has as many publishers
// retrying, and asking at a fixed interval they flooded the coordinators
// recovering those streams with stream.info requests. The stream is
// recovering (its host answers recovering) for 600 ms of retries every
// millisecond or two; at a fixed 10 ms interval that was a question for
// about every tenth attempt, with the doubling wait it is a handful.
func TestRetryAsksCoordinatorsLessOften(t *testing.T) {
	a, i := retryRecovering(t, 10*time.Millisecond, 600*time.Millisecond, 50)
	// 10, 20, 40, then every 80 ms: at most 3 + 600/80 + 1 questions.
	if i < 2 || i > 12 {
		t.Fatalf("%d stream.info requests for %d attempts, want 2 to 12 (a doubling wait from 10 ms up to 80 ms)", i, a)
	}
}

// retryRecovering publishes to a stream whose host answers recovering for
// retryFor, retrying every millisecond or two and asking the coordinators
// at the info interval iv, and returns the attempts the host saw and the
// stream.info requests the coordinator saw; it skips the test when the
// machine made fewer than minAttempts.
func retryRecovering(t *testing.T, iv, retryFor time.Duration, minAttempts int32) (attempts, infos int32) {
	t.Helper()
	url := startNATS(t)
	svc := responderConn(t, url)
	a, i := recoveringStream(t, svc)
	c := connectClient(t, url, WithRetry(0, retryFor), WithBackoff(time.Millisecond, 2*time.Millisecond),
		WithBatching(0, 0, 0))
	c.opts.infoInterval = iv

	_, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("r"))
	if err == nil {
		t.Fatal("publish to a stream that never serves: confirmed")
	}
	attempts, infos = a.Load(), i.Load()
	t.Logf("%d attempts, %d stream.info requests in %v", attempts, infos, retryFor)
	if attempts < minAttempts {
		t.Skipf("only %d attempts in %v: too slow a machine to tell", attempts, retryFor)
	}
	return attempts, infos
}

// recoveringStream has svc answer every publish to stream s recovering,
// and stream.info that s is recovering, counting both.
func recoveringStream(t *testing.T, svc *nats.Conn) (attempts, infos *atomic.Int32) {
	attempts, infos = new(atomic.Int32), new(atomic.Int32)
	subscribe(t, svc, wire.PublishSubject("s"), func(m *nats.Msg) {
		attempts.Add(1)
		respondError(t, m, wire.Errorf(wire.CodeRecovering, "stream s is recovering"))
	})
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
		infos.Add(1)
		respondJSON(t, m, wire.StreamInfo{Stream: "s", Status: wire.StatusRecovering})
	})
	return attempts, infos
}

// A publish whose attempts time out (a host takes them and answers late)
// is retried without asking the coordinators: the stream has a server, and
// in a mass failover every slow publish asking flooded them. An attempt
// that finds nobody serving still asks.
func TestRetryAfterATimeoutAsksNoCoordinator(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	var attempts, infos atomic.Int32
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
		infos.Add(1)
		respondJSON(t, m, wire.StreamInfo{Stream: "s", StreamID: 1, Status: wire.StatusServing})
	})
	sub := subscribe(t, svc, wire.PublishSubject("s"), func(m *nats.Msg) {
		if attempts.Add(1) < 3 {
			return // taken, never answered: the attempt times out
		}
		respondJSON(t, m, wire.PublishConfirm{StreamID: 1, Offset: 0, Epoch: 1, Copies: 2, W: 2})
	})
	c := connectClient(t, url, WithRetry(0, 0), WithBackoff(time.Millisecond, 2*time.Millisecond),
		WithRequestTimeout(100*time.Millisecond), WithBatching(0, 0, 0))
	if _, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("r")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if a, i := attempts.Load(), infos.Load(); a != 3 || i != 0 {
		t.Fatalf("%d attempts and %d stream.info requests, want 3 attempts and none", a, i)
	}

	// Nobody serving: the retry asks.
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Publish(ctx, "s", []byte("r")); err == nil {
		t.Fatal("publish with nobody serving: confirmed")
	}
	if i := infos.Load(); i == 0 {
		t.Fatal("retries after no responders asked no coordinator")
	}
}
