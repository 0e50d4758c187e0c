package wire

import "testing"

// FuzzDecodeErrorReply: the scan that skips decoding a result changes no
// answer of DecodeErrorReply: it answers as decoding every body does.
func FuzzDecodeErrorReply(f *testing.F) {
	for _, s := range []string{
		`{"error":{"code":"not_owner","message":"m"}}`, `{"ErRoR":{"code":"x"}}`, `{"\u0065rror":{"code":"x"}}`,
		`{"\u0045RROR":{"message":"m"}}`, `{"offset":3}`, `{"errors":[]}`, `{"error":null}`, `{"error":{"code":5}}`,
		`{"replies":[{"error":{"code":"sealed"}}]}`, `[{"error":{"code":"x"}}]`, "", "\x00\x01", `{"e\rror":1}`,
	} {
		f.Add("", []byte(s))
		f.Add("overloaded", []byte(s))
	}
	f.Fuzz(func(t *testing.T, code string, data []byte) {
		got, want := DecodeErrorReply(code, data), decodeErrorBody(code, data)
		if (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Fatalf("DecodeErrorReply(%q, %q) = %+v, decoding the body gives %+v", code, data, got, want)
		}
	})
}
