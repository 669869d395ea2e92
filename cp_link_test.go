package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
)

// cpInternalService is an HTTP service on loopback that only the control
// plane's network is meant to reach, counting the requests it serves.
type cpInternalService struct {
	*httptest.Server
	hits atomic.Int32
}

// cpInternalSecret is what the internal service answers on every path.
const cpInternalSecret = "internal-only: the billing database password is hunter2"

// newCPInternalService starts one, closed when the test ends.
func newCPInternalService(t testing.TB) *cpInternalService {
	s := &cpInternalService{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		io.WriteString(w, cpInternalSecret)
	}))
	t.Cleanup(s.Close)
	return s
}

// cpLinkAnswer posts a link of agent demo to boxURL and returns the status
// and error of the answer.
func cpLinkAnswer(t testing.TB, org, credential, boxURL string) (int, apiError) {
	t.Helper()
	var e struct{ Error apiError }
	code := httpJSONAuth(t, "POST", org+"/agents/demo/link", credential, cpLinkRequest{URL: boxURL, Secret: strings.Repeat("s", 40), ImageTag: "1.0.0"}, &e)
	return code, e.Error
}

// TestCPDeploymentProbe is a signed-in member of the organization using
// the control plane as an HTTP client into its own network: a deployment
// pointed at an internal service on loopback is refused (there is no route
// that records one without the box's proof, and link refuses it), the
// proxy never reaches the service, and link answers a refused port, a
// connection closed at once, a TLS failure and a plain HTTP answer with the
// same status, code and message, so it cannot tell them apart either.
func TestCPDeploymentProbe(t *testing.T) {
	cp, code := startTestControlPlane(t, testPostgresURL(t))
	attacker := cpSignInAdmin(t, cp, code)
	org := cp.url + "/api/orgs/default"
	if st := httpJSONAuth(t, "POST", org+"/agents", attacker, map[string]string{"slug": "demo"}, nil); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	internal := newCPInternalService(t)

	// Recording the URL straight, without a handshake or the secret proof.
	if st := httpJSONAuth(t, "PUT", org+"/agents/demo/deployment", attacker,
		map[string]string{"url": internal.URL, "image_tag": "1.0.0", "secret": strings.Repeat("s", 40)}, nil); st/100 == 2 {
		t.Errorf("PUT deployment at an internal service = %d; want it refused", st)
	}
	if st, e := cpLinkAnswer(t, org, attacker, internal.URL); st == 200 {
		t.Errorf("link to an internal service = %d %+v; want it refused", st, e)
	}
	before := internal.hits.Load()
	var e struct{ Error apiError }
	resp, body := cpProxyDo(t, http.DefaultClient, "GET", cp.url+"/default/demo/secrets", "Authorization", "Bearer "+attacker, nil)
	if json.Unmarshal(body, &e); resp.StatusCode != 404 || e.Error.Code != "no_deployment" || strings.Contains(string(body), "hunter2") {
		t.Errorf("the proxy after the attempts = %d %s; want 404 no_deployment", resp.StatusCode, body)
	}
	if n := internal.hits.Load() - before; n != 0 {
		t.Errorf("the proxy reached the internal service %d times", n)
	}

	// Link's one answer for every way a URL fails to be a box.
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused.Close()
	closing, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closing.Close() })
	go func() {
		for {
			c, err := closing.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	targets := []struct{ name, url string }{
		{"a refused port", "http://" + refused.Addr().String()},
		{"a connection closed at once", "http://" + closing.Addr().String()},
		{"a TLS failure", "https://" + internal.Listener.Addr().String()},
		{"a plain HTTP answer", internal.URL},
	}
	var first string
	for _, tt := range targets {
		st, e := cpLinkAnswer(t, org, attacker, tt.url)
		msg := strings.ReplaceAll(e.Message, tt.url, "<url>")
		if st != http.StatusBadGateway || e.Code != linkCodeUnreachable || !strings.HasPrefix(msg, "box unreachable or not an svc box at <url>") {
			t.Errorf("link to %s = %d %s %q; want 502 %s, box unreachable or not an svc box", tt.name, st, e.Code, e.Message, linkCodeUnreachable)
		}
		if first == "" {
			first = msg
		} else if msg != first {
			t.Errorf("link to %s answers %q; %s answered %q: the answers tell them apart", tt.name, msg, targets[0].name, first)
		}
	}
	if st := httpJSONAuth(t, "GET", org+"/agents/demo/deployment", attacker, nil, nil); st != 404 {
		t.Errorf("GET deployment after refused links = %d; want 404", st)
	}
	if !strings.Contains(cp.stderr.String(), "connection refused") {
		t.Errorf("the control plane's log does not keep the detail of the refused port:\n%s", cp.stderr.String())
	}
}

// TestCPDeploymentNetworks limits deployments to SVC_DEPLOYMENT_NETWORKS:
// the list parses, and a control plane with a bad one does not start; the dialer checks the address a name resolves to
// (localhost); link refuses a box outside the list before calling it; the
// proxy refuses to connect to a deployment outside it (one recorded before
// the list was set, or whose name now resolves elsewhere).
func TestCPDeploymentNetworks(t *testing.T) {
	for _, tt := range []struct {
		in, want string
	}{
		{"", "[]"},
		{" 10.0.0.0/8, 192.168.1.7/16 ,fd00::/8", "[10.0.0.0/8 192.168.0.0/16 fd00::/8]"},
		{"10.0.0.0", "error"},
		{"10.0.0.0/8,internal", "error"},
	} {
		nets, err := cpParseNetworks(tt.in)
		got := "error"
		if err == nil {
			got = fmt.Sprint([]netip.Prefix(nets))
		} else if !strings.Contains(err.Error(), cpNetworksEnv) {
			t.Errorf("cpParseNetworks(%q) = %v; want the error to name %s", tt.in, err, cpNetworksEnv)
		}
		if got != tt.want {
			t.Errorf("cpParseNetworks(%q) = %s; want %s", tt.in, got, tt.want)
		}
	}
	_, stderr, exit := runInProcess(t, t.TempDir(), map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none", cpNetworksEnv: "10.0.0.0/8,intranet"}, "control-plane")
	if exit != 1 || !strings.Contains(stderr, `"intranet" is not a network`) {
		t.Errorf("control-plane with %s=10.0.0.0/8,intranet = exit %d %q; want 1 naming the bad entry", cpNetworksEnv, exit, stderr)
	}
	if nets, _ := cpParseNetworks("10.0.0.0/8"); !nets.allows(netip.MustParseAddr("::ffff:10.1.2.3")) || nets.allows(netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("10.0.0.0/8 allows: want an IPv4-mapped 10.1.2.3, not 127.0.0.1")
	}

	// The dialer: localhost is checked as the address it resolves to.
	internal := newCPInternalService(t)
	byName := strings.Replace(internal.URL, "127.0.0.1", "localhost", 1)
	for _, tt := range []struct {
		list    string
		outside bool
	}{{"10.0.0.0/8", true}, {"127.0.0.0/8", false}} {
		nets, _ := cpParseNetworks(tt.list)
		tr := newCPProxyTransport(nets)
		req, _ := http.NewRequest("GET", byName+"/", nil)
		resp, err := tr.RoundTrip(req)
		var ne *cpNetworkError
		if tt.outside && (err == nil || !errors.As(err, &ne)) {
			t.Errorf("dial %s inside %s = %v; want refused as outside", byName, tt.list, err)
		}
		if !tt.outside && err != nil {
			t.Errorf("dial %s inside %s = %v; want it reached", byName, tt.list, err)
		}
		if err == nil {
			resp.Body.Close()
		}
		tr.CloseIdleConnections()
	}
	if n := internal.hits.Load(); n != 1 {
		t.Errorf("the service was reached %d times; want once (inside 127.0.0.0/8 only)", n)
	}

	// Link and the proxy of a control plane whose deployments live in 10/8.
	dbURL := testPostgresURL(t)
	cp, code := startTestControlPlane(t, dbURL, cpNetworksEnv+"=10.0.0.0/8")
	admin := cpSignInAdmin(t, cp, code)
	org := cp.url + "/api/orgs/default"
	if st := httpJSONAuth(t, "POST", org+"/agents", admin, map[string]string{"slug": "demo"}, nil); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	box := newStandInBox(t, strings.Repeat("s", 40))
	if st, e := cpLinkAnswer(t, org, admin, box.URL); st != 422 || e.Code != cpCodeOutsideNetworks || !strings.Contains(e.Message, cpNetworksEnv) {
		t.Errorf("link to a box on loopback = %d %+v; want 422 %s naming %s", st, e, cpCodeOutsideNetworks, cpNetworksEnv)
	}
	box.set(func(b *standInBox) {
		if b.taught.InstallationID != "" {
			t.Errorf("a box outside the networks was taught: %+v", b.taught)
		}
	})
	if st := httpJSONAuth(t, "GET", org+"/agents/demo/deployment", admin, nil, nil); st != 404 {
		t.Errorf("GET deployment after the refused link = %d; want 404", st)
	}
	cpTestRecordDeployment(t, dbURL, "demo", internal.URL, []byte(strings.Repeat("s", 40)))
	before := internal.hits.Load()
	var e struct{ Error apiError }
	resp, body := cpProxyDo(t, http.DefaultClient, "GET", cp.url+"/default/demo/secrets", "Authorization", "Bearer "+admin, nil)
	if json.Unmarshal(body, &e); resp.StatusCode != 502 || e.Error.Code != linkCodeUnreachable || !strings.Contains(e.Error.Message, cpNetworksEnv) || strings.Contains(string(body), "hunter2") {
		t.Errorf("the proxy to a deployment outside the networks = %d %s; want 502 %s naming %s", resp.StatusCode, body, linkCodeUnreachable, cpNetworksEnv)
	}
	if n := internal.hits.Load() - before; n != 0 {
		t.Errorf("the proxy reached a deployment outside the networks %d times", n)
	}
}
