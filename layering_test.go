package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The layers of the flat package, by file name. A lower file never names
// a declaration of an upper file: the engine, the journal and the JS
// runtime know nothing of commands, the dev boot or HTTP handlers, so the
// box (svc serve) and tests can reuse them without either.
var (
	// upperFiles hold the commands, the dev boot and the HTTP surface.
	upperFiles = []string{"main.go", "cli*.go", "devenv.go", "server.go", "api_*.go", "wires.go", "wire_*.go",
		"http_guard.go", "otel_http.go", "console.go", "link.go", "contract.go", "watch.go", "gate.go", "cp_*.go", "runtime*.go", "box*.go", "metrics_http.go", "schedule_api.go"}
	// lowerFiles hold the durable engine, its storage, the runtime of user
	// code and the agents (their loop, sessions and model vocabulary): the
	// wires decode into the agents' request type, never the reverse.
	lowerFiles = []string{"engine*.go", "journal.go", "events.go", "execution.go", "steps.go", "eventloop.go",
		"jsruntime.go", "bundle.go", "js_*.go", "catalog.go", "workflow_*.go", "json_limits.go", "files.go", "fdatasync_*.go",
		"schema*.go", "typegen*.go", "automigrate.go", "migrate.go", "secrets.go", "s3*.go", "storage_*.go", "sign.go", "ident*.go", "agent.go", "session.go", "model.go", "providers.go", "agent_history.go",
		"metrics.go", "metrics_text.go", "schedule_cron.go", "schedule_engine.go",
		"otel_export.go", "otel_engine.go", "otel_user.go", "otel_agent.go"}
)

// TestLayering fails when a lower file names a top-level declaration of an
// upper file. Identifiers are matched by name after the parser's own
// scope resolution (locals and parameters are resolved within their file,
// selectors and struct literal keys are not package-level names).
func TestLayering(t *testing.T) {
	fset := token.NewFileSet()
	upper, lower := parseProgramFiles(t, fset, upperFiles), parseProgramFiles(t, fset, lowerFiles)
	if len(upper) == 0 || len(lower) == 0 {
		t.Fatal("no files matched the layer patterns")
	}
	for n := range upper {
		if _, ok := lower[n]; ok {
			t.Fatalf("%s is in both layers", n)
		}
	}
	declaredIn := map[string]string{} // upper top-level name → its file
	for n, f := range upper {
		for _, d := range f.Decls {
			for _, name := range topLevelNames(d) {
				declaredIn[name] = n
			}
		}
	}
	var bad []string
	for _, f := range lower {
		keys := map[*ast.Ident]bool{f.Name: true}
		ast.Inspect(f, func(node ast.Node) bool {
			switch x := node.(type) {
			case *ast.SelectorExpr:
				keys[x.Sel] = true
			case *ast.FuncDecl:
				keys[x.Name] = true
			case *ast.KeyValueExpr:
				if id, ok := x.Key.(*ast.Ident); ok {
					keys[id] = true
				}
			case *ast.Ident:
				if keys[x] || x.Obj != nil {
					return true
				}
				if src, ok := declaredIn[x.Name]; ok {
					bad = append(bad, fset.Position(x.Pos()).String()+": "+x.Name+" (declared in "+src+")")
				}
			}
			return true
		})
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("lower layer reaches up: %s", b)
	}
	// Every non-test file is placed in a layer or deliberately left out.
	all, _ := filepath.Glob("*.go")
	unplaced := []string{}
	for _, n := range all {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		if _, ok := upper[n]; ok {
			continue
		}
		if _, ok := lower[n]; ok {
			continue
		}
		unplaced = append(unplaced, n)
	}
	t.Logf("files in neither layer (shared vocabulary and agents): %s", strings.Join(unplaced, " "))
	if _, err := os.Stat("main.go"); err != nil {
		t.Fatal("run from the package directory")
	}
}

// topLevelNames returns the names a top-level declaration introduces
// (methods excluded: they are reached through selectors).
func topLevelNames(d ast.Decl) []string {
	switch x := d.(type) {
	case *ast.FuncDecl:
		if x.Recv == nil {
			return []string{x.Name.Name}
		}
	case *ast.GenDecl:
		var out []string
		for _, s := range x.Specs {
			switch sp := s.(type) {
			case *ast.TypeSpec:
				out = append(out, sp.Name.Name)
			case *ast.ValueSpec:
				for _, id := range sp.Names {
					out = append(out, id.Name)
				}
			}
		}
		return out
	}
	return nil
}

// parseProgramFiles parses the program's files (not its tests) matching
// patterns, by name.
func parseProgramFiles(t *testing.T, fset *token.FileSet, patterns []string) map[string]*ast.File {
	t.Helper()
	out := map[string]*ast.File{}
	for _, p := range patterns {
		names, err := filepath.Glob(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if strings.HasSuffix(n, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, n, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			out[n] = f
		}
	}
	return out
}
