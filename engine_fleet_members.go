package main

// The members of a fleet on PostgreSQL and who owns which partition
// (engine_fleet.go). Each replica keeps a row in svc_engine.members (its
// name, the address the others reach it at, and a lease it renews every
// Renew); the live rows, ordered by name, deal the partitions out in turn:
// partition p belongs to member p mod n. Every replica computes the same
// answer from the same rows, so there is no coordinator: a replica that
// joins takes its share within a renewal, one that leaves (SIGTERM) hands
// its share over at once (a notification wakes the others), one that dies
// loses its share when its lease expires, and its partitions are spread
// over the survivors.
//
// Two replicas may for a moment both think they own a partition (their
// views of the rows differ by a renewal): both then open its log, which
// is a shared log like any other (engine_store_pg.go: fenced leases,
// voids, claims), so the moment costs work, never correctness. The one
// that no longer owns it closes it, releasing its runs to the other.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fleetMembersSchemaSQL creates the members and the fleet's token (the
// credential of calls between replicas), idempotently.
const fleetMembersSchemaSQL = `SELECT pg_advisory_xact_lock(hashtext('svc_engine schema'));
CREATE TABLE IF NOT EXISTS svc_engine.members (owner text PRIMARY KEY, address text NOT NULL, lease_until timestamptz NOT NULL,
    joined_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS svc_engine.fleet (id int PRIMARY KEY CHECK (id = 1), token text NOT NULL);
CREATE TABLE IF NOT EXISTS svc_engine.idem_keys (key text PRIMARY KEY, part int NOT NULL, at timestamptz NOT NULL DEFAULT now());`

// fleetIdemClaimSQL gives an idempotency key ($1) a partition: $2 when the
// key is new or its claim older than the retention ($3 ms), else the one
// it has. It returns no row when another start claimed the key at once
// and committed after this statement's snapshot (then it runs again).
const fleetIdemClaimSQL = `WITH ins AS (INSERT INTO svc_engine.idem_keys (key, part) VALUES ($1, $2)
    ON CONFLICT (key) DO UPDATE SET part = excluded.part, at = now()
    WHERE svc_engine.idem_keys.at < now() - $3 * interval '1 millisecond' RETURNING part)
SELECT part FROM ins UNION ALL SELECT part FROM svc_engine.idem_keys WHERE key = $1 AND NOT EXISTS (SELECT FROM ins)`

// fleetMembersRenewSQL writes this replica's row (a join, or a renewal)
// and returns the other live members and, in ms, how soon the first of
// their leases expires (a day when there is none).
const fleetMembersRenewSQL = `WITH u AS (INSERT INTO svc_engine.members (owner, address, lease_until) VALUES ($1, $2, now() + $3 * interval '1 millisecond')
    ON CONFLICT (owner) DO UPDATE SET address = excluded.address, lease_until = excluded.lease_until RETURNING 1)
SELECT owner, address, floor(extract(epoch FROM lease_until - now()) * 1000)::bigint FROM svc_engine.members
WHERE owner <> $1 AND lease_until > now() AND EXISTS (SELECT FROM u) ORDER BY owner`

// fleetIdemPruneInterval is how often expired idempotency keys' claims
// are deleted.
const fleetIdemPruneInterval = time.Hour

// fleetMembersChannel is the NOTIFY channel of joins and leaves.
const fleetMembersChannel = "svc_engine_members"

// fleetMember is a live replica as the others see it.
type fleetMember struct {
	Owner   string // its name (engineStorePG.owner)
	Address string // the base URL the others reach it at (SVC_FLEET_ADDRESS)
}

// fleetView is the live members, ordered by name, as of a renewal.
type fleetView struct {
	self    string
	members []fleetMember
}

// ownerOf returns the member that owns partition p.
func (v fleetView) ownerOf(p int) (fleetMember, bool) {
	if len(v.members) == 0 {
		return fleetMember{}, false
	}
	return v.members[p%len(v.members)], true
}

// owns reports whether this replica owns partition p.
func (v fleetView) owns(p int) bool {
	m, ok := v.ownerOf(p)
	return ok && m.Owner == v.self
}

// fleetMembers is this replica among the members: its row, the view, and
// the calls to the others (engine_fleet_rpc.go).
type fleetMembers struct {
	f      *fleet
	pg     *engineStorePG // partition 0's store: the db, the name and the lease settings
	addr   string
	token  string // the fleet's token: calls between replicas carry it
	client *http.Client

	mu       sync.Mutex
	v        fleetView
	deadline time.Time // the row surely holds until then
	started  bool      // run was started (before the call: leave waits for it)
	left     bool

	kick chan struct{} // capacity 1: renew now
	stop chan struct{}
	done chan struct{}
}

// joinFleet creates the members' table if needed, reads the fleet's token
// (making it if this is the first replica ever), writes this replica's row
// and tells the others.
func joinFleet(ctx context.Context, f *fleet, pg *engineStorePG, addr string) (*fleetMembers, error) {
	m := &fleetMembers{f: f, pg: pg, addr: addr, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}}}
	if _, err := pg.db.Exec(ctx, fleetMembersSchemaSQL); err != nil {
		return nil, pg.fault("create svc_engine.members", err)
	}
	fresh := make([]byte, 32)
	rand.Read(fresh)
	if _, err := pg.db.Exec(ctx, `INSERT INTO svc_engine.fleet (id, token) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, hex.EncodeToString(fresh)); err != nil {
		return nil, pg.fault("make the fleet's token", err)
	}
	if err := pg.db.QueryRow(ctx, `SELECT token FROM svc_engine.fleet WHERE id = 1`).Scan(&m.token); err != nil {
		return nil, pg.fault("read the fleet's token", err)
	}
	if _, err := m.renew(ctx); err != nil {
		return nil, err
	}
	m.notify()
	pg.log.Info("engine replica joined the fleet", "owner", pg.owner, "address", addr, "members", len(m.view().members))
	return m, nil
}

// view returns the members as of the last renewal.
func (m *fleetMembers) view() fleetView {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.v
}

// renew writes this replica's row and reads the others; it returns in how
// long the first other lease expires.
func (m *fleetMembers) renew(ctx context.Context) (time.Duration, error) {
	sent := time.Now()
	rows, err := m.pg.db.Query(ctx, fleetMembersRenewSQL, m.pg.owner, m.addr, m.pg.lease.Milliseconds())
	if err != nil {
		return 0, m.pg.fault("renew this replica's membership", err)
	}
	members := []fleetMember{{Owner: m.pg.owner, Address: m.addr}}
	next := 24 * time.Hour
	var mb fleetMember
	var ms int64
	if _, err := pgx.ForEachRow(rows, []any{&mb.Owner, &mb.Address, &ms}, func() error {
		members = append(members, mb)
		next = min(next, time.Duration(ms)*time.Millisecond)
		return nil
	}); err != nil {
		return 0, m.pg.fault("renew this replica's membership", err)
	}
	slices.SortFunc(members, func(a, b fleetMember) int { return strings.Compare(a.Owner, b.Owner) })
	m.mu.Lock()
	m.v = fleetView{self: m.pg.owner, members: members}
	m.deadline = sent.Add(m.pg.lease)
	m.mu.Unlock()
	return next, nil
}

// run renews every Renew (and at once when kicked, or when another
// member's lease is due to expire), rebalancing the partitions after each
// renewal, until leave.
func (m *fleetMembers) run() {
	defer close(m.done)
	go m.listen()
	t := time.NewTimer(m.pg.renew)
	defer t.Stop()
	var pruned time.Time
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		case <-m.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), m.pg.renew)
		next, err := m.renew(ctx)
		cancel()
		wait := m.pg.renew
		if err != nil {
			m.pg.log.Warn("renew this replica's membership; retrying", "err", err)
		} else {
			if next < wait {
				wait = max(next+20*time.Millisecond, 50*time.Millisecond) // past it by a little: the database decides
			}
			v := m.view()
			if err := m.f.rebalance(v); err != nil {
				m.pg.log.Warn("open a partition this replica owns; retrying at the next renewal", "err", err)
			}
			if v.owns(0) && time.Since(pruned) > fleetIdemPruneInterval { // one replica prunes: partition 0's
				m.pruneIdemKeys(m.f.opts.idemRetention())
				pruned = time.Now()
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(wait)
	}
}

// kickRenew asks run to renew (and rebalance) now.
func (m *fleetMembers) kickRenew() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// listen turns the others' joins and leaves into renewals, on a connection
// of its own, reconnecting after a failure; the renewals cover what it
// misses.
func (m *fleetMembers) listen() {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-m.stop; cancel() }()
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, m.pg.db.Config().ConnConfig.Copy())
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+fleetMembersChannel)
			for err == nil {
				var n *pgconn.Notification
				if n, err = conn.WaitForNotification(ctx); err == nil && n.Payload != m.pg.owner {
					m.kickRenew()
				}
			}
			conn.Close(context.Background())
		}
		select {
		case <-ctx.Done():
		case <-time.After(m.pg.renew):
		}
	}
}

// notify tells the others this replica joined or left.
func (m *fleetMembers) notify() {
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
	defer cancel()
	if _, err := m.pg.db.Exec(ctx, `SELECT pg_notify($1, $2)`, fleetMembersChannel, m.pg.owner); err != nil {
		m.pg.log.Warn("tell the other replicas of a join or leave; they see it at their next renewal", "err", err)
	}
}

// leave stops renewing and deletes this replica's row, so the others take
// its partitions at once (the caller then closes them, releasing their
// runs).
func (m *fleetMembers) leave() {
	m.mu.Lock()
	if m.left {
		m.mu.Unlock()
		return
	}
	m.left = true
	started := m.started
	m.mu.Unlock()
	close(m.stop)
	if started {
		<-m.done
	}
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
	defer cancel()
	if _, err := m.pg.db.Exec(ctx, `DELETE FROM svc_engine.members WHERE owner = $1`, m.pg.owner); err != nil {
		m.pg.log.Warn("leave the fleet; the others take this replica's partitions when its lease expires", "err", err)
	}
	m.notify()
	m.client.CloseIdleConnections()
}

// health is the store as GET /api/health shows it on PostgreSQL: this
// replica's membership, the partitions it holds and the newest epoch of
// their leases.
func (m *fleetMembers) health() engineStoreHealth {
	m.mu.Lock()
	v, held := m.v, time.Now().Before(m.deadline) && !m.left
	m.mu.Unlock()
	h := engineStoreHealth{Kind: engineKindPostgres, Owner: m.pg.owner, Lease: engineLeaseReleased, Replicas: len(v.members), Partitions: []int{}}
	if held {
		h.Lease = engineLeaseHeld
	}
	for _, e := range m.f.engines() {
		h.Partitions = append(h.Partitions, e.opts.Partition)
		ph := e.storeHealth()
		if ph.Lease == engineLeaseLost {
			h.Lease = engineLeaseLost
		}
		h.Epoch = max(h.Epoch, ph.Epoch) // a partition rejoined after a lost lease has a newer one
	}
	return h
}

// fleetAddress is the base URL the other replicas reach this one at: set
// (SVC_FLEET_ADDRESS: http or https, a host and a port, no path), or, when
// it is empty, http:// and the listener's address, with this host's name
// in place of an address that binds every interface.
func fleetAddress(set string, ln net.Addr) (string, error) {
	if set != "" {
		u, err := url.Parse(set)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.User != nil {
			return "", fmt.Errorf("SVC_FLEET_ADDRESS is %q: it must be the URL the other replicas reach this one at, such as http://10.0.0.5:8080", truncateForMessage(set))
		}
		return strings.TrimRight(set, "/"), nil
	}
	host, port, err := net.SplitHostPort(ln.String())
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if host, err = os.Hostname(); err != nil {
			return "", fmt.Errorf("name this host for the other replicas (set SVC_FLEET_ADDRESS): %w", err)
		}
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// claimIdemKey returns the partition of idempotency key key: the one it
// was first claimed for (within the retention), else want, now claimed.
// A key is project-wide: a start of another workflow (whose limit's bucket
// may name another partition) or of another input with it goes where the
// key's first start went, and is refused there as a reuse.
func (m *fleetMembers) claimIdemKey(ctx context.Context, key string, want int, retention time.Duration) (int, error) {
	for range 3 {
		var p int
		err := m.pg.db.QueryRow(ctx, fleetIdemClaimSQL, key, want, retention.Milliseconds()).Scan(&p)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, fmt.Errorf("%w: %v", errJournalUnavailable, m.pg.fault("claim an idempotency key", err))
		}
	}
	return 0, fmt.Errorf("%w: the idempotency key is being claimed by another start; retry", errJournalUnavailable)
}

// pruneIdemKeys deletes the claims older than the retention.
func (m *fleetMembers) pruneIdemKeys(retention time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
	defer cancel()
	if _, err := m.pg.db.Exec(ctx, `DELETE FROM svc_engine.idem_keys WHERE at < now() - $1 * interval '1 millisecond'`, retention.Milliseconds()); err != nil {
		m.pg.log.Warn("prune the idempotency keys' partitions", "err", err)
	}
}
