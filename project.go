package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// scaffoldFS holds the starter project written by `svc init` (DESIGN §2).
//
//go:embed all:scaffold
var scaffoldFS embed.FS

// projectFile is .svc/project.json: which organization, agent and local-dev
// installation this directory is linked to. `svc init` writes a local-only one.
type projectFile struct {
	SchemaVersion          int          `json:"schema_version"`
	OrganizationID         string       `json:"organization_id"`
	OrganizationSlug       string       `json:"organization_slug"`
	Agent                  projectAgent `json:"agent"`
	LocalDevInstallationID string       `json:"local_dev_installation_id"`
	ControlPlaneURL        string       `json:"control_plane_url,omitempty"` // empty: local only
}

// projectAgent is the agent record a project is linked to (SPEC §2).
type projectAgent struct {
	ID   string `json:"id"`
	Slug string `json:"slug"`
	Name string `json:"name"`
}

// agentConfig is agent.yaml: the project's own settings.
type agentConfig struct {
	Name           string
	DevAutoMigrate bool // dev.autoMigrate, default true
}

// defaultAgentConfig returns agent.yaml's defaults.
func defaultAgentConfig() agentConfig { return agentConfig{DevAutoMigrate: true} }

// project is a user's project directory and its parsed settings.
type project struct {
	Dir    string // absolute root (holds agent.yaml)
	Config agentConfig
	Link   *projectFile // nil when .svc/project.json is absent
}

// stateDir is the gitignored .svc directory of the project.
func (p *project) stateDir(elem ...string) string {
	return filepath.Join(append([]string{p.Dir, ".svc"}, elem...)...)
}

// loadProject reads the project rooted at dir: agent.yaml (optional) and
// .svc/project.json (nil Link when absent).
func loadProject(dir string) (*project, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolve project dir %q: %w", dir, err)
	}
	p := &project{Dir: abs, Config: defaultAgentConfig()}
	if b, err := os.ReadFile(filepath.Join(abs, "agent.yaml")); err == nil {
		if p.Config, err = parseAgentConfig(b); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read agent.yaml: %w", err)
	}
	b, err := os.ReadFile(p.stateDir("project.json"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return p, nil
	case err != nil:
		return nil, fmt.Errorf("read .svc/project.json: %w", err)
	}
	var pf projectFile
	if err := json.Unmarshal(b, &pf); err != nil {
		return nil, fmt.Errorf("parse .svc/project.json: %w", err)
	}
	p.Link = &pf
	return p, nil
}

// parseAgentConfig parses agent.yaml. It understands the small YAML subset
// the file uses (nested maps of scalars, comments) and validates known keys,
// reporting field paths such as dev.autoMigrate.
func parseAgentConfig(b []byte) (agentConfig, error) {
	cfg := defaultAgentConfig()
	values, err := parseSimpleYAML(b)
	if err != nil {
		return cfg, fmt.Errorf("agent.yaml: %w", err)
	}
	for key, v := range values {
		switch key {
		case "name":
			cfg.Name = v
		case "dev.autoMigrate":
			bv, err := strconv.ParseBool(v)
			if err != nil {
				return cfg, fmt.Errorf("agent.yaml: dev.autoMigrate: want true or false, got %q", v)
			}
			cfg.DevAutoMigrate = bv
		}
	}
	return cfg, nil
}

// parseSimpleYAML flattens a YAML document of nested maps with scalar leaves
// into dotted keys ("dev.autoMigrate" → "false"). Lists and flow syntax are
// rejected with the line number.
func parseSimpleYAML(b []byte) (map[string]string, error) {
	out := map[string]string{}
	type level struct {
		indent int
		key    string
	}
	var stack []level
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		if strings.HasPrefix(strings.TrimSpace(line), "#") || strings.TrimSpace(line) == "" {
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		key, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || strings.HasPrefix(key, "-") {
			return nil, fmt.Errorf("line %d: want `key: value`", n)
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		full := strings.TrimSpace(key)
		if len(stack) > 0 {
			full = stack[len(stack)-1].key + "." + full
		}
		val = strings.TrimSpace(val)
		if val == "" {
			stack = append(stack, level{indent, full})
			continue
		}
		if uq, err := strconv.Unquote(val); err == nil {
			val = uq
		} else if len(val) >= 2 && val[0] == '\'' && val[len(val)-1] == '\'' {
			val = val[1 : len(val)-1]
		}
		out[full] = val
	}
	return out, sc.Err()
}

// randomID returns prefix followed by n random bytes in hex.
func randomID(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// runInit is `svc init [dir]`: write the starter project and a local-only
// .svc/project.json, refusing to overwrite an existing project.
func runInit(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() > 1 {
		return fmt.Errorf("init takes at most one directory: %w", errUsage)
	}
	dir := "."
	if fs.NArg() == 1 {
		dir = fs.Arg(0)
	}
	abs := dir
	if !filepath.IsAbs(dir) {
		abs = filepath.Join(c.dir, dir)
	}
	for _, marker := range []string{"agent.yaml", ".svc/project.json"} {
		if _, err := os.Stat(filepath.Join(abs, marker)); err == nil {
			return failf(codeGeneric, "choose an empty directory, e.g. `svc init my-agent`",
				"%s is already a project (%s exists); nothing was written", abs, marker)
		}
	}
	name := filepath.Base(abs)
	files, err := writeScaffold(abs, name)
	if err != nil {
		return err
	}
	c.emit(map[string]any{"schema_version": schemaVersion, "target_dir": abs, "files_written": files}, func(w io.Writer) {
		fmt.Fprintf(w, "Created project %q in %s\n\nNext:\n  cd %s\n  %s dev\n", name, abs, dir, c.selfCommand(abs))
	})
	return nil
}

// writeScaffold writes the embedded starter project into dir (substituting
// the project name) plus .svc/project.json, and returns the relative paths written.
func writeScaffold(dir, name string) ([]string, error) {
	var written []string
	err := fs.WalkDir(scaffoldFS, "scaffold", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(path, "scaffold/")
		b, err := scaffoldFS.ReadFile(path)
		if err != nil {
			return err
		}
		b = bytes.ReplaceAll(b, []byte("{{name}}"), []byte(name))
		if rel == "gitignore" { // embed cannot carry a file named .gitignore through `go install` reliably
			rel = ".gitignore"
		}
		if err := writeFileAtomic(filepath.Join(dir, rel), b, 0o644); err != nil {
			return err
		}
		written = append(written, rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("write scaffold: %w", err)
	}
	slug := slugify(name)
	pf := projectFile{
		SchemaVersion:          schemaVersion,
		OrganizationID:         "local",
		OrganizationSlug:       "local",
		Agent:                  projectAgent{ID: randomID("agt_", 8), Slug: slug, Name: name},
		LocalDevInstallationID: randomID("ldi_", 8),
	}
	b, _ := json.MarshalIndent(pf, "", "  ")
	if err := writeFileAtomic(filepath.Join(dir, ".svc", "project.json"), append(b, '\n'), privateFileMode); err != nil {
		return nil, err
	}
	return append(written, ".svc/project.json"), nil
}

// slugify lowercases name and keeps [a-z0-9-].
func slugify(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	if s := strings.Trim(b.String(), "-"); s != "" {
		return s
	}
	return "agent"
}

// gitignoreHidesMigrations reports whether a project's .gitignore keeps
// .svc/migrations/ out of git, as the scaffold of earlier versions did with
// `.svc/`. It reads the patterns naming .svc and its migrations, in order,
// the way git does: a pattern that ignores the .svc directory cannot be
// undone below it; one that ignores the migrations directory can, by
// `!.svc/migrations/`; one that ignores the files in it, by a negation of
// those files. Patterns that name other paths do not matter here.
func gitignoreHidesMigrations(gitignore []byte) bool {
	var svcDir, migrationsDir, migrationFiles bool
	for _, line := range strings.Split(string(gitignore), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		hide := !strings.HasPrefix(line, "!")
		pattern := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(line, "!"), "/"), "**/")
		switch strings.TrimSuffix(pattern, "/") {
		case ".svc":
			svcDir = hide
		case ".svc/*":
			migrationsDir = hide
		case ".svc/**":
			migrationsDir, migrationFiles = hide, hide
		case ".svc/migrations":
			migrationsDir = hide
		case ".svc/migrations/*", ".svc/migrations/**", ".svc/migrations/*.sql":
			migrationFiles = hide
		}
	}
	return svcDir || migrationsDir || migrationFiles
}

// projectWrite writes pf as dir's .svc/project.json (0600) and reports
// whether its content changed.
func projectWrite(dir string, pf projectFile) (bool, error) {
	b, _ := json.MarshalIndent(pf, "", "  ")
	return linkWriteFile(filepath.Join(dir, ".svc", "project.json"), append(b, '\n'), privateFileMode)
}

// projectForDev settles the project `svc dev` boots (SPEC §4.2 dev). A
// local-only project boots as is. A project linked to a control plane
// needs its user signed in there (exit 2) and its agent still there (exit
// 4; an unreachable control plane only warns, so dev works offline); its
// local-dev installation is the control plane's. With no
// .svc/project.json, a signed-in user (or SVC_CONTROL_PLANE_URL) picks or
// creates the organization's agent in a terminal; otherwise the local-only
// flow asks. Non-interactive runs fail with no_project saying what to do.
func projectForDev(ctx context.Context, c *cmd, proj *project) error {
	if proj.Link != nil && proj.Link.ControlPlaneURL == "" {
		return nil
	}
	_, signedIn, err := loginLoad(c)
	if err != nil {
		return err
	}
	if proj.Link == nil && !signedIn && c.getenv("SVC_CONTROL_PLANE_URL") == "" {
		return ensureLocalProject(c, proj)
	}
	cl, creds, err := requireSignIn(c)
	if err != nil {
		return err
	}
	if proj.Link != nil {
		return projectCheckUpstream(ctx, c, cl, proj)
	}
	if !c.interactive() {
		return failf(codeNoProject, "svc dev links the directory only when it may ask",
			"no .svc/project.json in %s: run `svc link --agent <slug> --local` here to link it to an agent of your organization, or `svc dev` in a terminal to pick or create one", proj.Dir)
	}
	if creds.Organization == nil {
		return failf(codeNoProject, "ask an owner to add you to an organization, then run `svc login` again", "you belong to no organization on %s", cl.url)
	}
	agent, err := projectPickAgent(ctx, c, cl, creds.Organization, proj)
	if err != nil {
		return err
	}
	pf, err := projectLocalDev(ctx, cl, creds.Organization.Slug, agent)
	if err != nil {
		return err
	}
	if _, err := projectWrite(proj.Dir, pf); err != nil {
		return err
	}
	proj.Link = &pf
	fmt.Fprintf(c.stderr, "Linked %s to agent %s of organization %s (.svc/project.json)\n", proj.Dir, agent.Slug, pf.OrganizationSlug)
	return nil
}

// projectLocalDev asks the control plane for the signed-in user's local-dev
// installation of the organization's agent (made on first use; the one
// svc dev runs as and tunnels) and returns the .svc/project.json that links
// a directory to it. `svc dev`'s pick and `svc link --local` write it.
func projectLocalDev(ctx context.Context, cl *cpClient, orgSlug string, agent cpAgent) (projectFile, error) {
	var local cpInstallation
	if err := cl.call(ctx, http.MethodPost, projectAgentPath(orgSlug, agent.Slug)+"/local-dev-installation", nil, &local); err != nil {
		return projectFile{}, err
	}
	return projectFile{SchemaVersion: schemaVersion, OrganizationID: local.OrganizationID, OrganizationSlug: local.OrganizationSlug,
		Agent: projectAgent(agent), LocalDevInstallationID: local.ID, ControlPlaneURL: cl.url}, nil
}

// projectAgentPath is the control plane path of an organization's agent.
func projectAgentPath(org, agent string) string {
	return "/api/orgs/" + url.PathEscape(org) + "/agents/" + url.PathEscape(agent)
}

// projectCheckUpstream checks that the linked project's control plane is
// the one signed in to and still has its agent, and takes the user's
// local-dev installation from it.
func projectCheckUpstream(ctx context.Context, c *cmd, cl *cpClient, proj *project) error {
	l := proj.Link
	if l.ControlPlaneURL != cl.url {
		return failf(codeAuth, "run `svc login --control-plane "+l.ControlPlaneURL+"`",
			"%s is linked to the control plane %s; you are signed in to %s", proj.Dir, l.ControlPlaneURL, cl.url)
	}
	var local cpInstallation
	err := cl.call(ctx, http.MethodPost, projectAgentPath(l.OrganizationID, l.Agent.Slug)+"/local-dev-installation", nil, &local)
	var ce *cliError
	switch {
	case cpErrorCode(err) == codeNotFound:
		return failf(codeNotFound, "run `svc link --force` (or delete .svc/project.json and run `svc dev`) to link another agent",
			"agent %s of organization %s is gone from %s", l.Agent.Slug, l.OrganizationSlug, l.ControlPlaneURL)
	case errors.As(err, &ce) && ce.Code == codeAuth:
		return err
	case err != nil:
		newDevLogger(c).Warn("could not check the linked agent with the control plane; booting with .svc/project.json as is", "err", err)
		return nil
	}
	if local.ID != l.LocalDevInstallationID {
		l.LocalDevInstallationID = local.ID
		if _, err := projectWrite(proj.Dir, *l); err != nil {
			return err
		}
	}
	return nil
}

// projectPickAgent lists the organization's agents on stderr and reads the
// user's pick: a number, a slug, or nothing for the agent named after the
// project's folder (or agent.yaml's name): linked when the organization
// has it (a clone of a project linked before), else created.
func projectPickAgent(ctx context.Context, c *cmd, cl *cpClient, org *cpOrg, proj *project) (cpAgent, error) {
	agents, err := cl.agents(ctx, org.Slug)
	if err != nil {
		return cpAgent{}, err
	}
	name := proj.Config.Name
	if name == "" {
		name = filepath.Base(proj.Dir)
	}
	slug := slugify(name)
	named := slices.IndexFunc(agents, func(a cpAgent) bool { return a.Slug == slug })
	enter := fmt.Sprintf("press Enter to create %q", slug)
	if named >= 0 {
		enter = fmt.Sprintf("press Enter to link %q", slug)
	}
	fmt.Fprintf(c.stderr, "No .svc/project.json in %s. Agents of organization %s:\n", proj.Dir, org.Slug)
	answer := linkChooseAgent(c, agents, "Pick one (number or slug), or "+enter+": ")
	if answer == "" && named >= 0 {
		return agents[named], nil
	}
	for _, a := range agents {
		if answer != "" && a.Slug == answer {
			return a, nil
		}
	}
	if answer != "" {
		return cpAgent{}, failf(codeNotFound, "run `svc dev` again and pick a listed agent", "no agent %q in organization %s", answer, org.Slug)
	}
	var a cpAgent
	err = cl.call(ctx, http.MethodPost, "/api/orgs/"+url.PathEscape(org.Slug)+"/agents", map[string]string{"slug": slug, "name": name}, &a)
	if cpErrorCode(err) == "conflict" {
		return cpAgent{}, failf(codeGeneric, "run `svc dev` again and pick it by its slug", "organization %s already has an agent %q", org.Slug, slug)
	}
	return a, err
}
