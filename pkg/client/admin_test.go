package client

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// Admin requests travel as JSON to brook.admin.<verb>; results and error
// replies are decoded.
func TestAdminRoundTripsAndErrors(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamCreate), func(m *nats.Msg) {
		var req wire.StreamCreate
		if err := json.Unmarshal(m.Data, &req); err != nil {
			respondJSON(t, m, wire.ErrorReply{Error: wire.Errorf(wire.CodeBadRequest, "%v", err)})
			return
		}
		if req.Stream == "taken" {
			respondJSON(t, m, wire.ErrorReply{Error: wire.Errorf(wire.CodeExists, "stream %q exists", req.Stream)})
			return
		}
		respondJSON(t, m, wire.StreamInfo{Stream: req.Stream, Copies: req.Copies, Policy: req.Policy, Version: 5})
	})
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
		respondJSON(t, m, wire.ErrorReply{Error: wire.Errorf(wire.CodeNotFound, "no such stream")})
	})
	subscribe(t, svc, wire.AdminSubject(wire.VerbNodeDrain), func(m *nats.Msg) {
		var req wire.NodeRef
		_ = json.Unmarshal(m.Data, &req)
		respondJSON(t, m, wire.OK{OK: req.Node == "h2", Version: 9})
	})
	subscribe(t, svc, wire.AttentionList, func(m *nats.Msg) {
		respondJSON(t, m, wire.AttentionListReply{Entries: []wire.AttentionEntry{{Kind: wire.AttentionWaitPrefix, Stream: "s"}}, Version: 3})
	})
	c := connectClient(t, url)
	ctx := ctxTimeout(t, 10*time.Second)

	info, err := c.CreateStream(ctx, wire.StreamCreate{Stream: "s", Copies: 3, Policy: "majority_durable"})
	if err != nil || info.Stream != "s" || info.Copies != 3 || info.Version != 5 {
		t.Fatalf("create = %+v, %v", info, err)
	}
	_, err = c.CreateStream(ctx, wire.StreamCreate{Stream: "taken", Copies: 3})
	var werr *wire.Error
	if !errors.As(err, &werr) || werr.Code != wire.CodeExists {
		t.Fatalf("create taken: err = %v, want exists", err)
	}
	_, err = c.StreamInfo(ctx, "nope")
	if !errors.Is(err, ErrNoSuchStream) || wire.CodeOf(err) != wire.CodeNotFound {
		t.Fatalf("info: err = %v, want ErrNoSuchStream and code not_found", err)
	}
	ok, err := c.DrainNode(ctx, "h2")
	if err != nil || !ok.OK || ok.Version != 9 {
		t.Fatalf("drain = %+v, %v", ok, err)
	}
	list, err := c.AttentionList(ctx)
	if err != nil || len(list.Entries) != 1 || list.Entries[0].Kind != wire.AttentionWaitPrefix {
		t.Fatalf("attention = %+v, %v", list, err)
	}
}

// A read waits for a coordinator to appear (no responders are retried); a
// write is not retried after a timeout, since it may have been applied.
func TestAdminRetryRules(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	c := connectClient(t, url, WithAdminTimeout(100*time.Millisecond))

	var creates atomic.Int32
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamCreate), func(m *nats.Msg) {
		creates.Add(1) // never answers
	})
	_, err := c.CreateStream(ctxTimeout(t, 10*time.Second), wire.StreamCreate{Stream: "s", Copies: 1})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("create: err = %v, want ErrTimeout", err)
	}
	if creates.Load() != 1 {
		t.Fatalf("create sent %d times, want 1", creates.Load())
	}

	var infos atomic.Int32
	subscribe(t, svc, wire.AdminSubject(wire.VerbClusterInfo), func(m *nats.Msg) {
		if infos.Add(1) < 3 {
			respondJSON(t, m, wire.ErrorReply{Error: wire.Errorf(wire.CodeUnavailable, "no leader yet")})
			return
		}
		respondJSON(t, m, wire.ClusterInfo{Leader: 2})
	})
	ci, err := c.ClusterInfo(ctxTimeout(t, 10*time.Second))
	if err != nil || ci.Leader != 2 || infos.Load() != 3 {
		t.Fatalf("cluster info = %+v, %v after %d asks", ci, err, infos.Load())
	}
}

// A stream.move may take its hand-off timeout and the recovery after it to
// be answered: the client waits for that (wire.MoveReplyWithin), not only
// its admin timeout, which still bounds the other verbs.
func TestMoveStreamWaitsForTheMovesAnswer(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	const answerAfter = 400 * time.Millisecond
	for _, verb := range []string{wire.VerbStreamMove, wire.VerbNodeDrain} {
		subscribe(t, svc, wire.AdminSubject(verb), func(m *nats.Msg) {
			go func() {
				time.Sleep(answerAfter)
				if verb == wire.VerbStreamMove {
					respondJSON(t, m, wire.StreamMoveReply{Stream: "s", From: "h1", To: "h2", Epoch: 2})
					return
				}
				respondJSON(t, m, wire.OK{OK: true})
			}()
		})
	}
	c := connectClient(t, url, WithAdminTimeout(100*time.Millisecond), WithRetry(0, 0))
	ctx := ctxTimeout(t, 10*time.Second)
	rep, err := c.MoveStream(ctx, wire.StreamMove{Stream: "s", Node: "h2"})
	if err != nil || rep.To != "h2" || rep.Epoch != 2 {
		t.Fatalf("move answered after %v with a 100ms admin timeout: %+v, %v", answerAfter, rep, err)
	}
	if _, err := c.DrainNode(ctx, "h1"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("drain answered after %v with a 100ms admin timeout: %v, want a timeout", answerAfter, err)
	}
	// The caller's context still ends the wait.
	short := ctxTimeout(t, 150*time.Millisecond)
	if _, err := c.MoveStream(short, wire.StreamMove{Stream: "s"}); err == nil || !errors.Is(short.Err(), context.DeadlineExceeded) {
		t.Fatalf("move under a 150ms context: %v", err)
	}
}
