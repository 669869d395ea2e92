package main

// Secrets a verb takes (issue 36, item 4): `svc login --token`, `svc login
// --invitation` and `svc link --secret`. An argument is visible to every
// account of the machine (ps, /proc/PID/cmdline), so each is taken from
// standard input (the flag's value "-", prompted for without echo in a
// terminal), a file (--NAME-file) or an environment variable as well, and
// an argument still works but earns a warning on stderr.

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// cliSecretFlag names a secret flag: the flag, its environment variable,
// and what it is, for the prompt and the warning.
type cliSecretFlag struct {
	name, env, what string
}

// cliSecretFlags are the verbs' secret flags.
var (
	cliSecretToken      = cliSecretFlag{"token", "SVC_TOKEN", "credential"}
	cliSecretInvitation = cliSecretFlag{"invitation", "SVC_INVITATION", "invitation code"}
	cliSecretLinkSecret = cliSecretFlag{"secret", "SVC_LINK_SECRET", "signing secret"}
)

// define adds the flag and its -file twin to fs.
func (s cliSecretFlag) define(fs *flag.FlagSet, usage string) {
	fs.String(s.name, "", usage+"; \"-\" reads it from standard input (a terminal prompts without echo); an argument is visible to other accounts (ps): prefer \"-\", --"+s.name+"-file or $"+s.env)
	fs.String(s.name+"-file", "", "read the "+s.what+" from this file instead of --"+s.name)
}

// read returns the secret: --NAME-file, else --NAME ("-": standard
// input), else $ENV; "" when none is given.
func (s cliSecretFlag) read(c *cmd, fs *flag.FlagSet) (string, error) {
	v, file := fs.Lookup(s.name).Value.String(), fs.Lookup(s.name+"-file").Value.String()
	switch {
	case file != "" && v != "":
		return "", failf(codeGeneric, "pass one of them", "--%s and --%s-file are two ways to give the %s", s.name, s.name, s.what)
	case file != "":
		if !filepath.IsAbs(file) {
			file = filepath.Join(c.dir, file)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return "", failf(codeGeneric, "pass a readable file with the "+s.what+" alone in it", "--%s-file: %v", s.name, err)
		}
		if v = strings.TrimSpace(string(b)); v == "" {
			return "", failf(codeGeneric, "put the "+s.what+" in the file", "--%s-file %s is empty", s.name, file)
		}
		return v, nil
	case v == "-":
		if v = cliReadSecret(c, "Paste the "+s.what+" (input hidden): "); v == "" {
			return "", failf(codeGeneric, "write the "+s.what+" to standard input", "--%s -: standard input held no %s", s.name, s.what)
		}
		return v, nil
	case v != "":
		fmt.Fprintf(c.stderr, "warning: --%s on the command line is visible to every account of this machine (ps, /proc); pass --%s - (standard input), --%s-file PATH or $%s instead\n",
			s.name, s.name, s.name, s.env)
		return v, nil
	}
	return strings.TrimSpace(c.getenv(s.env)), nil
}

// cliReadSecret reads one line of standard input; in a terminal it asks
// with prompt on stderr and turns echo off meanwhile.
func cliReadSecret(c *cmd, prompt string) string {
	if !c.stdinTerminal {
		return cliPrompt(c, "")
	}
	if f, ok := c.stdin.(*os.File); ok {
		defer cliEchoOff(f)()
	}
	v := cliPrompt(c, prompt)
	fmt.Fprintln(c.stderr)
	return v
}
