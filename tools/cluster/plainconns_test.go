package cluster

import (
	"slices"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestPlainConnsHandshaking: a connection that has sent nothing yet (no
// TLS version, no CONNECT: a process reconnecting at the moment of the
// check, still in its TLS handshake) is not plain, while one that sent
// CONNECT without TLS is; a TLS connection is neither. The e2e TLS test
// failed once on such a handshake (CI of session 24).
func TestPlainConnsHandshaking(t *testing.T) {
	conns := []*server.ConnInfo{
		{Cid: 1, IP: "127.0.0.1", Port: 1, Name: "h1", Lang: "go", Version: "1.55.0", TLSVersion: "1.3"},
		{Cid: 2, IP: "127.0.0.1", Port: 2},
		{Cid: 3, IP: "127.0.0.1", Port: 3, Name: "plain", Lang: "go", Version: "1.55.0"},
	}
	plain, handshaking := plainConns(conns)
	if want := []string{"plain (127.0.0.1:3)"}; !slices.Equal(plain, want) {
		t.Errorf("plain = %v, want %v", plain, want)
	}
	if want := []string{" (127.0.0.1:2)"}; !slices.Equal(handshaking, want) {
		t.Errorf("handshaking = %v, want %v", handshaking, want)
	}
}
