package main

// Run streams (issue 21, item 4): a step writes progress to its run through
// the ambient getWritable() (a web WritableStream, js/web.js); each chunk is
// an engine event (evStream) with the step's seq, name and attempt,
// journaled durably before the write resolves, so the stream is exactly as
// durable and ordered as the rest of the run, on both stores. A run's stream
// lives with its run: in memory and in snapshots while the run is active or
// not yet archived, then in the run history (svc.run_streams) beside the
// run, pruned with it. Readers (GET /api/runs/{runId}/stream, wire_stream.go)
// read entries by index, which never changes, so a reader resumes anywhere
// with Last-Event-ID whether the run is live, ended or archived.
//
// A step attempt that fails and is retried (an error, a timeout, or svc
// stopping during it) keeps its chunks: they are not silently merged with
// the retry's. The stream gains a "superseded" entry naming the attempt,
// and readers mark that attempt's chunks superseded from then on.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/dop251/goja"
)

// Bounds of a run's stream: what user code may write (retried attempts'
// chunks count too). A write past one fails with a *streamLimitError.
const (
	streamMaxChunk  = 64 << 10 // bytes of one chunk: its text, or its JSON
	streamMaxChunks = 10_000   // chunks per run
	streamMaxBytes  = 4 << 20  // chunk bytes per run
)

// Kinds of stream entries.
const (
	streamText       = "text"       // a string chunk
	streamJSON       = "json"       // any other JSON value
	streamSuperseded = "superseded" // the chunks of Seq's Attempt belong to a failed attempt that was retried
)

// streamEntry is one entry of a run's stream: a chunk, or the marker that
// an attempt's chunks are superseded.
type streamEntry struct {
	Index   int             `json:"index"` // from 1, in journal order: the SSE id
	Kind    string          `json:"kind"`  // streamText, streamJSON or streamSuperseded
	At      time.Time       `json:"at"`
	Seq     int             `json:"seq"` // the step call that wrote it
	Step    string          `json:"step"`
	Attempt int             `json:"attempt"`
	Text    *string         `json:"text,omitempty"` // streamText
	JSON    json.RawMessage `json:"json,omitempty"` // streamJSON
}

// size is the bytes of a chunk that count against the limits.
func (s *streamEntry) size() int {
	if s.Text != nil {
		return len(*s.Text)
	}
	return len(s.JSON)
}

// runStream is a run's stream in memory. Entries only ever grow (entries
// are never changed), so a copy of the slice read under the engine's lock
// stays valid outside it.
//
// Readers see only entries known durable (the first durable): the engine
// applies an event before its record is on disk, and an entry a reader saw
// must never vanish in a crash, nor its index later name another entry.
// A chunk's write reveals it, and every entry before it, once durable; the
// run's durable end reveals the rest; a replay reveals all it rebuilt.
type runStream struct {
	entries []streamEntry
	durable int           // entries[:durable] are durable
	chunks  int           // chunk entries (markers do not count)
	bytes   int           // their sizes
	wake    chan struct{} // closed and replaced when durable grows
}

// streamOf returns r's stream, creating it when missing. mu must be held.
func (r *runRecord) streamOf() *runStream {
	if r.stream == nil {
		r.stream = &runStream{wake: make(chan struct{})}
	}
	return r.stream
}

// add appends an entry, numbering it; readers see it once revealed.
func (s *runStream) add(en streamEntry) {
	en.Index = len(s.entries) + 1
	if en.Kind != streamSuperseded {
		s.chunks++
		s.bytes += en.size()
	}
	s.entries = append(s.entries, en)
}

// reveal says entries[:n] are durable and wakes the readers.
func (s *runStream) reveal(n int) {
	if n <= s.durable || n > len(s.entries) {
		return
	}
	s.durable = n
	close(s.wake)
	s.wake = make(chan struct{})
}

// revealStreamsLocked reveals every entry of every stream: called once a
// replay has rebuilt them from durable records. mu must be held.
func (e *engine) revealStreamsLocked() {
	for _, r := range e.st.Runs {
		if r.stream != nil {
			r.stream.reveal(len(r.stream.entries))
		}
	}
}

// applyStream applies an evStream event. A chunk also says its attempt is
// in flight: a step that wrote before its evAttempt was journaled (one
// that began inline) and was then interrupted is still recorded as
// interrupted at the next boot (settleReplay), so its retry is a new
// attempt and its chunks are superseded.
func (e *engine) applyStream(ev *journalEvent, at time.Time) []func() {
	r := e.st.Runs[ev.Run]
	if r == nil {
		return nil
	}
	c := r.ensureCall(ev.Seq, callStep, ev.Name, at)
	if c.EndedAt == nil && c.Inflight == nil {
		c.Inflight = &stepAttempt{Attempt: ev.Attempt, StartedAt: at}
	}
	en := streamEntry{At: at, Seq: ev.Seq, Step: ev.Name, Attempt: ev.Attempt}
	if ev.Result != nil {
		en.Kind, en.JSON = streamJSON, ev.Result
	} else {
		text := ev.Message
		en.Kind, en.Text = streamText, &text
	}
	r.streamOf().add(en)
	return nil
}

// registerStreams hangs run streams off the engine (engine_hooks.go).
func (e *engine) registerStreams() { e.on(engineHook{apply: e.applyStream}, evStream) }

// supersedeAttempt marks the chunks of a failed attempt that will be
// retried (ev is its evStep), when it wrote any.
func (r *runRecord) supersedeAttempt(ev *journalEvent, at time.Time) {
	if r.stream == nil || ev.Error == nil || ev.Final {
		return
	}
	for i := len(r.stream.entries) - 1; i >= 0; i-- {
		if en := &r.stream.entries[i]; en.Seq == ev.Seq && en.Attempt == ev.Attempt && en.Kind != streamSuperseded {
			r.stream.add(streamEntry{Kind: streamSuperseded, At: at, Seq: ev.Seq, Step: ev.Name, Attempt: ev.Attempt})
			return
		}
	}
}

// streamLimitError is a write past one of the stream's bounds.
type streamLimitError struct{ msg string }

func (e *streamLimitError) Error() string { return e.msg }

// streamChunk is a chunk a step attempt writes: Text, or JSON when set.
type streamChunk struct {
	Text string
	JSON json.RawMessage
}

// streamWrite journals a chunk of attempt of step name (call seq) of run
// id, and returns once it is durable: what a resolved write() promised
// survives any crash. A write past the bounds fails with a
// *streamLimitError and journals nothing.
func (e *engine) streamWrite(id string, seq int, name string, attempt int, ch streamChunk) error {
	n := len(ch.Text)
	if ch.JSON != nil {
		n = len(ch.JSON)
		if err := codeJSON.check(ch.JSON); err != nil {
			return fmt.Errorf("the chunk cannot be journaled: %w", err)
		}
	}
	if n > streamMaxChunk {
		return &streamLimitError{fmt.Sprintf("a stream chunk is %d bytes, more than the %d a chunk may hold: write it in smaller chunks", n, streamMaxChunk)}
	}
	e.mu.Lock()
	index := 1 // the entry's, once commitLocked applies it under this hold of mu
	if r := e.st.Runs[id]; r != nil && r.stream != nil {
		switch {
		case r.stream.chunks >= streamMaxChunks:
			e.mu.Unlock()
			return &streamLimitError{fmt.Sprintf("the run's stream holds %d chunks, the most a run may write: write fewer, larger chunks", streamMaxChunks)}
		case r.stream.bytes+n > streamMaxBytes:
			e.mu.Unlock()
			return &streamLimitError{fmt.Sprintf("the run's stream would exceed %d bytes (it holds %d): keep large data in storage and stream references to it", streamMaxBytes, r.stream.bytes)}
		}
		index = len(r.stream.entries) + 1
	}
	ev := &journalEvent{Type: evStream, Run: id, Seq: seq, Name: name, Attempt: attempt, Result: ch.JSON}
	if ch.JSON == nil {
		ev.Message = ch.Text
	}
	if err := e.commitLocked(ev, true); err != nil {
		return err
	}
	e.mu.Lock()
	if r := e.st.Runs[id]; r != nil && r.stream != nil {
		r.stream.reveal(index)
	}
	e.mu.Unlock()
	return nil
}

// streamPage is what a stream reader gets at once: the entries after the
// index it asked for, whether the run has ended (the stream is then
// complete), and, while it has not, channels that say when to read again.
type streamPage struct {
	Entries []streamEntry
	Ended   bool
	Status  string // the run's status
	// Superseded are the attempts marked superseded among the entries
	// readers may see, keyed by streamAttemptKey.
	Superseded map[[2]int]bool
	// Wake is closed when the stream grows, Done when the run ends, Stop
	// when the engine closes (nil once the run has ended).
	Wake, Done, Stop <-chan struct{}
}

// streamAttemptKey identifies a step attempt in a stream.
func streamAttemptKey(seq, attempt int) [2]int { return [2]int{seq, attempt} }

// streamRead returns the entries of run id's stream after index after,
// from memory or, for an archived run, from the history. errRunNotFound
// when there is no such run.
func (e *engine) streamRead(ctx context.Context, id string, after int) (streamPage, error) {
	e.knows(ctx, id)
	e.mu.Lock()
	r := e.st.Runs[id]
	if r != nil {
		s := r.streamOf()
		ended := false
		select {
		case <-r.done.ch: // the end is durable (or was replayed), and so is all before it
			ended = terminal(r.Status) // else recovery replaced the record: read again
			s.reveal(len(s.entries))
		default:
		}
		p := streamPage{Entries: s.entries[:s.durable], Ended: ended, Status: r.Status, Wake: s.wake, Done: r.done.ch, Stop: e.stop}
		e.mu.Unlock()
		return p.from(after), nil
	}
	e.mu.Unlock()
	if e.opts.History == nil || isQueueID(id) {
		return streamPage{}, errRunNotFound
	}
	rec, ok, err := e.opts.History.get(ctx, id)
	if err != nil {
		return streamPage{}, err
	}
	if !ok {
		return streamPage{}, errRunNotFound
	}
	entries, err := e.opts.History.stream(ctx, id)
	if err != nil {
		return streamPage{}, err
	}
	return streamPage{Entries: entries, Ended: true, Status: rec.Status}.from(after), nil
}

// from keeps the entries after index after, noting the superseded
// attempts among all of them.
func (p streamPage) from(after int) streamPage {
	p.Superseded = map[[2]int]bool{}
	for _, en := range p.Entries {
		if en.Kind == streamSuperseded {
			p.Superseded[streamAttemptKey(en.Seq, en.Attempt)] = true
		}
	}
	p.Entries = p.Entries[min(max(after, 0), len(p.Entries)):]
	return p
}

// errStreamInWorkflow is getWritable() called from workflow code.
var errStreamInWorkflow = errors.New("getWritable() writes to the run's stream from steps only (workflow code is replayed): call it inside a \"use step\" function")

// streamsOfLocked returns the non-empty streams of the runs in memory, for
// a snapshot. mu must be held.
func (e *engine) streamsOfLocked() map[string][]streamEntry {
	var out map[string][]streamEntry
	for id, r := range e.st.Runs {
		if r.stream != nil && len(r.stream.entries) > 0 {
			if out == nil {
				out = map[string][]streamEntry{}
			}
			out[id] = r.stream.entries // entries are never changed: sharing is safe
		}
	}
	return out
}

// restoreStreams gives the runs of a restored snapshot their streams.
func restoreStreams(st *engineState) {
	for id, entries := range st.Streams {
		if r := st.Runs[id]; r != nil {
			s := r.streamOf()
			for _, en := range entries {
				s.add(en)
			}
			s.reveal(len(s.entries))
		}
	}
	st.Streams = nil
}

// getWritable is the ambient getWritable() of a step VM: a WritableStream
// (js/web.js) whose writes journal chunks of the calling attempt. A string
// is a text chunk, bytes (an ArrayBuffer or a view) a text chunk of their
// UTF-8, anything else a JSON chunk. A write resolves once the chunk is
// durable; a write that fails (a limit, a value JSON cannot hold, the run
// ended) rejects and errors the stream, as a web sink's failure does.
func (sv *stepVM) getWritable() goja.Value {
	vm, out := sv.vm, sv.out
	if out == nil || out.write == nil {
		panic(vm.NewTypeError("getWritable() must be called while a step runs (inside a \"use step\" function), not when the file is evaluated"))
	}
	sink := vm.NewObject()
	sink.Set("write", func(chunk goja.Value) {
		if out.ended {
			panic(vm.NewTypeError("the step that opened this stream has returned: await each write() before the step returns"))
		}
		ch, err := streamChunkOf(vm, chunk)
		if err == nil {
			err = out.write(ch)
		}
		var limit *streamLimitError
		switch {
		case errors.As(err, &limit):
			re, _ := vm.New(vm.Get("RangeError"), vm.ToValue(err.Error()))
			panic(re)
		case err != nil:
			panic(vm.NewTypeError(err.Error()))
		}
	})
	ws, err := vm.New(vm.Get("WritableStream"), sink)
	if err != nil {
		panic(err)
	}
	return ws
}

// streamChunkOf converts what user code wrote into a chunk.
func streamChunkOf(vm *goja.Runtime, v goja.Value) (streamChunk, error) {
	if goja.IsUndefined(v) {
		return streamChunk{}, errors.New("write(undefined): a stream chunk is a string, bytes or a JSON value")
	}
	if s, ok := v.Export().(string); ok {
		return streamChunk{Text: s}, nil
	}
	if b, ok := jsBytes(v); ok {
		if !utf8.Valid(b) {
			return streamChunk{}, errors.New("a bytes chunk must be UTF-8 text (write JSON values or strings otherwise)")
		}
		return streamChunk{Text: string(b)}, nil
	}
	raw, err := jsonStringify(vm, v)
	if err != nil {
		return streamChunk{}, fmt.Errorf("the chunk is not JSON-serialisable: %w", err)
	}
	return streamChunk{JSON: raw}, nil
}
