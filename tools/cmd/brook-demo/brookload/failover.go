package brookload

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/wire"
)

// InfoFunc returns a stream's info, in one admin request.
type InfoFunc func(ctx context.Context) (wire.StreamInfo, error)

// StreamInfoOf is the InfoFunc of stream over c, each request bounded to
// two seconds so a poll goes on instead of waiting out retries.
func StreamInfoOf(c *client.Client, stream string) InfoFunc {
	return func(ctx context.Context) (wire.StreamInfo, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return c.StreamInfo(ctx, stream)
	}
}

// poll calls try every interval until it returns true or ctx ends; the
// last error of try is part of the error on timeout.
func poll(ctx context.Context, interval time.Duration, what string, try func(context.Context) (bool, error)) error {
	var last error
	for {
		ok, err := try(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("wait for %s: %w (last error: %w)", what, ctx.Err(), last)
			}
			return fmt.Errorf("wait for %s: %w", what, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// FailedOver reports whether info shows the stream serving again after
// the loss of victim, the owner at oldEpoch.
func FailedOver(info wire.StreamInfo, victim string, oldEpoch uint64) bool {
	a := info.Assignment
	return info.Status == wire.StatusServing && info.Recovery == nil && a.Epoch > oldEpoch && a.Owner != "" && a.Owner != victim
}

// WaitFailedOver polls until the stream serves again (see FailedOver).
func WaitFailedOver(ctx context.Context, info InfoFunc, victim string, oldEpoch uint64) (wire.StreamInfo, error) {
	var got wire.StreamInfo
	err := poll(ctx, 20*time.Millisecond, "the failover", func(ctx context.Context) (bool, error) {
		i, err := info(ctx)
		if err != nil {
			return false, err
		}
		got = i
		return FailedOver(i, victim, oldEpoch), nil
	})
	return got, err
}

// Rejoin is what WaitRejoined saw of a restarted old owner.
type Rejoin struct {
	Node string
	// Follower: the assignment lists the node as a follower and the node
	// reports its copy as a follower at the assignment's epoch.
	Follower bool
	// EpochBefore is the epoch the failover committed; Epoch the one the
	// node rejoined at.
	EpochBefore, Epoch uint64
	// Starts and trace ids before and after: a recovery appends a start
	// and records its trace.
	StartsBefore, StartsAfter int
	TraceBefore, TraceAfter   string
	// RecoverySeen is set when a pending recovery showed while waiting.
	RecoverySeen bool
	Took         time.Duration
	Info         wire.StreamInfo
}

// WithoutRecovery reports whether the node came back as a follower with
// the failover's epoch, starts and trace untouched and no recovery seen.
func (r Rejoin) WithoutRecovery() bool {
	return r.Follower && r.Epoch == r.EpochBefore && r.StartsAfter == r.StartsBefore &&
		r.TraceAfter == r.TraceBefore && !r.RecoverySeen
}

// Following reports whether info shows node as a follower of the current
// assignment that reports itself following at that epoch.
func Following(info wire.StreamInfo, node string) bool {
	a := info.Assignment
	if !slices.Contains(a.Followers, node) {
		return false
	}
	for _, ct := range info.CopyTails {
		if ct.Node == node {
			return ct.Published && ct.Role == wire.RoleFollower && ct.Epoch == a.Epoch
		}
	}
	return false
}

// WaitRejoined polls after node was restarted until it follows (see
// Following), comparing every answer with before (the info right after the
// failover). It stops early, with the Rejoin filled in, if the epoch moves.
func WaitRejoined(ctx context.Context, info InfoFunc, node string, before wire.StreamInfo) (Rejoin, error) {
	began := time.Now()
	r := Rejoin{Node: node, EpochBefore: before.Assignment.Epoch, StartsBefore: len(before.Starts), TraceBefore: before.LastTraceID}
	err := poll(ctx, 50*time.Millisecond, node+" following", func(ctx context.Context) (bool, error) {
		i, err := info(ctx)
		if err != nil {
			return false, err
		}
		r.Info, r.Epoch, r.StartsAfter, r.TraceAfter = i, i.Assignment.Epoch, len(i.Starts), i.LastTraceID
		r.Took = time.Since(began)
		if i.Recovery != nil {
			r.RecoverySeen = true
		}
		r.Follower = Following(i, node)
		return r.Follower || r.Epoch != r.EpochBefore, nil
	})
	return r, err
}
