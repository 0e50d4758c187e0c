// Package cluster runs a local brook cluster on loopback for tests and
// benchmarks: an embedded nats-server (accounts BROOK and SYS, as the
// services expect), and the coordinators, stream hosts and optionally the
// attention service as separate OS processes built from this repository.
//
// Each process writes its stdout and stderr to a file under the log
// directory, so a failed test can print their tails (Cluster.LogTails).
// Processes run in their own process groups, are killed when the harness
// stops, and on Linux also when the process that started them dies.
//
// Every stream host reaches NATS through its own in-process TCP proxy, so a
// test can cut a host off from NATS and heal it without killing it
// (CutHost, HealHost).
//
// The harness picks the processes' ports (outside the kernel's ephemeral
// range, which it hands out by itself to every outgoing connection on the
// machine) and the processes bind them. A process that finds its HTTP port
// taken all the same, at its start or at a restart, exits; the cluster's
// next wait starts it again on a fresh port (Proc.HTTPAddr follows).
package cluster
