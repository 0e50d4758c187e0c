package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestNilListsMarshalEmpty(t *testing.T) {
	for name, v := range map[string]any{
		"assignment": Assignment{}, "snapshot": AssignmentSnapshot{Assignments: []AssignedStream{{}}},
		"heartbeat": Heartbeat{}, "seal": SealReply{}, "seals": SealBatchReply{Replies: []SealResult{{Reply: &SealReply{}}}}, "info": StreamInfo{}, "list": StreamList{},
		"cluster": ClusterInfo{}, "attention": AttentionListReply{Entries: []AttentionEntry{{}}},
		"pointer": &AssignedStream{},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if strings.Contains(string(b), "null") {
			t.Errorf("%s marshals a null: %s", name, b)
		}
	}
	var back AssignedStream
	if err := json.Unmarshal([]byte(`{"assignment":{"stream":"s","stream_id":1,"epoch":1,"owner":"a","followers":[],"policy":""},"starts":[],"retention":{}}`), &back); err != nil || back.Starts == nil {
		t.Errorf("an empty starts list must decode as a readable, empty list: %v %v", back.Starts, err)
	}
}
