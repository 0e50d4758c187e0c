package client

import "sync/atomic"

// Stats counts the requests a Client sent and the owner notices it heard
// since it was made, by kind: what a failover costs the client (and the
// cluster it asks). Counting is one atomic add per request.
type Stats struct {
	// PublishAttempts counts the attempts of publishes that may retry:
	// every attempt of Publish, and an AsyncPublisher's retries (its first
	// sends are not counted).
	PublishAttempts uint64
	// Retries counts the failed attempts of requests about a stream that
	// were tried again (publishes, fetches, commits): what a failover
	// costs. AdminRetries counts those of admin requests (and the
	// attention list), which a coordinator's election or overload costs.
	Retries      uint64
	AdminRetries uint64
	// RetriesNoResponders, RetriesTimedOut, RetriesOwnerLost and
	// RetriesOther split Retries (their sum) by why the attempt before
	// each failed: nobody served the stream (no responders: its owner is
	// gone and no new one serves yet), no reply came within the request
	// timeout, the owner watch abandoned it for a newer owner
	// (ErrOwnerLost), or anything else: refused by a host or a
	// coordinator (not owner, sealed, recovering, overloaded, ...) or
	// lost to a reconnect.
	RetriesNoResponders uint64
	RetriesTimedOut     uint64
	RetriesOwnerLost    uint64
	RetriesOther        uint64
	// Probes counts the owner watch's probes (ownerwatch.go): fetches
	// that read nothing, asking who serves a stream a publish waits on.
	Probes uint64
	// StatusChecks counts the stream.info requests a retrying request
	// about a stream sent the coordinators.
	StatusChecks uint64
	// NoticeSubscribes counts the owner-notice subscriptions made, and
	// Notices the owner notices heard on them (notices.go).
	NoticeSubscribes uint64
	Notices          uint64
}

// stats are the live counters of Stats.
type stats struct {
	publishAttempts, adminRetries, probes, statusChecks, noticeSubscribes, notices atomic.Uint64
	// A retry about a stream is counted once, in the counter of its
	// reason (countRetry); Retries is their sum, so any snapshot, and
	// any difference of two, adds up.
	retriesNoResponders, retriesTimedOut, retriesOwnerLost, retriesOther atomic.Uint64
}

// Stats returns the client's counts so far; the difference of two calls is
// what happened between them.
func (c *Client) Stats() Stats {
	s := &c.stats
	noResponders, timedOut, ownerLost, other := s.retriesNoResponders.Load(), s.retriesTimedOut.Load(), s.retriesOwnerLost.Load(), s.retriesOther.Load()
	return Stats{
		PublishAttempts:     s.publishAttempts.Load(),
		Retries:             noResponders + timedOut + ownerLost + other,
		AdminRetries:        s.adminRetries.Load(),
		RetriesNoResponders: noResponders,
		RetriesTimedOut:     timedOut,
		RetriesOwnerLost:    ownerLost,
		RetriesOther:        other,
		Probes:              s.probes.Load(),
		StatusChecks:        s.statusChecks.Load(),
		NoticeSubscribes:    s.noticeSubscribes.Load(),
		Notices:             s.notices.Load(),
	}
}

// Add returns s plus other: the counts of two clients together.
func (s Stats) Add(other Stats) Stats {
	return s.each(other, func(a, b uint64) uint64 { return a + b })
}

// Sub returns s less an earlier snapshot: the counts between the two.
func (s Stats) Sub(earlier Stats) Stats {
	return s.each(earlier, func(a, b uint64) uint64 { return a - b })
}

// each combines s and o count by count with f.
func (s Stats) each(o Stats, f func(a, b uint64) uint64) Stats {
	return Stats{
		PublishAttempts:     f(s.PublishAttempts, o.PublishAttempts),
		Retries:             f(s.Retries, o.Retries),
		AdminRetries:        f(s.AdminRetries, o.AdminRetries),
		RetriesNoResponders: f(s.RetriesNoResponders, o.RetriesNoResponders),
		RetriesTimedOut:     f(s.RetriesTimedOut, o.RetriesTimedOut),
		RetriesOwnerLost:    f(s.RetriesOwnerLost, o.RetriesOwnerLost),
		RetriesOther:        f(s.RetriesOther, o.RetriesOther),
		Probes:              f(s.Probes, o.Probes),
		StatusChecks:        f(s.StatusChecks, o.StatusChecks),
		NoticeSubscribes:    f(s.NoticeSubscribes, o.NoticeSubscribes),
		Notices:             f(s.Notices, o.Notices),
	}
}
