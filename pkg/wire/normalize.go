package wire

import "encoding/json"

// Go marshals a nil slice or map as null, but the schemas (and readers in
// other languages) expect [] and {}. These MarshalJSON methods send empty
// lists instead of null, so a missing list can never be mistaken for an
// unreadable one: an assignment's history starts above all, where an absent
// list withholds the assignment.

func (a Assignment) MarshalJSON() ([]byte, error) {
	type plain Assignment
	p := plain(a)
	p.Followers = orEmpty(p.Followers)
	return json.Marshal(p)
}

func (s AssignmentSnapshot) MarshalJSON() ([]byte, error) {
	type plain AssignmentSnapshot
	p := plain(s)
	p.Assignments = orEmpty(p.Assignments)
	if p.Streams == nil {
		p.Streams = map[string]uint64{}
	}
	return json.Marshal(p)
}

func (s AssignedStream) MarshalJSON() ([]byte, error) {
	type plain AssignedStream
	p := plain(s)
	p.Starts = orEmpty(p.Starts)
	return json.Marshal(p)
}

func (h Heartbeat) MarshalJSON() ([]byte, error) {
	type plain Heartbeat
	p := plain(h)
	p.Copies = orEmpty(p.Copies)
	return json.Marshal(p)
}

func (r SealReply) MarshalJSON() ([]byte, error) {
	type plain SealReply
	p := plain(r)
	p.LogEpochs = orEmpty(p.LogEpochs)
	return json.Marshal(p)
}

func (r SealBatchReply) MarshalJSON() ([]byte, error) {
	type plain SealBatchReply
	p := plain(r)
	p.Replies = orEmpty(p.Replies)
	return json.Marshal(p)
}

func (i StreamInfo) MarshalJSON() ([]byte, error) {
	type plain StreamInfo
	p := plain(i)
	p.Starts = orEmpty(p.Starts)
	p.CopyTails = orEmpty(p.CopyTails)
	return json.Marshal(p)
}

func (l StreamList) MarshalJSON() ([]byte, error) {
	type plain StreamList
	p := plain(l)
	p.Streams = orEmpty(p.Streams)
	return json.Marshal(p)
}

func (c ClusterInfo) MarshalJSON() ([]byte, error) {
	type plain ClusterInfo
	p := plain(c)
	p.Coordinators = orEmpty(p.Coordinators)
	p.Nodes = orEmpty(p.Nodes)
	return json.Marshal(p)
}

func (e AttentionEntry) MarshalJSON() ([]byte, error) {
	type plain AttentionEntry
	p := plain(e)
	if p.Figures == nil {
		p.Figures = map[string]any{}
	}
	return json.Marshal(p)
}

func (l AttentionListReply) MarshalJSON() ([]byte, error) {
	type plain AttentionListReply
	p := plain(l)
	p.Entries = orEmpty(p.Entries)
	return json.Marshal(p)
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
