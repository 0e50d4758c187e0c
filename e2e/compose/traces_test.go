package compose

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// jaegerTraces is the part of Jaeger's /api/traces answer the test reads.
type jaegerTraces struct {
	Data []struct {
		TraceID string `json:"traceID"`
		Spans   []struct {
			OperationName string `json:"operationName"`
			ProcessID     string `json:"processID"`
		} `json:"spans"`
		Processes map[string]struct {
			ServiceName string `json:"serviceName"`
		} `json:"processes"`
	} `json:"data"`
}

// failoverSpans are the spans one failover's trace must hold: the root the
// controller opens when it records the pending recovery, and the recovery
// worker's choice and guarded commit, which continue the same trace.
var failoverSpans = []string{"brook.failover", "detect", "choose", "commit"}

// sameTraceID compares trace ids as hex, ignoring the leading zeros Jaeger
// drops from ids whose high half is zero.
func sameTraceID(a, b string) bool {
	return strings.TrimLeft(strings.ToLower(a), "0") == strings.TrimLeft(strings.ToLower(b), "0")
}

// testTraces runs the stack with the traces profile, the services
// exporting OTLP/HTTP to Jaeger, kills a stream owner and waits for the
// failover's trace in Jaeger's query API.
func testTraces(ctx context.Context, t *testing.T, compose composeCmd, root string) {
	services := append(slices.Clone(coreServices), "jaeger")
	s, cl := startStack(ctx, t, compose, root, stackConfig{Profiles: []string{"traces"}, OTLPEndpoint: "http://jaeger:4318"}, services)
	const stream = "traced"
	before := createStream(ctx, t, cl, stream)
	for i := range 20 {
		if _, err := cl.Publish(ctx, stream, fmt.Appendf(nil, "traced-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	id, err := s.Container(ctx, serviceOf(before.Assignment.Owner))
	if err != nil {
		t.Fatal(err)
	}
	if err := docker(ctx, "kill", "--signal", "KILL", id); err != nil {
		t.Fatal(err)
	}
	var after wire.StreamInfo
	fctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	err = poll(fctx, "the failover committed", func(ctx context.Context) (bool, error) {
		var err error
		after, err = cl.StreamInfo(ctx, stream)
		return err == nil && after.Assignment.Epoch > before.Assignment.Epoch && after.Status == wire.StatusServing, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if after.LastTraceID == "" {
		t.Fatalf("stream info after the failover names no trace: %+v", after)
	}
	t.Logf("failover of %s committed (owner %s, epoch %d), trace %s", stream, after.Assignment.Owner, after.Assignment.Epoch, after.LastTraceID)

	// The coordinators export in batches (every few seconds), so the
	// trace appears in Jaeger a little after the failover.
	q := url.Values{"service": {"brook-coordinator"}, "lookback": {"1h"}, "limit": {"50"}}
	api := s.JaegerURL() + "/api/traces?" + q.Encode()
	var found []string
	jctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err = poll(jctx, "the failover trace in Jaeger", func(ctx context.Context) (bool, error) {
		var tr jaegerTraces
		if err := getJSON(ctx, api, &tr); errors.Is(err, errNoAnswer) {
			return false, nil // Jaeger is healthy; a slow answer is retried
		} else if err != nil {
			return false, err
		}
		for _, trace := range tr.Data {
			if !sameTraceID(trace.TraceID, after.LastTraceID) {
				continue
			}
			found = found[:0]
			for _, sp := range trace.Spans {
				found = append(found, sp.OperationName+"@"+trace.Processes[sp.ProcessID].ServiceName)
			}
			for _, name := range failoverSpans {
				if !slices.Contains(found, name+"@brook-coordinator") {
					return false, nil
				}
			}
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v (spans of trace %s so far: %v)", err, after.LastTraceID, found)
	}
	slices.Sort(found)
	t.Logf("Jaeger holds trace %s with spans %v", after.LastTraceID, found)
}
