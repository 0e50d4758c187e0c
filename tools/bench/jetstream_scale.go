package bench

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The JetStream side of brook-bench --failover-streams (issue 17): many R3
// file streams, each its own Raft group, and the server leading the most
// of them killed.

// CreateScaleStream creates one R3 file stream named name on subject name,
// with a duplicate window so a publish retried across the kill is stored
// once, as the bench stream is.
func (j *JetStream) CreateScaleStream(ctx context.Context, name string) error {
	_, err := j.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{name}, Replicas: 3,
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
	})
	if err != nil {
		return fmt.Errorf("jetstream: create stream %s: %w", name, err)
	}
	return nil
}

// StreamLeader returns the server leading stream name.
func (j *JetStream) StreamLeader(ctx context.Context, name string) (string, error) {
	s, err := j.js.Stream(ctx, name)
	if err != nil {
		return "", fmt.Errorf("jetstream: stream %s: %w", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return "", fmt.Errorf("jetstream: stream %s info: %w", name, err)
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", fmt.Errorf("jetstream: stream %s has no leader", name)
	}
	return info.Cluster.Leader, nil
}

// PublishOnce publishes data to stream name's subject with message id
// msgID, retrying (the id makes a retry safe) until acknowledged or ctx
// ends.
func (j *JetStream) PublishOnce(ctx context.Context, name string, data []byte, msgID string) error {
	backoff := 5 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := j.js.Publish(actx, name, data, jetstream.WithMsgID(msgID))
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("jetstream publish to %s: %w", name, errors.Join(err, ctx.Err()))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// StreamRecords returns the data of stream name's records 1..n, reading
// each by sequence.
func (j *JetStream) StreamRecords(ctx context.Context, name string, n int) ([][]byte, error) {
	s, err := j.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %s: %w", name, err)
	}
	var out [][]byte
	for seq := uint64(1); seq <= uint64(n); seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			return out, fmt.Errorf("jetstream: stream %s record %d: %w", name, seq, err)
		}
		out = append(out, m.Data)
	}
	return out, nil
}

// ServerNames returns the servers' names, in the order of ServerPIDs.
func (j *JetStream) ServerNames() []string {
	var names []string
	for _, s := range j.servers {
		if s.cmd.Process != nil {
			names = append(names, s.name)
		}
	}
	return names
}

// KillServer SIGKILLs the server named name.
func (j *JetStream) KillServer(name string) error {
	for _, s := range j.servers {
		if s.name == name {
			j.victim = name
			return s.cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	return fmt.Errorf("jetstream: no server %q", name)
}
