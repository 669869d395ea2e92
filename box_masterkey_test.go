package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBoxMasterKeyFromEnv: a box that kept its secret store's key in
// --data/master.key, restarted with SVC_MASTER_KEY, keeps its secrets (its
// minted signing secret still answers the challenge) and leaves no key on
// disk, on that boot and the next. A wrong or malformed SVC_MASTER_KEY is
// refused, saying what to do.
func TestBoxMasterKeyFromEnv(t *testing.T) {
	if testing.Short() {
		t.Skip("runs boxes")
	}
	dir, data := projectDir(t), t.TempDir()
	env := baseEnv("DATABASE_URL="+testPostgresURL(t), "SVC_CONTROL_PLANE_URL=http://127.0.0.1:1")
	box := startBox(t, dir, data, env)
	var sm []string
	eventually(t, 10*time.Second, "the minted secret in the first boot's log", func() bool {
		sm = boxSecretLine.FindStringSubmatch(box.stderr.String())
		return sm != nil
	})
	secret := []byte(sm[1])
	box.stop()
	keyFile := filepath.Join(data, "master.key")
	if _, err := os.Stat(keyFile); err != nil {
		t.Fatalf("the first boot kept no key file: %v", err)
	}

	raw := make([]byte, 32)
	rand.Read(raw)
	key := hex.EncodeToString(raw)
	withKey := append(append([]string{}, env...), "SVC_MASTER_KEY="+key)
	for _, what := range []string{"the boot that moves to SVC_MASTER_KEY", "the boot after"} {
		box = startBox(t, dir, data, withKey)
		rep := boxDo(t, "POST", box.url+boxWellKnown+"/challenge", []byte(`{"challenge":"c-0123456789"}`), secret, time.Now(), "", nil)
		var mac struct{ MAC string }
		if json.Unmarshal(rep.body, &mac); rep.status != 200 || mac.MAC != boxMAC(secret, "c-0123456789") {
			t.Errorf("%s: the challenge signed with the minted secret = %d %s; want its MAC", what, rep.status, rep.body)
		}
		box.stop()
		if strings.Contains(box.stderr.String(), "signing_secret") {
			t.Errorf("%s minted a new signing secret:\n%s", what, box.stderr.String())
		}
		if _, err := os.Stat(keyFile); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %s is still there (%v)", what, keyFile, err)
		}
		filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			if b, err := os.ReadFile(path); err == nil && (bytes.Contains(b, raw) || bytes.Contains(b, []byte(key))) {
				t.Errorf("%s: %s holds SVC_MASTER_KEY", what, path)
			}
			return nil
		})
	}

	rand.Read(raw)
	for _, tt := range []struct{ name, key, want string }{
		{"another key", hex.EncodeToString(raw), "SVC_MASTER_KEY"},
		{"a malformed key", "0123", "32 bytes"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a box that boots runs until killed
		cmd := exec.CommandContext(ctx, svcBinary(t), "--json", "serve", "--addr", "127.0.0.1:0", "--data", data, dir)
		cmd.Env = append(append([]string{}, env...), "SVC_MASTER_KEY="+tt.key)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil || timedOut || !strings.Contains(stdout.String(), tt.want) {
			t.Errorf("svc serve with %s = %v; want it to fail naming %q\nstdout: %s\nstderr: %s", tt.name, err, tt.want, stdout.String(), stderr.String())
		}
	}
}
