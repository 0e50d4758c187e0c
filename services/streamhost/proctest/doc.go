// Package proctest holds the process-level tests and benchmarks of
// brook-streamhost: an embedded nats-server, host processes built from
// cmd/brook-streamhost, and the test itself standing in for the
// coordinators with a static assignment it controls. It has no non-test
// code.
package proctest
