package main

// `svc dev --tls`: the API serves HTTPS with a self-signed certificate svc
// makes once per project and keeps under .svc/tls, so the dev key of
// --listen does not cross the LAN in clear. The project's own CLI trusts
// exactly that certificate (devTLSClient); other clients are told its
// SHA-256 fingerprint, which svc dev prints and logs.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Where the certificate and its key live under .svc, both privateFileMode
// like everything there (.svc is the user's alone; tightenTree).
const (
	devTLSCertFile = "tls/cert.pem"
	devTLSKeyFile  = "tls/key.pem"
)

// devTLSValidity is how long a minted certificate is valid: under the 398
// days browsers and Apple's platforms accept for a server certificate.
// devTLSRenewBefore is how close to its end it is minted anew.
const (
	devTLSValidity    = 397 * 24 * time.Hour
	devTLSRenewBefore = 30 * 24 * time.Hour
)

// devTLSCert is the certificate svc dev serves and what it prints of it.
type devTLSCert struct {
	pair        tls.Certificate
	fingerprint string // SHA-256 of the DER, colon-separated upper-case hex as browsers show it
	minted      bool   // made this boot (absent, expiring, not covering this machine's names, or unreadable)
}

// devTLSLoad returns the certificate of the project whose state directory
// is stateDir: the one kept there while it is valid beyond
// devTLSRenewBefore and covers every name devTLSNames lists for
// extraHosts; else a new one, signed by the kept key (minted only when
// missing or unreadable, so the public key stays stable), written there.
// A certificate made for a new name or address also keeps the names of
// the one it replaces, so that a laptop moving between networks it has
// seen keeps one fingerprint; one made at the end of the validity lists
// the current names only.
func devTLSLoad(stateDir string, extraHosts []string, now time.Time) (*devTLSCert, error) {
	certPath, keyPath := filepath.Join(stateDir, devTLSCertFile), filepath.Join(stateDir, devTLSKeyFile)
	key, err := devTLSKey(keyPath)
	if err != nil {
		return nil, err
	}
	names := devTLSNames(extraHosts)
	if b, err := os.ReadFile(certPath); err == nil {
		if leaf, der := devTLSParse(b, key); leaf != nil && devTLSLasts(leaf, now) {
			if devTLSCovers(leaf, names) {
				return devTLSMake(der, key, false), nil
			}
			for _, ip := range leaf.IPAddresses {
				names = append(names, ip.String())
			}
			names = append(names, leaf.DNSNames...)
			slices.Sort(names)
			names = slices.Compact(names)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", certPath, err)
	}
	der, err := devTLSMint(key, names, now)
	if err != nil {
		return nil, fmt.Errorf("make the TLS certificate: %w", err)
	}
	if err := writeFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), privateFileMode); err != nil {
		return nil, err
	}
	return devTLSMake(der, key, true), nil
}

// devTLSMake wraps a certificate and its key.
func devTLSMake(der []byte, key *ecdsa.PrivateKey, minted bool) *devTLSCert {
	return &devTLSCert{pair: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, fingerprint: devTLSFingerprint(der), minted: minted}
}

// devTLSKey reads the ECDSA P-256 key at path, or mints one and writes it
// there when the file is missing or holds no such key.
func devTLSKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if blk, _ := pem.Decode(b); blk != nil && blk.Type == "PRIVATE KEY" {
		if k, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
			if ek, ok := k.(*ecdsa.PrivateKey); ok && ek.Curve == elliptic.P256() {
				return ek, nil
			}
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), privateFileMode); err != nil {
		return nil, err
	}
	return key, nil
}

// devTLSParse returns the certificate of a PEM file and its DER when it
// is for key, else nil.
func devTLSParse(b []byte, key *ecdsa.PrivateKey) (*x509.Certificate, []byte) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, nil
	}
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, nil
	}
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(key.Public()) {
		return nil, nil
	}
	return leaf, blk.Bytes
}

// devTLSLasts reports whether leaf is valid now and for devTLSRenewBefore
// more.
func devTLSLasts(leaf *x509.Certificate, now time.Time) bool {
	return !now.Before(leaf.NotBefore) && !now.Add(devTLSRenewBefore).After(leaf.NotAfter)
}

// devTLSCovers reports whether leaf covers every one of names.
func devTLSCovers(leaf *x509.Certificate, names []string) bool {
	for _, n := range names {
		if leaf.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}

// devTLSNames are the names the certificate must cover: localhost,
// 127.0.0.1, ::1, this machine's host name and its non-loopback interface
// addresses (link-local ones left out: a URL cannot use them without a
// zone), and extraHosts (SVC_ALLOWED_HOSTS, already normalized).
func devTLSNames(extraHosts []string) []string {
	names := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil {
		if n, err := httpGuardHost(h); err == nil {
			names = append(names, n)
		}
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.IsGlobalUnicast() {
			names = append(names, ipn.IP.String())
		}
	}
	names = append(names, extraHosts...)
	slices.Sort(names)
	return slices.Compact(names)
}

// devTLSMint makes a self-signed server certificate for names, signed by key.
func devTLSMint(key *ecdsa.PrivateKey, names []string, now time.Time) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "svc dev", Organization: []string{"svc dev (self-signed)"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(devTLSValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	return x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
}

// devTLSFingerprint is the SHA-256 of a certificate's DER as browsers show
// it: upper-case hex bytes joined by colons.
func devTLSFingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	h := strings.ToUpper(hex.EncodeToString(sum[:]))
	var b strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(h[i : i+2])
	}
	return b.String()
}

// listener serves TLS 1.2 or later with the certificate on ln: HTTP/1.1
// only, as the plain listener did.
func (c *devTLSCert) listener(ln net.Listener) net.Listener {
	return tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{c.pair}, NextProtos: []string{"http/1.1"}})
}

// devTLSClient is an HTTP client that trusts exactly the certificate
// svc dev serves for the project whose state directory is stateDir (a
// pool holding it alone): what the CLI uses when .svc/runtime.json says
// https.
func devTLSClient(stateDir string) (*http.Client, error) {
	path := filepath.Join(stateDir, devTLSCertFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no certificate", path)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr}, nil
}
