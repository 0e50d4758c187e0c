package schemas_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/brook-streams/brook/schemas"
)

// Every embedded file is a draft 2020-12 schema whose $id matches its name,
// so that relative references between them resolve.
func TestFilesAreSchemasWithMatchingIDs(t *testing.T) {
	names := schemas.Names()
	if len(names) < 20 {
		t.Fatalf("only %d schema files embedded: %v", len(names), names)
	}
	for _, name := range names {
		if !strings.HasSuffix(name, ".schema.json") {
			t.Errorf("%s: file name does not end in .schema.json", name)
		}
		b, err := schemas.Read(name)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Schema string `json:"$schema"`
			ID     string `json:"$id"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if doc.Schema != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema %q, want draft 2020-12", name, doc.Schema)
		}
		if doc.ID != schemas.ID(name) {
			t.Errorf("%s: $id %q, want %q", name, doc.ID, schemas.ID(name))
		}
	}
}

func TestReadMissing(t *testing.T) {
	if _, err := schemas.Read("nope.schema.json"); err == nil {
		t.Fatal("reading a missing schema succeeded")
	}
}
