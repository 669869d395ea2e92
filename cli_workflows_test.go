package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// runsListFake is a runtime answering GET /api/runs with one page, and a
// nextCursor unless the request carried a cursor, and GET /api/runs/{id}
// with a run of the page. It records the queries.
type runsListFake struct {
	mu      sync.Mutex
	queries []url.Values
	health  []byte      // the identity of the project it serves
	items   []runRecord // the page (under mu); nil: one failed run of greet
}

// ServeHTTP answers /api/health, /api/runs and /api/runs/{id}.
func (f *runsListFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	items := f.items
	f.mu.Unlock()
	if items == nil {
		items = []runRecord{historyTestRun("run-1", "greet", runFailed, historyTestBase)}
	}
	switch id, isRun := strings.CutPrefix(r.URL.Path, "/api/runs/"); {
	case r.URL.Path == "/api/health":
		w.Write(f.health)
	case r.URL.Path == "/api/runs":
		f.mu.Lock()
		f.queries = append(f.queries, r.URL.Query())
		f.mu.Unlock()
		page := map[string]any{"schema_version": schemaVersion, "items": items, "queued": []queuedTrigger{}}
		if r.URL.Query().Get("cursor") == "" {
			page["nextCursor"] = runCursorOf(&items[len(items)-1]).String()
		}
		json.NewEncoder(w).Encode(page)
	case isRun:
		for _, run := range items {
			if run.RunID == id {
				json.NewEncoder(w).Encode(map[string]any{"schema_version": schemaVersion, "run": run})
				return
			}
		}
		http.NotFound(w, r)
	default:
		http.NotFound(w, r)
	}
}

// last returns the query of the last /api/runs request and how many there were.
func (f *runsListFake) last() (url.Values, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queries) == 0 {
		return nil, 0
	}
	return f.queries[len(f.queries)-1], len(f.queries)
}

// newRunsListFake serves a runsListFake as the `svc dev` of a new project
// and returns the project directory.
func newRunsListFake(t *testing.T) (string, *runsListFake) {
	t.Helper()
	dir := projectDir(t)
	proj, err := loadProject(dir)
	if err != nil {
		t.Fatal(err)
	}
	health, _ := json.Marshal(map[string]string{"project_dir": dir, "local_dev_installation_id": proj.Link.LocalDevInstallationID})
	fake := &runsListFake{health: health}
	ts := httptest.NewServer(fake)
	t.Cleanup(ts.Close)
	writeFile(t, dir, ".svc/runtime.json", fmt.Sprintf(`{"url":%q}`, ts.URL))
	return dir, fake
}

func TestRunsListRefusesBadFlagsBeforeAnyRequest(t *testing.T) {
	dir, fake := newRunsListFake(t)
	tests := []struct {
		name string
		args []string
		want string // in the error message
	}{
		{"unknown status", []string{"--status", "done"}, `--status "done"`},
		{"empty status in list", []string{"--status", "failed,"}, "--status"},
		{"limit zero", []string{"--limit", "0"}, `--limit "0"`},
		{"limit too big", []string{"--limit", "501"}, "from 1 to 500"},
		{"garbage cursor", []string{"--cursor", "!!"}, "--cursor"},
		{"positional argument", []string{"greet"}, "no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, _, code := runInProcess(t, dir, nil, append([]string{"--json", "runs", "list"}, tt.args...)...)
			e := decodeEnvelope(t, stdout)
			if code != 1 || e.Error == nil || e.Error.Code != codeGeneric || !strings.Contains(e.Error.Message, tt.want) {
				t.Errorf("runs list %q = exit %d %s; want exit 1, code generic, message with %q", tt.args, code, stdout, tt.want)
			}
		})
	}
	if _, n := fake.last(); n != 0 {
		t.Errorf("%d requests reached GET /api/runs; want none", n)
	}
}

func TestRunsListPagesWithFilters(t *testing.T) {
	dir, fake := newRunsListFake(t)
	cursor := runCursorOf(&runRecord{RunID: "run-1", CreatedAt: historyTestBase}).String()

	// First page: the flags become the query; the last line asks for the next page.
	stdout, stderr, code := runInProcess(t, dir, nil, "runs", "list", "--workflow", "greet", "--status", "failed,cancelled", "--limit", "7")
	if code != 0 {
		t.Fatalf("runs list = exit %d, %s", code, stderr)
	}
	q, _ := fake.last()
	want := url.Values{"workflow": {"greet"}, "status": {"failed,cancelled"}, "limit": {"7"}}
	if q.Encode() != want.Encode() {
		t.Errorf("query = %s; want %s", q.Encode(), want.Encode())
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "RUN ") || !strings.Contains(lines[1], "run-1") || !strings.Contains(lines[1], "failed") {
		t.Fatalf("runs list printed %q; want a header, one row and the next-page line", stdout)
	}
	wantNext := "More runs: svc runs list --limit 7 --status failed,cancelled --workflow greet --cursor " + cursor
	if lines[2] != wantNext {
		t.Errorf("last line = %q; want %q", lines[2], wantNext)
	}

	// The line names the binary as the user typed it (svc init's Next line does too).
	fs := flag.NewFlagSet("runs list", flag.ContinueOnError)
	fs.String("workflow", "", "")
	fs.Parse([]string{"--workflow", "greet"})
	if got := runsListNext("../svc", fs, "c1"); got != "../svc runs list --workflow greet --cursor c1" {
		t.Errorf("next-page command = %q; want it to start with ../svc", got)
	}

	// Following it: the cursor is sent, and the last page says nothing more.
	stdout, _, code = runInProcess(t, dir, nil, strings.Fields(strings.TrimPrefix(lines[2], "More runs: svc "))...)
	q, _ = fake.last()
	if code != 0 || q.Get("cursor") != cursor || q.Get("workflow") != "greet" || strings.Contains(stdout, "More runs") {
		t.Errorf("next page = exit %d, query %s, %q; want the cursor sent and no next-page line", code, q.Encode(), stdout)
	}

	// --json: the payload carries nextCursor; the default limit is sent.
	stdout, _, code = runInProcess(t, dir, nil, "--json", "runs", "list")
	var env struct {
		OK   bool `json:"ok"`
		Data struct {
			Items      []runRecord `json:"items"`
			NextCursor string      `json:"nextCursor"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(stdout), &env); err != nil || code != 0 || !env.OK || env.Data.NextCursor != cursor || len(env.Data.Items) != 1 {
		t.Errorf("runs list --json = exit %d %s; want ok with nextCursor %s", code, stdout, cursor)
	}
	if q, _ := fake.last(); q.Encode() != "limit=50" {
		t.Errorf("default query = %s; want limit=50", q.Encode())
	}
}

// TestRunsShowAgentTurns prints an agent's turn, whose record has no
// workflow, under the agent's name: in the WORKFLOW column of `svc runs
// list` (as the console does) and as the agent line of `svc runs get`.
func TestRunsShowAgentTurns(t *testing.T) {
	dir, fake := newRunsListFake(t)
	turn := historyTestRun("run-turn", "", runCompleted, historyTestBase)
	turn.Agent, turn.Wire, turn.SessionID = "assistant", "agui", "s-1"
	fake.mu.Lock()
	fake.items = []runRecord{turn}
	fake.mu.Unlock()
	stdout, stderr, code := runInProcess(t, dir, nil, "runs", "list")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || len(lines) < 2 || !strings.HasPrefix(lines[0], "RUN ") {
		t.Fatalf("runs list = exit %d %q %s", code, stdout, stderr)
	}
	header, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	if header[1] != "WORKFLOW" || len(row) < 2 || row[0] != "run-turn" || row[1] != "assistant" {
		t.Fatalf("runs list row of an agent turn = %q; want the agent in the WORKFLOW column", lines[1])
	}
	stdout, stderr, code = runInProcess(t, dir, nil, "runs", "get", "run-turn")
	if code != 0 || !strings.Contains(stdout, "\nagent     assistant (agui, session s-1)\n") {
		t.Fatalf("runs get of an agent turn = exit %d\n%s%s", code, stdout, stderr)
	}
}

func TestShellWord(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"greet", "greet"},
		{"failed,cancelled", "failed,cancelled"},
		{"", "''"},
		{"two words", "'two words'"},
		{"it's", `'it'\''s'`},
	} {
		if got := shellWord(tt.in); got != tt.want {
			t.Errorf("shellWord(%q) = %s; want %s", tt.in, got, tt.want)
		}
	}
}
