package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream is the peer target: three nats-server processes with a
// replicated (R3) file-backed stream whose acks mean fsync
// (sync_interval: always), so both systems confirm the same promise.
type JetStream struct {
	dir     string
	servers []*jsServer
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  jetstream.Stream
	subject string
	victim  string
	// Async publishes with PublishAsync and waits for the ack future
	// instead of a synchronous Publish (the window's publishes then share
	// one reply subscription): nats.go's other fast path, set before Run.
	Async bool
}

// JetStreamAsync is the target name of a JetStream with Async set.
const JetStreamAsync = "jetstream-async"

type jsServer struct {
	name       string
	clientPort int
	cmd        *exec.Cmd
	log        *os.File
}

// StartJetStream starts a three-server JetStream cluster from the
// nats-server binary at bin in dir and creates an R3 stream.
func StartJetStream(ctx context.Context, bin, dir string) (*JetStream, error) {
	j := &JetStream{dir: dir, subject: "bench.records"}
	clientPorts, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	routePorts, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("js%d", i+1)
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
jetstream { store_dir: %q, sync_interval: always }
cluster { name: bench, listen: 127.0.0.1:%d, routes: [%s] }
`, name, clientPorts[i], filepath.Join(dir, name), routePorts[i], strings.Join(routes, ", "))
		confPath := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			return nil, fmt.Errorf("jetstream: write config: %w", err)
		}
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return nil, fmt.Errorf("jetstream: log file: %w", err)
		}
		cmd := exec.Command(bin, "-c", confPath)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("jetstream: start %s: %w", name, err)
		}
		j.servers = append(j.servers, &jsServer{name: name, clientPort: clientPorts[i], cmd: cmd, log: logf})
	}
	var urls []string
	for _, s := range j.servers {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", s.clientPort))
	}
	j.nc, err = nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.RetryOnFailedConnect(true), nats.Timeout(2*time.Second))
	if err != nil {
		j.Close()
		return nil, fmt.Errorf("jetstream: connect: %w", err)
	}
	j.js, err = jetstream.New(j.nc)
	if err != nil {
		j.Close()
		return nil, fmt.Errorf("jetstream: context: %w", err)
	}
	// The cluster needs a meta leader before it takes a stream.
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		j.stream, err = j.js.CreateStream(cctx, jetstream.StreamConfig{
			Name: "BENCH", Subjects: []string{j.subject}, Replicas: 3,
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
		})
		cancel()
		if err == nil {
			return j, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			j.Close()
			return nil, fmt.Errorf("jetstream: create stream: %w", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Name implements Target.
func (j *JetStream) Name() string {
	if j.Async {
		return JetStreamAsync
	}
	return "jetstream"
}

// jsAttempt bounds one publish attempt before it is retried.
const jsAttempt = 2 * time.Second

// publishOnce makes one publish attempt of data with message id msgID.
func (j *JetStream) publishOnce(ctx context.Context, data []byte, msgID string) (uint64, error) {
	actx, cancel := context.WithTimeout(ctx, jsAttempt)
	defer cancel()
	if !j.Async {
		ack, err := j.js.Publish(actx, j.subject, data, jetstream.WithMsgID(msgID))
		if err != nil {
			return 0, err
		}
		return ack.Sequence, nil
	}
	fut, err := j.js.PublishAsync(j.subject, data, jetstream.WithMsgID(msgID))
	if err != nil {
		return 0, err
	}
	select {
	case ack := <-fut.Ok():
		return ack.Sequence, nil
	case err := <-fut.Err():
		return 0, err
	case <-actx.Done():
		return 0, actx.Err()
	}
}

// Publish implements Target: a JetStream publish with a message id
// (synchronous, or PublishAsync and its ack with Async), retried across the
// leader election (the id makes the retry safe).
func (j *JetStream) Publish(ctx context.Context, data []byte) (uint64, error) {
	id, _ := decodeRecord(data)
	msgID := fmt.Sprintf("%d-%d", id.pub, id.seq)
	backoff := 5 * time.Millisecond
	for {
		seq, err := j.publishOnce(ctx, data, msgID)
		if err == nil {
			return seq, nil
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("jetstream publish %s: %w", msgID, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

// Kill implements Target: SIGKILL the stream's leader.
func (j *JetStream) Kill(ctx context.Context) (string, error) {
	info, err := j.stream.Info(ctx)
	if err != nil {
		return "", fmt.Errorf("jetstream: stream info: %w", err)
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", errors.New("jetstream: stream has no leader")
	}
	for _, s := range j.servers {
		if s.name == info.Cluster.Leader {
			j.victim = s.name
			return s.name, s.cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	return "", fmt.Errorf("jetstream: leader %q is not one of ours", info.Cluster.Leader)
}

// Follow implements Target with an ordered consumer from the start.
func (j *JetStream) Follow(ctx context.Context, fn func(uint64, []byte)) error {
	return j.read(ctx, fn, false)
}

// ReadAll implements Target: an ordered consumer up to the last sequence.
func (j *JetStream) ReadAll(ctx context.Context, fn func(uint64, []byte)) error {
	return j.read(ctx, fn, true)
}

func (j *JetStream) read(ctx context.Context, fn func(uint64, []byte), toEnd bool) error {
	var last uint64
	if toEnd {
		info, err := j.stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("jetstream: stream info: %w", err)
		}
		last = info.State.LastSeq
		if last == 0 {
			return nil
		}
	}
	// An ordered consumer recreates itself after a leader change, resuming
	// after the last sequence it delivered.
	for ctx.Err() == nil {
		cons, err := j.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		it, err := cons.Messages()
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		stop := context.AfterFunc(ctx, it.Stop)
		for {
			msg, err := it.Next()
			if err != nil {
				break
			}
			md, err := msg.Metadata()
			if err != nil {
				continue
			}
			fn(md.Sequence.Stream, msg.Data())
			if toEnd && md.Sequence.Stream >= last {
				it.Stop()
				stop()
				return nil
			}
		}
		stop()
		it.Stop()
		if !toEnd {
			return nil
		}
		return fmt.Errorf("jetstream: read stopped before sequence %d", last)
	}
	return ctx.Err()
}

// After implements Target.
func (j *JetStream) After(ctx context.Context) map[string]any {
	out := map[string]any{}
	if info, err := j.stream.Info(ctx); err == nil && info.Cluster != nil {
		out["leader_after"] = info.Cluster.Leader
	}
	return out
}

// Close stops every server and the connection.
func (j *JetStream) Close() {
	if j.nc != nil {
		j.nc.Close()
	}
	var wg sync.WaitGroup
	for _, s := range j.servers {
		wg.Add(1)
		go func(s *jsServer) {
			defer wg.Done()
			_ = s.cmd.Process.Signal(syscall.SIGKILL)
			_, _ = s.cmd.Process.Wait()
			// The killed server wrote its output through its own descriptor;
			// this one never wrote, so closing it has no error to act on.
			_ = s.log.Close()
		}(s)
	}
	wg.Wait()
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close() // only held to reserve the port; nothing was sent
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
