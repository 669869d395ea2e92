package main

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"
)

// jsPlatform is what the VMs of steps and agent tools get beyond the
// language (DESIGN §9): the web platform's globals, and the project's data
// through the ambient "svc" module. Built once per runtime; only its
// storage target changes afterwards (set atomically at boot). A nil
// *jsPlatform gives a VM the defaults (fetch with no project data), which
// is what tests of the engine alone use.
type jsPlatform struct {
	fetch *http.Client // fetch() of steps and tools
	sql   *sqlHost     // sql of steps and tools (js_sql.go); nil: no database, sql throws saying so
	// storage is the project's bucket (js_storage.go): nil until boot sets it, which may
	// be after steps of resumed runs have started (their calls fail: not configured).
	storage atomic.Pointer[storageClient]
}

// jsDefaultPlatform is the platform of VMs given none, made once so that
// their fetches share one connection pool.
var jsDefaultPlatform = sync.OnceValue(newJSPlatform)

// defaultFetchTimeout bounds one fetch() of user code, headers and body.
const defaultFetchTimeout = 10 * time.Minute

// newJSPlatform returns the platform with the default fetch client.
func newJSPlatform() *jsPlatform {
	return &jsPlatform{fetch: newFetchHTTPClient()}
}

// install gives the VM of l its globals and the ambient module its data
// members; newModuleVM calls it before the user's module runs, so module
// top-level code sees them too.
func (p *jsPlatform) install(l *jsLoop, ambient *goja.Object) {
	if p == nil {
		p = jsDefaultPlatform()
	}
	installTimers(l)
	installWeb(l, p.fetch)
	p.installSQL(l, ambient)
	storageInstall(l, ambient, &p.storage)
}

// installWorkflow gives a workflow VM the deterministic part of the
// platform, and in place of I/O members of the ambient module, functions
// that throw saying to use a step (workflow code is replayed: DESIGN §3).
// p may be nil (the catalog's VMs): nothing of it is used.
func (p *jsPlatform) installWorkflow(vm *goja.Runtime, ambient *goja.Object) {
	installWebWorkflow(vm)
	ambient.Set("sql", sqlUnavailable(vm, sqlInWorkflow))
	storageInstallWorkflow(vm, ambient)
}

// abandon tells the platform that the VM of l will not run again although
// it has work outstanding (an attempt that timed out or was cancelled):
// its open transactions roll back and its queries are cancelled.
func (p *jsPlatform) abandon(l *jsLoop) {
	if p != nil && p.sql != nil {
		p.sql.abandon(l)
	}
}
