package main

// Bundling user code (DESIGN §9): esbuild turns each workflow, agent, the
// config and the schema into one CommonJS program for goja, with its
// relative imports, the project's npm packages and the built-in stand-in for
// drizzle-orm inlined; only the ambient "svc" module stays a require().
//
// Packages resolve as a worker/edge bundler resolves them: the "worker",
// "browser" and "module" export conditions (besides "import", "require" and
// "default"), and the "browser", "module" and "main" fields of package.json
// for packages without an exports map. Those are the builds that run on the
// web platform (fetch, URL, streams) rather than on Node; the openai package,
// for one, offers only its fetch-based build on these conditions. The VMs
// have no Node built-ins: an import of one (fs, node:fs, net, child_process…)
// fails to compile, naming the built-in, the package file that imports it and
// the user's file that pulled the package in.

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/dop251/goja"
	"github.com/evanw/esbuild/pkg/api"
)

var (
	// bundleConditions are the export conditions packages resolve with
	// (esbuild adds "import", "require" and "default").
	bundleConditions = []string{"worker", "browser", "module"}
	// bundleMainFields are the package.json fields read, in order, when a
	// package has no exports map.
	bundleMainFields = []string{"browser", "module", "main"}
)

// bundleNodeBuiltinNote is part of the note esbuild attaches to an import it
// could not resolve because the path is a Node built-in (esbuild knows the
// list); TestBundleNodeBuiltins pins it.
const bundleNodeBuiltinNote = "is built into node"

// bundleDrizzleSource is the built-in stand-in for "drizzle-orm" and
// "drizzle-orm/pg-core": an expression whose value holds the exports. Both
// paths resolve to it at compile time, whether or not the project installed
// drizzle-orm, so src/schema.ts means the same tables to auto-migrate and to
// user code that imports it.
//
//go:embed js/drizzle_pg_core.js
var bundleDrizzleSource string

// bundleDrizzleUnknown starts esbuild's error for a named import the
// stand-in does not export.
const bundleDrizzleUnknown = `No matching export in "svc:drizzle-orm" for import `

// bundleDrizzle returns the stand-in as an ES module, so that importing a
// name it lacks fails to compile at the import, and the names it exports.
var bundleDrizzle = sync.OnceValues(func() (string, []string) {
	vm := goja.New()
	v, err := vm.RunString("Object.keys(" + bundleDrizzleSource + ")")
	var names []string
	if err == nil {
		err = vm.ExportTo(v, &names)
	}
	if err != nil {
		panic("drizzle-orm stand-in: " + err.Error()) // the embedded source is broken
	}
	return "const api = " + bundleDrizzleSource + ";\nexport const { " + strings.Join(names, ", ") + " } = api;\n", names
})

// bundleDrizzlePlugin resolves "drizzle-orm" and "drizzle-orm/pg-core" to
// one module, the stand-in (one instance, so sql`…` made with one import is
// recognized by builders of the other).
var bundleDrizzlePlugin = api.Plugin{
	Name: "svc-drizzle",
	Setup: func(b api.PluginBuild) {
		b.OnResolve(api.OnResolveOptions{Filter: `^drizzle-orm(/pg-core)?$`}, func(api.OnResolveArgs) (api.OnResolveResult, error) {
			return api.OnResolveResult{Path: "drizzle-orm", Namespace: "svc"}, nil
		})
		b.OnLoad(api.OnLoadOptions{Filter: `.*`, Namespace: "svc"}, func(api.OnLoadArgs) (api.OnLoadResult, error) {
			src, _ := bundleDrizzle()
			return api.OnLoadResult{Contents: &src, Loader: api.LoaderJS}, nil
		})
	},
}

// bundleOptions are the esbuild options for the entry rel under dir.
func bundleOptions(dir, rel string) api.BuildOptions {
	return api.BuildOptions{
		EntryPoints:   []string{filepath.Join(dir, rel)},
		AbsWorkingDir: dir,
		// Not written; it makes the source map's paths relative to rel's
		// directory, which is how goja resolves them against the program name.
		Outfile:    filepath.Join(dir, rel+".js"),
		Bundle:     true,
		Write:      false,
		Format:     api.FormatCommonJS,
		Platform:   api.PlatformNeutral,
		Conditions: bundleConditions,
		MainFields: bundleMainFields,
		Target:     api.ES2017, // goja runs ES2017 natively; later syntax is lowered
		Supported:  map[string]bool{"bigint": true},
		External:   []string{"svc"},
		Plugins:    []api.Plugin{bundleDrizzlePlugin},
		Sourcemap:  api.SourceMapInline,
		LogLevel:   api.LogLevelSilent,
	}
}

// bundleModule bundles and compiles the TypeScript entry rel under dir.
// Imports of "svc" stay require() calls, answered at run time by newModuleVM.
func bundleModule(dir, rel string) (*jsModule, error) {
	opts := bundleOptions(dir, rel)
	res := api.Build(opts)
	if len(res.Errors) > 0 {
		return nil, bundleError(opts, rel, res.Errors[0])
	}
	if len(res.OutputFiles) != 1 {
		return nil, &compileError{File: rel, Message: "bundler produced no output"}
	}
	src := markSteps(bundleLoopHelpers(string(res.OutputFiles[0].Contents)))
	prog, err := goja.Compile(rel, src, false)
	if err != nil {
		return nil, &compileError{File: rel, Message: err.Error()}
	}
	return &jsModule{File: rel, Program: prog, Source: src, Hash: moduleHash(src)}, nil
}

// bundleHelperLoops are the loops of esbuild's CommonJS export helpers
// (__export, __copyProps) and the same loops over Object.keys and
// Object.getOwnPropertyNames by index, line for line (the source map
// stays right). goja's for...in walks the prototype chain and makes every
// method of Object.prototype to see that none is enumerable, and for...of
// makes the array iterator's machinery: about 180 of a workflow VM's 900
// allocations, paid by every VM of every module that has exports (one per
// workflow execution). The keys are the same: the objects these helpers
// get are esbuild's own export maps and module namespaces.
var bundleHelperLoops = strings.NewReplacer(
	"  for (var name in all)\n    __defProp(target, name, { get: all[name], enumerable: true });",
	"  for (var names = Object.keys(all), i = 0, name; name = names[i], i < names.length; i++)\n    __defProp(target, name, { get: all[name], enumerable: true });",
	"    for (let key of __getOwnPropNames(from))\n",
	"    for (let keys = __getOwnPropNames(from), i = 0, key; key = keys[i], i < keys.length; i++)\n",
)

// bundleLoopHelpers rewrites the loops of esbuild's export helpers in src
// (bundleHelperLoops); text without them is returned as is.
func bundleLoopHelpers(src string) string { return bundleHelperLoops.Replace(src) }

// bundleError converts esbuild's message m about the entry rel into a
// *compileError located where m points, explaining imports of Node built-ins.
func bundleError(opts api.BuildOptions, rel string, m api.Message) *compileError {
	ce := &compileError{File: rel, Message: m.Text}
	if m.Location != nil {
		ce.File, ce.Line, ce.Column = bundleDisplayPath(m.Location.File), m.Location.Line, m.Location.Column+1
	}
	if name, ok := strings.CutPrefix(m.Text, bundleDrizzleUnknown); ok {
		_, names := bundleDrizzle()
		ce.Message = fmt.Sprintf("%s is not supported by svc's drizzle-orm stand-in (drizzle-orm and drizzle-orm/pg-core resolve to it); it knows %s", name, strings.Join(names, ", "))
		return ce
	}
	builtin, ok := bundleBuiltin(m)
	if !ok || m.Location == nil {
		return ce
	}
	const why = "the svc runtime has no Node built-ins; use web APIs (fetch, URL, crypto.subtle…) or a package that runs on them"
	if !bundleInPackage(m.Location.File) {
		ce.Message = fmt.Sprintf("imports the Node built-in %q: %s", builtin, why)
		return ce
	}
	pkgFile := fmt.Sprintf("%s:%d", ce.File, ce.Line)
	user, spec := bundleUserImport(opts, builtin, m.Location.File)
	if user == "" {
		ce.Message = fmt.Sprintf("imports the Node built-in %q (pulled in by %s): %s", builtin, rel, why)
		return ce
	}
	ce.File, ce.Line, ce.Column = user, 0, 0
	if src, err := os.ReadFile(filepath.Join(opts.AbsWorkingDir, user)); err == nil {
		ce.Line, ce.Column = bundleFindSpecifier(string(src), spec)
	}
	ce.Message = fmt.Sprintf("%q needs the Node built-in %q (imported by %s): %s", spec, builtin, pkgFile, why)
	return ce
}

// bundleBuiltin returns the import path of a message saying that a Node
// built-in could not be resolved.
func bundleBuiltin(m api.Message) (string, bool) {
	quoted, ok := strings.CutPrefix(m.Text, "Could not resolve ")
	if !ok {
		return "", false
	}
	path, err := strconv.Unquote(quoted)
	if err != nil {
		return "", false
	}
	for _, n := range m.Notes {
		if strings.Contains(n.Text, bundleNodeBuiltinNote) {
			return path, true
		}
	}
	return "", false
}

// bundleInPackage reports whether the path (as esbuild prints it) is a file
// of an npm package.
func bundleInPackage(path string) bool {
	return strings.Contains("/"+filepath.ToSlash(path), "/node_modules/")
}

// bundleDisplayPath shortens a package file outside the project (a
// symlinked node_modules resolves to its real path) to node_modules/….
func bundleDisplayPath(path string) string {
	p := filepath.ToSlash(path)
	if i := strings.Index(p, "node_modules/"); i >= 0 && strings.HasPrefix(p, "../") {
		return p[i:]
	}
	return p
}

// bundleUserImport rebuilds the entry with builtin left external to learn
// its import graph, finds the chain of imports from the entry to pkgFile,
// and returns the last user file on it (outside node_modules) and the
// specifier with which that file imports the package. It returns "" when
// the chain cannot be found.
func bundleUserImport(opts api.BuildOptions, builtin, pkgFile string) (user, spec string) {
	opts.External = append(append([]string(nil), opts.External...), builtin)
	opts.Metafile = true
	opts.Sourcemap = api.SourceMapNone
	res := api.Build(opts)
	var meta struct {
		Inputs map[string]struct {
			Imports []struct {
				Path     string `json:"path"`
				Original string `json:"original"`
				External bool   `json:"external"`
			} `json:"imports"`
		} `json:"inputs"`
	}
	if len(res.Errors) > 0 || json.Unmarshal([]byte(res.Metafile), &meta) != nil {
		return "", ""
	}
	entry, err := filepath.Rel(opts.AbsWorkingDir, opts.EntryPoints[0])
	if err != nil {
		return "", ""
	}
	// Breadth-first from the entry; from[f] is the file that imported f and
	// the specifier it used.
	type edge struct{ file, spec string }
	entry = filepath.ToSlash(entry)
	from := map[string]edge{entry: {}}
	queue := []string{entry}
	for len(queue) > 0 && queue[0] != pkgFile {
		f := queue[0]
		queue = queue[1:]
		for _, imp := range meta.Inputs[f].Imports {
			if _, seen := from[imp.Path]; !seen && !imp.External {
				from[imp.Path] = edge{f, imp.Original}
				queue = append(queue, imp.Path)
			}
		}
	}
	if len(queue) == 0 {
		return "", ""
	}
	for f := pkgFile; f != entry; f = from[f].file {
		if e := from[f]; !bundleInPackage(e.file) {
			return e.file, e.spec
		}
	}
	return "", ""
}

// bundleFindSpecifier returns the 1-based line and column of the first
// quoted occurrence of spec in src, or 0, 0.
func bundleFindSpecifier(src, spec string) (line, column int) {
	i := -1
	for _, q := range []string{`"`, `'`} {
		if j := strings.Index(src, q+spec+q); j >= 0 && (i < 0 || j < i) {
			i = j
		}
	}
	if i < 0 {
		return 0, 0
	}
	return strings.Count(src[:i], "\n") + 1, i - strings.LastIndex(src[:i], "\n")
}
