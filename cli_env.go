package main

import (
	"context"
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
