package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dop251/goja"
)

// workflowDef is one compiled workflow: its module, the export holding the
// "use workflow" function, its schemas and its concurrency limit.
type workflowDef struct {
	Name         string
	File         string // project-relative
	Module       *jsModule
	Export       string           // key of module.exports holding the workflow function
	InputSchema  json.RawMessage  // nil when not declared
	OutputSchema json.RawMessage  // nil when not declared
	Concurrency  concurrencyDecl  // export const serial or concurrency (engine_concurrency.go)
	Schedule     *scheduleDecl    // export const schedule (schedule_engine.go); nil when not declared
	StepTimeout  time.Duration    // bound of one step attempt (svc.config.ts stepTimeout)
	input        *jsonSchema      // compiled InputSchema, nil when absent
	vms          chan *workflowVM // pre-warmed workflow VMs, each used by one execution
	stepVMs      chan *stepVM     // idle step VMs, reused
}

// newWorkflowDef returns the definition of workflow name in file, with its
// VM pools, before its module is set.
func newWorkflowDef(name, file string) *workflowDef {
	return &workflowDef{Name: name, File: file, StepTimeout: defaultStepTimeout, vms: make(chan *workflowVM, warmVMs), stepVMs: make(chan *stepVM, vmPoolSize)}
}

// agentDef is one compiled agent of deep-agents/<name>/index.ts.
type agentDef struct {
	Name   string
	File   string
	Module *jsModule
	Spec   *agentSpec // what defineAgent declared (agent.go)
}

// catalog is the compiled project: every workflow and agent that compiled,
// and the error of every file that did not. A catalog is immutable; edits
// produce a new one.
type catalog struct {
	Workflows map[string]*workflowDef
	Agents    map[string]*agentDef
	Failed    map[string]*compileError // workflow or agent name → its error
}

// workflowNames returns the workflow names, sorted.
func (c *catalog) workflowNames() []string { return sortedKeys(c.Workflows) }

// agentNames returns the agent names, sorted.
func (c *catalog) agentNames() []string { return sortedKeys(c.Agents) }

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// workflowOverride is one entry of svc.config.ts's `workflows` map.
type workflowOverride struct {
	File        string `json:"file"`
	Serial      *bool  `json:"serial"`
	StepTimeout string `json:"stepTimeout"` // a duration such as "30s" or "2m"; default defaultStepTimeout
}

// catalogSource is what discovery found on disk before compiling.
type catalogSource struct {
	workflows map[string]string        // name → file
	serial    map[string]bool          // svc.config.ts serial overrides
	timeouts  map[string]time.Duration // svc.config.ts stepTimeout overrides
	agents    map[string]string        // name → file
}

// discoverSources lists workflows/<name>.workflow.ts, applies svc.config.ts
// overrides, and lists deep-agents/<name>/index.ts.
func discoverSources(dir string, log *slog.Logger) (catalogSource, *compileError) {
	src := catalogSource{workflows: map[string]string{}, serial: map[string]bool{}, timeouts: map[string]time.Duration{}, agents: map[string]string{}}
	wfs, _ := filepath.Glob(filepath.Join(dir, "workflows", "*.workflow.ts"))
	for _, f := range wfs {
		name := strings.TrimSuffix(filepath.Base(f), ".workflow.ts")
		src.workflows[name] = filepath.ToSlash(filepath.Join("workflows", filepath.Base(f)))
	}
	agents, _ := filepath.Glob(filepath.Join(dir, "deep-agents", "*", "index.ts"))
	for _, f := range agents {
		name := filepath.Base(filepath.Dir(f))
		src.agents[name] = filepath.ToSlash(filepath.Join("deep-agents", name, "index.ts"))
	}
	overrides, err := loadConfigOverrides(dir, log)
	if err != nil {
		return src, err
	}
	for name, o := range overrides {
		if o.File != "" {
			src.workflows[name] = filepath.ToSlash(filepath.Clean(o.File))
		}
		if o.Serial != nil {
			src.serial[name] = *o.Serial
		}
		if o.StepTimeout != "" {
			d, err := time.ParseDuration(o.StepTimeout)
			if err != nil || d <= 0 {
				return src, &compileError{File: "svc.config.ts", Message: fmt.Sprintf("workflows.%s.stepTimeout %q: want a positive duration such as \"30s\" or \"5m\"", name, o.StepTimeout)}
			}
			src.timeouts[name] = d
		}
	}
	return src, nil
}

// loadConfigOverrides evaluates svc.config.ts (when present) and returns its
// `workflows` overrides: export default { workflows: { name: { file, serial } } }.
func loadConfigOverrides(dir string, log *slog.Logger) (map[string]workflowOverride, *compileError) {
	const file = "svc.config.ts"
	if _, err := os.Stat(filepath.Join(dir, file)); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	m, err := bundleModule(dir, file)
	if err != nil {
		return nil, asCompileError(file, err)
	}
	vm, exports, stop, err := catalogEval(m, log, false)
	defer stop()
	if err != nil {
		return nil, asCompileError(file, err)
	}
	cfg := exports.Get("default")
	if cfg == nil || goja.IsUndefined(cfg) {
		return nil, &compileError{File: file, Message: "svc.config.ts must `export default { workflows: { … } }`"}
	}
	var parsed struct {
		Workflows map[string]workflowOverride `json:"workflows"`
	}
	if err := exportJSON(vm, cfg, &parsed); err != nil {
		return nil, &compileError{File: file, Message: "invalid config: " + err.Error()}
	}
	return parsed.Workflows, nil
}

// exportJSON converts a JS value to a Go value through JSON.
func exportJSON(vm *goja.Runtime, v goja.Value, out any) error {
	b, err := json.Marshal(v.Export())
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// asCompileError returns err as a *compileError located in file.
func asCompileError(file string, err error) *compileError {
	var ce *compileError
	if errors.As(err, &ce) {
		return ce
	}
	return &compileError{File: file, Message: err.Error()}
}

// catalogEvalTimeout bounds the evaluation of one file while the catalog
// compiles: top-level code that never ends fails its own file instead of
// holding up every compile. A variable so tests can shorten it.
var catalogEvalTimeout = 10 * time.Second

// catalogEval runs the module m once for inspection, interrupted after
// catalogEvalTimeout; stop disarms the deadline once the caller has read
// what it needs. It evaluates m as its VMs will, with the default
// platform, so code that looks for the platform's globals when it is
// imported finds them: a workflow file in a workflow VM's setting
// (workflowVMOptions: I/O throws, the clock reads the epoch), any other
// file (agents, svc.config.ts) with the platform of steps and tools and
// the real clock (an agent's instructions may read it).
func catalogEval(m *jsModule, log *slog.Logger, workflow bool) (vm *goja.Runtime, exports *goja.Object, stop func(), err error) {
	var o vmOptions
	if workflow {
		o = workflowVMOptions(&workflowVM{}, nil)
	} else {
		var l *jsLoop
		o = vmOptions{
			Setup:   func(vm *goja.Runtime) { l = newJSLoop(vm) },
			Install: func(ambient *goja.Object) { (*jsPlatform)(nil).install(l, ambient) },
		}
	}
	var timer *time.Timer
	setup := o.Setup
	o.Log = log
	o.Setup = func(vm *goja.Runtime) {
		setup(vm)
		timer = time.AfterFunc(catalogEvalTimeout, func() {
			vm.Interrupt(fmt.Sprintf("evaluating the file took longer than %v; does its top-level code loop?", catalogEvalTimeout))
		})
	}
	vm, exports, err = newModuleVM(m, o)
	return vm, exports, func() { timer.Stop() }, err
}

// compileCatalog discovers, bundles and evaluates every workflow and agent
// of the project in parallel. A file that fails, panics the VM or runs too
// long is recorded in Failed and does not stop the others.
func compileCatalog(dir string, log *slog.Logger) (*catalog, *compileError) {
	src, cerr := discoverSources(dir, log)
	if cerr != nil {
		return nil, cerr
	}
	cat := &catalog{Workflows: map[string]*workflowDef{}, Agents: map[string]*agentDef{}, Failed: map[string]*compileError{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2*runtime.GOMAXPROCS(0))
	each := func(name, file string, build func(*jsModule) error, record func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						err = &compileError{File: file, Message: fmt.Sprintf("evaluating the file failed: %v", p)}
					}
				}()
				var m *jsModule
				if m, err = bundleModule(dir, file); err == nil {
					err = build(m)
				}
			}()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				cat.Failed[name] = asCompileError(file, err)
				return
			}
			record()
		}()
	}
	for name, file := range src.workflows {
		wf := newWorkflowDef(name, file)
		if d := src.timeouts[name]; d > 0 {
			wf.StepTimeout = d
		}
		each(name, file, func(m *jsModule) error {
			wf.Module = m
			return inspectWorkflow(wf, src.serial, log)
		}, func() { cat.Workflows[name] = wf })
	}
	for name, file := range src.agents {
		ag := &agentDef{Name: name, File: file}
		each(name, file, func(m *jsModule) error {
			ag.Module = m
			return inspectAgent(ag, log)
		}, func() { cat.Agents[name] = ag })
	}
	wg.Wait()
	return cat, nil
}

// inspectWorkflow evaluates the workflow module once to find its single
// "use workflow" export and its sibling inputSchema, outputSchema, serial,
// concurrency and schedule.
func inspectWorkflow(wf *workflowDef, serialOverride map[string]bool, log *slog.Logger) error {
	vm, exports, stop, err := catalogEval(wf.Module, log, true)
	defer stop()
	if err != nil {
		return err
	}
	var found []string
	for _, key := range exports.Keys() {
		if functionHasDirective(vm, exports.Get(key), "use workflow") {
			found = append(found, key)
		}
	}
	switch len(found) {
	case 0:
		return &compileError{File: wf.File, Message: `no exported function starts with "use workflow"`}
	case 1:
		wf.Export = found[0]
	default:
		return &compileError{File: wf.File, Message: fmt.Sprintf(`%d exported functions start with "use workflow" (%s); a workflow file has exactly one`, len(found), strings.Join(found, ", "))}
	}
	for key, dst := range map[string]*json.RawMessage{"inputSchema": &wf.InputSchema, "outputSchema": &wf.OutputSchema} {
		v := exports.Get(key)
		if v == nil || goja.IsUndefined(v) || goja.IsNull(v) {
			continue
		}
		b, err := jsonStringify(vm, v) // keeps the source order of properties
		if err != nil {
			return &compileError{File: wf.File, Message: fmt.Sprintf("%s is not JSON: %v", key, err)}
		}
		*dst = b
	}
	if wf.InputSchema != nil {
		s, err := compileSchema(wf.InputSchema)
		if err != nil {
			return &compileError{File: wf.File, Message: "inputSchema: " + err.Error()}
		}
		wf.input = s
	}
	if wf.OutputSchema != nil {
		if _, err := compileSchema(wf.OutputSchema); err != nil {
			return &compileError{File: wf.File, Message: "outputSchema: " + err.Error()}
		}
	}
	if err := inspectConcurrency(vm, exports, wf); err != nil {
		return err
	}
	if s, ok := serialOverride[wf.Name]; ok {
		// svc.config.ts's serial replaces what the file declares.
		wf.Concurrency = concurrencyDecl{}
		if s {
			wf.Concurrency.Limit = 1
		}
	}
	return inspectSchedule(vm, exports.Get("schedule"), wf)
}

// inspectAgent evaluates the agent module once, checks that its default
// export was made by defineAgent and reads its definition.
func inspectAgent(ag *agentDef, log *slog.Logger) error {
	vm, exports, stop, err := catalogEval(ag.Module, log, false)
	defer stop()
	if err != nil {
		return err
	}
	def := exports.Get("default")
	if def == nil || goja.IsUndefined(def) {
		return &compileError{File: ag.File, Message: "no default export; write `export default defineAgent({ … })`"}
	}
	obj, ok := def.(*goja.Object)
	if !ok || !jsTruthy(obj.Get("__svcAgent")) {
		return &compileError{File: ag.File, Message: "the default export was not made by defineAgent({ … })"}
	}
	ag.Spec, err = readAgentSpec(vm, obj, ag.File)
	return err
}
