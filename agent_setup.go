package main

// Coding-agent setup (DESIGN §11), run by `svc link`: the svc skill for
// coding agents and, per selected agent, its project MCP config pointing
// at `svc mcp`. Every file is written idempotently: a second run with the
// same choice changes nothing, and an agent's existing config keeps its
// other servers. No secret is ever written: `svc mcp` finds the runtime
// through .svc/ and the environment.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// agentSetupAgent is a supported coding agent: its name on the command
// line and the project file holding its MCP servers.
type agentSetupAgent struct {
	name string
	path string
	// merge returns the file's content with the svc server set to run
	// command, from its current content (nil when absent).
	merge func(old []byte, command string) ([]byte, error)
}

// agentSetupAgents lists the supported coding agents, in report order.
var agentSetupAgents = []agentSetupAgent{
	{name: "claude-code", path: ".mcp.json", merge: agentSetupMergeJSON},
	{name: "cursor", path: ".cursor/mcp.json", merge: agentSetupMergeJSON},
	{name: "codex", path: ".codex/config.toml", merge: agentSetupMergeTOML},
}

// agentSetupSkillPaths are where the svc skill is written.
var agentSetupSkillPaths = []string{".agents/skills/svc/SKILL.md", ".claude/skills/svc/SKILL.md"}

// Step outcomes of the setup report (SPEC §4.2). An MCP entry is written
// when its file changed, unchanged when the file already held it.
const (
	agentSetupOK        = "ok"
	agentSetupWritten   = "written"
	agentSetupUnchanged = "unchanged"
	agentSetupSkipped   = "skipped"
	agentSetupFailed    = "failed"
)

// agentSetupReport is agent_setup of the link payload.
type agentSetupReport struct {
	OK       bool            `json:"ok"`
	Selected []string        `json:"selected"`
	Steps    agentSetupSteps `json:"steps"`
}

// agentSetupSteps are the outcomes of the setup's steps: the skill, and
// one MCP entry for every supported agent, selected or not.
type agentSetupSteps struct {
	Skills string            `json:"skills"`
	MCP    map[string]string `json:"mcp"`
}

// agentSetupNames lists the supported agents' names.
func agentSetupNames() []string {
	names := make([]string, len(agentSetupAgents))
	for i, a := range agentSetupAgents {
		names[i] = a.name
	}
	return names
}

// agentSetupParse reads a comma-separated list of agent names ("all" for
// every one; "" for none), refusing unknown names.
func agentSetupParse(list string) ([]string, error) {
	out := []string{}
	for _, n := range strings.Split(list, ",") {
		n = strings.ToLower(strings.TrimSpace(n))
		switch {
		case n == "":
		case n == "all":
			return agentSetupNames(), nil
		case !slices.Contains(agentSetupNames(), n):
			return nil, fmt.Errorf("unknown coding agent %q: want %s", n, strings.Join(agentSetupNames(), ", "))
		case !slices.Contains(out, n):
			out = append(out, n)
		}
	}
	return out, nil
}

// agentSetupAsk asks which agents to set up; a command that may not prompt
// sets up none and says what to pass instead.
func agentSetupAsk(c *cmd) ([]string, error) {
	if !c.interactive() {
		fmt.Fprintf(c.stderr, "note: no coding agent was set up; pass --agents %s (or all) to set some up, or --no-agents to say none\n", strings.Join(agentSetupNames(), ","))
		return []string{}, nil
	}
	for range 3 {
		answer := cliPrompt(c, fmt.Sprintf("Set up coding agents? (%s, all; empty for none) ", strings.Join(agentSetupNames(), ", ")))
		names, err := agentSetupParse(answer)
		if err == nil {
			return names, nil
		}
		fmt.Fprintf(c.stderr, "%v\n", err)
	}
	return nil, failf(codeGeneric, "pass --agents or --no-agents", "svc link: no valid coding-agent choice")
}

// agentSetupRun writes the skill and the MCP config of each selected agent
// in dir, the MCP server started as command (the absolute path of this
// binary), and returns the report and the relative paths whose content it
// created or changed. A failed step is reported, not returned: the link
// itself is done by then.
func agentSetupRun(dir string, selected []string, command string) (agentSetupReport, []string) {
	r := agentSetupReport{OK: true, Selected: selected, Steps: agentSetupSteps{Skills: agentSetupSkipped, MCP: map[string]string{}}}
	var written []string
	// write sets rel to content(its current bytes) and answers the step's
	// outcome: written, unchanged or failed.
	write := func(rel string, content func(old []byte) ([]byte, error)) string {
		path := filepath.Join(dir, filepath.FromSlash(rel))
		old, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			return agentSetupFailed
		}
		b, err := content(old)
		if err != nil {
			return agentSetupFailed
		}
		changed, err := linkWriteFile(path, b, 0o644)
		switch {
		case err != nil:
			return agentSetupFailed
		case !changed:
			return agentSetupUnchanged
		}
		written = append(written, rel)
		return agentSetupWritten
	}
	if len(selected) > 0 {
		r.Steps.Skills = agentSetupOK
		for _, p := range agentSetupSkillPaths {
			if write(p, func([]byte) ([]byte, error) { return []byte(agentSetupSkill), nil }) == agentSetupFailed {
				r.Steps.Skills, r.OK = agentSetupFailed, false
			}
		}
	}
	for _, a := range agentSetupAgents {
		if !slices.Contains(selected, a.name) {
			r.Steps.MCP[a.name] = agentSetupSkipped
			continue
		}
		r.Steps.MCP[a.name] = write(a.path, func(old []byte) ([]byte, error) { return a.merge(old, command) })
		if r.Steps.MCP[a.name] == agentSetupFailed {
			r.OK = false
		}
	}
	return r, written
}

// agentSetupMergeJSON sets mcpServers.svc in a JSON MCP config (Claude
// Code's .mcp.json, Cursor's .cursor/mcp.json) to `command mcp` over
// stdio, keeping every other key. A file that is not a JSON object is left
// alone (an error).
func agentSetupMergeJSON(old []byte, command string) ([]byte, error) {
	doc := map[string]any{}
	if len(bytes.TrimSpace(old)) > 0 {
		if err := json.Unmarshal(old, &doc); err != nil {
			return nil, fmt.Errorf("existing MCP config is not a JSON object: %w", err)
		}
	}
	servers, _ := doc["mcpServers"].(map[string]any)
	if servers == nil {
		servers = map[string]any{}
	}
	servers["svc"] = map[string]any{"command": command, "args": []string{"mcp"}}
	doc["mcpServers"] = servers
	b, err := json.MarshalIndent(doc, "", "  ")
	return append(b, '\n'), err
}

// agentSetupMergeTOML sets the [mcp_servers.svc] table of Codex's
// config.toml to `command mcp`: an existing one is replaced up to the next
// table header, else the table is appended; the rest of the file is kept
// as is.
func agentSetupMergeTOML(old []byte, command string) ([]byte, error) {
	quoted, _ := json.Marshal(command) // a JSON string is a TOML basic string
	section := "[mcp_servers.svc]\ncommand = " + string(quoted) + "\nargs = [\"mcp\"]\n"
	lines := strings.SplitAfter(string(old), "\n")
	var out strings.Builder
	replaced, inSection := false, false
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "[") {
			inSection = t == "[mcp_servers.svc]"
			if inSection {
				out.WriteString(section)
				replaced = true
				continue
			}
		}
		if !inSection {
			out.WriteString(l)
		}
	}
	s := out.String()
	if !replaced {
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		if s != "" {
			s += "\n"
		}
		s += section
	}
	return []byte(s), nil
}

// agentSetupSkill is the svc skill for coding agents (SKILL.md).
const agentSetupSkill = `---
name: svc
description: Run, inspect and start the agents and durable workflows of this svc project (svc dev, svc workflows, svc runs, the svc MCP server).
---

# svc

This directory is a svc project: agents in ` + "`deep-agents/<name>/index.ts`" + `, durable
workflows in ` + "`workflows/<name>.workflow.ts`" + `, the database schema in ` + "`src/schema.ts`" + `.

- ` + "`svc dev`" + ` boots the local runtime (keep it running; it recompiles on save).
- ` + "`svc workflows list`" + `, ` + "`svc workflows schema <name>`" + `, ` + "`svc workflows start <name> --input '{...}'`" + `.
- ` + "`svc runs list`" + `, ` + "`svc runs get <runId> --wait 30s`" + `, ` + "`svc runs logs <runId>`" + `, ` + "`svc runs stream <runId>`" + ` (what its steps write with ` + "`getWritable()`" + `, live), ` + "`svc runs cancel <runId>`" + `.
- Add ` + "`--agent <installationId>`" + ` to target the deployed box instead of ` + "`svc dev`" + `.
- Add ` + "`--json`" + ` for one machine-readable line: ` + "`{\"ok\":true,\"data\":...}`" + `.

The MCP server ` + "`svc mcp`" + ` offers the same: list workflows and schemas, start a run,
get a run (waiting up to 25 s), list and cancel runs, resume a hook, message an agent.
Never print or commit secrets: ` + "`.svc/`" + ` is gitignored except ` + "`.svc/migrations/`" + `.
`
