// Package e2e holds brook's process kill suites: every test starts a fresh
// local cluster of real processes (three coordinators, four stream hosts
// and, where a suite needs it, the attention service) around an embedded
// nats-server, puts a stream under load, and then kills, pauses or cuts off
// processes with real signals (SIGKILL, SIGSTOP/SIGCONT) or a NATS
// partition. Each suite then reads the whole stream back through a durable
// cursor and checks that no confirmed record was lost, that each was
// delivered at the one offset it was confirmed at, and that the stream
// serves again without an operator (or, for the operator verbs, with one).
//
// TestChaos runs a seeded random sequence of those faults; `make chaos`
// runs it for longer (BROOK_CHAOS=1, BROOK_CHAOS_DURATION, BROOK_CHAOS_SEED).
//
// The binaries are built once per run of the test binary (TestMain); the
// process logs of a failed test are printed with it.
package e2e
