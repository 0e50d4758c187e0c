// Package schemas holds brook's wire contracts: one JSON Schema (draft
// 2020-12) per control-plane message under json/, and the byte layout of the
// binary data-plane frames in frames.md. README.md maps every subject to its
// schema. The schemas are embedded so that tests and tools validate against
// exactly the files in the repository.
package schemas

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
)

// FS holds the schema files, at json/<name>. It is read-only.
//
//go:embed json/*.json
var FS embed.FS

// BaseURL is the base of every schema's $id: the schema of file name has
// $id BaseURL+name, and the per-message schemas reference the shared shapes
// in DefsFile relative to it.
const BaseURL = "https://github.com/brook-streams/brook/schemas/json/"

// DefsFile is the schema file holding the shapes shared by the messages, under
// "$defs".
const DefsFile = "defs.schema.json"

// Names lists the schema file names (without the json/ directory), sorted.
func Names() []string {
	entries, err := fs.ReadDir(FS, "json")
	if err != nil {
		// The directory is embedded at build time, so this cannot happen
		// in a binary that compiled.
		panic(fmt.Sprintf("schemas: embedded json directory unreadable: %v", err))
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// Read returns the content of the schema file name, as listed by Names.
func Read(name string) ([]byte, error) {
	b, err := FS.ReadFile(path.Join("json", name))
	if err != nil {
		return nil, fmt.Errorf("schemas: read %s: %w", name, err)
	}
	return b, nil
}

// ID is the $id of the schema file name.
func ID(name string) string { return BaseURL + name }
