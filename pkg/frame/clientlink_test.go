package frame_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/brook-streams/brook/pkg/frame"
)

var linkHdr = []byte{frame.Magic, frame.Version, frame.KindLinkMsg}

func sampleLinkMsg() *frame.LinkMsg {
	return &frame.LinkMsg{
		Subject: "brook.s.orders.pubb",
		Reply:   "_INBOX.client.abc.7",
		Header:  []frame.LinkHeader{{Key: "Brook-Stream-Id", Value: "3"}, {Key: "traceparent", Value: "00-x"}, {Key: "traceparent", Value: "00-y"}},
		Data:    []byte{1, 2, 3},
	}
}

func TestLinkMsgRoundTrip(t *testing.T) {
	for _, m := range []*frame.LinkMsg{
		sampleLinkMsg(),
		{Subject: "s"},
		{Subject: "s", Reply: "r", Data: []byte("x")},
	} {
		got, err := frame.DecodeLinkMsg(frame.AppendLinkMsg([]byte("junk")[4:], m))
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip: got %+v, want %+v", got, m)
		}
	}
}

func TestLinkMsgRejects(t *testing.T) {
	long := strings.Repeat("k", frame.MaxLinkHeaderLength+1)
	cases := map[string][]byte{
		"empty":               {},
		"other kind":          cat([]byte{frame.Magic, frame.Version, frame.KindPubBatch}, uv(1), []byte("s"), uv(0, 0, 0)),
		"no subject":          cat(linkHdr, uv(0, 0, 0, 0)),
		"subject too long":    cat(linkHdr, uv(frame.MaxLinkSubject+1)),
		"too many headers":    cat(linkHdr, uv(1), []byte("s"), uv(0, frame.MaxLinkHeaders+1), make([]byte, 200)),
		"headers past end":    cat(linkHdr, uv(1), []byte("s"), uv(0, 3), uv(1), []byte("k")),
		"empty header key":    cat(linkHdr, uv(1), []byte("s"), uv(0, 1, 0, 0, 0)),
		"header key too long": cat(linkHdr, uv(1), []byte("s"), uv(0, 1), uv(uint64(len(long))), []byte(long), uv(0, 0)),
		"data past end":       cat(linkHdr, uv(1), []byte("s"), uv(0, 0, 5), []byte("abc")),
		"trailing bytes":      cat(linkHdr, uv(1), []byte("s"), uv(0, 0, 0), []byte("x")),
	}
	for name, p := range cases {
		if _, err := frame.DecodeLinkMsg(p); !errors.Is(err, frame.ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

// FuzzDecodeLinkMsg is FuzzDecodeBatch for client link messages.
func FuzzDecodeLinkMsg(f *testing.F) {
	f.Add(frame.AppendLinkMsg(nil, sampleLinkMsg()))
	f.Add(frame.AppendLinkMsg(nil, &frame.LinkMsg{Subject: "s"}))
	f.Add(cat(linkHdr, uv(1), []byte("s"), uv(0, 1, 1), []byte("k"), uv(0, 0)))
	f.Add(cat(linkHdr, uv(1), []byte("s"), uv(0, 0, 0)))
	f.Add([]byte{})
	fuzzCanonical(f, frame.DecodeLinkMsg, frame.AppendLinkMsg)
}
