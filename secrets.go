package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// secretStore keeps named secrets in PostgreSQL (svc.secrets), encrypted at
// rest with AES-256-GCM under the project's key file (.svc/master.key, 0600).
type secretStore struct {
	db   *pgxpool.Pool
	aead cipher.AEAD
}

// openSecretStore loads (or mints) the key at keyPath and returns the store.
func openSecretStore(db *pgxpool.Pool, keyPath string) (*secretStore, error) {
	key, err := secretLoadKey(keyPath)
	if err != nil {
		return nil, err
	}
	aead, err := secretNewAEAD(key)
	if err != nil {
		return nil, err
	}
	return &secretStore{db: db, aead: aead}, nil
}

// secretLoadKey reads the 32-byte key file at path, minting it (random,
// privateFileMode) when it does not exist.
func secretLoadKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key = make([]byte, 32)
		rand.Read(key)
		err = writeFileAtomic(path, key, privateFileMode)
	}
	if err != nil {
		return nil, fmt.Errorf("secret key %s: %w", path, err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("secret key %s: want 32 bytes, have %d", path, len(key))
	}
	return key, nil
}

// secretNewAEAD returns AES-256-GCM under the 32-byte key.
func secretNewAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	return cipher.NewGCM(block)
}

// secretSeal encrypts value under aead, bound to aad (the name it is
// stored under, so a sealed value cannot be moved to another name): a
// random nonce followed by the ciphertext.
func secretSeal(aead cipher.AEAD, value, aad []byte) []byte {
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	return aead.Seal(nonce, nonce, value, aad)
}

// errSecretUndecryptable reports a sealed value the key cannot open: the
// key changed, the value was moved, or it was tampered with.
var errSecretUndecryptable = errors.New("cannot decrypt")

// secretOpen decrypts what secretSeal returned for the same aad.
func secretOpen(aead cipher.AEAD, sealed, aad []byte) ([]byte, error) {
	n := aead.NonceSize()
	if len(sealed) < n {
		return nil, errSecretUndecryptable
	}
	value, err := aead.Open(nil, sealed[:n], sealed[n:], aad)
	if err != nil {
		return nil, errSecretUndecryptable
	}
	return value, nil
}

// put stores value under name, replacing any earlier value.
func (s *secretStore) put(ctx context.Context, name string, value []byte) error {
	sealed := secretSeal(s.aead, value, []byte(name))
	_, err := s.db.Exec(ctx, `insert into svc.secrets(name, value, updated_at) values($1, $2, now())
		on conflict (name) do update set value = excluded.value, updated_at = now()`, name, sealed)
	if err != nil {
		return fmt.Errorf("store secret %q: %w", name, err)
	}
	return nil
}

// get returns the secret name; ok is false when it is not stored.
func (s *secretStore) get(ctx context.Context, name string) (value []byte, ok bool, err error) {
	var sealed []byte
	err = s.db.QueryRow(ctx, `select value from svc.secrets where name = $1`, name).Scan(&sealed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read secret %q: %w", name, err)
	}
	value, err = secretOpen(s.aead, sealed, []byte(name))
	if err != nil {
		return nil, false, fmt.Errorf("read secret %q: cannot decrypt (was .svc/master.key replaced?)", name)
	}
	return value, true, nil
}

// getOrMint returns the secret name, minting and storing a random hex value
// of n bytes the first time.
func (s *secretStore) getOrMint(ctx context.Context, name string, n int) (string, error) {
	v, ok, err := s.get(ctx, name)
	if err != nil || ok {
		return string(v), err
	}
	minted := randomID("", n)
	return minted, s.put(ctx, name, []byte(minted))
}

// parseDotEnv parses a .env file: KEY=VALUE lines, optional `export `,
// single/double quotes, # comments. Bad lines are reported with their number.
func parseDotEnv(b []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		key, val, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" || strings.ContainsAny(key, " \t") {
			return nil, fmt.Errorf(".env line %d: want KEY=VALUE", n)
		}
		val = strings.TrimSpace(val)
		switch {
		case strings.HasPrefix(val, `"`):
			uq, err := strconv.Unquote(val)
			if err != nil {
				return nil, fmt.Errorf(".env line %d: bad quoted value", n)
			}
			val = uq
		case strings.HasPrefix(val, "'") && strings.HasSuffix(val, "'") && len(val) >= 2:
			val = val[1 : len(val)-1]
		default:
			if i := strings.Index(val, " #"); i >= 0 {
				val = strings.TrimSpace(val[:i])
			}
		}
		out[key] = val
	}
	return out, sc.Err()
}
