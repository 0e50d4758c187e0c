package frame

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// The client link: a client's own connection to an owner host, on which
// its publish batches and their replies travel instead of crossing a
// nats-server (schemas/frames.md, "The client link"). The stream host's
// link_direct.go serves it and pkg/client's link.go uses it.

// HeaderClientLink on a publish batch request (brook.s.<stream>.pubb)
// makes it a client link hello instead of a batch: its value is the hex
// SHA-256 of the client's link certificate, and the owner answers with a
// JSON ClientLinkHello naming its host's address and certificate. Only a
// principal that may publish batches can send it, which is what lets the
// certificate's holder publish on the link.
const HeaderClientLink = "Brook-Client-Link"

// ClientLinkHello is an owner host's answer to a client link hello.
type ClientLinkHello struct {
	Node string `json:"node"` // the owner host
	Addr string `json:"addr"` // where to dial it
	Cert string `json:"cert"` // hex SHA-256 of the certificate it presents
}

// KindLinkMsg is a message on a client link: a publish batch request from
// the client, or a reply from the host.
const KindLinkMsg byte = 0x09

// A client link connection's frames are pkg/linkconn's, shared with the
// hosts' direct link, of these kinds, with id 0 and a KindLinkMsg frame as
// the body. After TLS's handshake the client sends one byte 0 (a host
// sends its node's length and name), and the host answers LinkReady once
// it took the client's certificate.
const (
	LinkClientRequest   byte = 6 // client to host: a LinkMsg request
	LinkClientReply     byte = 7 // host to client: a LinkMsg reply
	LinkReady           byte = 'K'
	MaxLinkSubject           = 1024
	MaxLinkHeaders           = 32
	MaxLinkHeaderLength      = 4096
)

// LinkMsg is a NATS message as a client link carries it: a request with
// the subject it would have been published on and the reply subject the
// client takes its answer on, or a reply to that subject. Header keeps
// the order it was encoded in (each value of a key is its own pair).
type LinkMsg struct {
	Subject string
	Reply   string
	Header  []LinkHeader
	Data    []byte
}

// LinkHeader is one header value of a LinkMsg.
type LinkHeader struct{ Key, Value string }

// LinkHeaders lists a NATS header map (nats.Header) as a LinkMsg's
// headers, keys in order.
func LinkHeaders(h map[string][]string) []LinkHeader {
	if len(h) == 0 {
		return nil
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []LinkHeader
	for _, k := range keys {
		for _, v := range h[k] {
			out = append(out, LinkHeader{Key: k, Value: v})
		}
	}
	return out
}

// HeaderMap is LinkHeaders' inverse: a map to convert to nats.Header, nil
// for none.
func HeaderMap(hs []LinkHeader) map[string][]string {
	if len(hs) == 0 {
		return nil
	}
	m := make(map[string][]string, len(hs))
	for _, h := range hs {
		m[h.Key] = append(m[h.Key], h.Value)
	}
	return m
}

// AppendLinkMsg appends m's frame to dst.
func AppendLinkMsg(dst []byte, m *LinkMsg) []byte {
	size := headerLen + len(m.Subject) + len(m.Reply) + len(m.Data) + 4*binary.MaxVarintLen64
	for _, h := range m.Header {
		size += len(h.Key) + len(h.Value) + 2*binary.MaxVarintLen64
	}
	dst = slices.Grow(dst, size)
	dst = append(dst, Magic, Version, KindLinkMsg)
	dst = appendString(dst, m.Subject)
	dst = appendString(dst, m.Reply)
	dst = binary.AppendUvarint(dst, uint64(len(m.Header)))
	for _, h := range m.Header {
		dst = appendString(dst, h.Key)
		dst = appendString(dst, h.Value)
	}
	dst = binary.AppendUvarint(dst, uint64(len(m.Data)))
	return append(dst, m.Data...)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// DecodeLinkMsg decodes a KindLinkMsg frame. Data aliases p.
func DecodeLinkMsg(p []byte) (*LinkMsg, error) {
	d := decoder{p: p}
	if err := d.header(KindLinkMsg); err != nil {
		return nil, fmt.Errorf("frame: link message: %w", err)
	}
	m := &LinkMsg{}
	var err error
	if m.Subject, err = d.text("subject", MaxLinkSubject); err != nil {
		return nil, fmt.Errorf("frame: link message: %w", err)
	}
	if m.Subject == "" {
		return nil, fmt.Errorf("frame: link message: no subject: %w", ErrMalformed)
	}
	if m.Reply, err = d.text("reply", MaxLinkSubject); err != nil {
		return nil, fmt.Errorf("frame: link message: %w", err)
	}
	n, err := d.uvarint("header count")
	if err != nil {
		return nil, fmt.Errorf("frame: link message: %w", err)
	}
	if n > MaxLinkHeaders || n > uint64(d.rest()/2) {
		return nil, fmt.Errorf("frame: link message: %d headers (at most %d, in %d bytes): %w", n, MaxLinkHeaders, d.rest(), ErrMalformed)
	}
	if n > 0 {
		m.Header = make([]LinkHeader, n)
	}
	for i := range m.Header {
		if m.Header[i].Key, err = d.text("header key", MaxLinkHeaderLength); err != nil {
			return nil, fmt.Errorf("frame: link message: %w", err)
		}
		if m.Header[i].Key == "" {
			return nil, fmt.Errorf("frame: link message: empty header key: %w", ErrMalformed)
		}
		if m.Header[i].Value, err = d.text("header value", MaxLinkHeaderLength); err != nil {
			return nil, fmt.Errorf("frame: link message: %w", err)
		}
	}
	size, err := d.uvarint("data length")
	if err != nil {
		return nil, fmt.Errorf("frame: link message: %w", err)
	}
	if m.Data, err = d.bytes(size); err != nil {
		return nil, fmt.Errorf("frame: link message: data: %w", err)
	}
	if len(m.Data) == 0 {
		m.Data = nil
	}
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("frame: link message: %w", err)
	}
	return m, nil
}

// text reads a length-prefixed string of at most max bytes.
func (d *decoder) text(what string, max uint64) (string, error) {
	n, err := d.uvarint(what + " length")
	if err != nil {
		return "", err
	}
	if n > max {
		return "", fmt.Errorf("%s of %d bytes over the limit %d: %w", what, n, max, ErrMalformed)
	}
	b, err := d.bytes(n)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return string(b), nil
}
