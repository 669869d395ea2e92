package main

// The control plane's store (DESIGN §7): PostgreSQL (DATABASE_URL) with
// its own embedded migrations (cp_migrations/), tracked in the same
// svc.svc_migrations table as the platform's under a "cp/" prefix.

import (
	"cmp"
	"context"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// cpMigrationsFS holds the control plane's migrations; a package variable
// because go:embed only fills those. Nothing writes it.
//
//go:embed cp_migrations/*.sql
var cpMigrationsFS embed.FS

// Values of the control plane's records.
const (
	// cpMigrationPrefix prefixes the tracked names of its migrations.
	cpMigrationPrefix = "cp/"
	// cpStatusRegistered is a deployment recorded by link and not called
	// since; the proxy moves it to active, unreachable or rejected (see
	// cp_migrations/0001_control_plane.sql).
	cpStatusRegistered = "registered"
	// cpDeviceTTL is how long a device code waits for approval.
	cpDeviceTTL = 10 * time.Minute
	// cpDeviceInterval is the least time, in seconds, between two polls.
	cpDeviceInterval = 2
	// cpUserCodeAlphabet has no vowels and no look-alikes (RFC 8628 §6.1).
	cpUserCodeAlphabet = "BCDFGHJKLMNPQRSTVWXZ"
)

// Errors of the store that handlers turn into statuses.
var (
	errCPNotFound = errors.New("not found")
	errCPConflict = errors.New("already exists")
	// errCPForbidden is a change the caller's role may not make.
	errCPForbidden = errors.New("forbidden")
)

// cpSlugPattern is what an organization or agent slug may be.
var cpSlugPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// cpReservedOrgSlugs are the control plane's own first path segments: an
// organization of that slug would lose its proxy paths (/{org}/{agent}/…)
// to them.
var cpReservedOrgSlugs = []string{"api", "box", "dev", "device", "oidc", "team"}

// cpStore is the control plane's database and the key its secrets are
// sealed under.
type cpStore struct {
	db   *pgxpool.Pool
	aead cipher.AEAD
	// auditKey keys the audit log's chains (cpAuditKeyOf the master key).
	auditKey []byte
	// rechained says what openCPStore did with an audit log of before
	// issue 36 (auditRechain), for the caller to log; "" when nothing.
	rechained string
	// credTTL is how long an unused credential lives (cp_credentials.go;
	// 0: cpCredentialTTLDefault).
	credTTL time.Duration
}

// openCPStore applies the control plane's migrations to databaseURL and
// returns the store sealing secrets and keying the audit log with keys of
// the master key; an audit log of before issue 36 is re-chained once.
func openCPStore(ctx context.Context, databaseURL string, masterKey []byte) (*cpStore, error) {
	aead, err := secretNewAEAD(masterKey)
	if err != nil {
		return nil, err
	}
	if err := cpMigrate(ctx, databaseURL); err != nil {
		return nil, err
	}
	db, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("open control plane database: %w", err)
	}
	s := &cpStore{db: db, aead: aead, auditKey: cpAuditKeyOf(masterKey)}
	var legacy bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM cp.audit_log WHERE chain_seq IS NULL)`).Scan(&legacy); err != nil {
		db.Close()
		return nil, fmt.Errorf("open control plane database: %w", err)
	}
	if legacy {
		problem, n, err := s.auditRechain(ctx)
		if err != nil {
			db.Close()
			return nil, err
		}
		s.rechained = fmt.Sprintf("re-chained %d audit rows of before into keyed chains of their organizations; the old chain held", n)
		if problem != "" {
			s.rechained = fmt.Sprintf("re-chained %d audit rows of before into keyed chains of their organizations; the old chain did NOT hold: %s", n, problem)
		}
	}
	return s, nil
}

// cpMigrate applies cp_migrations/*.sql once each, in order, with the
// platform runner's lock, tracking table and per-file transaction.
func cpMigrate(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("control plane migrations: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) // also releases the advisory lock
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		return fmt.Errorf("control plane migrations: lock: %w", err)
	}
	if _, err := conn.Exec(ctx, migrateBootstrapSQL); err != nil {
		return fmt.Errorf("control plane migrations: %w", err)
	}
	done, err := migrateApplied(ctx, conn)
	if err != nil {
		return fmt.Errorf("control plane migrations: %w", err)
	}
	entries, err := fs.ReadDir(cpMigrationsFS, "cp_migrations")
	if err != nil {
		return err
	}
	for _, e := range entries {
		b, err := cpMigrationsFS.ReadFile(path.Join("cp_migrations", e.Name()))
		if err != nil {
			return err
		}
		f := migrateNewFile(cpMigrationPrefix+e.Name(), cpMigrationPrefix+e.Name(), b)
		if sum, ok := done[f.name]; ok {
			if sum != f.checksum {
				return &migrationError{Op: "check", File: f.path, Err: errMigrationEdited}
			}
			continue
		}
		if err := migrateApply(ctx, conn, f); err != nil {
			return err
		}
	}
	return nil
}

// close releases the database pool.
func (s *cpStore) close() { s.db.Close() }

// cpHash is the stored form of a bearer secret (credential, API key,
// device or sign-in code): SHA-256. The secrets are high-entropy, so a
// plain hash is enough and lookups stay an index probe.
func cpHash(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// cpNewSecret returns prefix followed by 32 random bytes, base64url.
func cpNewSecret(prefix string) string {
	b := make([]byte, 32)
	rand.Read(b)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// cpCode returns groups of 4 characters of cpUserCodeAlphabet joined by "-"
// (20^4 ≈ 2^17 per group).
func cpCode(groups int) string {
	b := make([]byte, groups*4)
	rand.Read(b)
	var sb strings.Builder
	for i, c := range b {
		if i > 0 && i%4 == 0 {
			sb.WriteByte('-')
		}
		sb.WriteByte(cpUserCodeAlphabet[int(c)%len(cpUserCodeAlphabet)]) // 256 % 20 = 16: a negligible bias
	}
	return sb.String()
}

// cpNormalizeCode upper-cases a typed code and drops spaces and dashes, so
// "bcdf-ghjk" and "BCDFGHJK" match.
func cpNormalizeCode(code string) string {
	return strings.NewReplacer("-", "", " ", "").Replace(strings.ToUpper(strings.TrimSpace(code)))
}

// cpUser is a user of the control plane.
type cpUser struct {
	ID    string `json:"id"`
	Email string `json:"email"`
	Name  string `json:"name"`
}

// cpOrg is an organization, with the caller's role in it when listed for
// a user.
type cpOrg struct {
	ID   string `json:"id"`
	Slug string `json:"slug"`
	Name string `json:"name"`
	Role string `json:"role,omitempty"`
}

// cpAgent is the agent record of SPEC §2.
type cpAgent struct {
	ID   string `json:"id"`
	Slug string `json:"slug"`
	Name string `json:"name"`
}

// cpDeployment is the deployment record of SPEC §2.
type cpDeployment struct {
	ID           string     `json:"id"`
	URL          string     `json:"url"`
	ImageTag     string     `json:"image_tag"`
	Status       string     `json:"status"`
	LastActiveAt *time.Time `json:"last_active_at"`
}

// cpInstallation is an installation: the local-dev one of a user and an
// agent, or the one a deployment's box is taught.
type cpInstallation struct {
	ID               string `json:"id"`
	Kind             string `json:"kind"`
	OrganizationID   string `json:"organization_id"`
	OrganizationSlug string `json:"organization_slug"`
	AgentID          string `json:"agent_id"`
	// user is the local-dev installation's user ("" for a deployment's);
	// set by installation only, never answered.
	user string
}

// bootstrap creates, on the first boot only, the owner (of email owner,
// checked by the caller; "" for the user "admin"), the organization
// orgSlug they own and a one-time sign-in code, which it returns; later
// boots return "". Concurrent first boots create one.
func (s *cpStore) bootstrap(ctx context.Context, orgSlug, owner string) (code string, err error) {
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO cp.state (key, value) VALUES ('bootstrapped', 'true') ON CONFLICT DO NOTHING`)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		org, user := randomID("org_", 8), randomID("usr_", 8)
		code = cpCode(4)
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`INSERT INTO cp.organizations (id, slug, name) VALUES ($1, $2, $2)`, []any{org, orgSlug}},
			{`INSERT INTO cp.users (id, email, name) VALUES ($1, $2, $3)`, []any{user, cmp.Or(owner, "admin"), cmp.Or(strings.SplitN(owner, "@", 2)[0], "Admin")}},
			{`INSERT INTO cp.memberships (org_id, user_id, role) VALUES ($1, $2, 'owner')`, []any{org, user}},
			{`INSERT INTO cp.signin_codes (code_hash, user_id) VALUES ($1, $2)`, []any{cpHash(cpNormalizeCode(code)), user}},
		} {
			if _, err := tx.Exec(ctx, q.sql, q.args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("first boot: %w", err)
	}
	return code, nil
}

// identityKeys returns the signing keys, newest first, generating and
// storing (sealed) the first one when there is none.
func (s *cpStore) identityKeys(ctx context.Context) ([]identKey, error) {
	load := func() ([]identKey, error) {
		rows, err := s.db.Query(ctx, `SELECT kid, seed FROM cp.signing_keys WHERE retired_at IS NULL ORDER BY created_at DESC, kid`)
		if err != nil {
			return nil, err
		}
		var keys []identKey
		var kid string
		var sealed []byte
		_, err = pgx.ForEachRow(rows, []any{&kid, &sealed}, func() error {
			seed, err := secretOpen(s.aead, sealed, []byte("identity-key:"+kid))
			if err != nil {
				return fmt.Errorf("key %s: %w (was the master key replaced?)", kid, err)
			}
			keys = append(keys, identKeyFromSeed(seed))
			return nil
		})
		return keys, err
	}
	keys, err := load()
	if err == nil && len(keys) == 0 {
		k := identNewKey()
		_, err = s.db.Exec(ctx, `INSERT INTO cp.signing_keys (kid, seed) VALUES ($1, $2)`, k.kid, secretSeal(s.aead, k.priv.Seed(), []byte("identity-key:"+k.kid)))
		if err == nil {
			keys, err = load()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("identity signing keys: %w", err)
	}
	return keys, nil
}

// cpSignInCodesMax is how many unused browser sign-in codes a member may
// hold: minting one more drops the oldest (issue 36, item 10).
const cpSignInCodesMax = 5

// newSignInCode mints user a one-time sign-in code that expires at
// expires (a browser's sign-in on the device page). The same statement
// deletes the user's spent and expired codes and all but the newest
// cpSignInCodesMax-1 unused ones, so a member holds at most
// cpSignInCodesMax rows however often it asks (the first boot's code,
// which has no expiry, is not among them).
func (s *cpStore) newSignInCode(ctx context.Context, user string, expires time.Time) (string, error) {
	code := cpCode(4)
	_, err := s.db.Exec(ctx, `WITH gone AS (
			DELETE FROM cp.signin_codes WHERE user_id = $2 AND expires_at IS NOT NULL AND (used_at IS NOT NULL OR expires_at <= now() OR code_hash IN (
				SELECT code_hash FROM cp.signin_codes WHERE user_id = $2 AND expires_at > now() AND used_at IS NULL
				ORDER BY expires_at DESC OFFSET $4)))
		INSERT INTO cp.signin_codes (code_hash, user_id, expires_at) VALUES ($1, $2, $3)`,
		cpHash(cpNormalizeCode(code)), user, expires, cpSignInCodesMax-1)
	if err != nil {
		return "", fmt.Errorf("new sign-in code: %w", err)
	}
	return code, nil
}

// redeemSignInCode spends a one-time sign-in code that has not expired and
// returns its user.
func (s *cpStore) redeemSignInCode(ctx context.Context, code string) (cpUser, error) {
	var u cpUser
	err := s.db.QueryRow(ctx, `UPDATE cp.signin_codes c SET used_at = now() FROM cp.users u
		WHERE c.code_hash = $1 AND c.used_at IS NULL AND (c.expires_at IS NULL OR c.expires_at > now()) AND u.id = c.user_id
		RETURNING u.id, u.email, u.name`,
		cpHash(cpNormalizeCode(code))).Scan(&u.ID, &u.Email, &u.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return u, errCPNotFound
	}
	return u, err
}

// createCredential mints a credential of kind ("cli", "console") for user
// on device (a host name, or "browser") and returns it; only its hash is
// stored.
func (s *cpStore) createCredential(ctx context.Context, user, kind, device string) (string, error) {
	tok := cpNewSecret("svc_cred_")
	_, err := s.db.Exec(ctx, `INSERT INTO cp.credentials (id, user_id, token_hash, kind, name) VALUES ($1, $2, $3, $4, $5)`,
		randomID("crd_", 8), user, cpHash(tok), kind, device)
	if err != nil {
		return "", fmt.Errorf("create credential: %w", err)
	}
	return tok, nil
}

// userByCredential returns the user a live credential (unrevoked, used
// within the credential TTL, cp_credentials.go) belongs to and the
// credential's id, noting its use. A user in no organization (removed from
// the last one) has no access: errCPNotFound, whatever their credential.
func (s *cpStore) userByCredential(ctx context.Context, tok string) (cpUser, string, error) {
	var u cpUser
	var cred string
	err := s.db.QueryRow(ctx, `UPDATE cp.credentials c SET last_used_at = now() FROM cp.users u
		WHERE c.token_hash = $1 AND `+cpCredentialLive("$2")+` AND u.id = c.user_id
			AND EXISTS (SELECT 1 FROM cp.memberships m WHERE m.user_id = u.id)
		RETURNING u.id, u.email, u.name, c.id`, cpHash(tok), s.credentialTTL().Seconds()).Scan(&u.ID, &u.Email, &u.Name, &cred)
	if errors.Is(err, pgx.ErrNoRows) {
		return u, "", errCPNotFound
	}
	return u, cred, err
}

// revokeCredential revokes the credential id.
func (s *cpStore) revokeCredential(ctx context.Context, id string) error {
	_, err := s.db.Exec(ctx, `UPDATE cp.credentials SET revoked_at = now() WHERE id = $1`, id)
	return err
}

// cpDeviceClient is who asked for a device sign-in, as the device page
// shows it before a user approves (RFC 8628 §5.4): the address the request
// came from, and the host name and version its CLI reported (claims of the
// requester: only the address is the control plane's own observation).
type cpDeviceClient struct {
	Addr, Host, Version string
}

// cpDeviceRequest is a pending device sign-in as the device page shows it.
type cpDeviceRequest struct {
	cpDeviceClient
	CreatedAt, ExpiresAt time.Time
}

// Caps of pending device codes: per source address, and in all, so that
// codes started without limit cannot fill the table (cpServer's rate
// limit bounds how fast one source starts them).
const (
	cpDevicePendingPerSource = 20
	cpDevicePendingMax       = 10000
)

// errCPTooMany is a device start refused because too many of its source's
// (or of all) codes wait for approval.
var errCPTooMany = errors.New("too many pending device sign-ins")

// startDevice creates a pending device code for client and returns it and
// its user code; expired codes are dropped first (an index range, not a
// scan); errCPTooMany when client's address, or the control plane, has
// its cap of pending codes.
func (s *cpStore) startDevice(ctx context.Context, client cpDeviceClient) (device, userCode string, err error) {
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM cp.device_codes WHERE expires_at < now()`); err != nil {
			return err
		}
		var mine, all int
		err := tx.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM (SELECT 1 FROM cp.device_codes WHERE status = 'pending' AND client_addr = $1 LIMIT $2) m),
			(SELECT count(*) FROM (SELECT 1 FROM cp.device_codes WHERE status = 'pending' LIMIT $3) a)`,
			client.Addr, cpDevicePendingPerSource, cpDevicePendingMax).Scan(&mine, &all)
		if err != nil {
			return err
		}
		if mine >= cpDevicePendingPerSource || all >= cpDevicePendingMax {
			return errCPTooMany
		}
		device, userCode = cpNewSecret("svc_dev_"), cpCode(2)
		_, err = tx.Exec(ctx, `INSERT INTO cp.device_codes (device_hash, user_code, status, expires_at, client_addr, client_host, client_version)
			VALUES ($1, $2, 'pending', $3, $4, $5, $6)`,
			cpHash(device), cpNormalizeCode(userCode), time.Now().Add(cpDeviceTTL), client.Addr, client.Host, client.Version)
		return err
	})
	if err != nil && !errors.Is(err, errCPTooMany) {
		err = fmt.Errorf("start device sign-in: %w", err)
	}
	return device, userCode, err
}

// deviceRequest returns the pending, unexpired device sign-in of userCode;
// errCPNotFound when there is none.
func (s *cpStore) deviceRequest(ctx context.Context, userCode string) (cpDeviceRequest, error) {
	var d cpDeviceRequest
	err := s.db.QueryRow(ctx, `SELECT client_addr, client_host, client_version, created_at, expires_at FROM cp.device_codes
		WHERE user_code = $1 AND status = 'pending' AND expires_at > now()`, cpNormalizeCode(userCode)).
		Scan(&d.Addr, &d.Host, &d.Version, &d.CreatedAt, &d.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, errCPNotFound
	}
	return d, err
}

// decideDevice approves (status "approved") or denies ("denied") the
// pending, unexpired user code as user; errCPNotFound when there is none.
func (s *cpStore) decideDevice(ctx context.Context, userCode, user, status string) error {
	tag, err := s.db.Exec(ctx, `UPDATE cp.device_codes SET status = $3, user_id = $2
		WHERE user_code = $1 AND status = 'pending' AND expires_at > now()`, cpNormalizeCode(userCode), user, status)
	if err != nil {
		return fmt.Errorf("%s device sign-in: %w", status, err)
	}
	if tag.RowsAffected() == 0 {
		return errCPNotFound
	}
	return nil
}

// pollDevice answers a poll of device: its RFC 8628 state ("pending",
// "slow_down", "expired", "denied") or, once approved, a fresh CLI
// credential of the approving user, exactly once, named after the host the
// CLI reported.
func (s *cpStore) pollDevice(ctx context.Context, device string) (state, credential string, err error) {
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var status, host string
		var user *string
		var expired, fast bool
		err := tx.QueryRow(ctx, `SELECT status, user_id, expires_at < now(),
			coalesce(last_poll_at > now() - make_interval(secs => $2::float8 / 2), false), client_host
			FROM cp.device_codes WHERE device_hash = $1 FOR UPDATE`, cpHash(device), cpDeviceInterval).Scan(&status, &user, &expired, &fast, &host)
		if errors.Is(err, pgx.ErrNoRows) {
			state = "expired"
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE cp.device_codes SET last_poll_at = now() WHERE device_hash = $1`, cpHash(device)); err != nil {
			return err
		}
		switch {
		case status == "consumed" || expired:
			state = "expired"
		case status == "denied":
			state = "denied"
		case fast:
			state = "slow_down"
		case status == "pending":
			state = "pending"
		default:
			credential = cpNewSecret("svc_cred_")
			if _, err := tx.Exec(ctx, `INSERT INTO cp.credentials (id, user_id, token_hash, kind, name) VALUES ($1, $2, $3, 'cli', $4)`,
				randomID("crd_", 8), *user, cpHash(credential), host); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE cp.device_codes SET status = 'consumed' WHERE device_hash = $1`, cpHash(device))
			state = "approved"
			return err
		}
		return nil
	})
	if err != nil {
		return "", "", fmt.Errorf("poll device sign-in: %w", err)
	}
	return state, credential, nil
}

// userOrgs lists the organizations user belongs to, with their role.
func (s *cpStore) userOrgs(ctx context.Context, user string) ([]cpOrg, error) {
	rows, err := s.db.Query(ctx, `SELECT o.id, o.slug, o.name, m.role FROM cp.organizations o
		JOIN cp.memberships m ON m.org_id = o.id WHERE m.user_id = $1 ORDER BY o.slug`, user)
	if err != nil {
		return nil, fmt.Errorf("list organizations: %w", err)
	}
	orgs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[cpOrg])
	if err != nil {
		return nil, fmt.Errorf("list organizations: %w", err)
	}
	return orgs, nil
}

// userOrg returns the organization ref (id or slug) when user belongs to
// it; errCPNotFound otherwise, so a stranger cannot tell it exists.
func (s *cpStore) userOrg(ctx context.Context, user, ref string) (cpOrg, error) {
	var o cpOrg
	err := s.db.QueryRow(ctx, `SELECT o.id, o.slug, o.name, m.role FROM cp.organizations o
		JOIN cp.memberships m ON m.org_id = o.id WHERE m.user_id = $1 AND (o.id = $2 OR o.slug = $2)`, user, ref).
		Scan(&o.ID, &o.Slug, &o.Name, &o.Role)
	if errors.Is(err, pgx.ErrNoRows) {
		return o, errCPNotFound
	}
	return o, err
}

// listAgents lists the organization's agents by slug.
func (s *cpStore) listAgents(ctx context.Context, org string) ([]cpAgent, error) {
	rows, err := s.db.Query(ctx, `SELECT id, slug, name FROM cp.agents WHERE org_id = $1 ORDER BY slug`, org)
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	agents, err := pgx.CollectRows(rows, pgx.RowToStructByPos[cpAgent])
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	return agents, nil
}

// createAgent creates an agent; errCPConflict when the slug is taken.
func (s *cpStore) createAgent(ctx context.Context, org, slug, name string) (cpAgent, error) {
	a := cpAgent{ID: randomID("agt_", 8), Slug: slug, Name: name}
	_, err := s.db.Exec(ctx, `INSERT INTO cp.agents (id, org_id, slug, name) VALUES ($1, $2, $3, $4)`, a.ID, org, slug, name)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return a, errCPConflict
	}
	if err != nil {
		return a, fmt.Errorf("create agent: %w", err)
	}
	return a, nil
}

// agent returns the organization's agent ref (id or slug).
func (s *cpStore) agent(ctx context.Context, org, ref string) (cpAgent, error) {
	var a cpAgent
	err := s.db.QueryRow(ctx, `SELECT id, slug, name FROM cp.agents WHERE org_id = $1 AND (id = $2 OR slug = $2)`, org, ref).Scan(&a.ID, &a.Slug, &a.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, errCPNotFound
	}
	return a, err
}

// installationOf returns the installation of agent of kind for user (""
// for the deployment one), creating it the first time.
func (s *cpStore) installationOf(ctx context.Context, org cpOrg, agent, kind, user string) (cpInstallation, error) {
	in := cpInstallation{Kind: kind, OrganizationID: org.ID, OrganizationSlug: org.Slug, AgentID: agent}
	var uid *string
	if user != "" {
		uid = &user
	}
	// The no-op update makes RETURNING give the existing row on conflict.
	arbiter := "(agent_id, user_id) WHERE kind = 'local_dev'"
	if kind == "deployment" {
		arbiter = "(agent_id) WHERE kind = 'deployment'"
	}
	err := s.db.QueryRow(ctx, `INSERT INTO cp.installations (id, org_id, agent_id, kind, user_id) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT `+arbiter+` DO UPDATE SET kind = excluded.kind RETURNING id`,
		randomID("ins_", 8), org.ID, agent, kind, uid).Scan(&in.ID)
	if err != nil {
		return in, fmt.Errorf("installation of agent %s: %w", agent, err)
	}
	return in, nil
}

// installation returns the installation id when user belongs to its
// organization.
func (s *cpStore) installation(ctx context.Context, user, id string) (cpInstallation, error) {
	var in cpInstallation
	err := s.db.QueryRow(ctx, `SELECT i.id, i.kind, o.id, o.slug, i.agent_id, coalesce(i.user_id, '') FROM cp.installations i
		JOIN cp.organizations o ON o.id = i.org_id JOIN cp.memberships m ON m.org_id = o.id AND m.user_id = $1
		WHERE i.id = $2`, user, id).Scan(&in.ID, &in.Kind, &in.OrganizationID, &in.OrganizationSlug, &in.AgentID, &in.user)
	if errors.Is(err, pgx.ErrNoRows) {
		return in, errCPNotFound
	}
	return in, err
}

// recordDeployment records agent's one deployment (re-recording updates
// its URL, tag and secret and resets its status to registered), with the
// secret sealed, and the link by in its history (cp.deployment_links), and
// returns it with the installation its box is taught.
func (s *cpStore) recordDeployment(ctx context.Context, org cpOrg, agent, url, tag string, secret []byte, by cpUser) (cpDeployment, cpInstallation, error) {
	d := cpDeployment{URL: url, ImageTag: tag, Status: cpStatusRegistered}
	in, err := s.installationOf(ctx, org, agent, "deployment", "")
	if err != nil {
		return d, in, err
	}
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO cp.deployments (id, agent_id, url, image_tag, status, signing_secret) VALUES ($1, $2, $3, $4, $5, '')
			ON CONFLICT (agent_id) DO UPDATE SET url = excluded.url, image_tag = excluded.image_tag, status = excluded.status, updated_at = now()
			RETURNING id, last_active_at`, randomID("dep_", 8), agent, url, tag, cpStatusRegistered).Scan(&d.ID, &d.LastActiveAt)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE cp.deployments SET signing_secret = $2 WHERE id = $1`, d.ID, secretSeal(s.aead, secret, []byte("deployment:"+d.ID)))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO cp.deployment_links (id, agent_id, deployment_id, actor_id, actor, url, image_tag) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			randomID("lnk_", 8), agent, d.ID, by.ID, by.Email, url, tag)
		return err
	})
	if err != nil {
		return d, in, fmt.Errorf("record deployment: %w", err)
	}
	return d, in, nil
}

// deploymentOf returns agent's deployment; errCPNotFound when none is
// registered.
func (s *cpStore) deploymentOf(ctx context.Context, agent string) (cpDeployment, error) {
	var d cpDeployment
	err := s.db.QueryRow(ctx, `SELECT id, url, image_tag, status, last_active_at FROM cp.deployments WHERE agent_id = $1`, agent).
		Scan(&d.ID, &d.URL, &d.ImageTag, &d.Status, &d.LastActiveAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, errCPNotFound
	}
	return d, err
}

// deploymentSecret returns the signing secret of deployment id, decrypted
// (for the proxy and the secret proof).
func (s *cpStore) deploymentSecret(ctx context.Context, id string) ([]byte, error) {
	var sealed []byte
	if err := s.db.QueryRow(ctx, `SELECT signing_secret FROM cp.deployments WHERE id = $1`, id).Scan(&sealed); err != nil {
		return nil, fmt.Errorf("deployment %s secret: %w", id, err)
	}
	return s.openDeploymentSecret(id, sealed)
}

// openDeploymentSecret decrypts the sealed signing secret of deployment id.
func (s *cpStore) openDeploymentSecret(id string, sealed []byte) ([]byte, error) {
	secret, err := secretOpen(s.aead, sealed, []byte("deployment:"+id))
	if err != nil {
		return nil, fmt.Errorf("deployment %s secret: %w (was the master key replaced?)", id, err)
	}
	return secret, nil
}

// cpProxyCaller is who a proxied request acts for: a user (a credential)
// or an organization (an API key).
type cpProxyCaller struct {
	userID    string
	apiKeyOrg string
	apiKeyID  string
	// limited is set when the request found the caller's bucket shared by
	// the replicas (cp.proxy_limits) empty.
	limited bool
}

// actorName is how the audit log names a proxied caller: the user's email,
// or "API key <name>"; "" when neither is found.
func (s *cpStore) actorName(ctx context.Context, userID, apiKeyID string) string {
	var name string
	if apiKeyID != "" {
		if s.db.QueryRow(ctx, `SELECT 'API key ' || name FROM cp.api_keys WHERE id = $1`, apiKeyID).Scan(&name) != nil {
			return "API key"
		}
		return name
	}
	s.db.QueryRow(ctx, `SELECT email FROM cp.users WHERE id = $1`, userID).Scan(&name)
	return name
}

// principal names the caller to the box (signed, in the principal header),
// which scopes its durable chat sessions to that caller.
func (c cpProxyCaller) principal() string {
	if c.apiKeyID != "" {
		return "cp-key:" + c.apiKeyID
	}
	return "cp-user:" + c.userID
}

// cpProxyDeployment is where a proxied request goes: the deployment, the
// status the proxy last recorded and its decrypted signing secret.
type cpProxyDeployment struct {
	id, url, status string
	org             string // the organization's id
	lastActive      *time.Time
	secret          []byte
}

// cpProxyMiss is why a proxied request goes nowhere: its status (401 for
// an unknown credential, 404 for a missing organization, agent or
// deployment), code and message; stranger marks a known caller asking for
// an organization not theirs (audited).
type cpProxyMiss struct {
	status    int
	code, msg string
	stranger  bool
}

// Error is the message.
func (e *cpProxyMiss) Error() string { return e.msg }

// proxyTarget resolves a proxied request in one query: the caller of tok
// (a live API key or user credential: cpAPIKeyLive, cpCredentialLive),
// and the deployment of agentRef (id
// or slug) in orgRef (id or slug) when the caller may reach it: a
// member's credential or the organization's API key. A stranger's
// organization is reported missing, like an unknown one. A miss is a
// *cpProxyMiss.
func (s *cpStore) proxyTarget(ctx context.Context, tok, orgRef, agentRef string, limit *cpSharedLimit) (cpProxyCaller, cpProxyDeployment, error) {
	var c cpProxyCaller
	var d cpProxyDeployment
	var keyOrg, keyID, user, orgID, orgSlug, agentID, depID, depURL, status *string
	var sealed []byte
	var tokens *float64
	var async string
	limit.sweep(ctx)
	err := s.db.QueryRow(ctx, `WITH caller AS (
			SELECT org_id, id AS key_id, NULL AS user_id FROM cp.api_keys WHERE key_hash = $1 AND `+cpAPIKeyLive+`
			UNION ALL SELECT NULL, NULL, user_id FROM cp.credentials c WHERE token_hash = $1 AND `+cpCredentialLive("$4")+`
			LIMIT 1),
		-- Each call spends a token of the caller's bucket, shared by the
		-- replicas (cp_limits.go): refilled by the time since its last
		-- call at $6 a second up to $7; negative when empty.
		spent AS (INSERT INTO cp.proxy_limits AS l (principal, tokens, at)
			SELECT CASE WHEN key_id IS NOT NULL THEN 'cp-key:' || key_id ELSE 'cp-user:' || user_id END, $7 - 1, now() FROM caller
			ON CONFLICT (principal) DO UPDATE SET tokens = GREATEST(-1, LEAST($7, l.tokens + extract(epoch FROM now() - l.at) * $6) - 1), at = now()
			RETURNING tokens),
		-- Each call notes the key's or credential's use, at most once a
		-- minute (cpTouchEvery).
		key_used AS (UPDATE cp.api_keys SET last_used_at = now() WHERE key_hash = $1 AND `+cpAPIKeyLive+`
			AND (last_used_at IS NULL OR last_used_at < now() - make_interval(secs => $5))),
		cred_used AS (UPDATE cp.credentials c SET last_used_at = now() WHERE token_hash = $1 AND `+cpCredentialLive("$4")+`
			AND (last_used_at IS NULL OR last_used_at < now() - make_interval(secs => $5)))
		SELECT c.org_id, c.key_id, c.user_id, o.id, o.slug, a.id, d.id, d.url, d.status, d.last_active_at, d.signing_secret,
			(SELECT tokens FROM spent),
			-- A bucket lost in a crash costs nothing: this statement's
			-- commit does not wait for the disk.
			set_config('synchronous_commit', 'off', true)
		FROM caller c
		LEFT JOIN cp.organizations o ON (o.id = $2 OR o.slug = $2)
			AND (o.id = c.org_id OR EXISTS (SELECT 1 FROM cp.memberships m WHERE m.org_id = o.id AND m.user_id = c.user_id))
		LEFT JOIN cp.agents a ON a.org_id = o.id AND (a.id = $3 OR a.slug = $3)
		LEFT JOIN cp.deployments d ON d.agent_id = a.id`,
		cpHash(tok), orgRef, agentRef, s.credentialTTL().Seconds(), cpTouchEvery.Seconds(), limit.rate, float64(limit.burst)).
		Scan(&keyOrg, &keyID, &user, &orgID, &orgSlug, &agentID, &depID, &depURL, &status, &d.lastActive, &sealed, &tokens, &async)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return c, d, &cpProxyMiss{http.StatusUnauthorized, codeAuth, "the credential or API key is unknown, revoked or expired", false}
	case err != nil:
		return c, d, fmt.Errorf("proxy target: %w", err)
	case keyOrg != nil:
		c.apiKeyOrg, c.apiKeyID = *keyOrg, *keyID
	default:
		c.userID = *user
	}
	c.limited = tokens != nil && *tokens < 0
	switch {
	case orgSlug == nil:
		return c, d, &cpProxyMiss{http.StatusNotFound, codeNotFound, fmt.Sprintf("no organization %q of yours", orgRef), true}
	case agentID == nil:
		return c, d, &cpProxyMiss{http.StatusNotFound, codeNotFound, fmt.Sprintf("no agent %q in organization %s", agentRef, *orgSlug), false}
	case depID == nil:
		return c, d, &cpProxyMiss{http.StatusNotFound, "no_deployment", fmt.Sprintf("agent %s of organization %s has no deployment: run svc link", agentRef, *orgSlug), false}
	}
	d.id, d.url, d.status, d.org = *depID, *depURL, *status, *orgID
	d.secret, err = s.openDeploymentSecret(d.id, sealed)
	return c, d, err
}

// setDeploymentStatus records the status the proxy saw of deployment id
// at now; active also sets last_active_at.
func (s *cpStore) setDeploymentStatus(ctx context.Context, id, status string, now time.Time) error {
	_, err := s.db.Exec(ctx, `UPDATE cp.deployments SET status = $2,
		last_active_at = CASE WHEN $2 = 'active' THEN $3 ELSE last_active_at END WHERE id = $1`, id, status, now)
	if err != nil {
		return fmt.Errorf("set deployment %s status: %w", id, err)
	}
	return nil
}
