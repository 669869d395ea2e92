package main

// The container image under test: the repository's Dockerfile built with
// podman from Debian's packages, where no container registry is reachable,
// and run as the box of the deploy walkthrough
// (TestDeploymentWalkthroughImage). /work/shared/CONTAINERS.md of the
// project's notes, in short: runc instead of crun (hybrid cgroups), lower
// rlimits, `--isolation chroot` builds, host networking, and a Debian root
// filesystem from mmdebstrap standing in for debian:bookworm-slim.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// containerTools are the programs the image test runs (Debian packages of
// the same names; .ci/run installs them, and buildah, whose build engine
// podman embeds).
var containerTools = []string{"podman", "mmdebstrap", "runc"}

// containerBaseImage is the name the Dockerfile's FROM resolves to in the
// test's storage (short names are looked up under localhost/ first).
const containerBaseImage = "localhost/debian:bookworm-slim"

// containerStepTimeout bounds each podman or mmdebstrap command: the first
// ones download a Debian root filesystem and the image's PostgreSQL.
const containerStepTimeout = 15 * time.Minute

// containerPodman is podman as root with all of its state (storage, run
// root, temporary and network directories) in a directory of the test,
// removed when the test ends.
type containerPodman struct {
	t    testing.TB
	dir  string
	conf string // the CONTAINERS_CONF file
}

// newContainerPodman returns the test's podman. Without podman, mmdebstrap
// or runc, or when not root, the test is skipped, but fails in CI (CI set),
// where .ci/run installs them and runs as root.
func newContainerPodman(t testing.TB) *containerPodman {
	t.Helper()
	var missing []string
	for _, tool := range containerTools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	why := ""
	if len(missing) > 0 {
		why = "needs " + strings.Join(missing, ", ") + " (apt-get install podman buildah mmdebstrap runc)"
	} else if os.Geteuid() != 0 {
		why = "needs root: podman runs as root here (CI runs as root)"
	}
	if why != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("the image test %s; .ci/run installs them", why)
		}
		t.Skip("the image test " + why)
	}
	dir, err := os.MkdirTemp("", "svc-podman-")
	if err != nil {
		t.Fatal(err)
	}
	p := &containerPodman{t: t, dir: dir, conf: filepath.Join(dir, "containers.conf")}
	conf := `[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "` + filepath.Join(dir, "tmp") + `"
[network]
network_config_dir = "` + filepath.Join(dir, "networks") + `"
`
	if err := os.WriteFile(p.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.remove)
	return p
}

// command is podman with args on the test's state, bounded by
// containerStepTimeout (cancel releases it).
func (p *containerPodman) command(args ...string) (*exec.Cmd, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), containerStepTimeout)
	cmd := exec.CommandContext(ctx, "podman", append([]string{"--root", filepath.Join(p.dir, "storage"),
		"--runroot", filepath.Join(p.dir, "runroot"), "--storage-driver", "overlay"}, args...)...)
	cmd.Env = baseEnv("CONTAINERS_CONF=" + p.conf)
	return cmd, cancel
}

// run runs podman with args and returns its stdout, trimmed; the test fails,
// showing its output, unless it exits 0.
func (p *containerPodman) run(args ...string) string {
	p.t.Helper()
	cmd, cancel := p.command(args...)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		p.t.Fatalf("podman %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// remove deletes everything the test's podman holds (its containers are
// removed by id when their test ends) and its directory; `system reset`
// also undoes the mount the overlay driver keeps on its storage.
func (p *containerPodman) remove() {
	cmd, cancel := p.command("system", "reset", "--force")
	defer cancel()
	if out, err := cmd.CombinedOutput(); err != nil {
		p.t.Errorf("podman system reset: %v\n%s", err, out)
		return
	}
	if err := os.RemoveAll(p.dir); err != nil {
		p.t.Errorf("remove podman's state: %v", err)
	}
}

// build builds the repository's Dockerfile into an image serving project
// and returns its name. The binary is built outside (the golang image of
// the build stage cannot be pulled here) with the build stage's command
// and given as the named context svc; the project as the context project.
// Both replace their stages, so the build stage is skipped, as it is for
// anyone who builds that way.
func (p *containerPodman) build(project string) string {
	p.t.Helper()
	began := time.Now()
	p.run("import", containerRootfs(p.t), containerBaseImage)
	imported := time.Now()
	bin := p.t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(bin, "svc"), ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		p.t.Fatalf("build the image's static binary: %v\n%s", err, out)
	}
	repo, err := os.Getwd()
	if err != nil {
		p.t.Fatal(err)
	}
	const image = "localhost/svc-walkthrough:test"
	compiled := time.Now()
	p.run("build", "--isolation", "chroot", "--pull=never", "--build-context", "svc="+bin, "--build-context", "project="+project,
		"--tag", image, "--file", filepath.Join(repo, "Dockerfile"), repo)
	p.t.Logf("image built: base %s, static binary %s, podman build %s", imported.Sub(began).Round(time.Second),
		compiled.Sub(imported).Round(time.Second), time.Since(compiled).Round(time.Second))
	return image
}

// containerBox is a box running in a container of the test's podman.
type containerBox struct {
	*boxProcess
	id string
}

// startBox runs image as a container, its /data the named volume volume
// (created on first use, as `docker run -v` does), on the host's network,
// with env passed as -e. It runs the image's entrypoint with two changes:
// --json, so the box's first stdout line is its payload, and --addr on
// port of loopback rather than every address's 8080 (a restarted box keeps
// its port: the control plane has its URL). The container is removed by
// id when the test ends.
func (p *containerPodman) startBox(image, volume string, port int, env []string) *containerBox {
	p.t.Helper()
	var entry []string
	if err := json.Unmarshal([]byte(p.run("image", "inspect", "--format", "{{json .Config.Entrypoint}}", image)), &entry); err != nil {
		p.t.Fatalf("the image's entrypoint: %v", err)
	}
	addr := slices.Index(entry, "--addr")
	if len(entry) < 2 || addr < 0 || addr+1 >= len(entry) {
		p.t.Fatalf("the image's entrypoint %q has no --addr", entry)
	}
	entry = slices.Concat(entry[:1], []string{"--json"}, entry[1:addr+1], []string{fmt.Sprintf("127.0.0.1:%d", port)}, entry[addr+2:])
	rawEntry, _ := json.Marshal(entry)
	cidfile := filepath.Join(p.t.TempDir(), "cid")
	args := []string{"run", "--cidfile", cidfile, "--network", "host", "--volume", volume + ":/data", "--entrypoint", string(rawEntry)}
	for _, kv := range env {
		args = append(args, "--env", kv)
	}
	cmd, cancel := p.command(append(args, image)...)
	// Registered before the box's own cleanup, so it runs after that has
	// stopped the box; it reads the id podman wrote, so that a box that
	// never served is removed as well.
	p.t.Cleanup(func() {
		defer cancel()
		if id, err := os.ReadFile(cidfile); err == nil {
			p.run("rm", "--force", strings.TrimSpace(string(id)))
		}
	})
	b := &containerBox{boxProcess: &boxProcess{}}
	b.envelopeProcess = startEnvelopeCommand(p.t, cmd, &b.ready)
	b.url = b.ready.URL
	raw, err := os.ReadFile(cidfile)
	if err != nil {
		p.t.Fatalf("podman run wrote no container id: %v", err)
	}
	b.id = strings.TrimSpace(string(raw))
	return b
}

// hostUIDs returns the host user id of every process in the box's
// container (`podman top … huser`).
func (p *containerPodman) hostUIDs(b *containerBox) []string {
	p.t.Helper()
	lines := strings.Fields(p.run("top", b.id, "huser"))
	if len(lines) < 2 || lines[0] != "HUSER" {
		p.t.Fatalf("podman top %s huser = %q", b.id, lines)
	}
	return lines[1:]
}

// containerRootfs returns a tarball of a minimal Debian bookworm root
// filesystem, the test's debian:bookworm-slim, made with mmdebstrap from the
// machine's own mirrors on first use and cached under the user's cache
// directory (svc-test/), since it does not change.
func containerRootfs(t testing.TB) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(cache, "svc-test", "debian-bookworm-minbase.tar")
	if _, err := os.Stat(tarball); err == nil {
		return tarball
	}
	if err := os.MkdirAll(filepath.Dir(tarball), 0o755); err != nil {
		t.Fatal(err)
	}
	partial := fmt.Sprintf("%s.%d.partial", tarball, os.Getpid()) // two test runs may make it at once
	ctx, cancel := context.WithTimeout(context.Background(), containerStepTimeout)
	defer cancel()
	args := append([]string{"--variant=minbase", "--format=tar", "bookworm", partial}, containerSources(t)...)
	if out, err := exec.CommandContext(ctx, "mmdebstrap", args...).CombinedOutput(); err != nil {
		os.Remove(partial)
		t.Fatalf("mmdebstrap %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := os.Rename(partial, tarball); err != nil {
		t.Fatal(err)
	}
	return tarball
}

// containerPolicyLine is a package source in `apt-cache policy`:
// " 500 http://deb.debian.org/debian bookworm-updates/main amd64 Packages".
var containerPolicyLine = regexp.MustCompile(`(?m)^\s*\d+\s+(https?://\S+)\s+([a-z]+(-[a-z]+)?)/main\s`)

// containerSources returns mmdebstrap's sources for bookworm, its updates
// and its security updates, on the mirrors the machine's apt uses (the
// image's apt-get then uses them as well).
func containerSources(t testing.TB) []string {
	t.Helper()
	out, err := exec.Command("apt-cache", "policy").Output()
	if err != nil {
		t.Fatalf("apt-cache policy (to find the machine's Debian mirror): %v", err)
	}
	var mirror, security string
	for _, m := range containerPolicyLine.FindAllStringSubmatch(string(out), -1) {
		if strings.HasSuffix(m[2], "-security") {
			security = m[1]
		} else if m[3] == "" || m[3] == "-updates" {
			mirror = m[1]
		}
	}
	if mirror == "" {
		t.Fatalf("apt-cache policy names no Debian mirror to build the image's base from:\n%s", out)
	}
	sources := []string{"deb " + mirror + " bookworm main", "deb " + mirror + " bookworm-updates main"}
	if security != "" {
		sources = append(sources, "deb "+security+" bookworm-security main")
	}
	return sources
}
