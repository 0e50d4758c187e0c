package wire_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/schemas"
)

// wireSource parses the non-test files of package wire, so the tests see
// every type and constant, not only those someone remembered to list.
func wireSource(t *testing.T) []*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", p, err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatal("no wire source files found")
	}
	return files
}

func TestEveryWireTypeHasASchema(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range validExamples() {
		typ := reflect.TypeOf(c.value)
		if typ.PkgPath() != reflect.TypeOf(wire.OK{}).PkgPath() {
			t.Errorf("example of %s is not a wire type", typ)
		}
		covered[typ.Name()] = true
	}
	var structs []string
	for _, f := range wireSource(t) {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if ok && ts.Name.IsExported() {
				if _, isStruct := ts.Type.(*ast.StructType); isStruct {
					structs = append(structs, ts.Name.Name)
				}
			}
			return true
		})
	}
	if len(structs) < 30 {
		t.Fatalf("found only %d wire struct types: %v", len(structs), structs)
	}
	for _, name := range structs {
		if !covered[name] {
			t.Errorf("wire.%s has no schema example in validExamples", name)
		}
	}
}

func TestEverySchemaIsUsed(t *testing.T) {
	used := map[string]bool{}
	for _, c := range validExamples() {
		used[c.schema] = true
		file, _, _ := strings.Cut(c.schema, "#")
		used[file] = true
	}
	for _, name := range schemas.Names() {
		if !used[name] {
			t.Errorf("schema file %s is used by no example", name)
		}
	}
	// Every object shape in the shared definitions must be exercised on
	// its own; the scalar ones (names, enums, integers) are exercised
	// through the messages that use them.
	defs := objectDefs(t)
	if len(defs) < 10 {
		t.Fatalf("only %d object definitions found", len(defs))
	}
	for _, d := range defs {
		if !used[def(d)] {
			t.Errorf("definition %s is used by no example", d)
		}
	}
}

// objectDefs lists the $defs of the shared file whose type is object.
func objectDefs(t *testing.T) []string {
	t.Helper()
	doc := objectSchema(t, schemas.DefsFile)
	var names []string
	for name, d := range doc["$defs"].(map[string]any) {
		if d.(map[string]any)["type"] == "object" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// constBlock returns the string values of the one const block in package
// wire whose names all start with prefix.
func constBlock(t *testing.T, prefix string) []string {
	t.Helper()
	var found [][]string
	for _, f := range wireSource(t) {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			var vals []string
			all := true
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, prefix) || i >= len(vs.Values) {
						all = false
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						all = false
						continue
					}
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					vals = append(vals, s)
				}
			}
			if all && len(vals) > 0 {
				found = append(found, vals)
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("found %d const blocks of %s*, want 1", len(found), prefix)
	}
	slices.Sort(found[0])
	return found[0]
}

// TestEnumsMatchConstants keeps the schema enums equal to the constant sets
// of package wire.
func TestEnumsMatchConstants(t *testing.T) {
	for _, c := range []struct{ def, prefix string }{
		{"error_code", "Code"},
		{"attention_kind", "Attention"},
		{"severity", "Severity"},
		{"role", "Role"},
		{"node_state", "Node"},
		{"stream_status", "Status"},
	} {
		var enum []string
		for _, v := range asSlice(objectSchema(t, def(c.def))["enum"]) {
			enum = append(enum, v.(string))
		}
		slices.Sort(enum)
		if want := constBlock(t, c.prefix); !slices.Equal(enum, want) {
			t.Errorf("$defs/%s enum %v, want wire.%s* %v", c.def, enum, c.prefix, want)
		}
	}
}

// TestEveryAdminVerbHasSchemasAndIsDocumented ties the verbs to the request
// schemas and the README's subject table.
func TestEveryAdminVerbHasSchemasAndIsDocumented(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "schemas", "README.md"))
	if err != nil {
		t.Fatalf("read schemas/README.md: %v", err)
	}
	names := schemas.Names()
	verbs := constBlock(t, "Verb")
	if len(verbs) < 10 {
		t.Fatalf("only %d verbs", len(verbs))
	}
	for _, verb := range verbs {
		file := strings.ReplaceAll(verb, ".", "-") + ".request.schema.json"
		if !slices.Contains(names, file) {
			t.Errorf("verb %s has no request schema %s", verb, file)
		}
		if !strings.Contains(string(readme), "`"+wire.AdminSubject(verb)+"`") {
			t.Errorf("README does not document subject %s", wire.AdminSubject(verb))
		}
	}
	for _, name := range names {
		if !strings.Contains(string(readme), name) {
			t.Errorf("README does not mention %s", name)
		}
	}
	for _, subj := range []string{
		wire.HeartbeatSubject("<node>"), wire.AssignNoticeSubject("<node>"), wire.AssignPull,
		wire.SealSubject("<node>"), wire.SealBatchSubject("<node>"), wire.HandoffSubject("<node>"), wire.PublishSubject("<stream>"), wire.PublishBatchSubject("<stream>"), wire.FetchSubject("<stream>"),
		wire.CommitSubject("<stream>"), wire.OwnerNoticeSubject("<stream>", "<node>"), "brook.s.<stream>.repl.<epoch>.<node>", wire.HostLeaveSubject("<node>"),
		wire.HostReplSubject("<owner>", "<node>"),
		wire.AttentionList,
	} {
		if !strings.Contains(string(readme), "`"+subj+"`") {
			t.Errorf("README does not document subject %s", subj)
		}
	}
}
