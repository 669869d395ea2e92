package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"
)

// mcpTestWorkflows are the workflows the MCP suites drive besides the
// scaffold's greet: one waiting on a hook, one sleeping to be cancelled.
var mcpTestWorkflows = map[string]string{
	"workflows/waiter.workflow.ts": `import { createHook } from "svc";
export default async function waiter() { "use workflow"; const h = createHook(); return { got: await h }; }
`,
	"workflows/sleepy.workflow.ts": `import { sleep } from "svc";
export default async function sleepy() { "use workflow"; await sleep("1h"); return 1; }
`,
	"deep-agents/helper/index.ts": agentTestSource,
}

// mcpTestDev starts svc dev in front of the fake provider (returned) in a
// project holding mcpTestWorkflows.
func mcpTestDev(t testing.TB) (*devProcess, string, *fakeProvider) {
	fake := newFakeProvider(t)
	dir := projectDir(t)
	for f, src := range mcpTestWorkflows {
		writeFile(t, dir, f, src)
	}
	env := baseEnv("OPENAI_BASE_URL="+fake.URL+"/v1", "OPENAI_API_KEY=sk-fake", "SVC_DATABASE_URL="+testPostgresURL(t))
	return startDev(t, dir, env), dir, fake
}

// TestMCPConformance runs conformance/mcp.test.mjs: the official MCP
// clients (v1 SDK, v2 client in 2025-06-18 and 2026-07-28) over POST /mcp
// and over `svc mcp` (stdio) against a real svc dev.
func TestMCPConformance(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	d, dir, _ := mcpTestDev(t)
	runConformance(t, "conformance/mcp.test.mjs", []string{"SVC_URL=" + d.payload.EmulatorURL, "SVC_BIN=" + svcBinary(t), "SVC_PROJECT=" + dir})
}

// TestMCPStdioWithoutDev: `svc mcp` in a project whose svc dev is not
// running answers each request with an error saying how to start it, and
// never answers a notification.
func TestMCPStdioWithoutDev(t *testing.T) {
	dir := projectDir(t)
	in := `{"jsonrpc":"2.0","id":7,"method":"ping"}` + "\n" + `{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"mcp"}, cliIO{stdin: strings.NewReader(in), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }, dir: dir})
	if code != 0 {
		t.Fatalf("svc mcp: exit %d: %s", code, errOut.String())
	}
	var resp mcpResponse
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &resp) != nil {
		t.Fatalf("want one answer line, got %q", out.String())
	}
	if string(resp.ID) != "7" || resp.Error == nil || resp.Error.Code != mcpInternalError || !strings.Contains(resp.Error.Message, "svc dev") {
		t.Fatalf("answer %s: want an internal error naming svc dev", lines[0])
	}
}

// TestMCPStdioCancel: over `svc mcp`, notifications/cancelled stops the
// work of the request it names (a get_run waiting on a run, a
// message_agent whose model call hangs: the provider sees its caller
// leave) and nothing is answered for either; the requests around them are
// answered as usual. The relay sends 2026-07-28's request headers, which
// svc dev requires.
func TestMCPStdioCancel(t *testing.T) {
	d, dir, fake := mcpTestDev(t)
	cmd := exec.Command(svcBinary(t), "mcp")
	cmd.Dir, cmd.Env = dir, d.env
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	killer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	defer killer.Stop()
	answers := make(chan mcpResponse, 16)
	go func() {
		defer close(answers)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var r mcpResponse
			if json.Unmarshal(sc.Bytes(), &r) != nil {
				t.Errorf("svc mcp printed %q", sc.Text())
				continue
			}
			answers <- r
		}
	}()
	go func() { cmd.Wait(); close(exited) }()
	meta := `"_meta":{"` + mcpMetaProtocolVersion + `":"` + mcpVersionStateless + `"}`
	send := func(line string) {
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	callTool := func(id, tool, args string) {
		send(`{"jsonrpc":"2.0","id":"` + id + `","method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `,` + meta + `}}`)
	}

	callTool("s", "start_workflow", `{"name":"sleepy"}`)
	first, ok := <-answers
	var started struct {
		StructuredContent startReceipt `json:"structuredContent"`
	}
	b, _ := json.Marshal(first.Result)
	if !ok || string(first.ID) != `"s"` || json.Unmarshal(b, &started) != nil || started.StructuredContent.RunID == "" {
		t.Fatalf("start_workflow through svc mcp: %+v %s (stderr %s)", first, b, stderr.String())
	}
	callTool("g", "get_run", `{"runId":"`+started.StructuredContent.RunID+`","waitSeconds":20}`)
	callTool("m", "message_agent", `{"agent":"helper","message":"hang"}`)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		hung := false
		for _, r := range fake.requests() {
			hung = hung || strings.Contains(string(r.Raw), `"hang"`)
		}
		if hung {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the model call of message_agent never reached the provider")
		}
	}
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"g","reason":"user"}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"m"}}`)
	send(`{"jsonrpc":"2.0","id":"p","method":"ping","params":{` + meta + `}}`)
	stdin.Close()
	var ids []string
	for r := range answers {
		ids = append(ids, string(r.ID))
	}
	<-exited
	if strings.Join(ids, ",") != `"p"` {
		t.Fatalf("answers after the cancellations: %v; want only the ping's (stderr %s)", ids, stderr.String())
	}
	for deadline := time.Now().Add(30 * time.Second); fake.hungUp() == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cancelled message_agent kept its model call open")
		}
	}
}

// TestMCPProtocol checks the JSON-RPC and version handling of mcpServe
// without a runtime: the requests here never reach a tool's body.
func TestMCPProtocol(t *testing.T) {
	tools := &mcpTools{}
	meta := func(v string) string { return `,"params":{"_meta":{"` + mcpMetaProtocolVersion + `":"` + v + `"}}` }
	// modern are the headers of a 2026-07-28 request to method, naming name.
	modern := func(method string, name *string) mcpHeaders {
		return mcpHeaders{Version: mcpVersionStateless, Method: &method, Name: name}
	}
	str := func(s string) *string { return &s }
	call := func(name string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + name + `","arguments":{},"_meta":{"` + mcpMetaProtocolVersion + `":"` + mcpVersionStateless + `"}}}`
	}
	tests := []struct {
		name, body string
		h          mcpHeaders
		code       int    // expected JSON-RPC error code; 0: a result
		want       string // substring of the answer
	}{
		{"parse error", `{"jsonrpc":`, mcpHeaders{}, mcpParseError, `"id":null`},
		{"too deep", strings.Repeat("[", jsonMaxDepth+1) + strings.Repeat("]", jsonMaxDepth+1), mcpHeaders{}, mcpParseError, "nested deeper"},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, mcpHeaders{}, mcpInvalidRequest, "batches"},
		{"not an object", `"ping"`, mcpHeaders{}, mcpInvalidRequest, "JSON object"},
		{"wrong jsonrpc", `{"jsonrpc":"1.0","id":1,"method":"ping"}`, mcpHeaders{}, mcpInvalidRequest, `"2.0"`},
		{"null id", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, mcpHeaders{}, mcpInvalidRequest, "id must be"},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, mcpHeaders{}, mcpInvalidRequest, "id must be"},
		{"no method", `{"jsonrpc":"2.0","id":1}`, mcpHeaders{}, mcpInvalidRequest, "method"},
		{"params array", `{"jsonrpc":"2.0","id":"a","method":"ping","params":[]}`, mcpHeaders{}, mcpInvalidParams, `"id":"a"`},
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"resources/list"}`, mcpHeaders{}, mcpMethodNotFound, "resources/list"},
		{"ping", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, mcpHeaders{}, 0, `"result":{}`},
		{"initialize 2025-06-18", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, mcpHeaders{}, 0, `"protocolVersion":"2025-06-18"`},
		{"initialize 2025-11-25", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, mcpHeaders{}, 0, `"protocolVersion":"2025-11-25"`},
		{"initialize older", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, mcpHeaders{}, 0, `"protocolVersion":"2025-11-25"`},
		{"initialize without version", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, mcpHeaders{}, mcpInvalidParams, "protocolVersion"},
		{"tools/list legacy", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, mcpHeaders{Version: mcpVersionLatest}, 0, `"name":"message_agent"`},
		{"tools/list stateless", `{"jsonrpc":"2.0","id":1,"method":"tools/list"` + meta(mcpVersionStateless) + `}`, modern("tools/list", nil), 0, `"resultType":"complete"`},
		{"tools/list stateless cache", `{"jsonrpc":"2.0","id":1,"method":"tools/list"` + meta(mcpVersionStateless) + `}`, modern("tools/list", nil), 0, `"ttlMs":`},
		{"discover", `{"jsonrpc":"2.0","id":1,"method":"server/discover"` + meta(mcpVersionStateless) + `}`, modern("server/discover", nil), 0, `"supportedVersions":["2026-07-28","2025-11-25","2025-06-18"]`},
		{"unsupported version", `{"jsonrpc":"2.0","id":1,"method":"ping"` + meta("2099-01-01") + `}`, mcpHeaders{}, mcpUnsupportedVersion, `"requested":"2099-01-01"`},
		{"unsupported header", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, mcpHeaders{Version: "1999-01-01"}, mcpUnsupportedVersion, "unsupported protocol version"},
		{"header mismatch", `{"jsonrpc":"2.0","id":1,"method":"ping"` + meta(mcpVersionStateless) + `}`, mcpHeaders{Version: mcpVersionLatest}, mcpHeaderMismatch, "differs"},
		{"bad meta version", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"` + mcpMetaProtocolVersion + `":5}}}`, mcpHeaders{}, mcpInvalidParams, "version string"},
		{"unknown tool", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope","arguments":{}}}`, mcpHeaders{}, mcpInvalidParams, "unknown tool"},
		// The request metadata headers of 2026-07-28: required, and matching the body.
		{"no version header", call("nope"), mcpHeaders{Method: str("tools/call"), Name: str("nope")}, mcpHeaderMismatch, "MCP-Protocol-Version header is required"},
		{"no Mcp-Method", call("nope"), mcpHeaders{Version: mcpVersionStateless, Name: str("nope")}, mcpHeaderMismatch, "Mcp-Method header is required"},
		{"wrong Mcp-Method", call("nope"), modern("tools/list", str("nope")), mcpHeaderMismatch, `Mcp-Method header value \"tools/list\" does not match body value \"tools/call\"`},
		{"no Mcp-Name", call("nope"), modern("tools/call", nil), mcpHeaderMismatch, "Mcp-Name header is required"},
		{"wrong Mcp-Name", call("nope"), modern("tools/call", str("start_workflow")), mcpHeaderMismatch, "does not match"},
		{"malformed Mcp-Name", call("nope"), modern("tools/call", str("=?base64?!!?=")), mcpHeaderMismatch, "malformed"},
		{"Mcp-Name not ASCII", call("nope"), modern("tools/call", str("nöpe")), mcpHeaderMismatch, "malformed"},
		{"Mcp-Name with no target", `{"jsonrpc":"2.0","id":1,"method":"tools/list"` + meta(mcpVersionStateless) + `}`, modern("tools/list", str("x")), mcpHeaderMismatch, "the body has no"},
		{"Mcp-Name in Base64", call("nöpe"), modern("tools/call", str(mcpHeaderEncode("nöpe"))), mcpInvalidParams, "unknown tool"},
		{"headers matching", call("nope"), modern("tools/call", str("nope")), mcpInvalidParams, "unknown tool"},
		{"legacy without headers", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope"}}`, mcpHeaders{Version: mcpVersionLatest}, mcpInvalidParams, "unknown tool"},
		{"legacy wrong Mcp-Method", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, mcpHeaders{Version: mcpVersionLatest, Method: str("tools/list")}, mcpHeaderMismatch, "does not match"},
		{"unknown method stateless", `{"jsonrpc":"2.0","id":1,"method":"resources/list"` + meta(mcpVersionStateless) + `}`, modern("resources/list", nil), mcpMethodNotFound, "resources/list"},
		{"tools/call without name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`, mcpHeaders{}, mcpInvalidParams, "tools/call takes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := mcpServe(t.Context(), tools, []byte(tt.body), tt.h)
			if resp == nil {
				t.Fatal("no answer")
			}
			b, _ := json.Marshal(resp)
			if got := 0; resp.Error != nil {
				got = resp.Error.Code
				if got != tt.code {
					t.Fatalf("code %d, want %d: %s", got, tt.code, b)
				}
			} else if tt.code != 0 {
				t.Fatalf("a result, want code %d: %s", tt.code, b)
			}
			if !strings.Contains(string(b), tt.want) {
				t.Fatalf("answer lacks %q: %s", tt.want, b)
			}
			// 2026-07-28 answers an unknown method with 404, earlier revisions with 200.
			if stateless := tt.h.Version == mcpVersionStateless; tt.code == mcpMethodNotFound && (resp.Error.status == http.StatusNotFound) != stateless {
				t.Fatalf("method not found under %q: HTTP status %d", tt.h.Version, resp.Error.status)
			}
		})
	}
	for _, body := range []string{
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":[]}`,
		`{"jsonrpc":"2.0","id":3,"result":{}}`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"x"}}`,
	} {
		if resp := mcpServe(t.Context(), tools, []byte(body), mcpHeaders{}); resp != nil {
			t.Errorf("%s answered: %+v", body, resp)
		}
	}
}

// TestMCPToolArguments: every tool's arguments are checked against its
// schema before it runs, with the failing path in an isError result.
func TestMCPToolArguments(t *testing.T) {
	tools := &mcpTools{}
	for _, tt := range []struct{ tool, args, want string }{
		{"start_workflow", `{}`, `(root): missing required property \"name\"`},
		{"start_workflow", `{"name":"greet","extra":1}`, "extra"},
		{"get_run", `{"runId":"r","waitSeconds":26}`, "/waitSeconds"},
		{"list_runs", `{"limit":0}`, "/limit"},
		{"list_runs", `{"status":["done"]}`, "/status/0"},
		{"message_agent", `{"agent":"a","session":"` + strings.Repeat("s", sessionMaxKeyLength+1) + `"}`, "/session"},
		{"resume_hook", `[]`, "object"},
	} {
		res := tools.call(t.Context(), mcpFindTool(tt.tool), json.RawMessage(tt.args))
		b, _ := json.Marshal(res)
		if res["isError"] != true || !strings.Contains(string(b), tt.want) {
			t.Errorf("%s %s: %s; want isError naming %q", tt.tool, tt.args, b, tt.want)
		}
	}
}

// BenchmarkMCPStartWorkflow measures an MCP start_workflow round trip over
// POST /mcp of svc dev (JSON-RPC in, the receipt out), p50 and p99:
//
//	go test -run '^$' -bench MCPStartWorkflow -benchtime=1x .
func BenchmarkMCPStartWorkflow(b *testing.B) {
	d, _, _ := mcpTestDev(b)
	client := &http.Client{}
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"start_workflow","arguments":{"name":"ping"}}}`)
	for range b.N {
		var lat []time.Duration
		for range 200 {
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url("/mcp"), bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				cancel()
				b.Fatal(err)
			}
			var out bytes.Buffer
			out.ReadFrom(resp.Body)
			resp.Body.Close()
			cancel()
			lat = append(lat, time.Since(t0))
			if !bytes.Contains(out.Bytes(), []byte(`\"status\":\"started\"`)) {
				b.Fatalf("start_workflow: %s", out.String())
			}
		}
		sort.Slice(lat, func(i, k int) bool { return lat[i] < lat[k] })
		b.ReportMetric(percentile(lat, 50), "start-p50-ms")
		b.ReportMetric(percentile(lat, 99), "start-p99-ms")
	}
}

// TestMCPOnBox: a box serves POST /mcp only behind an identity token, and
// `svc mcp --agent <installationId>` reaches it through the control plane.
func TestMCPOnBox(t *testing.T) {
	w := newLinkWorld(t)
	box := w.startLinkBox()
	httpJSONAuth(t, "POST", w.cp.url+"/api/orgs/default/agents", w.admin, map[string]string{"slug": "demo", "name": "demo"}, nil)
	p, env, code := w.link(t.TempDir(), "--agent", "demo", "--url", box.url, "--secret", box.secret, "--tag", "1", "--no-agents")
	if code != 0 {
		t.Fatalf("link = %d %+v", code, env.Error)
	}
	ping := []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	for _, token := range []string{"", "not-a-token"} {
		if rep := boxDo(t, "POST", box.url+"/mcp", ping, nil, time.Time{}, token, nil); rep.status != http.StatusUnauthorized {
			t.Errorf("POST /mcp on the box with token %q = %d %s; want 401", token, rep.status, rep.body)
		}
	}
	relay := func(lines ...string) map[string]mcpResponse {
		t.Helper()
		cmd := exec.Command(svcBinary(t), "mcp", "--agent", p.LocalDevInstallation.ID)
		cmd.Dir, cmd.Env = t.TempDir(), w.env
		cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("svc mcp --agent: %v\n%s", err, stderr.String())
		}
		got := map[string]mcpResponse{}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var r mcpResponse
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("svc mcp --agent printed %q", l)
			}
			got[string(r.ID)] = r
		}
		return got
	}
	got := relay(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"start_workflow","arguments":{"name":"ping"}}}`)
	var start struct{ StructuredContent startReceipt }
	b, _ := json.Marshal(got[`2`].Result)
	json.Unmarshal(b, &start)
	if len(got) != 2 || got[`1`].Error != nil || start.StructuredContent.RunID == "" {
		t.Fatalf("svc mcp --agent: %+v", got)
	}
	got = relay(`{"jsonrpc":"2.0","id":"w","method":"tools/call","params":{"name":"get_run","arguments":{"runId":"` + start.StructuredContent.RunID + `","waitSeconds":20}}}`)
	if b, _ := json.Marshal(got[`"w"`]); !strings.Contains(string(b), `\"status\":\"completed\"`) {
		t.Fatalf("get_run through the box: %s", b)
	}
}
