package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
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
// rest with AES-256-GCM under the master key: the key file (.svc/master.key,
// 0600), or for svc serve SVC_MASTER_KEY, which keeps the key out of the
// volume it protects.
type secretStore struct {
	db   *pgxpool.Pool
	aead cipher.AEAD
}

// openSecretStore returns the store under key, or, when key is nil, under
// the key file at keyPath (minted when absent). With key given, a key file
// left at keyPath is retired: the secrets it sealed are sealed again under
// key, in one transaction, and the file is removed, so that no key stays on
// disk and no secret is lost.
func openSecretStore(ctx context.Context, db *pgxpool.Pool, keyPath string, key []byte) (*secretStore, error) {
	given := key != nil
	if !given {
		var err error
		if key, err = secretLoadKey(keyPath); err != nil {
			return nil, err
		}
	}
	aead, err := secretNewAEAD(key)
	if err != nil {
		return nil, err
	}
	s := &secretStore{db: db, aead: aead}
	if _, err := os.Stat(keyPath); !given || errors.Is(err, fs.ErrNotExist) {
		return s, nil // no key file to retire
	}
	if err := s.retireKeyFile(ctx, keyPath); err != nil {
		return nil, err
	}
	return s, nil
}

// retireKeyFile seals again under s's key every secret the key file at path
// sealed, then removes the file. A secret that already opens under s's key
// (a retirement interrupted after its commit) is left as is.
func (s *secretStore) retireKeyFile(ctx context.Context, path string) error {
	old, err := secretLoadKey(path)
	if err != nil {
		return err
	}
	oldAEAD, err := secretNewAEAD(old)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `select name, value from svc.secrets for update`)
		if err != nil {
			return err
		}
		sealed := map[string][]byte{}
		for rows.Next() {
			var name string
			var value []byte
			if err := rows.Scan(&name, &value); err != nil {
				return err
			}
			sealed[name] = value
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for name, value := range sealed {
			if _, err := secretOpen(s.aead, value, []byte(name)); err == nil {
				continue
			}
			plain, err := secretOpen(oldAEAD, value, []byte(name))
			if err != nil {
				return fmt.Errorf("secret %q opens with neither %s nor SVC_MASTER_KEY", name, path)
			}
			if _, err := tx.Exec(ctx, `update svc.secrets set value = $2 where name = $1`, name, secretSeal(s.aead, plain, []byte(name))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("move the secrets from %s to SVC_MASTER_KEY (nothing was changed): %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove %s, whose secrets are now sealed under SVC_MASTER_KEY: %w", path, err)
	}
	return nil
}

// parseMasterKey decodes a master key given in the environment
// (SVC_MASTER_KEY): 32 bytes as 64 hex digits or base64.
func parseMasterKey(env string) ([]byte, error) {
	for _, dec := range []func(string) ([]byte, error){hex.DecodeString, base64.StdEncoding.DecodeString, base64.RawURLEncoding.DecodeString} {
		if k, err := dec(strings.TrimSpace(env)); err == nil && len(k) == 32 {
			return k, nil
		}
	}
	return nil, errors.New("SVC_MASTER_KEY is not 32 bytes of hex or base64")
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
		return nil, false, fmt.Errorf("read secret %q: cannot decrypt: the master key (master.key, or svc serve's SVC_MASTER_KEY) is not the one it was sealed with; restore that key (replicas sharing one database must all have the same SVC_MASTER_KEY: a replica's own --data/master.key cannot read the fleet's secrets)", name)
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
