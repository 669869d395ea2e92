package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// envLike matches the string literals that name an environment variable
// svc reads: its own, OpenTelemetry's and the model providers', and a few
// others by name.
var envLike = regexp.MustCompile(`^(?:(?:SVC|OTEL|OPENAI|ANTHROPIC)_[A-Z0-9_]+|DATABASE_URL|HMAC_SECRET|XDG_CONFIG_HOME|XDG_DATA_HOME|CI|GOGC)$`)

// TestEnvTable: every environment variable the code names is in envVars
// (config_env.go), which --help and docs/configuration.md are rendered
// from, and every entry is still named by the code.
func TestEnvTable(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	named := map[string]string{} // variable → a file that names it
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "config_env.go" {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && envLike.MatchString(s) {
					named[s] = f
				}
			}
			return true
		})
	}
	var names []string
	for _, v := range envVars {
		if slices.Contains(names, v.name) {
			t.Errorf("%s is in envVars twice", v.name)
		}
		names = append(names, v.name)
		if named[v.name] == "" {
			t.Errorf("envVars lists %s, which no code names any more", v.name)
		}
	}
	for name, f := range named {
		if !slices.Contains(names, name) {
			t.Errorf("%s names %s, which envVars (config_env.go) does not list", f, name)
		}
	}
}

// TestPackageDocNamesEveryVerb: the package doc's usage lists every
// top-level verb.
func TestPackageDocNamesEveryVerb(t *testing.T) {
	file, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	doc := file.Doc.Text()
	i := strings.Index(doc, "Verbs (")
	if i < 0 {
		t.Fatal("main.go's package doc has no Verbs section")
	}
	section, _, _ := strings.Cut(doc[i:], "Global flags")
	for _, v := range verbs() {
		if !regexp.MustCompile(`(?m)^\s+`+regexp.QuoteMeta(v.name)+`\b`).MatchString(section) && !strings.Contains(section, "|"+v.name) && !strings.Contains(section, v.name+"|") {
			t.Errorf("main.go's package doc does not list the verb %s", v.name)
		}
	}
}
