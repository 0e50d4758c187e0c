package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/attention/judge"
)

func asg(stream string, id, epoch uint64, pol, owner string, followers ...string) wire.Assignment {
	return wire.Assignment{Stream: stream, StreamID: id, Epoch: epoch, Owner: owner, Followers: followers, Policy: pol}
}

func cs(a wire.Assignment, role string, epoch, tail uint64, sealed bool) wire.CopyStatus {
	return wire.CopyStatus{Stream: a.Stream, StreamID: a.StreamID, Role: role, Epoch: epoch, RecordTail: tail, Sealed: sealed}
}

func info(a wire.Assignment, status string) wire.StreamInfo {
	return wire.StreamInfo{Stream: a.Stream, StreamID: a.StreamID, Copies: len(a.Copies()), Policy: a.Policy,
		Assignment: a, Status: status, Starts: []wire.HistoryStart{}, CopyTails: []wire.CopyTails{}}
}

func nodes(states ...string) []wire.NodeInfo {
	var out []wire.NodeInfo
	for i := 0; i+1 < len(states); i += 2 {
		out = append(out, wire.NodeInfo{Node: states[i], State: states[i+1], Incarnation: 1})
	}
	return out
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatalf("close %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// TestServiceFollowsSecondOwnerLoss plays the seed's confirmed-prefix case
// against the service: the owner that took over at epoch 2 with 100 records
// is lost before its followers caught up; the recovery waits, the entry
// appears; the owner comes back and publishes nothing yet, the entry goes
// quiet; the recovery completes, the list empties. Throughout, the list is
// read as an operator reads it: on brook.attention.list and over HTTP.
func TestServiceFollowsSecondOwnerLoss(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns, "test")
	svc := startService(t, ns, testRefresh)
	web := httptest.NewServer(svc.Handler())
	defer web.Close()

	// Before any coordinator has answered, the service says it is not ready.
	eventually(t, 5*time.Second, "not ready before the first pull", func() (bool, string) {
		_, werr, err := requestList(nc) // no responders until the service has subscribed
		return err == nil && werr != nil && werr.Code == wire.CodeUnavailable, errString(err, werr)
	})
	for _, path := range []string{"/healthz", "/attention", "/"} {
		if code, body := httpGet(t, web.URL+path); code != http.StatusServiceUnavailable {
			t.Errorf("GET %s before the first pull: %d %s", path, code, body)
		}
	}

	orders := asg("orders", 7, 2, "majority_durable", "h2", "h3", "h4")
	audit := asg("audit", 8, 1, "majority_durable", "h1", "h3", "h4")
	start := wire.HistoryStart{Epoch: 2, RecordTail: 100, CursorTail: 9, Node: "h2"}
	waiting := info(orders, wire.StatusWaiting)
	waiting.Starts = []wire.HistoryStart{{Epoch: 1, Node: "h1"}, start}
	waiting.Recovery = &wire.PendingRecovery{
		Stream: "orders", Transition: 3, Old: orders, Proposal: asg("orders", 7, 3, "majority_durable", "h3", "h4", "h1"),
		Reason: "expired",
		Wait:   &wire.RecoveryWait{Kind: "confirmed_prefix", Answered: 2, Needed: 2, Start: &start, BestTail: 90, BestNode: "h3"},
	}
	hb := startHeartbeats(t, nc)
	hb.run("h1", cs(audit, wire.RoleOwner, 1, 40, false))
	hb.run("h3", cs(orders, wire.RoleFollower, 3, 90, true), cs(audit, wire.RoleFollower, 1, 40, false))
	hb.run("h4", cs(orders, wire.RoleFollower, 3, 80, true), cs(audit, wire.RoleFollower, 1, 40, false))

	fc := newFakeCoordinator(t, nc)
	fc.set(t, 5, []wire.StreamInfo{waiting, info(audit, wire.StatusServing)},
		nodes("h1", wire.NodeLive, "h2", wire.NodeExpired, "h3", wire.NodeLive, "h4", wire.NodeLive), true)

	var list wire.AttentionListReply
	eventually(t, 5*time.Second, "the confirmed-prefix wait is listed", func() (bool, string) {
		r, werr, err := requestList(nc)
		if err != nil || werr != nil {
			return false, "error " + errString(err, werr)
		}
		list = r
		_, ok := hasKind(r.Entries, wire.AttentionWaitPrefix, "orders")
		return ok, strings.Join(entryKinds(r.Entries), " ")
	})
	if got, want := entryKinds(list.Entries), []string{
		wire.AttentionWaitPrefix + "/orders/h2",
		wire.AttentionNodeHolds + "//h2",
	}; !slices.Equal(got, want) {
		t.Fatalf("list %v, want %v", got, want)
	}
	if list.Version != 5 {
		t.Errorf("version %d, want 5", list.Version)
	}
	e := list.Entries[0]
	for k, v := range map[string]any{
		"start_record_tail": 100.0, "start_epoch": 2.0, "start_node": "h2", "best_tail": 90.0, "best_node": "h3",
		"fence_epoch": 3.0, "missing_records": 10.0,
	} {
		if e.Figures[k] != v {
			t.Errorf("figure %s = %v, want %v", k, e.Figures[k], v)
		}
	}
	if e.Severity != wire.SeverityCritical || !strings.Contains(e.Headline, "100 records") {
		t.Errorf("entry %+v", e)
	}

	// Since-when stays while the condition does.
	again, _, err := requestList(nc)
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := hasKind(again.Entries, wire.AttentionWaitPrefix, "orders"); !ok || w.SinceMS != e.SinceMS {
		t.Errorf("since moved: %d then %d", e.SinceMS, w.SinceMS)
	}

	// The same list over HTTP, as JSON and as a page.
	code, body := httpGet(t, web.URL+"/attention")
	var viaHTTP wire.AttentionListReply
	if code != http.StatusOK || json.Unmarshal([]byte(body), &viaHTTP) != nil {
		t.Fatalf("GET /attention: %d %s", code, body)
	}
	if !slices.Equal(entryKinds(viaHTTP.Entries), entryKinds(list.Entries)) {
		t.Errorf("HTTP list %v, NATS list %v", entryKinds(viaHTTP.Entries), entryKinds(list.Entries))
	}
	code, body = httpGet(t, web.URL+"/")
	for _, want := range []string{`http-equiv="refresh"`, wire.AttentionWaitPrefix, "orders", "start_record_tail=100", "1 critical, 1 warning, 0 info"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET /: %d, page lacks %q", code, want)
		}
	}
	if code, body := httpGet(t, web.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("GET /healthz: %d %s", code, body)
	}
	if code, _ := httpGet(t, web.URL+"/nope"); code != http.StatusNotFound {
		t.Errorf("GET /nope: %d", code)
	}

	// h2 comes back and has published nothing yet: quiet about the wait.
	hb.run("h2")
	eventually(t, 5*time.Second, "the wait goes quiet while h2 has published nothing", func() (bool, string) {
		r, werr, err := requestList(nc)
		if err != nil || werr != nil {
			return false, "error " + errString(err, werr)
		}
		_, ok := hasKind(r.Entries, wire.AttentionWaitPrefix, "orders")
		return !ok, strings.Join(entryKinds(r.Entries), " ")
	})

	// h2 answers the seal with its 100 records and the recovery commits h2
	// as owner at epoch 3; hosts apply it.
	moved := asg("orders", 7, 3, "majority_durable", "h2", "h3", "h4")
	hb.run("h2", cs(moved, wire.RoleOwner, 3, 100, false))
	hb.run("h3", cs(moved, wire.RoleFollower, 3, 100, false), cs(audit, wire.RoleFollower, 1, 40, false))
	hb.run("h4", cs(moved, wire.RoleFollower, 3, 100, false), cs(audit, wire.RoleFollower, 1, 40, false))
	served := info(moved, wire.StatusServing)
	served.Starts = append(waiting.Starts, wire.HistoryStart{Epoch: 3, RecordTail: 100, CursorTail: 9, Node: "h2"})
	fc.set(t, 6, []wire.StreamInfo{served, info(audit, wire.StatusServing)},
		nodes("h1", wire.NodeLive, "h2", wire.NodeLive, "h3", wire.NodeLive, "h4", wire.NodeLive), true)
	eventually(t, 5*time.Second, "the list empties", func() (bool, string) {
		r, werr, err := requestList(nc)
		if err != nil || werr != nil {
			return false, "error " + errString(err, werr)
		}
		return len(r.Entries) == 0 && r.Version == 6, strings.Join(entryKinds(r.Entries), " ")
	})
	if _, body := httpGet(t, web.URL+"/"); !strings.Contains(body, "Nothing needs attention") {
		t.Errorf("empty page: %s", body)
	}
}

func errString(err error, werr *wire.Error) string {
	if err != nil {
		return err.Error()
	}
	if werr != nil {
		return werr.Error()
	}
	return "none"
}

// TestNoticePullsAtOnce: with the periodic pull far away, a change notice
// newer than the view makes the service pull, and the hosts' pull requests
// that share the notice wildcard are left alone.
func TestNoticePullsAtOnce(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns, "test")
	fc := newFakeCoordinator(t, nc)
	fc.set(t, 1, []wire.StreamInfo{}, nodes("h1", wire.NodeLive), false)
	svc := startService(t, ns, time.Hour)
	eventually(t, 5*time.Second, "first pull", func() (bool, string) {
		ok, why := svc.Ready()
		return ok, why
	})

	// A host's pull request is not the attention service's to answer.
	if _, err := nc.Request(wire.AssignPull, []byte(`{"node":"h1"}`), 200*time.Millisecond); err == nil {
		t.Errorf("someone answered %s", wire.AssignPull)
	}

	a := asg("s", 1, 4, "", "h1")
	s := info(a, wire.StatusServing)
	s.AcceptedLoss = &wire.AcceptedLoss{Stream: "s", Epoch: 4, Node: "h1", RecordTail: 7, StartTail: 9}
	fc.set(t, 2, []wire.StreamInfo{s}, nodes("h1", wire.NodeLive), true)
	eventually(t, 5*time.Second, "the accepted loss is listed after the notice", func() (bool, string) {
		r, _, ok := svc.List()
		_, has := hasKind(r.Entries, wire.AttentionAcceptedLoss, "s")
		return ok && has && r.Version == 2, strings.Join(entryKinds(r.Entries), " ")
	})
	if n := fc.pulls.Load(); n != 2 {
		t.Errorf("%d pulls, want 2 (start and notice)", n)
	}
	// An older notice (say from a lagging replica) pulls nothing: after it
	// and a newer one, which the service handles in order, there is exactly
	// one more pull.
	for _, v := range []uint64{1, 2} {
		data, _ := json.Marshal(wire.AssignNotice{Version: v})
		if err := nc.Publish(wire.AssignNoticeSubject("h1"), data); err != nil {
			t.Fatal(err)
		}
	}
	fc.set(t, 3, []wire.StreamInfo{}, nodes("h1", wire.NodeLive), true)
	eventually(t, 5*time.Second, "the cleared state is listed after the notice", func() (bool, string) {
		r, _, ok := svc.List()
		return ok && len(r.Entries) == 0 && r.Version == 3, strings.Join(entryKinds(r.Entries), " ")
	})
	if n := fc.pulls.Load(); n != 3 {
		t.Errorf("%d pulls, want 3 (start and two newer notices)", n)
	}
}

// TestRestartRebuildsWithinTTL: a service started from nothing lists every
// entry within one heartbeat TTL, and stays quiet about copies it has not
// heard from yet instead of listing them as below policy.
func TestRestartRebuildsWithinTTL(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns, "test")
	audit := asg("audit", 1, 1, "majority_durable", "h1", "h3", "h4")
	ledger := asg("ledger", 2, 2, "majority_durable", "h3", "h4", "h9")
	tiny := asg("tiny", 3, 1, "local_durable", "h5", "h6")
	hb := startHeartbeats(t, nc)
	hb.run("h1", cs(audit, wire.RoleOwner, 1, 10, false), cs(ledger, wire.RoleNone, 1, 30, true))
	hb.run("h3", cs(audit, wire.RoleFollower, 1, 10, false), cs(ledger, wire.RoleOwner, 2, 20, false))
	hb.run("h4", cs(audit, wire.RoleFollower, 1, 10, false), cs(ledger, wire.RoleFollower, 2, 20, false))
	hb.run("h5", cs(tiny, wire.RoleOwner, 1, 5, false))
	// h6 died a moment ago; the coordinator has not expired it yet. h9 is
	// expired.
	fc := newFakeCoordinator(t, nc)
	fc.set(t, 9, []wire.StreamInfo{info(audit, wire.StatusServing), info(ledger, wire.StatusServing), info(tiny, wire.StatusServing)},
		nodes("h1", wire.NodeLive, "h3", wire.NodeLive, "h4", wire.NodeLive, "h5", wire.NodeLive, "h6", wire.NodeLive, "h9", wire.NodeExpired), false)
	started := time.Now()
	svc := startService(t, ns, testRefresh)
	want := []string{
		wire.AttentionBelowPolicy + "/tiny/",
		wire.AttentionNodeHolds + "//h9",
		wire.AttentionSealedLeft + "/ledger/h1",
	}
	var got []string
	for {
		r, _, ok := svc.List()
		got = entryKinds(r.Entries)
		elapsed := time.Since(started)
		if _, bad := hasKind(r.Entries, wire.AttentionBelowPolicy, "audit"); bad {
			t.Fatalf("healthy audit listed below policy: %v", got)
		}
		if ok && elapsed < testTTL {
			// Silence is no evidence yet: h6 may simply not have been heard.
			if _, bad := hasKind(r.Entries, wire.AttentionBelowPolicy, "tiny"); bad {
				t.Fatalf("tiny listed below policy %v after start, before a TTL of listening", elapsed)
			}
		}
		if ok && slices.Equal(got, want) {
			t.Logf("full list after %v (TTL %v)", elapsed, testTTL)
			break
		}
		if elapsed > testTTL+time.Second {
			t.Fatalf("after %v the list is %v, want %v", elapsed, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPageEscapes(t *testing.T) {
	var b strings.Builder
	err := page.Execute(&b, pageData{Ready: true, RefreshSeconds: 1, Entries: []pageEntry{{
		Severity: `critical" onmouseover="x`, Kind: "k", Headline: `<script>alert(1)</script>`,
		Figures: []string{`a=<b>`},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{"<script>alert", `" onmouseover="x`, "a=<b>"} {
		if strings.Contains(out, bad) {
			t.Errorf("page holds unescaped %q", bad)
		}
	}
	if !strings.Contains(out, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("headline not escaped as text: %s", out)
	}
}

func TestFigureLines(t *testing.T) {
	got := figureLines(map[string]any{
		"w": 2, "nodes": []string{"h1", "h2"}, "not_current": map[string]any{"h3": "node expired", "h2": "at epoch 1"}, "policy": "majority_durable",
	})
	want := []string{"nodes=[h1, h2]", "not_current={h2=at epoch 1, h3=node expired}", "policy=majority_durable", "w=2"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestRunEndsCleanly cancels Run many times: when its context ends, Run
// returns nil even if the watch has returned first (it once answered
// "watch: %!w(<nil>)" whenever select picked the watch's channel).
func TestRunEndsCleanly(t *testing.T) {
	ns := startNATS(t)
	for i := 0; i < 200; i++ {
		nc := connect(t, ns, "brook-attention")
		svc := New(nc, Options{
			Judge:          judge.Config{TTL: testTTL, LagWindow: 10 * time.Second},
			Refresh:        testRefresh,
			RequestTimeout: time.Second,
			Logger:         testLogger(t),
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		time.Sleep(time.Duration(i%4) * time.Millisecond)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run %d: Run returned %v after its context ended, want nil", i, err)
		}
	}
}
