package main

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// deeplinkAgent is the scaffold's assistant with one more tool, which
// needs the user's approval.
const deeplinkAgent = `import { defineAgent, tool } from "svc";
export default defineAgent({
  instructions: "You are a concise, friendly assistant for the demo project.",
  tools: {
    add: tool({
      description: "Add two numbers",
      parameters: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] },
      execute: async ({ a, b }: { a: number; b: number }) => ({ sum: a + b }),
    }),
    refund: tool({
      description: "Refund an order",
      parameters: { type: "object", properties: { orderId: { type: "string" } }, required: ["orderId"] },
      needsApproval: true,
      execute: async ({ orderId }: { orderId: string }) => ({ refunded: orderId }),
    }),
  },
});
`

// TestDeeplinkWalkthrough is issue 12's "done when", run as a user would
// on one machine, each part its own process on loopback: a control plane
// (its first boot's one-time sign-in code), `svc login` approved in
// Chromium after signing in on the device page with that code, a project
// linked to an agent of the organization by `svc link --local`, `svc relay` admitting its
// tunnel with a registration token of the control plane, `svc dev` in front of the fake model provider, then Chromium
// (the same browser: its cookies kept between the two runs of
// conformance/deeplink.test.mjs) opening the deeplink of the payload: the
// console through the relay, a browser not signed in sent to the sign-in
// page with the way back (signed in there with the code of `svc login
// --browser`, it comes back to the console), the playground's start, the run's timeline to
// completed, the chat's streamed answer, tool call and approval; then a
// coding agent (@modelcontextprotocol/sdk over `svc mcp`) on the same
// session. Chromium reaches https://<sub>.tun.test by a host-resolver
// rule to the relay's port and trusts exactly the relay's certificate
// (--ignore-certificate-errors-spki-list with its SPKI hash). No process's
// output holds the credential.
func TestDeeplinkWalkthrough(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	if testing.Short() {
		t.Skip("runs a control plane, a relay, svc dev and Chromium")
	}
	if _, err := os.Stat(consoleChromium); err != nil {
		t.Fatalf("the walkthrough needs Debian's chromium at %s (apt-get install -y chromium; .ci/run installs it): %v", consoleChromium, err)
	}
	artifacts, err := filepath.Abs(filepath.Join("conformance", "artifacts", t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(artifacts)
	browserState := filepath.Join(t.TempDir(), "browser-state.json")
	browser := func(step string, env ...string) {
		t.Helper()
		runConformance(t, "conformance/deeplink.test.mjs", append(env, "SVC_WALK_STEP="+step, "SVC_BROWSER_STATE="+browserState, "SVC_ARTIFACTS="+artifacts))
	}
	user := baseEnv("XDG_CONFIG_HOME="+t.TempDir(), "CI=1")
	var outputs []string

	// svc control-plane, then svc login: the device page, opened from the
	// terminal's link, signs the browser in with the one-time code and
	// approves the code.
	cp, signInCode := startTestControlPlane(t, testPostgresURL(t))
	cred := walkLogin(t, user, cp.url, func(userCode string) {
		browser("login", "SVC_DEVICE_URL="+cp.url+"/device?code="+url.QueryEscape(userCode), "SVC_SIGN_IN_CODE="+signInCode)
	}, &outputs)

	// The project, linked to an agent of the organization.
	dir := projectDir(t)
	writeFile(t, dir, "deep-agents/assistant/index.ts", deeplinkAgent)
	installation := deeplinkLink(t, dir, cp.url, cred, user)

	// svc relay for *.tun.test (the control plane's SVC_TUNNEL_DOMAIN),
	// trusting the control plane's tokens: svc dev registers with a
	// registration token the control plane mints it before each dial.
	tmp := t.TempDir()
	_, caFile, certFile, keyFile := relayTestCA(t, tmp)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	relayAddr := ln.Addr().String()
	ln.Close()
	startRelay(t, relayAddr, "--domain", "test", "--tls-cert", certFile, "--tls-key", keyFile, "--control-plane", cp.url)

	// svc dev: its payload carries the public URL and the deeplink.
	model := newFakeProvider(t)
	dev := startDev(t, dir, append(append([]string(nil), user...), "SVC_DATABASE_URL="+testPostgresURL(t), "SSL_CERT_FILE="+caFile,
		"SVC_RELAY_URL=https://"+relayAddr, "OPENAI_API_KEY=sk-fake", "OPENAI_BASE_URL="+model.URL+"/v1"))
	p := dev.payload
	if p.Deeplink == nil { // the tunnel came up after the first payload
		p = dev.nextPayload(30 * time.Second)
	}
	_, relayPort, _ := net.SplitHostPort(relayAddr)
	public := "https://" + relaySubdomain(installation) + ".tun.test:" + relayPort
	if p.PublicURL == nil || *p.PublicURL != public || p.Deeplink == nil || *p.Deeplink != cp.url+"/dev/"+installation+"?url="+url.QueryEscape(public) {
		t.Fatalf("payload public_url %v deeplink %v; want %s and its deeplink\n%s", p.PublicURL, p.Deeplink, public, dev.stderr.String())
	}

	// The browser on the deeplink (a fresh one signs in with the code of
	// svc login --browser and comes back), then the coding agent.
	var browserCode cpNewSignInCode
	if out, stderr, code := cli(t, dir, user, "--json", "login", "--browser"); code != 0 || !cpEnvelope(t, out, &browserCode).OK {
		t.Fatalf("svc login --browser = %d %s %s", code, out, stderr)
	}
	browser("console", "SVC_DEEPLINK="+*p.Deeplink, "SVC_BROWSER_CODE="+browserCode.Code, "SVC_RESOLVER_RULES=MAP *.tun.test "+relayAddr, "SVC_SPKI="+deeplinkSPKI(t, certFile),
		"SVC_BIN="+svcBinary(t), "SVC_PROJECT="+dir)

	cp.stop()
	outputs = append(outputs, dev.stderr.String(), cp.stdout.String(), cp.stderr.String())
	for _, o := range outputs {
		if strings.Contains(o, cred) {
			t.Fatalf("a process's output holds the credential:\n%s", o)
		}
	}
}

// deeplinkLink creates the agent "demo" of the signed-in user's
// organization (as the console does) and links the project in dir to it
// with `svc link --agent demo --local`, run as the user (env), and returns
// the local-dev installation id of its payload.
func deeplinkLink(t testing.TB, dir, cpURL, cred string, env []string) (installation string) {
	t.Helper()
	if st := httpJSONAuth(t, "POST", cpURL+"/api/orgs/default/agents", cred, map[string]string{"slug": "demo", "name": "Demo"}, nil); st != 201 {
		t.Fatalf("create the agent = %d", st)
	}
	var p linkPayload
	if out, stderr, code := cli(t, dir, env, "--json", "link", "--agent", "demo", "--local", "--no-agents"); code != 0 || !cpEnvelope(t, out, &p).OK || p.LocalDevInstallation.ID == "" {
		t.Fatalf("svc link --local = %d %s %s", code, out, stderr)
	}
	return p.LocalDevInstallation.ID
}

// deeplinkSPKI is the base64 SHA-256 of the public key of the PEM
// certificate in file: what Chromium's --ignore-certificate-errors-spki-list
// takes to trust that certificate alone.
func deeplinkSPKI(t testing.TB, file string) string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		t.Fatalf("no PEM certificate in %s", file)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}
