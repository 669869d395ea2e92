// Command oidcop is the OpenID provider the control plane's single sign-on
// tests run against (cp_oidc_test.go): zitadel/oidc's certified provider
// library with its example server and in-memory storage, nobody here wrote,
// in a main of its own module so that the product's module never depends on
// it. It listens on -addr, names itself -issuer (default http://<addr>/),
// registers the confidential (web) clients of -config and the users of
// -users (the example storage's JSON format), and prints one line
// "issuer <url>" on stdout once it serves.
//
// Two things are added to the stock example, both through the library's own
// seams: the clients assert the email and profile claims in the ID token
// (not only at /userinfo), and a user listed in the config's "groups" gets
// a "groups" claim in it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// config is the -config file: the clients to register and the groups of
// each user (by subject).
type config struct {
	Clients []struct {
		ID           string   `json:"id"`
		Secret       string   `json:"secret"`
		RedirectURIs []string `json:"redirect_uris"`
	} `json:"clients"`
	Groups map[string][]string `json:"groups"`
}

// provider is the example storage with the two additions of the package doc.
type provider struct {
	*storage.Storage
	groups map[string][]string
}

// claimsInIDToken is a client whose email and profile claims go in the ID token.
type claimsInIDToken struct{ op.Client }

// IDTokenUserinfoClaimsAssertion puts the userinfo claims in the ID token.
func (claimsInIDToken) IDTokenUserinfoClaimsAssertion() bool { return true }

// GetClientByClientID wraps the stored client (claimsInIDToken).
func (p provider) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := p.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return claimsInIDToken{c}, nil
}

// SetUserinfoFromRequest adds the user's groups to the ID token's claims.
func (p provider) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := p.Storage.SetUserinfoFromRequest(ctx, info, req, scopes); err != nil {
		return err
	}
	if g, ok := p.groups[req.GetSubject()]; ok {
		info.AppendClaims("groups", g)
	}
	return nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "host:port to listen on")
	issuer := flag.String("issuer", "", "the issuer URL (default http://<listening address>/)")
	cfgFile := flag.String("config", "", "JSON: {clients:[{id,secret,redirect_uris}], groups:{sub:[group]}}")
	usersFile := flag.String("users", "", "JSON users file of the example storage: {id:{ID,Username,Password,Email,EmailVerified,...}}")
	flag.Parse()
	if err := run(*addr, *issuer, *cfgFile, *usersFile); err != nil {
		fmt.Fprintln(os.Stderr, "oidcop:", err)
		os.Exit(1)
	}
}

// run serves the provider until the process is killed.
func run(addr, issuer, cfgFile, usersFile string) error {
	var cfg config
	b, err := os.ReadFile(cfgFile)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("%s: %w", cfgFile, err)
	}
	for _, c := range cfg.Clients {
		storage.RegisterClients(storage.WebClient(c.ID, c.Secret, c.RedirectURIs...))
	}
	users, err := storage.StoreFromFile(usersFile)
	if err != nil {
		return fmt.Errorf("%s: %w", usersFile, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if issuer == "" {
		issuer = "http://" + ln.Addr().String() + "/"
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	router := exampleop.SetupServer(issuer, provider{storage.NewStorage(users), cfg.Groups}, log, false)
	fmt.Printf("issuer %s listening %s\n", issuer, ln.Addr())
	return http.Serve(ln, router)
}
