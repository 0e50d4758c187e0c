package heartbeat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/brook-streams/brook/pkg/wire"
)

// maxDecoderEntries bounds the senders a Decoder remembers. Past it the
// Decoder forgets them all: remembering is only a saving, and heartbeats on
// forged subjects must not grow it without end.
const maxDecoderEntries = 4096

// Decoder decodes heartbeat messages as json.Unmarshal into a
// wire.Heartbeat does, faster when a sender repeats itself. A host lists
// every copy it holds in every full report, and an idle host's copies are
// the same from one full report to the next (sorted by stream, they encode
// to the same bytes); only the fields after them (the time, the beat
// number) change.
// So the Decoder remembers, per sender, the message up to the end of its
// copies and what that part decoded to; a message that starts with the same
// bytes is decoded by reading only what follows. With a thousand copies per
// host, decoding them on every beat was most of a coordinator's CPU.
//
// A Decoder is not safe for concurrent use, and the Copies it returns may be
// shared between calls: callers must not modify them.
type Decoder struct {
	last map[string]*decodedPrefix
}

// decodedPrefix is a message up to the end of its copies, and its fields.
type decodedPrefix struct {
	raw []byte
	hb  wire.Heartbeat
}

// NewDecoder returns a Decoder that remembers nothing yet.
func NewDecoder() *Decoder { return &Decoder{last: map[string]*decodedPrefix{}} }

// present records that a member was there, even as null (a null copies
// member empties the copies).
type present bool

// UnmarshalJSON implements json.Unmarshaler; json calls it for null too.
func (p *present) UnmarshalJSON([]byte) error {
	*p = true
	return nil
}

// Decode decodes data, a heartbeat from sender (its subject: messages of
// one sender are compared with each other only).
func (d *Decoder) Decode(sender string, data []byte) (wire.Heartbeat, error) {
	if p := d.last[sender]; p != nil && len(data) > len(p.raw) && bytes.Equal(data[:len(p.raw)], p.raw) {
		if hb, ok := withTail(p.hb, data[len(p.raw):]); ok {
			return hb, nil
		}
	}
	// Decode the message as its start (up to the end of its copies) and
	// the rest, and remember the start; any message that does not split so
	// is decoded whole.
	if end, ok := copiesEnd(data); ok {
		var prefix wire.Heartbeat
		raw := append(bytes.Clone(data[:end]), '}')
		if json.Unmarshal(raw, &prefix) == nil {
			if hb, ok := withTail(prefix, data[end:]); ok {
				// A liveness beat's empty copies, or a delta's few, would
				// replace the full reports' in memory (they alternate): they
				// are not remembered.
				if hb.Live || hb.Delta {
					return hb, nil
				}
				if _, known := d.last[sender]; !known && len(d.last) >= maxDecoderEntries {
					clear(d.last)
				}
				d.last[sender] = &decodedPrefix{raw: raw[:end], hb: prefix}
				return hb, nil
			}
		}
	}
	var hb wire.Heartbeat
	if err := json.Unmarshal(data, &hb); err != nil {
		return wire.Heartbeat{}, fmt.Errorf("decode heartbeat: %w", err)
	}
	return hb, nil
}

// withTail completes prefix (the fields of a message up to the end of its
// copies) with the rest of the message, tail, and reports false if tail is
// not the valid end of a JSON object or sets the copies again (the caller
// then decodes the whole message).
func withTail(prefix wire.Heartbeat, tail []byte) (wire.Heartbeat, bool) {
	t := bytes.TrimLeft(tail, " \t\r\n")
	var obj []byte
	switch {
	case len(t) > 0 && t[0] == '}':
		obj = append([]byte{'{'}, t...)
	case len(t) > 0 && t[0] == ',':
		// A member must follow the comma: "{" + "}" would hide a trailing
		// comma that makes the whole message invalid.
		if rest := bytes.TrimLeft(t[1:], " \t\r\n"); len(rest) == 0 || rest[0] != '"' {
			return wire.Heartbeat{}, false
		}
		obj = append([]byte{'{'}, t[1:]...)
	default:
		return wire.Heartbeat{}, false
	}
	// Decoding into a copy of prefix sets exactly the members the tail
	// has, as json.Unmarshal of the whole message would after reading the
	// prefix. The outer Copies hides the embedded one, so the tail cannot
	// write into the copies prefix shares with the Decoder's memory, and
	// tells when the tail sets them again.
	tf := struct {
		wire.Heartbeat
		Copies present `json:"copies"`
	}{Heartbeat: prefix}
	if err := json.Unmarshal(obj, &tf); err != nil || tf.Copies {
		return wire.Heartbeat{}, false
	}
	return tf.Heartbeat, true
}

// copiesEnd returns the offset in data just past the value of the last
// top-level member named "copies" (in any case, unescaped), found by a
// structural scan that does not decode anything. It need not be exact to
// be safe: Decode decodes the two sides of the split with encoding/json,
// and a split anywhere but after a top-level member makes one of them
// invalid, so the message is then decoded whole.
func copiesEnd(data []byte) (int, bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return 0, false
	}
	end, found := 0, false
	for i++; ; {
		i = skipSpace(data, i)
		if i < len(data) && data[i] == '}' {
			return end, found
		}
		keyStart := i
		i = skipValue(data, i)
		if i < 0 || data[keyStart] != '"' {
			return 0, false
		}
		key := data[keyStart+1 : i-1]
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != ':' {
			return 0, false
		}
		i = skipValue(data, skipSpace(data, i+1))
		if i < 0 {
			return 0, false
		}
		if bytes.EqualFold(key, []byte("copies")) {
			end, found = i, true
		}
		i = skipSpace(data, i)
		switch {
		case i < len(data) && data[i] == ',':
			i++
		case i < len(data) && data[i] == '}':
			return end, found
		default:
			return 0, false
		}
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the offset just past the JSON value starting at i, or
// -1. It checks only what it needs to find the end: quotes and escapes in
// strings, and the nesting of brackets.
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		for i++; i < len(data); i++ {
			switch data[i] {
			case '\\':
				i++
			case '"':
				return i + 1
			}
		}
		return -1
	case '{', '[':
		depth := 0
		for ; i < len(data); i++ {
			switch data[i] {
			case '"':
				j := skipValue(data, i)
				if j < 0 {
					return -1
				}
				i = j - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	default:
		start := i
		for i < len(data) && !strings.ContainsRune(",}] \t\r\n", rune(data[i])) {
			i++
		}
		if i == start {
			return -1
		}
		return i
	}
}
