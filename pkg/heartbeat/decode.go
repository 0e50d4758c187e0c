package heartbeat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
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

// membersCount counts the members encoding/json decodes into it: it
// stands in for the copies to tell whether, and how many times, a message
// sets them (encoding/json calls it for null too, and a null copies
// member empties the copies).
type membersCount int

// UnmarshalJSON implements json.Unmarshaler.
func (n *membersCount) UnmarshalJSON([]byte) error {
	*n++
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
		if decodeWhole(raw, &prefix) == nil {
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
		Copies membersCount `json:"copies"`
	}{Heartbeat: prefix}
	if err := json.Unmarshal(obj, &tf); err != nil || tf.Copies > 0 {
		return wire.Heartbeat{}, false
	}
	return tf.Heartbeat, true
}

// decodeWhole decodes data, a whole heartbeat object, into hb as
// json.Unmarshal does. When data has one top-level "copies" member (in any
// case) whose value is an array in the form json.Marshal writes
// (decodeCopies), the copies are read by hand and only the other members
// by encoding/json: a mass failover's deltas list hundreds of copies, and
// three coordinators and attention decoding each with reflection was 4-5%
// of the whole machine's CPU (issue 17). Anything else is decoded by
// encoding/json alone, which then also gives the error.
func decodeWhole(data []byte, hb *wire.Heartbeat) error {
	if start, end, n := copiesSpan(data); n == 1 {
		if copies, ok := decodeCopies(data[start:end]); ok {
			rest := make([]byte, 0, len(data)-(end-start)+2)
			rest = append(append(append(rest, data[:start]...), "[]"...), data[end:]...)
			// encoding/json counts the members it takes for the copies
			// itself (a key with escapes, "c\u006fpies", is one that
			// copiesSpan's scan of the raw bytes does not see): only
			// when that is the one member read by hand are they used.
			var out struct {
				wire.Heartbeat
				Copies membersCount `json:"copies"`
			}
			if json.Unmarshal(rest, &out) == nil && out.Copies == 1 {
				out.Heartbeat.Copies = copies
				*hb = out.Heartbeat
				return nil
			}
		}
	}
	return json.Unmarshal(data, hb)
}

// copiesEnd returns the offset in data just past the value of the last
// top-level member named "copies" (in any case, unescaped), found by a
// structural scan that does not decode anything. It need not be exact to
// be safe: Decode decodes the two sides of the split with encoding/json,
// and a split anywhere but after a top-level member makes one of them
// invalid, so the message is then decoded whole.
func copiesEnd(data []byte) (int, bool) {
	_, end, n := copiesSpan(data)
	return end, n > 0
}

// copiesSpan returns where the value of the last top-level member named
// "copies" (in any case, unescaped) starts and ends in data, and how many
// such members data has (0 if none, or if the scan fails).
func copiesSpan(data []byte) (start, end, n int) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return 0, 0, 0
	}
	for i++; ; {
		i = skipSpace(data, i)
		if i < len(data) && data[i] == '}' {
			return start, end, n
		}
		keyStart := i
		i = skipValue(data, i)
		if i < 0 || data[keyStart] != '"' {
			return 0, 0, 0
		}
		key := data[keyStart+1 : i-1]
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != ':' {
			return 0, 0, 0
		}
		valueStart := skipSpace(data, i+1)
		i = skipValue(data, valueStart)
		if i < 0 {
			return 0, 0, 0
		}
		if bytes.EqualFold(key, []byte("copies")) {
			start, end, n = valueStart, i, n+1
		}
		i = skipSpace(data, i)
		switch {
		case i < len(data) && data[i] == ',':
			i++
		case i < len(data) && data[i] == '}':
			return start, end, n
		default:
			return 0, 0, 0
		}
	}
}

// decodeCopies decodes data, a JSON array of copies, when it is in the
// form json.Marshal writes: no white space; objects whose members are
// CopyStatus's, each named exactly as its tag (in any order; of a member
// named twice the last counts, as in encoding/json); strings of printable
// ASCII without escapes; numbers as plain digits without a leading zero
// that fit a uint64; true or false. For such an array the result is
// json.Unmarshal's. It reports false for anything else (null, other
// forms, invalid JSON), which the caller then leaves to encoding/json.
func decodeCopies(data []byte) ([]wire.CopyStatus, bool) {
	if len(data) < 2 || data[0] != '[' {
		return nil, false
	}
	out := []wire.CopyStatus{}
	i := 1
	if data[i] == ']' {
		return out, i+1 == len(data)
	}
	for {
		var cs wire.CopyStatus
		var ok bool
		if i, ok = decodeCopy(data, i, &cs); !ok {
			return nil, false
		}
		out = append(out, cs)
		switch {
		case i < len(data) && data[i] == ',':
			i++
		case i < len(data) && data[i] == ']':
			return out, i+1 == len(data)
		default:
			return nil, false
		}
	}
}

// decodeCopy decodes the object at data[i:] into cs (decodeCopies's form)
// and returns the offset just past it.
func decodeCopy(data []byte, i int, cs *wire.CopyStatus) (int, bool) {
	if i >= len(data) || data[i] != '{' {
		return 0, false
	}
	i++
	if i < len(data) && data[i] == '}' {
		return i + 1, true
	}
	for {
		key, next, ok := plainString(data, i)
		if !ok || next >= len(data) || data[next] != ':' {
			return 0, false
		}
		i = next + 1
		switch key {
		case "stream", "role":
			var v string
			if v, i, ok = plainString(data, i); !ok {
				return 0, false
			}
			if key == "stream" {
				cs.Stream = v
			} else {
				cs.Role = v
			}
		case "stream_id", "epoch", "record_tail", "cursor_tail", "confirmed":
			var v uint64
			if v, i, ok = plainUint(data, i); !ok {
				return 0, false
			}
			switch key {
			case "stream_id":
				cs.StreamID = v
			case "epoch":
				cs.Epoch = v
			case "record_tail":
				cs.RecordTail = v
			case "cursor_tail":
				cs.CursorTail = v
			default:
				cs.Confirmed = v
			}
		case "sealed", "gone":
			var v bool
			switch {
			case bytes.HasPrefix(data[i:], []byte("true")):
				v, i = true, i+4
			case bytes.HasPrefix(data[i:], []byte("false")):
				i += 5
			default:
				return 0, false
			}
			if key == "sealed" {
				cs.Sealed = v
			} else {
				cs.Gone = v
			}
		default:
			return 0, false
		}
		switch {
		case i < len(data) && data[i] == ',':
			i++
		case i < len(data) && data[i] == '}':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// plainString reads the string at data[i:] if it is printable ASCII
// between quotes with no escape, and returns it and the offset past it.
func plainString(data []byte, i int) (string, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return string(data[i+1 : j]), j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return "", 0, false
		}
	}
	return "", 0, false
}

// plainUint reads the number at data[i:] if it is plain digits without a
// leading zero (or a lone 0) that fit a uint64, and returns it and the
// offset past it.
func plainUint(data []byte, i int) (uint64, int, bool) {
	j := i
	var v uint64
	for j < len(data) && data[j] >= '0' && data[j] <= '9' {
		d := uint64(data[j] - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, 0, false
		}
		v = v*10 + d
		j++
	}
	if j == i || (data[i] == '0' && j > i+1) {
		return 0, 0, false
	}
	if j < len(data) && (data[j] == '.' || data[j] == 'e' || data[j] == 'E') {
		return 0, 0, false
	}
	return v, j, true
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
