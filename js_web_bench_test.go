package main

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkStepVM measures what the web platform adds to a step VM: its
// creation (the module evaluated with every global installed) and its
// creation plus a first step call. Run with
// go test -run '^$' -bench StepVM -benchmem .
func BenchmarkStepVM(b *testing.B) {
	dir := b.TempDir()
	src := `async function inc(x: number) { "use step"; return x + 1; }
export default async function bench() { "use workflow"; return await inc(1); }`
	if err := os.MkdirAll(filepath.Join(dir, "workflows"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "workflows/bench.workflow.ts"), []byte(src), 0o644); err != nil {
		b.Fatal(err)
	}
	m, err := bundleModule(dir, "workflows/bench.workflow.ts")
	if err != nil {
		b.Fatal(err)
	}
	sr := newStepRunner(func() map[string]string { return nil }, nil, discardLogger())
	b.Run("create", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := sr.newVM(m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("create+first-call", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sv, err := sr.newVM(m)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := settledResult(callAsync(sv.vm, sv.steps["inc"], sv.vm.ToValue(1))); err != nil {
				b.Fatal(err)
			}
		}
	})
}
