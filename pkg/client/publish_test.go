package client

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// An owner appearing after a failover: the first attempt finds no
// responders, the client asks stream.info, and the next attempt (after the
// owner subscribed) is confirmed.
func TestPublishRetriesNoRespondersThenSucceeds(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	var infos, pubs atomic.Int32
	var once sync.Once
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
		infos.Add(1)
		// The owner comes up only after the client has seen no
		// responders, so the retry path is what makes the publish work.
		once.Do(func() {
			_, err := svc.Subscribe(wire.PublishSubject("orders"), func(m *nats.Msg) {
				pubs.Add(1)
				respondJSON(t, m, wire.PublishConfirm{Offset: 7, Epoch: 2, Copies: 2})
			})
			if err == nil {
				err = svc.Flush()
			}
			if err != nil {
				t.Errorf("start owner: %v", err)
			}
		})
		respondJSON(t, m, wire.StreamInfo{Stream: "orders", Status: wire.StatusRecovering})
	})
	c := connectClient(t, url)

	pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "orders", []byte("hello"))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if pc.Offset != 7 || pc.Epoch != 2 || pc.Copies != 2 {
		t.Fatalf("confirm = %+v, want offset 7 epoch 2 copies 2", pc)
	}
	if infos.Load() < 1 {
		t.Fatalf("stream.info asked %d times, want at least 1", infos.Load())
	}
	if pubs.Load() != 1 {
		t.Fatalf("owner saw %d publishes, want 1", pubs.Load())
	}
}

// A stream the coordinators do not know fails at once with ErrNoSuchStream,
// not after the retry limits, and not as ErrRecovering.
func TestPublishNoSuchStream(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
		respondJSON(t, m, wire.ErrorReply{Error: wire.Errorf(wire.CodeNotFound, "no stream %q", "ghost")})
	})
	c := connectClient(t, url, WithRetry(0, time.Minute))

	start := time.Now()
	_, err := c.Publish(ctxTimeout(t, 30*time.Second), "ghost", []byte("x"))
	if !errors.Is(err, ErrNoSuchStream) {
		t.Fatalf("err = %v, want ErrNoSuchStream", err)
	}
	if errors.Is(err, ErrRecovering) {
		t.Fatalf("err = %v also matches ErrRecovering", err)
	}
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("err = %v, want the last attempt's no responders kept", err)
	}
	if wire.CodeOf(err) != wire.CodeNotFound {
		t.Fatalf("code = %s, want the coordinator's not_found", wire.CodeOf(err))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v; want an early answer", d)
	}
}

// A stream that stays recovering past the retry limits gives ErrRecovering.
func TestPublishRecoveringGivesUp(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
		respondJSON(t, m, wire.StreamInfo{Stream: "s", Status: wire.StatusWaiting})
	})
	c := connectClient(t, url, WithRetry(4, 0))

	_, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("x"))
	if !errors.Is(err, ErrRecovering) {
		t.Fatalf("err = %v, want ErrRecovering", err)
	}
	if errors.Is(err, ErrNoSuchStream) {
		t.Fatalf("err = %v also matches ErrNoSuchStream", err)
	}
}

// A request whose retry limit runs out on its first failure gives up at
// once: it sends no stream.info after the failed attempt, since no retry
// could use the answer.
func TestRetryLimitReachedAsksNoStatus(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  Option
	}{
		{"one attempt", WithRetry(1, 0)},
		{"time limit", WithRetry(0, time.Nanosecond)},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := startNATS(t)
			svc := responderConn(t, url)
			var infos atomic.Int32
			subscribe(t, svc, wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
				infos.Add(1)
				respondJSON(t, m, wire.StreamInfo{Stream: "s", Status: wire.StatusRecovering})
			})
			cl := connectClient(t, url, c.opt)

			_, err := cl.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("x"))
			if !errors.Is(err, nats.ErrNoResponders) {
				t.Fatalf("err = %v, want the attempt's no responders", err)
			}
			if !strings.Contains(err.Error(), "gave up after 1 attempts") {
				t.Fatalf("err = %v, want a give-up after 1 attempt", err)
			}
			if n := infos.Load(); n != 0 {
				t.Fatalf("asked stream.info %d times after the last attempt, want 0", n)
			}
		})
	}
}

// The caller's context bounds the retries too.
func TestPublishContextBoundsRetries(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
		respondJSON(t, m, wire.StreamInfo{Stream: "s", Status: wire.StatusServing})
	})
	c := connectClient(t, url, WithRetry(0, 0))

	_, err := c.Publish(ctxTimeout(t, 200*time.Millisecond), "s", []byte("x"))
	if err == nil {
		t.Fatal("publish with no owner succeeded")
	}
	if errors.Is(err, ErrRecovering) || errors.Is(err, ErrNoSuchStream) {
		t.Fatalf("err = %v; a serving stream is neither recovering nor missing", err)
	}
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("err = %v, want it to carry the last attempt's no responders", err)
	}
}

// not_owner, sealed and shutting_down are retried; the attempt after them
// is confirmed.
func TestPublishRetriesHostErrors(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	codes := []string{wire.CodeNotOwner, wire.CodeSealed, wire.CodeShuttingDown, wire.CodeRecovering}
	var n atomic.Int32
	subscribe(t, svc, wire.PublishSubject("s"), func(m *nats.Msg) {
		i := int(n.Add(1)) - 1
		if i < len(codes) {
			respondError(t, m, wire.Errorf(codes[i], "attempt %d", i))
			return
		}
		respondJSON(t, m, wire.PublishConfirm{Offset: 1, Epoch: 3, Copies: 2})
	})
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
		respondJSON(t, m, wire.StreamInfo{Stream: "s", Status: wire.StatusServing})
	})
	c := connectClient(t, url)

	pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("x"))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if pc.Epoch != 3 {
		t.Fatalf("confirm = %+v", pc)
	}
	if got := int(n.Load()); got != len(codes)+1 {
		t.Fatalf("attempts = %d, want %d", got, len(codes)+1)
	}
}

// A request that times out (the owner died holding it) is retried.
func TestPublishRetriesAfterTimeout(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	var n atomic.Int32
	subscribe(t, svc, wire.PublishSubject("s"), func(m *nats.Msg) {
		if n.Add(1) == 1 {
			return // swallowed: no reply
		}
		respondJSON(t, m, wire.PublishConfirm{Offset: 9, Copies: 2})
	})
	c := connectClient(t, url, WithRequestTimeout(100*time.Millisecond))

	pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("x"))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if pc.Offset != 9 || n.Load() != 2 {
		t.Fatalf("confirm %+v after %d attempts, want offset 9 after 2", pc, n.Load())
	}
}

// confirm_timeout is never retried nor reported as confirmed, and its
// *wire.Error (with the copy count) reaches the caller.
func TestPublishConfirmTimeoutNotRetried(t *testing.T) {
	url := startNATS(t)
	copies := 1
	n := refuser(t, url, wire.PublishSubject("s"), &wire.Error{Code: wire.CodeConfirmTimeout, Message: "1 of 2 copies", Copies: &copies})
	c := connectClient(t, url)

	pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("x"))
	if err == nil {
		t.Fatalf("unconfirmed publish reported confirmed: %+v", pc)
	}
	var werr *wire.Error
	if !errors.As(err, &werr) || werr.Code != wire.CodeConfirmTimeout {
		t.Fatalf("err = %v, want a *wire.Error confirm_timeout", err)
	}
	if werr.Copies == nil || *werr.Copies != 1 {
		t.Fatalf("copies = %v, want 1", werr.Copies)
	}
	if !IsConfirmTimeout(err) {
		t.Fatal("IsConfirmTimeout = false")
	}
	if n.Load() != 1 {
		t.Fatalf("attempts = %d, want 1", n.Load())
	}
}

// Non-retryable errors come back as they are, and the producer headers
// travel with the publish.
func TestPublishErrorDecodingAndProducerHeaders(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	var gotProducer, gotSeq string
	subscribe(t, svc, wire.PublishSubject("s"), func(m *nats.Msg) {
		gotProducer, gotSeq = m.Header.Get(wire.HeaderProducer), m.Header.Get(wire.HeaderSequence)
		respondError(t, m, wire.Errorf(wire.CodePayloadTooLarge, "record of %d bytes", len(m.Data)))
	})
	c := connectClient(t, url)

	_, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("xyz"), WithProducer("p-1", 42))
	var werr *wire.Error
	if !errors.As(err, &werr) || werr.Code != wire.CodePayloadTooLarge || werr.Message != "record of 3 bytes" {
		t.Fatalf("err = %v, want payload_too_large 'record of 3 bytes'", err)
	}
	if gotProducer != "p-1" || gotSeq != "42" {
		t.Fatalf("headers = %q/%q, want p-1/42", gotProducer, gotSeq)
	}
}

// WithStreamID sends the stream id; the not_found of an owner of a newer
// stream of the name is final (the stream meant is gone), and the confirm
// carries the stream id through.
func TestPublishWithStreamID(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	var calls atomic.Int32
	var got atomic.Value
	subscribe(t, svc, wire.PublishSubject("s"), func(m *nats.Msg) {
		calls.Add(1)
		h := m.Header.Get(wire.HeaderStreamID)
		got.Store(h)
		if h == "3" {
			respondError(t, m, wire.Errorf(wire.CodeNotFound, "stream s id 3 was deleted; the stream of that name is now id 4"))
			return
		}
		respondJSON(t, m, wire.PublishConfirm{StreamID: 4, Offset: 1, Epoch: 1, Copies: 1, W: 1})
	})
	c := connectClient(t, url)
	_, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("x"), WithStreamID(3))
	var werr *wire.Error
	if !errors.As(err, &werr) || werr.Code != wire.CodeNotFound || calls.Load() != 1 {
		t.Fatalf("publish to a deleted stream id: %v after %d attempts, want not_found after 1", err, calls.Load())
	}
	pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("x"), WithStreamID(4))
	if err != nil || pc.StreamID != 4 || got.Load() != "4" {
		t.Fatalf("publish = %+v, %v, header %v; want a confirm of stream 4", pc, err, got.Load())
	}
	if _, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("x")); err != nil || got.Load() != "" {
		t.Fatalf("publish without a stream id sent header %q (%v)", got.Load(), err)
	}
}

// A duplicate confirm (the owner dropped a repeated producer sequence) is
// a confirm: the record is held, at the first write's offset.
func TestPublishDuplicateConfirm(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	subscribe(t, svc, wire.PublishSubject("s"), func(m *nats.Msg) {
		respondJSON(t, m, wire.PublishConfirm{Offset: 4, Epoch: 1, Copies: 3, Duplicate: true})
	})
	c := connectClient(t, url)
	pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("x"), WithProducer("p", 1))
	if err != nil || !pc.Duplicate || pc.Offset != 4 {
		t.Fatalf("publish = %+v, %v; want duplicate at 4", pc, err)
	}
}

// An unreadable reply is an error, never a confirm.
func TestPublishGarbageReplyIsNotConfirm(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	subscribe(t, svc, wire.PublishSubject("s"), func(m *nats.Msg) { _ = m.Respond([]byte("not json")) })
	c := connectClient(t, url)
	if pc, err := c.Publish(ctxTimeout(t, 10*time.Second), "s", []byte("x")); err == nil {
		t.Fatalf("garbage reply taken as confirm %+v", pc)
	}
}
