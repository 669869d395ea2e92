package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/dop251/goja"
)

// compileError is a TypeScript file that failed to bundle or evaluate,
// located at File:Line:Column (project-relative path).
type compileError struct {
	File    string
	Line    int
	Column  int
	Message string
}

func (e *compileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Message)
}

// jsModule is one TypeScript entry file bundled by esbuild (relative
// imports inlined, the ambient "svc" module left external) and compiled
// once by goja; every VM that runs it shares the Program.
type jsModule struct {
	File    string // project-relative path of the entry
	Program *goja.Program
	Source  string // the compiled JavaScript
	Hash    string // its version: moduleHash(Source)
}

// stepDeclPattern finds function declarations in esbuild's output; whether
// each is a step is decided by its body's first statement (see markSteps).
var stepDeclPattern = regexp.MustCompile(`(?m)\b(async\s+)?function\s+([A-Za-z_$][\w$]*)\s*\(`)

// markSteps rewrites every function whose body starts with the "use step"
// directive so that calls go through the ambient step dispatcher:
//
//	async function charge(x) { "use step"; … }
//
// becomes
//
//	var charge = __svc_step("charge", __svc_step_charge); async function __svc_step_charge(x) { "use step"; … }
//
// The implementation keeps its (hoisted) declaration; in a workflow VM the
// dispatcher journals the call, in a step VM it registers the implementation.
func markSteps(src string) string {
	var b strings.Builder
	last := 0
	for _, m := range stepDeclPattern.FindAllStringSubmatchIndex(src, -1) {
		if !bodyStartsWithDirective(src[m[1]:], "use step") {
			continue
		}
		name := src[m[4]:m[5]]
		b.WriteString(src[last:m[0]])
		fmt.Fprintf(&b, "var %s = __svc_step(%q, __svc_step_%s); ", name, name, name)
		b.WriteString(src[m[0]:m[4]])
		b.WriteString("__svc_step_" + name)
		last = m[5]
	}
	b.WriteString(src[last:])
	return b.String()
}

// bodyStartsWithDirective reports whether s, the text just after a function's
// opening parenthesis, has a body whose first statement is the directive.
func bodyStartsWithDirective(s, directive string) bool {
	depth := 1
	i := 0
	for ; i < len(s) && depth > 0; i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case '"', '\'', '`':
			q := s[i]
			for i++; i < len(s) && s[i] != q; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		}
	}
	rest := strings.TrimLeft(s[i:], " \t\r\n")
	if !strings.HasPrefix(rest, "{") {
		return false
	}
	rest = strings.TrimLeft(rest[1:], " \t\r\n")
	return strings.HasPrefix(rest, `"`+directive+`"`) || strings.HasPrefix(rest, `'`+directive+`'`)
}

// functionHasDirective reports whether the JS function value's source starts
// its body with the directive (used to find the "use workflow" export).
func functionHasDirective(vm *goja.Runtime, v goja.Value, directive string) bool {
	if _, ok := goja.AssertFunction(v); !ok {
		return false
	}
	src := v.String()
	i := strings.Index(src, "(")
	return i >= 0 && bodyStartsWithDirective(src[i+1:], directive)
}

// The preludes, compiled once: the JS half of the ambient "svc" module, and
// the deterministic clock and randomness of workflow VMs.
var (
	//go:embed js/prelude.js
	preludeSource  string
	preludeProgram = goja.MustCompile("svc:prelude.js", preludeSource, false)
	//go:embed js/workflow_prelude.js
	workflowPreludeSource  string
	workflowPreludeProgram = goja.MustCompile("svc:workflow_prelude.js", workflowPreludeSource, false)
)

// vmOptions configure a fresh VM for a module.
type vmOptions struct {
	Ambient  map[string]any                     // Go members of the "svc" module, beside the prelude's
	Env      map[string]string                  // process.env
	Log      *slog.Logger                       // console.* output
	Globals  map[string]any                     // extra globals (e.g. __svc_step, __svc_now)
	Workflow bool                               // install the deterministic workflow prelude (needs __svc_now/__svc_random/__svc_uuid globals)
	Setup    func(*goja.Runtime)                // called with the VM before the module runs
	Install  func(ambient *goja.Object)         // called once the ambient module exists, before the globals and the module (jsPlatform.install)
	Console  func(level slog.Level, msg string) // when set, also receives every console line (kept with the run)
}

// newModuleVM creates a VM, installs require("svc"), process.env, console
// and the globals, runs the module and returns the VM and module.exports.
// The ambient module's prelude and Ambient members are added on the first
// require("svc"): a module that imports nothing from "svc" (and every VM
// of it, one per workflow execution) does not pay for them. Members that
// Install set win over both, as when they were set first.
func newModuleVM(m *jsModule, o vmOptions) (*goja.Runtime, *goja.Object, error) {
	vm := goja.New()
	if strings.Contains(m.Source, "asyncIterator") {
		installAsyncIterator(vm)
	}
	if o.Setup != nil {
		o.Setup(vm)
	}
	vm.SetFieldNameMapper(goja.TagFieldNameMapper("json", true))
	ambient := vm.NewObject()
	if o.Install != nil {
		o.Install(ambient)
	}
	completed := false
	vm.Set("require", func(name string) (goja.Value, error) {
		if name != "svc" {
			return nil, fmt.Errorf("cannot require %q: only the ambient \"svc\" module is loaded at run time; npm packages and relative imports are bundled when the file compiles, and there are no Node built-ins", name)
		}
		if !completed {
			base, err := vm.RunProgram(preludeProgram)
			if err != nil {
				return nil, fmt.Errorf("run prelude: %w", err)
			}
			completed = true
			members := base.ToObject(vm)
			for _, k := range members.Keys() {
				setAbsent(ambient, k, members.Get(k))
			}
			for k, v := range o.Ambient {
				setAbsent(ambient, k, v)
			}
		}
		return ambient, nil
	})
	env := vm.NewObject()
	for k, v := range o.Env {
		env.Set(k, v)
	}
	process := vm.NewObject()
	process.Set("env", env)
	vm.Set("process", process)
	installConsole(vm, o.Log, o.Console)
	for k, v := range o.Globals {
		vm.Set(k, v)
	}
	if o.Workflow {
		if _, err := vm.RunProgram(workflowPreludeProgram); err != nil {
			return nil, nil, fmt.Errorf("run workflow prelude: %w", err)
		}
	}
	if _, ok := o.Globals["__svc_step"]; !ok {
		vm.Set("__svc_step", func(call goja.FunctionCall) goja.Value { return call.Argument(1) })
	}
	module := vm.NewObject()
	exports := vm.NewObject()
	module.Set("exports", exports)
	vm.Set("module", module)
	vm.Set("exports", exports)
	if _, err := vm.RunProgram(m.Program); err != nil {
		return nil, nil, jsError(m.File, err)
	}
	return vm, module.Get("exports").ToObject(vm), nil
}

// setAbsent sets o[k] to v unless o has k already.
func setAbsent(o *goja.Object, k string, v any) {
	if o.Get(k) == nil {
		o.Set(k, v)
	}
}

// installAsyncIterator defines Symbol.asyncIterator, which goja lacks,
// unless it is defined already. esbuild's helpers for lowered for await and
// async generators look it up (with a fallback of their own), but code that
// defines [Symbol.asyncIterator]() itself, as the openai package's streams
// do, would key the method "undefined", and for await over it would find no
// iterator. Only code that names it needs it: making the Symbol constructor
// costs a fresh VM about a hundred allocations, so newModuleVM defines it for
// a module whose source names it, and the web platform before its programs.
func installAsyncIterator(vm *goja.Runtime) {
	sym := vm.Get("Symbol").ToObject(vm)
	if v := sym.Get("asyncIterator"); v != nil && !goja.IsUndefined(v) {
		return
	}
	sym.DefineDataProperty("asyncIterator", goja.NewSymbol("Symbol.asyncIterator"), goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE)
}

// installConsole defines console.log/info/warn/error/debug writing to log,
// and to keep when it is set.
func installConsole(vm *goja.Runtime, log *slog.Logger, keep func(slog.Level, string)) {
	console := vm.NewObject()
	logAt := func(level slog.Level) func(goja.FunctionCall) goja.Value {
		return func(call goja.FunctionCall) goja.Value {
			parts := make([]string, len(call.Arguments))
			for i, a := range call.Arguments {
				parts[i] = jsDisplay(vm, a)
			}
			msg := strings.Join(parts, " ")
			log.Log(context.Background(), level, msg)
			if keep != nil {
				keep(level, msg)
			}
			return goja.Undefined()
		}
	}
	console.Set("log", logAt(slog.LevelInfo))
	console.Set("info", logAt(slog.LevelInfo))
	console.Set("debug", logAt(slog.LevelDebug))
	console.Set("warn", logAt(slog.LevelWarn))
	console.Set("error", logAt(slog.LevelError))
	vm.Set("console", console)
}

// jsDisplay renders a value for console output: strings as is, objects as JSON.
func jsDisplay(vm *goja.Runtime, v goja.Value) string {
	if v == nil || goja.IsUndefined(v) {
		return "undefined"
	}
	if _, ok := v.Export().(string); ok {
		return v.String()
	}
	if o, ok := v.(*goja.Object); ok && o.ClassName() != "Error" {
		if b, err := o.MarshalJSON(); err == nil {
			return string(b)
		}
	}
	return v.String()
}

// jsError converts a goja error raised while running file into a
// *compileError carrying the script position when goja knows it.
func jsError(file string, err error) error {
	var ex *goja.Exception
	if errors.As(err, &ex) {
		ce := &compileError{File: file, Message: ex.Value().String()}
		if frames := userFrames(ex.Stack()); len(frames) > 0 {
			pos := frames[0].Position()
			ce.Line, ce.Column = pos.Line, pos.Column
			if pos.Filename != "" {
				ce.File = pos.Filename
			}
		}
		return ce
	}
	return &compileError{File: file, Message: err.Error()}
}

// userFrames drops the leading frames of the runtime's own programs (named
// "svc:…"), so an error thrown by a builtin is located at the user's call;
// nil when no user code is on the stack.
func userFrames(frames []goja.StackFrame) []goja.StackFrame {
	for i, f := range frames {
		if !strings.HasPrefix(f.Position().Filename, "svc:") {
			return frames[i:]
		}
	}
	return nil
}
