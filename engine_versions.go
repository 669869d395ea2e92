package main

// Runs are pinned to the code they started with (DESIGN §9): a run records
// the content hash of its workflow's compiled module, and every execution
// of it uses that version, so an edit never breaks an in-flight run; new
// runs take the new code. Each version a run starts on is saved in the
// engine's store (engine_store.go: a file under the journal directory, or
// a row of svc_engine.versions) before the start is journaled, so a
// restart after an edit, or another replica on a newer image, still finds
// it; a version leaves memory when its last active run ends, and the store
// drops it at the next boot once no active run needs it.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dop251/goja"
)

// errNonDeterministic wraps a replay that made a different call than the
// journal holds.
var errNonDeterministic = errors.New("workflow is not deterministic")

// moduleHash returns the version of compiled JavaScript source.
func moduleHash(src string) string {
	sum := sha256.Sum256([]byte(src))
	return hex.EncodeToString(sum[:12])
}

// savedVersion is a saved version: what it takes to run it again.
type savedVersion struct {
	Workflow string `json:"workflow"`
	File     string `json:"file"`
	Export   string `json:"export"`
	Serial   bool   `json:"serial"`
	Timeout  int64  `json:"stepTimeoutMs"`
	Source   string `json:"source"`
	// Concurrency is a limit other than serial's (engine_concurrency.go).
	Concurrency *concurrencyDecl `json:"concurrency,omitempty"`
}

// saveVersion saves def's version in the store once (durably), so that a run
// started on it can resume after a restart whatever the code is then.
func (e *engine) saveVersion(def *workflowDef) error {
	v := def.Module.Hash
	e.versionMu.Lock()
	defer e.versionMu.Unlock()
	if e.saved[v] {
		return nil
	}
	sv := savedVersion{Workflow: def.Name, File: def.File, Export: def.Export, Serial: def.Concurrency.serial(), Timeout: def.StepTimeout.Milliseconds(), Source: def.Module.Source}
	if def.Concurrency.limited() && !sv.Serial {
		sv.Concurrency = &def.Concurrency
	}
	b, err := json.Marshal(sv)
	if err != nil {
		return err
	}
	if err := e.opts.Store.saveVersion(v, b); err != nil {
		return fmt.Errorf("save workflow version %s: %w", v, err)
	}
	e.saved[v] = true
	return nil
}

// pinLocked records that one more active run uses version v (applied with
// registerVersions hangs pinned versions off the engine (engine_hooks.go):
// a started run holds its version in memory, an ended one lets go of it.
func (e *engine) registerVersions() {
	e.on(engineHook{apply: func(ev *journalEvent, _ time.Time) []func() {
		e.pinLocked(ev.Ver)
		return nil
	}}, evStart)
	e.on(engineHook{apply: func(ev *journalEvent, _ time.Time) []func() {
		e.releaseLocked(e.st.Runs[ev.Run].Version)
		return nil
	}}, evEnd)
}

// each start, live and on replay). mu must be held.
func (e *engine) pinLocked(v string) {
	if v == "" {
		return
	}
	if e.versions[v] == nil {
		e.versions[v] = &pinnedVersion{}
	}
	e.versions[v].runs++
}

// pinnedVersion is a version in memory and how many active runs use it.
type pinnedVersion struct {
	def  *workflowDef // nil until an execution needs it (after a replay)
	runs int
}

// releaseLocked drops one active run's hold on version v; the version
// leaves memory with its last run. mu must be held.
func (e *engine) releaseLocked(v string) {
	if p := e.versions[v]; p != nil {
		if p.runs--; p.runs <= 0 {
			delete(e.versions, v)
		}
	}
}

// defFor returns the workflow definition run r executes: its pinned
// version (from memory, the current catalog when it is the same code, or
// the store), or for a run started before versions were recorded the
// current code. Nil while the gate is closed or the workflow has not
// compiled.
func (e *engine) defFor(r *runRecord) (*workflowDef, error) {
	cat := e.opts.Catalog()
	if cat == nil {
		return nil, nil
	}
	cur := cat.Workflows[r.WorkflowName]
	if r.Version == "" {
		return cur, nil
	}
	e.mu.Lock()
	p := e.versions[r.Version]
	if p == nil { // the run ended meanwhile
		e.mu.Unlock()
		return cur, nil
	}
	if p.def == nil && cur != nil && cur.Module.Hash == r.Version {
		p.def = cur
	}
	def := p.def
	e.mu.Unlock()
	if def != nil {
		return def, nil
	}
	def, err := e.loadVersion(r.Version)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	if p.def == nil {
		p.def = def
	}
	def = p.def
	e.mu.Unlock()
	return def, nil
}

// loadVersion compiles a saved version.
func (e *engine) loadVersion(v string) (*workflowDef, error) {
	b, err := e.opts.Store.loadVersion(v)
	if err != nil {
		return nil, fmt.Errorf("load workflow version %s: %w", v, err)
	}
	var sv savedVersion
	if err := json.Unmarshal(b, &sv); err != nil {
		return nil, fmt.Errorf("load workflow version %s: %w", v, err)
	}
	prog, err := goja.Compile(sv.File, sv.Source, false)
	if err != nil {
		return nil, fmt.Errorf("load workflow version %s: %w", v, err)
	}
	def := newWorkflowDef(sv.Workflow, sv.File)
	def.Module = &jsModule{File: sv.File, Program: prog, Source: sv.Source, Hash: v}
	def.Export = sv.Export
	if sv.Serial {
		def.Concurrency = concurrencyDecl{Limit: 1}
	} else if sv.Concurrency != nil {
		def.Concurrency = *sv.Concurrency
	}
	if sv.Timeout > 0 {
		def.StepTimeout = time.Duration(sv.Timeout) * time.Millisecond
	}
	return def, nil
}

// pins reports whether an active run of e runs version v.
func (e *engine) pins(v string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.versions[v] != nil
}
