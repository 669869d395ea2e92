package main

// Kept responses of the Responses wire (wire_responses.go) in
// svc.agent_responses (platform_migrations/0005_responses.sql). A response
// holds only the messages its turn added and points at the response it
// continues, so a chain keeps its history once and a branch from an older
// response shares everything before it. Reading a response's conversation
// walks up to its chain's first response. Deleting a response, or trimming
// it past the retention (SVC_RESPONSE_RETENTION), first hands its messages
// down to the responses that continue it, so they still read their whole
// conversation.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// Trimming of kept responses.
const (
	// responseRetentionDefault is how long a kept response stays unless
	// SVC_RESPONSE_RETENTION says otherwise.
	responseRetentionDefault = 30 * 24 * time.Hour
	// responseTrimInterval is how often responses past the retention go.
	responseTrimInterval = time.Hour
	// responseTrimBatch is the most responses one trim pass removes; the
	// next pass (or the next tick) takes the rest.
	responseTrimBatch = 500
)

// errResponseNotFound: no kept response with that id for this credential.
var errResponseNotFound = errors.New("response not found")

// responseRow is one kept response: its own messages, not its history.
type responseRow struct {
	ID, Agent, CredentialHash string
	Parent                    string // "" when its chain starts here
	Messages                  []chatMessage
	Pending                   []pendingCall
	Turns                     int
	turn                      string // the turn in progress that made it (sessionStore.takeLeft), whose record saving removes
}

// loadResponse returns the conversation of the kept response id of ref's
// agent and credential (its ancestors' messages, then its own), with its
// pending calls and turns; sess.stored is false when there is no such
// response.
func (s *sessionStore) loadResponse(ctx context.Context, ref sessionRef) (*agentSession, error) {
	sess := &agentSession{Ref: ref}
	rows, err := s.db.Query(ctx, `WITH RECURSIVE up AS (
    SELECT parent_id, messages, pending, turns, 0 AS depth FROM svc.agent_responses
    WHERE response_id = $1 AND agent = $2 AND credential_hash = $3
  UNION ALL
    SELECT r.parent_id, r.messages, NULL, NULL, up.depth + 1 FROM svc.agent_responses r JOIN up ON r.response_id = up.parent_id)
SELECT messages, pending, turns FROM up ORDER BY depth DESC`, ref.Key, ref.Agent, ref.CredentialHash)
	if err != nil {
		return nil, fmt.Errorf("load response %q: %w", ref.Key, err)
	}
	defer rows.Close()
	for rows.Next() {
		var msgs, pending []byte
		var turns *int
		if err := rows.Scan(&msgs, &pending, &turns); err != nil {
			return nil, fmt.Errorf("load response %q: %w", ref.Key, err)
		}
		var own []chatMessage
		if err := json.Unmarshal(msgs, &own); err != nil {
			return nil, fmt.Errorf("load response %q: messages: %w", ref.Key, err)
		}
		sess.Messages = append(sess.Messages, own...)
		if turns != nil { // the response itself (the last row)
			if err := json.Unmarshal(pending, &sess.Pending); err != nil {
				return nil, fmt.Errorf("load response %q: pending: %w", ref.Key, err)
			}
			sess.Turns, sess.stored = *turns, true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load response %q: %w", ref.Key, err)
	}
	return sess, nil
}

// saveResponse keeps r (its body is set when its answer is finished) and
// removes the record of the turn in progress that made it.
func (s *sessionStore) saveResponse(ctx context.Context, r responseRow) error {
	msgs, pending, err := sessionEncode(r.Messages, r.Pending)
	if err != nil {
		return fmt.Errorf("save response %q: %w", r.ID, err)
	}
	var parent *string
	if r.Parent != "" {
		parent = &r.Parent
	}
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		// The parent is locked until the insert commits: a delete or trim
		// of it waits, then hands its messages down to this response too.
		if parent != nil {
			var one int
			err := tx.QueryRow(ctx, `SELECT 1 FROM svc.agent_responses WHERE response_id = $1 FOR KEY SHARE`, r.Parent).Scan(&one)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("save response %q: %w: %q was deleted or trimmed during the turn", r.ID, errSessionNotFound, r.Parent)
			}
			if err != nil {
				return fmt.Errorf("save response %q: %w", r.ID, err)
			}
		}
		if _, err := tx.Exec(ctx, `WITH ended AS (DELETE FROM svc.agent_turns WHERE turn_id = $8)
INSERT INTO svc.agent_responses (response_id, agent, credential_hash, parent_id, messages, pending, turns)
VALUES ($1, $2, $3, $4, $5, $6, $7)`, r.ID, r.Agent, r.CredentialHash, parent, msgs, pending, r.Turns, r.turn); err != nil {
			return fmt.Errorf("save response %q: %w", r.ID, err)
		}
		return nil
	})
}

// setResponseBody stores the response object answered for the kept
// response id of credentialHash.
func (s *sessionStore) setResponseBody(ctx context.Context, id, credentialHash string, body []byte) error {
	if _, err := s.db.Exec(ctx, `UPDATE svc.agent_responses SET body = $3 WHERE response_id = $1 AND credential_hash = $2`,
		id, credentialHash, string(body)); err != nil {
		return fmt.Errorf("store response %q: %w", id, err)
	}
	return nil
}

// responseBody returns the response object of the kept response id of
// credentialHash; errResponseNotFound when there is none (or its answer
// never finished).
func (s *sessionStore) responseBody(ctx context.Context, id, credentialHash string) ([]byte, error) {
	var body *string
	err := s.db.QueryRow(ctx, `SELECT body FROM svc.agent_responses WHERE response_id = $1 AND credential_hash = $2`, id, credentialHash).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && body == nil {
		return nil, errResponseNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read response %q: %w", id, err)
	}
	return []byte(*body), nil
}

// deleteResponse deletes the kept response id of credentialHash
// (errResponseNotFound when there is none); the responses continuing it
// take over its messages first, so their conversations stay whole.
func (s *sessionStore) deleteResponse(ctx context.Context, id, credentialHash string) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		n, err := responseSpliceOut(ctx, tx, id, credentialHash)
		if err == nil && n == 0 {
			err = errResponseNotFound
		}
		return err
	})
}

// responseSpliceOut removes response id (of credentialHash, or of any
// credential when it is "") in tx after prepending its messages to those
// of its children, which then continue its parent. It returns how many
// responses it removed (0 or 1).
func responseSpliceOut(ctx context.Context, tx pgx.Tx, id, credentialHash string) (int64, error) {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM svc.agent_responses WHERE response_id = $1 AND ($2 = '' OR credential_hash = $2) FOR UPDATE`,
		id, credentialHash).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err == nil {
		// messages are JSON arrays kept as text (jsonb cannot hold every
		// string a model writes): "[a]" and "[b]" join as "[a,b]".
		_, err = tx.Exec(ctx, `UPDATE svc.agent_responses c SET parent_id = p.parent_id, messages = CASE
    WHEN p.messages = '[]' THEN c.messages
    WHEN c.messages = '[]' THEN p.messages
    ELSE left(p.messages, -1) || ',' || substr(c.messages, 2) END
FROM svc.agent_responses p WHERE p.response_id = $1 AND c.parent_id = p.response_id`, id)
	}
	if err == nil {
		_, err = tx.Exec(ctx, `DELETE FROM svc.agent_responses WHERE response_id = $1`, id)
	}
	if err != nil {
		return 0, fmt.Errorf("delete response %q: %w", id, err)
	}
	return 1, nil
}

// trimResponses removes the responses kept before before, oldest first
// (a parent before its children, so each hands its messages down to a
// child that may stay), at most responseTrimBatch of them per pass, until
// none is left or ctx ends. It returns how many it removed.
func (s *sessionStore) trimResponses(ctx context.Context, before time.Time) (int, error) {
	total := 0
	for {
		rows, err := s.db.Query(ctx, `SELECT response_id FROM svc.agent_responses WHERE created_at < $1 ORDER BY created_at LIMIT $2`, before, responseTrimBatch)
		if err != nil {
			return total, fmt.Errorf("trim responses: %w", err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return total, fmt.Errorf("trim responses: %w", err)
		}
		for _, id := range ids {
			err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
				n, err := responseSpliceOut(ctx, tx, id, "")
				total += int(n)
				return err
			})
			if err != nil {
				return total, err
			}
		}
		if len(ids) < responseTrimBatch {
			return total, nil
		}
	}
}

// startResponseTrim trims the responses past retention now and every
// responseTrimInterval, off the requests' path, until the returned stop is
// called; retention 0 keeps responses forever (nothing starts).
func (s *sessionStore) startResponseTrim(retention time.Duration, log *slog.Logger) (stop func()) {
	if retention <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(responseTrimInterval)
		defer tick.Stop()
		for {
			n, err := s.trimResponses(ctx, time.Now().Add(-retention))
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("trim kept responses past the retention", "err", err)
			case n > 0:
				log.Info("trimmed kept responses past the retention", "responses", n, "retention", retention)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}
