package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentSetupMerge keeps a coding agent's other MCP servers and
// settings, replaces a stale svc entry, starts the binary by the path
// given (quoted in both formats), and is a fixed point: merging twice
// gives the bytes of merging once. A config that is not JSON is left
// alone.
func TestAgentSetupMerge(t *testing.T) {
	const bin = `/opt/my "tools"/svc`
	for _, tt := range []struct {
		name  string
		merge func([]byte, string) ([]byte, error)
		old   string
		keep  []string
	}{
		{"json absent", agentSetupMergeJSON, "", []string{`"svc"`, `"mcp"`, `"command": "/opt/my \"tools\"/svc"`}},
		{"json other server", agentSetupMergeJSON, `{"mcpServers":{"db":{"command":"pg"}},"x":1}`, []string{`"db"`, `"x": 1`, `"svc"`}},
		{"json stale svc", agentSetupMergeJSON, `{"mcpServers":{"svc":{"command":"old"}}}`, []string{`"command": "/opt/my \"tools\"/svc"`}},
		{"toml absent", agentSetupMergeTOML, "", []string{"[mcp_servers.svc]\ncommand = \"/opt/my \\\"tools\\\"/svc\""}},
		{"toml others", agentSetupMergeTOML, "model = \"o3\"\n[mcp_servers.db]\ncommand = \"pg\"", []string{"model = \"o3\"", "[mcp_servers.db]\ncommand = \"pg\"\n\n[mcp_servers.svc]"}},
		{"toml stale svc", agentSetupMergeTOML, "[mcp_servers.svc]\ncommand = \"old\"\n[other]\na = 1\n", []string{"[mcp_servers.svc]\ncommand = \"/opt/my \\\"tools\\\"/svc\"\nargs = [\"mcp\"]\n[other]\na = 1\n"}},
	} {
		once, err := tt.merge([]byte(tt.old), bin)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		twice, _ := tt.merge(once, bin)
		if string(once) != string(twice) {
			t.Errorf("%s: not idempotent:\n%s\n---\n%s", tt.name, once, twice)
		}
		for _, k := range tt.keep {
			if !strings.Contains(string(once), k) {
				t.Errorf("%s: merged config lacks %q:\n%s", tt.name, k, once)
			}
		}
		if strings.Contains(string(once), `"old"`) {
			t.Errorf("%s: the stale entry survived:\n%s", tt.name, once)
		}
	}
	if _, err := agentSetupMergeJSON([]byte("not json"), bin); err == nil {
		t.Error("merging into a non-JSON config succeeded; want it left alone")
	}
}

// TestLinkPatchGitignore ignores .svc/* and keeps .svc/migrations/,
// replacing a line that hides the whole .svc directory, once.
func TestLinkPatchGitignore(t *testing.T) {
	for _, tt := range []struct{ old, want string }{
		{"", ".svc/*\n!.svc/migrations/\n"},
		{"node_modules/\n.svc/\n.env\n", "node_modules/\n.env\n.svc/*\n!.svc/migrations/\n"},
		{".svc/*\n!.svc/migrations/\nnode_modules/\n", ".svc/*\n!.svc/migrations/\nnode_modules/\n"},
	} {
		dir := t.TempDir()
		if tt.old != "" {
			os.WriteFile(filepath.Join(dir, ".gitignore"), []byte(tt.old), 0o644)
		}
		changed, err := linkPatchGitignore(dir)
		got, _ := os.ReadFile(filepath.Join(dir, ".gitignore"))
		if err != nil || string(got) != tt.want || changed != (tt.old != tt.want) || gitignoreHidesMigrations(got) {
			t.Errorf("patch(%q) = %q, changed %v, %v; want %q", tt.old, got, changed, err, tt.want)
		}
	}
}
