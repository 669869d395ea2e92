package main

// svc runs stream <runId>: a run's stream (engine_stream.go) read from GET
// /api/runs/{runId}/stream, printed as it comes: text chunks as they are,
// JSON chunks one per line; with --json, one envelope line per event. A
// dropped connection (svc dev restarting) is resumed with Last-Event-ID,
// so nothing is printed twice or skipped.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

const (
	// streamReconnectDelay is the pause before the CLI reconnects a run
	// stream that dropped.
	streamReconnectDelay = 500 * time.Millisecond
	// streamReconnectTries bounds the reconnections in a row that make no
	// progress (about a minute of the runtime being away: a restart).
	streamReconnectTries = 120
	// streamMaxLine bounds one line of the event stream the CLI reads: a
	// chunk's JSON, escaped.
	streamMaxLine = 8 * streamMaxChunk
)

// newRunsStreamFlags defines the flags of `svc runs stream`.
func newRunsStreamFlags() *flag.FlagSet {
	fs := targetFlags("stream")()
	fs.Int("after", 0, "print only the entries after this index (the id of the last event already seen)")
	return fs
}

// runRunsStream is `svc runs stream <runId>`. It exits 0 once the run has
// completed and its stream is printed, 1 when it failed or was cancelled.
func runRunsStream(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	id, t, err := argAndTarget(ctx, c, fs, "run id")
	if err != nil {
		return err
	}
	after, _ := strconv.Atoi(fs.Lookup("after").Value.String())
	p := &streamPrinter{c: c, newline: true}
	for tries := 0; ; {
		from := after
		status, err := p.read(ctx, t, id, &after)
		var ce *cliError
		switch {
		case status != "":
			if !c.json {
				if !p.newline {
					fmt.Fprintln(c.stdout)
				}
				fmt.Fprintf(c.stderr, "run %s %s\n", id, status)
			}
			if status != runCompleted {
				return reportedExit(1)
			}
			return nil
		case errors.As(err, &ce), ctx.Err() != nil:
			return err // an answer such as run_not_found, or the user stopped it
		case after > from: // it dropped after some progress
			tries = 0
		}
		if tries++; tries > streamReconnectTries {
			if err == nil {
				err = errors.New("the stream keeps closing before the run ends")
			}
			return t.unreachable(err)
		}
		select {
		case <-time.After(streamReconnectDelay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// streamPrinter prints a run stream's events for a person or as envelopes.
type streamPrinter struct {
	c       *cmd
	newline bool // the last text printed ended a line
}

// read connects once, from *after, and prints events until the stream
// ends (status set: the run's final status) or drops (err, or nil when
// it closed early); *after follows the events printed.
//
// --json prints every event; a person sees the text of every chunk, the
// superseded attempts' too, with a note on stderr once one is superseded.
func (p *streamPrinter) read(ctx context.Context, t *target, id string, after *int) (status string, err error) {
	path := "/api/runs/" + id + "/stream"
	header := http.Header{"Accept": {"text/event-stream"}}
	if *after > 0 {
		header.Set("Last-Event-ID", strconv.Itoa(*after))
	}
	resp, err := t.send(ctx, http.MethodGet, path, nil, header)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		ce := t.statusError(http.MethodGet, path, resp.StatusCode, b)
		if resp.StatusCode == http.StatusServiceUnavailable {
			return "", errors.New(ce.Message) // standing by, or its history away: try again
		}
		if ce.exitCode() == exitCodes[codeNotFound] {
			ce.Hint = "list runs with `svc runs list`"
		}
		return "", ce
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), streamMaxLine)
	var evID, event, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if event == "end" {
				var end struct{ Status string }
				json.Unmarshal([]byte(data), &end)
				if p.c.json {
					p.emit(event, data)
				}
				return end.Status, nil
			}
			if data != "" {
				p.print(event, data)
				if n, err := strconv.Atoi(evID); err == nil {
					*after = n
				}
			}
			evID, event, data = "", "", ""
		case strings.HasPrefix(line, "id: "):
			evID = line[len("id: "):]
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		}
	}
	return "", sc.Err()
}

// emit writes an event as an envelope line: its data with the event's name.
func (p *streamPrinter) emit(event, data string) {
	var m map[string]any
	if json.Unmarshal([]byte(data), &m) != nil {
		return
	}
	m["event"] = event
	writeEnvelope(p.c.stdout, envelope{OK: true, Data: m})
}

// print shows one event: a text chunk as is, a JSON chunk on its own line,
// a superseded attempt as a note on stderr.
func (p *streamPrinter) print(event, data string) {
	if p.c.json {
		p.emit(event, data)
		return
	}
	var en streamEvent
	if json.Unmarshal([]byte(data), &en) != nil {
		return
	}
	switch {
	case event == streamSuperseded:
		if !p.newline {
			fmt.Fprintln(p.c.stdout)
			p.newline = true
		}
		fmt.Fprintf(p.c.stderr, "(step %s attempt %d failed and was retried: its chunks above are superseded)\n", en.Step, en.Attempt)
	case en.Text != nil:
		fmt.Fprint(p.c.stdout, *en.Text)
		p.newline = strings.HasSuffix(*en.Text, "\n") || (*en.Text == "" && p.newline)
	default:
		if !p.newline {
			fmt.Fprintln(p.c.stdout)
		}
		fmt.Fprintf(p.c.stdout, "%s\n", en.JSON)
		p.newline = true
	}
}
