package host

import (
	"context"
	"errors"
	"time"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// replLink is how a stream's copies talk to each other: a follower's
// replication requests and standalone acks to its owner, and the owner's
// side that serves them. It carries encoded frames (frame.ReplRequest one
// way, frame.Batch or a wire error the other) and knows nothing of what
// they mean: the rules (what an ack counts, what a request is answered
// with, when a follower asks again) are the follower's and the owner's.
//
// natsLink (link_nats.go) carries it over the host's NATS connection, and
// is the only file of the package that knows how; another transport (a
// direct host-to-host link) is another implementation of this interface.
//
// What every implementation must keep, because the rules rely on it:
//   - replCall.from is the sending node as the transport authenticated
//     it, not as the body claims: an owner refuses a request whose body
//     names another node (serveRepl), so that a host cannot ack for
//     another.
//   - A request is answered at most once, and an ack never.
//   - A request lost with its link (a reconnect) fails at once with
//     errLinkLost, rather than at its timeout: the follower asks again,
//     and the answer, if it ever comes, is dropped.
//   - A request with nobody serving its stream at its epoch fails at once
//     with errNoServer (an owner not yet promoted, or gone).
type replLink interface {
	// serve delivers the requests and acks of stream's followers at epoch
	// to fn, in the link's goroutines, until stop is called; after stop
	// returns nothing more is delivered except what was already being
	// delivered.
	serve(stream string, epoch uint64, fn func(replCall)) (stop func(), err error)
	// toOwner is the way from this host's follower of stream at epoch to
	// the stream's owner at that epoch, on node owner (the bus finds it
	// by subject and needs no node; a direct link does).
	toOwner(stream string, epoch uint64, owner string) ownerLink

	// serveHostWaits delivers the host waits other hosts send this one
	// (hostwait.go) to fn, in the link's goroutines, until stop is called.
	serveHostWaits(fn func(hostWaitCall)) (stop func(), err error)
	// toHost is the way from this host's sleeping copies to the host
	// waits of node, the owner host of their streams (idlewait.go).
	toHost(node string) hostLink

	// maxMessage is the most bytes one request or answer may carry, as
	// the link knows it now (it may change with the link); 0 if unknown.
	maxMessage() int64
}

// hostLink is a follower host's way to an owner host (replLink.toHost).
type hostLink interface {
	// wait sends a host wait and waits for its answer up to timeout, or
	// until ctx ends or the link is lost.
	wait(ctx context.Context, hw hostWaitMsg, timeout time.Duration) (hostWaitAnswer, error)
}

// hostWaitMsg is a host wait as sent.
type hostWaitMsg struct {
	// data is an encoded frame.HostWait (a whole set) or
	// frame.HostWaitChange.
	data []byte
	// gen is a whole set's generation; "" with a change, which carries
	// its own.
	gen string
	// records: the sender takes records in its wake.
	records bool
}

// hostWaitCall is one host wait delivered to an owner host
// (replLink.serveHostWaits).
type hostWaitCall struct {
	hostWaitMsg
	// from is the sending node, as the link authenticated it.
	from string
	// reply answers it; nil if it asked for no answer.
	reply hostWaitReplier
}

// fail answers c with e, unless it asked for no answer.
func (c hostWaitCall) fail(e *wire.Error) {
	if c.reply != nil {
		c.reply.fail(e)
	}
}

// hostWaitReplier answers one host wait: once, with a wake or an error.
type hostWaitReplier interface {
	// wake answers with an encoded frame.HostWake and the generation of
	// the sender's set this host holds ("" for none).
	wake(data []byte, gen string)
	fail(e *wire.Error)
}

// hostWaitAnswer is an owner host's answer to a host wait: an encoded
// frame.HostWake with the generation of the set it holds, or when code is
// set, a JSON wire.ErrorReply with that code.
type hostWaitAnswer struct {
	code string
	gen  string
	data []byte
}

// ownerLink is a follower's way to its owner (replLink.toOwner).
type ownerLink interface {
	// request sends a request (an encoded frame.ReplRequest) and waits for
	// its answer up to timeout, or until ctx ends or the link is lost.
	request(ctx context.Context, req []byte, timeout time.Duration) (replAnswer, error)
	// ack sends a standalone ack (an encoded frame.ReplRequest): not
	// answered, best effort (the follower's next request carries its
	// tails anyway).
	ack(req []byte) error
}

// errNoServer is a request nobody serves: no owner took its stream at its
// epoch (yet).
var errNoServer = errors.New("no owner serves the stream at this epoch")

// errLinkLost is a request whose link went away before its answer came.
var errLinkLost = errors.New("the link to the owner was replaced")

// replCall is one request or ack delivered to an owner (replLink.serve).
type replCall struct {
	// from is the sending node, as the link authenticated it.
	from string
	// data is the encoded frame.ReplRequest.
	data []byte
	// reply answers the request; nil for an ack.
	reply replReplier
}

// replReplier answers one request: once, with a batch or an error.
type replReplier interface {
	batch(b *frame.Batch)
	fail(e *wire.Error)
}

// isAck reports whether c is a standalone ack, which is not answered.
func (c replCall) isAck() bool { return c.reply == nil }

// answer sends b as c's answer, unless c is an ack.
func (c replCall) answer(b *frame.Batch) {
	if c.reply != nil {
		c.reply.batch(b)
	}
}

// fail answers c with e, unless c is an ack.
func (c replCall) fail(e *wire.Error) {
	if c.reply != nil {
		c.reply.fail(e)
	}
}

// replAnswer is an owner's answer to a request: an encoded frame.Batch, or
// when code is set, a JSON wire.ErrorReply with that code.
type replAnswer struct {
	code string
	data []byte
}
