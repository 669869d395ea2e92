package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
)

// devEnvOutput is the payload of `svc env --json`.
type devEnvOutput struct {
	SchemaVersion int               `json:"schema_version"`
	Env           map[string]string `json:"env"`
}

// runEnv is `svc env`: the local credentials of the running svc dev of
// this project (database URL, object-storage endpoint, bucket, region and
// keys), as shell export lines for `eval "$(svc env)"`, or an object with
// --json. It is the one verb that prints them: the dev payload and the
// logs never do.
func runEnv(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("env takes no arguments: %w", errUsage)
	}
	t, err := localTarget(ctx, c)
	if err != nil {
		return err
	}
	var out devEnvOutput
	if err := t.call(ctx, http.MethodGet, "/api/dev/env", nil, http.Header{devTokenHeader: {t.devToken}}, &out); err != nil {
		return err
	}
	c.emit(out, func(w io.Writer) {
		for _, k := range devEnvVars {
			fmt.Fprintf(w, "export %s=%s\n", k, shellWord(out.Env[k]))
		}
	})
	return nil
}

// devConsoleLinkOutput is the payload of `svc console --json`.
type devConsoleLinkOutput struct {
	SchemaVersion int    `json:"schema_version"`
	URL           string `json:"url"`
}

// runConsole is `svc console`: a new console link of the running svc dev
// of this project, for another browser or after the printed one was used
// (each link's one-time code signs in one browser, console_session.go).
func runConsole(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("console takes no arguments: %w", errUsage)
	}
	t, err := localTarget(ctx, c)
	if err != nil {
		return err
	}
	var out devConsoleLinkOutput
	if err := t.call(ctx, http.MethodPost, "/api/dev/console-link", nil, http.Header{devTokenHeader: {t.devToken}}, &out); err != nil {
		return err
	}
	c.emit(out, func(w io.Writer) { fmt.Fprintln(w, out.URL) })
	return nil
}

// devRotateKeyOutput is the payload of `svc rotate-key --json`.
type devRotateKeyOutput struct {
	SchemaVersion        int  `json:"schema_version"`
	Running              bool `json:"running"` // a svc dev of this project took the new key at once
	ConsoleSessionsEnded int  `json:"console_sessions_ended"`
}

// runRotateKey is `svc rotate-key`: a new dev key for this project. The
// running svc dev mints and takes it (POST /api/dev/rotate-key), refusing
// the old one and ending every console session made before; with none
// running, the key in .svc is replaced for the next one. The key itself is
// never printed here: `svc env` prints it.
func runRotateKey(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("rotate-key takes no arguments: %w", errUsage)
	}
	out := devRotateKeyOutput{SchemaVersion: schemaVersion}
	t, err := localTarget(ctx, c)
	var notRunning *cliError
	switch {
	case err == nil:
		var res struct {
			Ended int `json:"console_sessions_ended"`
		}
		if err := t.call(ctx, http.MethodPost, "/api/dev/rotate-key", nil, http.Header{devTokenHeader: {t.devToken}}, &res); err != nil {
			return err
		}
		out.Running, out.ConsoleSessionsEnded = true, res.Ended
	case errors.As(err, &notRunning) && notRunning.Code == codeDevNotRunning:
		proj, perr := loadProject(c.dir)
		if perr != nil {
			return perr
		}
		if _, err := devAPIKeyRotate(proj.stateDir(devAPIKeyFile)); err != nil {
			return err
		}
	default:
		return err
	}
	c.emit(out, func(w io.Writer) {
		if out.Running {
			fmt.Fprintf(w, "dev key rotated: svc dev refuses the old one from now on; %d console session(s) ended (open a new link: svc console)\n", out.ConsoleSessionsEnded)
		} else {
			fmt.Fprintln(w, "dev key rotated: svc dev is not running; the next one uses the new key")
		}
		fmt.Fprintln(w, "svc env prints the new key as SVC_DEV_KEY")
	})
	return nil
}
