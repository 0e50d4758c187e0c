package host

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// natsLink is replLink over the host's NATS connection. A follower of
// stream at epoch on node n sends on wire.ReplicationSubject(stream,
// epoch, n), a request with a reply subject, an ack without; the owner
// subscribes to wire.ReplicationWildcard(stream, epoch). The subject's
// last token is the sender: with credentials, nats-server lets host n
// publish on its own replication subjects only (deploy/auth), which is
// what makes replCall.from authenticated.
//
// It also carries a direct link's hellos (link_direct.go) on the host-wait
// subjects, marked with frame.HeaderLinkHello, and serveHostWaits's
// subscription answers them with hello (nil: the host has no direct link,
// and says so). A host takes hellos while it takes host waits, which is
// its whole run.
type natsLink struct {
	h     *Host
	hello func(from string, data []byte) ([]byte, *wire.Error)
}

func (l natsLink) serve(stream string, epoch uint64, fn func(replCall)) (func(), error) {
	return l.subscribe(wire.ReplicationWildcard(stream, epoch), func(m *nats.Msg) {
		c := replCall{from: wire.ReplicationNode(m.Subject), data: m.Data}
		if m.Reply != "" {
			c.reply = natsReply{h: l.h, to: m.Reply}
		}
		fn(c)
	})
}

func (l natsLink) serveHostWaits(fn func(hostWaitCall)) (func(), error) {
	return l.subscribe(wire.HostReplWildcard(l.h.cfg.Node), func(m *nats.Msg) {
		if m.Header.Get(frame.HeaderLinkHello) != "" {
			l.answerHello(m)
			return
		}
		c := hostWaitCall{from: wire.ReplicationNode(m.Subject), hostWaitMsg: hostWaitMsg{data: m.Data,
			gen: m.Header.Get(frame.HeaderHostWaitGen), records: m.Header.Get(frame.HeaderWakeRecords) != ""}}
		if m.Reply != "" {
			c.reply = natsReply{h: l.h, to: m.Reply}
		}
		fn(c)
	})
}

// subscribe subscribes cb to subject and returns what unsubscribes it.
func (l natsLink) subscribe(subject string, cb nats.MsgHandler) (func(), error) {
	sub, err := l.h.nc.Subscribe(subject, cb)
	if err != nil {
		return nil, err
	}
	return func() {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
			l.h.log.Warn("unsubscribe", "subject", subject, "err", err)
		}
	}, nil
}

func (l natsLink) maxMessage() int64 { return l.h.nc.MaxPayload() }

func (l natsLink) toOwner(stream string, epoch uint64, _ string) ownerLink {
	return natsOwner{h: l.h, subj: wire.ReplicationSubject(stream, epoch, l.h.cfg.Node)}
}

// natsReply answers a replication request or a host wait on its reply
// subject (replReplier, hostWaitReplier).
type natsReply struct {
	h  *Host
	to string
}

func (r natsReply) batch(b *frame.Batch) { r.h.replyData(r.to, frame.AppendBatch(nil, b)) }
func (r natsReply) fail(e *wire.Error)   { r.h.replyErr(r.to, e) }

func (r natsReply) wake(data []byte, gen string) {
	m := nats.NewMsg(r.to)
	if gen != "" {
		m.Header.Set(frame.HeaderHostWaitGen, gen)
	}
	m.Data = data
	r.h.publishReply(m)
}

// natsOwner is a follower's way to its owner: its own replication subject.
type natsOwner struct {
	h    *Host
	subj string
}

func (o natsOwner) request(ctx context.Context, req []byte, timeout time.Duration) (replAnswer, error) {
	msg := nats.NewMsg(o.subj)
	msg.Data = req
	resp, err := natsRequest(ctx, o.h, msg, timeout)
	if err != nil {
		return replAnswer{}, err
	}
	return replAnswer{code: resp.Header.Get(frame.HeaderError), data: resp.Data}, nil
}

func (o natsOwner) ack(req []byte) error {
	err := o.h.nc.Publish(o.subj, req)
	if errors.Is(err, nats.ErrConnectionClosed) {
		return nil
	}
	return err
}

// natsRequest sends msg on h's connection and waits for its answer up to
// timeout, or until ctx ends (its error). A request nobody subscribed to
// fails at once with errNoServer; one whose connection was replaced
// before its answer came (a reconnect loses both) with errLinkLost.
func natsRequest(ctx context.Context, h *Host, msg *nats.Msg, timeout time.Duration) (*nats.Msg, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(h.conn.Current(), cancel)
	resp, err := h.nc.RequestMsgWithContext(rctx, msg)
	if !stop() && err != nil && ctx.Err() == nil {
		// The connection was replaced while the request waited.
		return nil, errLinkLost
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, errNoServer
	}
	return resp, err
}

func (l natsLink) toHost(node string) hostLink {
	return natsHost{h: l.h, subj: wire.HostReplSubject(node, l.h.cfg.Node)}
}

// natsHost is a follower host's way to an owner host's host waits: its
// own subject there (wire.HostReplSubject), whose last token is the
// sender as for replication.
type natsHost struct {
	h    *Host
	subj string
}

func (n natsHost) wait(ctx context.Context, hw hostWaitMsg, timeout time.Duration) (hostWaitAnswer, error) {
	msg := nats.NewMsg(n.subj)
	if hw.records {
		msg.Header.Set(frame.HeaderWakeRecords, "1")
	}
	if hw.gen != "" {
		msg.Header.Set(frame.HeaderHostWaitGen, hw.gen)
	}
	msg.Data = hw.data
	resp, err := natsRequest(ctx, n.h, msg, timeout)
	if err != nil {
		return hostWaitAnswer{}, err
	}
	return hostWaitAnswer{code: resp.Header.Get(frame.HeaderError), gen: resp.Header.Get(frame.HeaderHostWaitGen), data: resp.Data}, nil
}

// answerHello answers a direct link's hello (frame.HeaderLinkHello) on a
// host-wait subject, whose last token is the sender, as for host waits.
func (l natsLink) answerHello(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	if l.hello == nil {
		l.h.replyErr(m.Reply, wire.Errorf(wire.CodeNotFound, "host %s has no direct replication link", l.h.cfg.Node))
		return
	}
	data, e := l.hello(wire.ReplicationNode(m.Subject), m.Data)
	if e != nil {
		l.h.replyErr(m.Reply, e)
		return
	}
	l.h.replyData(m.Reply, data)
}

// sayHello sends a direct link's hello to node's host and returns its
// answer, or the error it was refused with.
func (l natsLink) sayHello(ctx context.Context, node string, data []byte, timeout time.Duration) ([]byte, error) {
	msg := nats.NewMsg(wire.HostReplSubject(node, l.h.cfg.Node))
	msg.Header.Set(frame.HeaderLinkHello, "1")
	msg.Data = data
	resp, err := natsRequest(ctx, l.h, msg, timeout)
	if err != nil {
		return nil, err
	}
	if code := resp.Header.Get(frame.HeaderError); code != "" {
		return nil, wire.DecodeErrorReply(code, resp.Data)
	}
	return resp.Data, nil
}
