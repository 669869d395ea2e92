package main

// Sign-in verbs (DESIGN §7): `svc login`, `svc logout`, `svc whoami`, and
// the saved credentials the verbs that need a control plane use
// (requireSignIn).

import (
	"cmp"
	"context"
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
	"strings"
	"time"
)

// loginProgressEvery is how often `svc login` says it is still waiting.
const loginProgressEvery = 15 * time.Second

// loginCredentials is the credentials file,
// $XDG_CONFIG_HOME/svc/credentials.json (0600).
type loginCredentials struct {
	SchemaVersion   int    `json:"schema_version"`
	ControlPlaneURL string `json:"control_plane_url"`
	Credential      string `json:"credential"`
	User            cpUser `json:"user"`
	// Organization is the active organization: the first of the user's
	// when they signed in.
	Organization *cpOrg `json:"organization"`
}

// loginIdentity is the payload of `svc login`, `svc whoami`: who is signed
// in where. It never holds the credential.
type loginIdentity struct {
	SchemaVersion   int     `json:"schema_version"`
	ControlPlaneURL string  `json:"control_plane_url"`
	User            cpUser  `json:"user"`
	Organization    *cpOrg  `json:"organization"`
	Organizations   []cpOrg `json:"organizations"`
	// Replaced is true when svc login revoked the credential this machine
	// had before (loginReplace).
	Replaced bool `json:"replaced_credential,omitempty"`
}

// cliConfigDir is svc's configuration directory: $XDG_CONFIG_HOME/svc, or
// ~/.config/svc.
func cliConfigDir(getenv func(string) string) string {
	if d := getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "svc")
	}
	return filepath.Join(getenv("HOME"), ".config", "svc")
}

// cliDataDir is svc's directory of data kept across runs:
// $XDG_DATA_HOME/svc, else ~/.local/share/svc.
func cliDataDir(getenv func(string) string) string {
	if d := getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "svc")
	}
	return filepath.Join(getenv("HOME"), ".local", "share", "svc")
}

// loginPath is the credentials file of c.
func loginPath(c *cmd) string { return filepath.Join(cliConfigDir(c.getenv), "credentials.json") }

// loginLoad reads the saved credentials; ok is false when there are none.
func loginLoad(c *cmd) (creds loginCredentials, ok bool, err error) {
	b, err := os.ReadFile(loginPath(c))
	if errors.Is(err, fs.ErrNotExist) {
		return creds, false, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &creds)
	}
	if err != nil {
		return creds, false, fmt.Errorf("read %s: %w (svc logout removes it)", loginPath(c), err)
	}
	return creds, creds.Credential != "", nil
}

// loginControlPlaneURL is the control plane c talks to: flag, else
// SVC_CONTROL_PLANE_URL, else the saved one; "" when none is known.
func loginControlPlaneURL(c *cmd, flagValue string, saved loginCredentials) string {
	for _, u := range []string{flagValue, c.getenv("SVC_CONTROL_PLANE_URL"), saved.ControlPlaneURL} {
		if u != "" {
			return strings.TrimSuffix(u, "/")
		}
	}
	return ""
}

// requireSignIn returns a client of the control plane c is signed in to,
// and the saved credentials; not signed in (or signed in to another
// control plane than SVC_CONTROL_PLANE_URL) is the auth error, exit 2.
func requireSignIn(c *cmd) (*cpClient, loginCredentials, error) {
	creds, ok, err := loginLoad(c)
	if err != nil {
		return nil, creds, err
	}
	u := loginControlPlaneURL(c, "", creds)
	if !ok || u != creds.ControlPlaneURL {
		where := ""
		if u != "" {
			where = " to " + u
		}
		return nil, creds, failf(codeAuth, "run `svc login`", "not signed in%s", where)
	}
	return newCPClient(u, creds.Credential), creds, nil
}

// newLoginFlags defines the flags of `svc login`.
func newLoginFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("login", flag.ContinueOnError)
	fs.String("control-plane", "", "control plane URL (default $SVC_CONTROL_PLANE_URL, else the one signed in to last)")
	cliSecretToken.define(fs, "sign in with this credential instead of a device code (CI); checked with the control plane, then saved")
	fs.Bool("browser", false, "already signed in here: print a one-time code (10 minutes) that signs a browser in to the console")
	cliSecretInvitation.define(fs, "accept an invitation: sign in with the one-time code an owner or admin gave you (svc members invite)")
	fs.String("org", "", "the organization (slug) the verbs act in from now on (default: the one an invitation joins, else your first)")
	return fs
}

// loginBrowser is `svc login --browser`: a one-time sign-in code for a
// browser, minted for the user signed in here.
func loginBrowser(ctx context.Context, c *cmd) error {
	cl, _, err := requireSignIn(c)
	if err != nil {
		return err
	}
	var code cpNewSignInCode
	if err := cl.call(ctx, http.MethodPost, "/api/login/codes", nil, &code); err != nil {
		return err
	}
	c.emit(code, func(w io.Writer) {
		fmt.Fprintf(w, "Open %s in your browser and sign in with the one-time code %s (valid until %s)\n",
			code.SignInURL, code.Code, code.ExpiresAt.Local().Format("2006-01-02 15:04 MST"))
	})
	return nil
}

// runLogin is `svc login`: with --token, check it (whoami) and save it;
// with --invitation, accept it (loginInvitation) and save the credential;
// otherwise start a device sign-in, show the code and page, wait for the
// approval and save the credential it yields.
func runLogin(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("login takes no arguments: %w", errUsage)
	}
	if fs.Lookup("browser").Value.String() == "true" {
		for _, f := range []string{"token", "token-file", "control-plane", "invitation", "invitation-file", "org"} {
			if fs.Lookup(f).Value.String() != "" {
				return failf(codeGeneric, "run `svc login --browser` alone, signed in", "svc login: --browser takes no other flag")
			}
		}
		return loginBrowser(ctx, c)
	}
	invitation, err := cliSecretInvitation.read(c, fs)
	if err != nil {
		return err
	}
	cred, err := cliSecretToken.read(c, fs)
	if err != nil {
		return err
	}
	if invitation != "" && cred != "" {
		return failf(codeGeneric, "pass one of them", "svc login: --invitation and --token are two ways to sign in")
	}
	saved, _, err := loginLoad(c)
	if err != nil {
		return err
	}
	base := loginControlPlaneURL(c, fs.Lookup("control-plane").Value.String(), saved)
	if u, err := url.Parse(base); base == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return failf(codeGeneric, "pass --control-plane http(s)://host:port or set SVC_CONTROL_PLANE_URL", "svc login: no control plane URL (have %q)", base)
	}
	org := fs.Lookup("org").Value.String()
	switch {
	case invitation != "":
		var joined cpOrg
		if cred, joined, err = loginInvitation(ctx, c, base, invitation, saved); err != nil {
			return err
		}
		org = cmp.Or(org, joined.Slug)
	case cred == "":
		if cred, err = loginDevice(ctx, c, base); err != nil {
			return err
		}
	}
	var who cpWhoami
	if err := newCPClient(base, cred).call(ctx, http.MethodGet, "/api/whoami", nil, &who); err != nil {
		var ce *cliError
		if errors.As(err, &ce) && ce.Code == codeAuth {
			return failf(codeAuth, "check the token, or run `svc login` without --token", "svc login: %s refused the credential", base)
		}
		return err
	}
	creds := loginCredentials{SchemaVersion: 1, ControlPlaneURL: base, Credential: cred, User: who.User}
	if len(who.Organizations) > 0 {
		creds.Organization = &who.Organizations[0]
	}
	var missing error
	if org != "" {
		i := slices.IndexFunc(who.Organizations, func(o cpOrg) bool { return o.Slug == org })
		if i < 0 {
			missing = failf(codeNotFound, "svc whoami lists your organizations; svc login --org <slug> picks one", "svc login: signed in, but you are no member of organization %q; the verbs act in your first one%s", org, loginOrgSuffix(creds.Organization))
		} else {
			creds.Organization = &who.Organizations[i]
		}
	}
	b, _ := json.MarshalIndent(creds, "", "  ")
	if err := writeFileAtomic(loginPath(c), append(b, '\n'), privateFileMode); err != nil {
		return fmt.Errorf("svc login: save credentials: %w", err)
	}
	replaced := loginReplace(ctx, c, saved, cred)
	if missing != nil {
		return missing
	}
	id := loginIdentity{SchemaVersion: 1, ControlPlaneURL: base, User: who.User, Organization: creds.Organization, Organizations: who.Organizations, Replaced: replaced}
	c.emit(id, func(w io.Writer) {
		fmt.Fprintf(w, "signed in to %s as %s%s\n", base, who.User.Email, loginOrgSuffix(creds.Organization))
		if replaced {
			fmt.Fprintln(w, "the credential this machine had before is revoked")
		}
	})
	return nil
}

// loginReplace revokes the credential saved before (when there was one
// and it is not cred, the one now saved in its place): a machine holds
// one credential, so the replaced one would only linger until it expired.
// It reports whether the control plane revoked it; an old credential it
// refuses (expired, revoked already) or a control plane it cannot reach
// is only warned about.
func loginReplace(ctx context.Context, c *cmd, saved loginCredentials, cred string) bool {
	if saved.Credential == "" || saved.Credential == cred {
		return false
	}
	err := newCPClient(saved.ControlPlaneURL, saved.Credential).call(ctx, http.MethodPost, "/api/logout", nil, nil)
	var ce *cliError
	if errors.As(err, &ce) && ce.Code == codeAuth {
		return false // no longer valid: nothing to revoke
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "warning: the credential this machine had before was not revoked (%v): svc devices list shows it, svc devices revoke ends it\n", err)
		return false
	}
	return true
}

// loginInvitation accepts the invitation code at base and returns the
// credential to save and the organization joined. Not signed in, the
// control plane makes the invited email's account and mints a credential;
// when that email has an account already, the one signed in here (saved)
// accepts it and keeps its credential.
func loginInvitation(ctx context.Context, c *cmd, base, code string, saved loginCredentials) (string, cpOrg, error) {
	var acc cpAccepted
	host, _ := os.Hostname() // the credential's device, as svc devices list shows it
	body := map[string]string{"code": code, "client_host": host}
	err := newCPClient(base, "").call(ctx, http.MethodPost, "/api/login/invitation", body, &acc)
	if cpErrorCode(err) == "forbidden" && saved.Credential != "" && saved.ControlPlaneURL == base {
		fmt.Fprintf(c.stderr, "the invitation is for an account that exists: accepting it as %s, signed in here\n", saved.User.Email)
		if err = newCPClient(base, saved.Credential).call(ctx, http.MethodPost, "/api/login/invitation", body, &acc); err == nil {
			acc.Credential = saved.Credential
		}
	}
	var ce *cliError
	var ae *cpAPIError
	switch {
	case err == nil:
		return acc.Credential, acc.Organization, nil
	case errors.As(err, &ce) && ce.Code == codeAuth:
		return "", acc.Organization, failf(codeAuth, "ask whoever invited you for a new invitation", "svc login: %s refused the invitation code: it is wrong, expired, was used or revoked (or the account signed in here was signed out)", base)
	case errors.As(err, &ae) && ae.Status == http.StatusForbidden:
		return "", acc.Organization, failf(codeAuth, "sign in as the invited account first (svc login), then run svc login --invitation again", "svc login: %s", ae.Message)
	case errors.As(err, &ae):
		return "", acc.Organization, failf(codeGeneric, "ask whoever invited you", "svc login: %s", ae.Message)
	}
	return "", acc.Organization, err
}

// loginOrgSuffix is " (organization <slug>)", or "" without one.
func loginOrgSuffix(o *cpOrg) string {
	if o == nil {
		return ""
	}
	return " (organization " + o.Slug + ")"
}

// loginDevice runs a device sign-in at base, telling the control plane
// this host's name and svc's version: it shows the user code and
// the page on stderr, polls at the control plane's interval until approved,
// denied or expired, and returns the credential.
func loginDevice(ctx context.Context, c *cmd, base string) (string, error) {
	cl := newCPClient(base, "")
	var start cpDeviceStart
	host, _ := os.Hostname() // shown on the device page, so the user can tell this sign-in from another's
	ask := cpDeviceStartRequest{ClientHost: host, ClientVersion: readBuildVersion().orDevel().Version}
	if err := cl.call(ctx, http.MethodPost, "/api/login/device", ask, &start); err != nil {
		return "", err
	}
	fmt.Fprintf(c.stderr, "To sign in, open %s\nand approve the code %s\n", start.VerificationURIComplete, start.UserCode)
	interval := time.Duration(max(start.Interval, 1)) * time.Second
	deadline := time.Now().Add(time.Duration(start.ExpiresIn) * time.Second)
	lastSaid := time.Now()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return "", failf(codeGeneric, "run `svc login` again", "svc login: interrupted before the approval")
		case <-time.After(interval):
		}
		var done cpSignedIn
		err := cl.call(ctx, http.MethodPost, "/api/login/device/token", map[string]string{"device_code": start.DeviceCode}, &done)
		switch code := cpErrorCode(err); {
		case err == nil:
			fmt.Fprintln(c.stderr, "approved")
			return done.Credential, nil
		case code == "authorization_pending":
		case code == "slow_down":
			interval += time.Second
		case code == "access_denied":
			return "", failf(codeAuth, "run `svc login` again", "svc login: the sign-in was denied")
		case code == "expired_token":
			return "", failf(codeAuth, "run `svc login` again", "svc login: the code expired before it was approved")
		default:
			return "", err
		}
		if time.Since(lastSaid) >= loginProgressEvery {
			fmt.Fprintf(c.stderr, "still waiting for approval of %s (%s left)\n", start.UserCode, time.Until(deadline).Round(time.Second))
			lastSaid = time.Now()
		}
	}
	return "", failf(codeAuth, "run `svc login` again", "svc login: the code expired before it was approved")
}

// loginSignedOut is the payload of `svc logout`.
type loginSignedOut struct {
	SchemaVersion   int    `json:"schema_version"`
	ControlPlaneURL string `json:"control_plane_url"`
	SignedOut       bool   `json:"signed_out"` // false: there was nothing to sign out of
	Revoked         bool   `json:"revoked"`    // the control plane revoked the credential
}

// runLogout is `svc logout`: revoke the saved credential (when the control
// plane answers) and remove the credentials file.
func runLogout(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("logout takes no arguments: %w", errUsage)
	}
	creds, ok, err := loginLoad(c)
	if err != nil {
		return err
	}
	out := loginSignedOut{SchemaVersion: 1, ControlPlaneURL: creds.ControlPlaneURL, SignedOut: ok}
	if ok {
		if err := newCPClient(creds.ControlPlaneURL, creds.Credential).call(ctx, http.MethodPost, "/api/logout", nil, nil); err != nil {
			fmt.Fprintf(c.stderr, "warning: the control plane did not revoke the credential (%v); removing it here anyway\n", err)
		} else {
			out.Revoked = true
		}
	}
	if err := os.Remove(loginPath(c)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("svc logout: %w", err)
	}
	c.emit(out, func(w io.Writer) {
		if !ok {
			fmt.Fprintln(w, "not signed in")
			return
		}
		fmt.Fprintf(w, "signed out of %s\n", creds.ControlPlaneURL)
	})
	return nil
}

// runWhoami is `svc whoami`: the signed-in user, as the control plane sees
// the saved credential.
func runWhoami(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("whoami takes no arguments: %w", errUsage)
	}
	cl, creds, err := requireSignIn(c)
	if err != nil {
		return err
	}
	var who cpWhoami
	if err := cl.call(ctx, http.MethodGet, "/api/whoami", nil, &who); err != nil {
		return err
	}
	id := loginIdentity{SchemaVersion: 1, ControlPlaneURL: cl.url, User: who.User, Organization: creds.Organization, Organizations: who.Organizations}
	c.emit(id, func(w io.Writer) {
		fmt.Fprintf(w, "%s at %s\n", who.User.Email, cl.url)
		printOrgs(w, who.Organizations, creds.Organization)
	})
	return nil
}
