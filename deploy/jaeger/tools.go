//go:build tools

// Package jaeger pins the Jaeger build for the compose stack's traces
// profile; see go.mod.
package jaeger

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
