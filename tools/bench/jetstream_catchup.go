package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStreamReaders are the catch-up reader settings of the JetStream
// target read by default, "<consumer>-<api>-<batch>": consumer "ordered"
// (an ordered consumer: ephemeral, R1, in memory, acks none, recreated on
// a gap) or "acknone" (an ephemeral R1 in-memory pull consumer with
// AckNone); api "consume" (Consume with a callback, PullMaxMessages
// batch), "messages" (Messages and Next, PullMaxMessages batch) or
// "fetch" (Fetch of batch messages at a time). The bench reads with each
// and quotes the fastest. These four were the fastest of thirteen
// settings tried on this machine (the consume batch 500 to 4000, fetch
// 500 to 10000, messages 1000 and 4000; ordered Fetch fails with "no
// responders" when the consumer is recreated between fetches), none of
// them clearly ahead of the others.
var JetStreamReaders = []string{"ordered-consume-500", "acknone-consume-500", "acknone-fetch-1000", "acknone-fetch-2000"}

// Fill implements CatchUpTarget: PublishAsync with a window of window
// outstanding publishes and a message id per record (as Publish), and a
// failed publish retried synchronously with its id, which the stream's
// deduplication makes safe.
func (j *JetStream) Fill(ctx context.Context, n, window int, data func(int) []byte, confirmed func(int, uint64)) error {
	js, err := jetstream.New(j.nc, jetstream.WithPublishAsyncMaxPending(window))
	if err != nil {
		return fmt.Errorf("jetstream: fill: %w", err)
	}
	err = FillAsync(ctx, n, window, func(i int) (func() (uint64, error), error) {
		fut, err := js.PublishAsync(j.subject, data(i), jetstream.WithMsgID(catchUpMsgID(i)))
		if err != nil {
			return nil, err
		}
		return func() (uint64, error) {
			select {
			case ack := <-fut.Ok():
				return ack.Sequence, nil
			case err := <-fut.Err():
				return 0, err
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}, nil
	}, func(i int) (uint64, error) {
		return j.publishRetry(ctx, js, data(i), catchUpMsgID(i))
	}, confirmed)
	if err != nil {
		return fmt.Errorf("jetstream: fill: %w", err)
	}
	return nil
}

func catchUpMsgID(i int) string { return "c" + strconv.Itoa(i) }

// publishRetry publishes synchronously until confirmed or ctx ends.
func (j *JetStream) publishRetry(ctx context.Context, js jetstream.JetStream, data []byte, id string) (uint64, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := js.Publish(actx, j.subject, data, jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			return ack.Sequence, nil
		}
		if ctx.Err() != nil {
			return 0, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Readers implements CatchUpTarget.
func (j *JetStream) Readers() []string { return JetStreamReaders }

// ServerPIDs implements ServerProcesses: the three nats-servers.
func (j *JetStream) ServerPIDs() []int {
	var pids []int
	for _, s := range j.servers {
		if s.cmd.Process != nil {
			pids = append(pids, s.cmd.Process.Pid)
		}
	}
	return pids
}

// CheckReader implements CatchUpTarget.
func (j *JetStream) CheckReader(r string) error {
	_, _, _, err := parseJSReader(r)
	return err
}

// CatchUp implements CatchUpTarget.
func (j *JetStream) CatchUp(ctx context.Context, reader string, n int, fn func(uint64, []byte)) (err error) {
	kind, api, batch, err := parseJSReader(reader)
	if err != nil {
		return err
	}
	var cons jetstream.Consumer
	if kind == "ordered" {
		cons, err = j.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	} else {
		cons, err = j.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
			AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
			Replicas: 1, MemoryStorage: true, InactiveThreshold: time.Minute,
		})
		if err == nil {
			name := cons.CachedInfo().Name
			defer func() {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				if derr := j.stream.DeleteConsumer(dctx, name); derr != nil && err == nil {
					err = fmt.Errorf("jetstream: delete consumer %s: %w", name, derr)
				}
			}()
		}
	}
	if err != nil {
		return fmt.Errorf("jetstream: %s consumer: %w", kind, err)
	}
	delivered := 0
	deliver := func(msg jetstream.Msg) error {
		md, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("jetstream: message metadata: %w", err)
		}
		fn(md.Sequence.Stream, msg.Data())
		delivered++
		return nil
	}
	switch api {
	case "consume":
		done := make(chan error, 1)
		finish := func(err error) {
			select {
			case done <- err:
			default:
			}
		}
		cc, err := cons.Consume(func(msg jetstream.Msg) {
			if delivered >= n {
				return
			}
			if err := deliver(msg); err != nil {
				finish(err)
				return
			}
			if delivered == n {
				finish(nil)
			}
		}, jetstream.PullMaxMessages(batch))
		if err != nil {
			return fmt.Errorf("jetstream: consume: %w", err)
		}
		defer cc.Stop()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	case "messages":
		it, err := cons.Messages(jetstream.PullMaxMessages(batch))
		if err != nil {
			return fmt.Errorf("jetstream: messages: %w", err)
		}
		defer it.Stop()
		stop := context.AfterFunc(ctx, it.Stop)
		defer stop()
		for delivered < n {
			msg, err := it.Next()
			if err != nil {
				return fmt.Errorf("jetstream: next after %d records: %w", delivered, err)
			}
			if err := deliver(msg); err != nil {
				return err
			}
		}
		return nil
	default: // fetch
		noResponders := 0
		for delivered < n {
			if err := ctx.Err(); err != nil {
				return err
			}
			mb, err := cons.Fetch(min(batch, n-delivered), jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				return fmt.Errorf("jetstream: fetch after %d records: %w", delivered, err)
			}
			for msg := range mb.Messages() {
				if err := deliver(msg); err != nil {
					return err
				}
			}
			err = mb.Error()
			if errors.Is(err, nats.ErrNoResponders) && delivered == 0 && noResponders < 100 {
				// The new consumer's interest has not reached this
				// client's server yet.
				noResponders++
				time.Sleep(20 * time.Millisecond)
				continue
			}
			if err != nil {
				return fmt.Errorf("jetstream: fetch after %d records: %w", delivered, err)
			}
		}
		return nil
	}
}

// parseJSReader splits a JetStreamReaders setting.
func parseJSReader(s string) (kind, api string, batch int, err error) {
	parts := strings.Split(s, "-")
	if len(parts) == 3 {
		kind, api = parts[0], parts[1]
		batch, err = strconv.Atoi(parts[2])
	}
	if len(parts) != 3 || err != nil || batch < 1 ||
		(kind != "ordered" && kind != "acknone") || (api != "consume" && api != "messages" && api != "fetch") {
		return "", "", 0, fmt.Errorf("jetstream: reader %q: want <ordered|acknone>-<consume|messages|fetch>-<batch>", s)
	}
	return kind, api, batch, nil
}
