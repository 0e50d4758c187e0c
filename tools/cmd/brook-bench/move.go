package main

import (
	"context"
	"fmt"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/bench"
)

// withMove returns the target of a --move-owner-at-secs run: its kill is a
// planned move of the bench stream to its best follower (bench.MoveOwner).
func withMove(t peerTarget) (bench.Target, error) {
	bt, ok := t.(*brookTarget)
	if !ok {
		return nil, fmt.Errorf("--move-owner-at-secs needs --target brook")
	}
	return bench.MoveOwner(bt, func(ctx context.Context) (string, error) {
		r, err := bt.c.MoveStream(ctx, wire.StreamMove{Stream: bt.stream})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s -> %s at epoch %d (held %d ms, took %d ms)", r.From, r.To, r.Epoch, r.HeldMS, r.TookMS), nil
	}), nil
}
