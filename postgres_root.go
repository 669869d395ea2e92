package main

// The clusters of root sessions (see postgres.go). PostgreSQL refuses to run
// as root, so a root session runs it as the postgres OS user, and that user
// cannot reach a cluster inside the project: .svc is private, and the
// project's parents often are too (/root). Making .svc or the parents
// reachable would open them to that user, so the clusters stay under
// pgFallbackRoot, owned by postgres, and are tied to the project itself:
//
//   - A project's cluster is pgFallbackRoot/<id>, the id minted (crypto/rand)
//     at its first root boot and kept in .svc/postgres.cluster. A project
//     removed and made again at the same path has no id, so it gets a new
//     cluster for its new password (naming clusters by the project's path,
//     as earlier versions did, handed the old cluster to the new project,
//     which then could not log in).
//   - Beside each cluster, <id>.project records the directory of its project;
//     each boot rewrites it, so its time is the cluster's last use. A project
//     moved elsewhere keeps its cluster (the record follows it); a copy made
//     with its .svc (cp -r) is told apart from a move because the original
//     still holds the id, and gets a cluster of its own.
//   - A cluster is an orphan when its recorded directory no longer holds its
//     id (the project was removed, or made again). Each root boot removes the
//     orphans unused for pgOrphanGrace (so that a project moved and not yet
//     booted again is not lost at once) and not running. A cluster without a
//     record (named by the path's hash by earlier versions) is never removed:
//     a project that has a password file adopts the one of its path.

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// pgClusterIDFile, under .svc, holds the id of a root session's cluster.
	pgClusterIDFile = "postgres.cluster"
	// pgClusterRecordExt ends the name of the file beside a cluster under
	// pgFallbackRoot that records the directory of its project.
	pgClusterRecordExt = ".project"
	// pgOrphanGrace is how long an orphan cluster stays unused before a boot
	// removes it.
	pgOrphanGrace = 7 * 24 * time.Hour
)

// pgServerUser returns the credential and home directory of the postgres OS
// user when svc runs as root, because PostgreSQL refuses to run as root, and
// a nil credential otherwise.
func pgServerUser() (cred *syscall.Credential, home string, err error) {
	if os.Geteuid() != 0 {
		return nil, "", nil
	}
	u, err := user.Lookup(pgSuperuser)
	if err != nil {
		return nil, "", fmt.Errorf("running as root, PostgreSQL must run as the %q user: %w (create it, e.g. `useradd --system postgres`, or set SVC_DATABASE_URL)",
			pgSuperuser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, "", fmt.Errorf("user %q: uid %q: %w", pgSuperuser, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, "", fmt.Errorf("user %q: gid %q: %w", pgSuperuser, u.Gid, err)
	}
	cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	groups, err := u.GroupIds()
	if err != nil {
		return nil, "", fmt.Errorf("user %q: groups: %w", pgSuperuser, err)
	}
	for _, g := range groups {
		id, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return nil, "", fmt.Errorf("user %q: group %q: %w", pgSuperuser, g, err)
		}
		cred.Groups = append(cred.Groups, uint32(id))
	}
	return cred, u.HomeDir, nil
}

// pgLocalDataDir returns the cluster directory of the project:
// ProjectDir/.svc/postgres when the server runs as the current user. When it
// runs as another (runAs, svc being root), that user cannot enter the
// private .svc: the cluster is then pgFallbackRoot/<the project's cluster
// id> (pgRootDataDir), where a cluster an earlier version kept in
// .svc/postgres is moved.
func pgLocalDataDir(projectDir string, runAs *syscall.Credential) (string, error) {
	if runAs == nil {
		return filepath.Join(projectDir, ".svc", "postgres"), nil
	}
	if err := pgPrepareRootDir(runAs); err != nil {
		return "", err
	}
	dataDir, err := pgRootDataDir(projectDir)
	if err != nil {
		return "", err
	}
	legacy := filepath.Join(projectDir, ".svc", "postgres")
	if _, err := os.Stat(filepath.Join(legacy, "PG_VERSION")); err != nil {
		return dataDir, nil // no cluster there
	}
	if _, err := os.Lstat(dataDir); err == nil {
		return dataDir, nil // this project already has a cluster where it belongs
	}
	if err := os.Rename(legacy, dataDir); err != nil {
		return "", fmt.Errorf("move the cluster %s to %s, where the postgres user can reach it: %w (move it there yourself, keeping its owner)",
			legacy, dataDir, err)
	}
	return dataDir, nil
}

// pgPrepareRootDir makes pgFallbackRoot private to the postgres user runAs:
// 0700, owned by it, below a world-searchable parent.
func pgPrepareRootDir(runAs *syscall.Credential) error {
	if err := os.MkdirAll(filepath.Dir(pgFallbackRoot), sharedDirMode); err != nil {
		return err
	}
	if err := os.MkdirAll(pgFallbackRoot, privateDirMode); err != nil {
		return err
	}
	if err := os.Chown(pgFallbackRoot, int(runAs.Uid), int(runAs.Gid)); err != nil {
		return err
	}
	return os.Chmod(pgFallbackRoot, privateDirMode)
}

// pgRootDataDir returns pgFallbackRoot/<id> for the project's cluster id,
// minting the id when the project has none or is a copy of the project
// that owns it, and records the project beside the cluster.
func pgRootDataDir(projectDir string) (string, error) {
	svcDir := filepath.Join(projectDir, ".svc")
	if err := mkdirPrivate(svcDir); err != nil {
		return "", err
	}
	idPath := filepath.Join(svcDir, pgClusterIDFile)
	id, err := pgReadToken(idPath, "the PostgreSQL cluster id")
	if err != nil {
		return "", err
	}
	if id != "" && !pgIsClusterID(id) {
		return "", fmt.Errorf("%s does not hold a cluster id: remove it and start svc again, which gives this project a new, empty cluster", idPath)
	}
	if owner := pgClusterProject(id); id != "" && owner != "" && owner != projectDir {
		if ownerID, _ := pgProjectClusterID(owner); ownerID == id {
			id = "" // a copy of owner, .svc included: it gets a cluster of its own
		}
	}
	if id == "" {
		id = rand.Text()
		if legacy := filepath.Join(pgFallbackRoot, pgProjectHash(projectDir)); pgAdoptsLegacy(projectDir, legacy) {
			if err := os.Rename(legacy, filepath.Join(pgFallbackRoot, id)); err != nil {
				return "", fmt.Errorf("rename the cluster %s of this project: %w", legacy, err)
			}
		}
		if err := writeFileAtomic(idPath, []byte(id+"\n"), privateFileMode); err != nil {
			return "", fmt.Errorf("save the PostgreSQL cluster id: %w", err)
		}
	}
	dataDir := filepath.Join(pgFallbackRoot, id)
	if err := writeFileAtomic(dataDir+pgClusterRecordExt, []byte(projectDir+"\n"), privateFileMode); err != nil {
		return "", fmt.Errorf("record the project of the cluster %s: %w", dataDir, err)
	}
	return dataDir, nil
}

// pgIsClusterID reports whether s has the form of a cluster id (what
// rand.Text returns: 26 characters of A-Z and 2-7), so that it names a
// directory right under pgFallbackRoot.
func pgIsClusterID(s string) bool {
	if len(s) != 26 {
		return false
	}
	for _, c := range s {
		if (c < 'A' || c > 'Z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// pgClusterProject returns the project directory recorded beside the
// cluster id, "" when there is none.
func pgClusterProject(id string) string {
	b, err := os.ReadFile(filepath.Join(pgFallbackRoot, id+pgClusterRecordExt))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// pgProjectClusterID returns the cluster id kept in projectDir/.svc, "" when
// there is none (no such project, or one without a cluster); ok is false
// when it cannot be read.
func pgProjectClusterID(projectDir string) (id string, ok bool) {
	id, err := pgReadToken(filepath.Join(projectDir, ".svc", pgClusterIDFile), "the PostgreSQL cluster id")
	return id, err == nil
}

// pgAdoptsLegacy reports whether the project, which has no cluster id yet,
// takes over legacy, the cluster an earlier version named by the hash of its
// path: only when legacy holds a cluster and the project has the password
// file that cluster was made with. A project without one was made again at
// that path; the cluster is not its own.
func pgAdoptsLegacy(projectDir, legacy string) bool {
	if _, err := os.Stat(filepath.Join(legacy, "PG_VERSION")); err != nil {
		return false
	}
	_, err := os.Stat(filepath.Join(projectDir, ".svc", pgPasswordFile))
	return err == nil
}

// pgRemoveOrphanClusters removes, best effort, the clusters under
// pgFallbackRoot other than own whose recorded project directory no longer
// holds their id, unused for pgOrphanGrace at now and not running (pg_ctl
// status, as the postgres user runAs with env). Each removal is reported to
// o.Log.
func pgRemoveOrphanClusters(ctx context.Context, o pgOptions, own string, bins pgServerBinaries, runAs *syscall.Credential, env []string, now time.Time) {
	entries, err := os.ReadDir(pgFallbackRoot)
	if err != nil {
		return
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), pgClusterRecordExt)
		dir := filepath.Join(pgFallbackRoot, id)
		if !ok || !e.Type().IsRegular() || !pgIsClusterID(id) || dir == own {
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < pgOrphanGrace {
			continue
		}
		project := pgClusterProject(id)
		if projectID, ok := pgProjectClusterID(project); !filepath.IsAbs(project) || !ok || projectID == id {
			continue // its project is there, or cannot be told
		}
		l := &pgLocal{bins: pgClusterBinaries(bins, o.BinGlob, dir), dataDir: dir, runAs: runAs, env: env}
		if running, err := l.running(ctx); err != nil || running {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(o.Log, "remove the orphan PostgreSQL cluster %s: %v\n", dir, err)
			continue
		}
		os.Remove(dir + pgClusterRecordExt)
		fmt.Fprintf(o.Log, "removed the PostgreSQL cluster %s: its project %s is gone (unused since %s)\n", dir, project, info.ModTime().Format(time.RFC3339))
	}
}
