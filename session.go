package main

// Sessions and approvals (SPEC §5, DESIGN §4). A turn is stateless unless
// the request names a durable session (x-svc-session, or a non-empty
// agent-UI threadId): then the history and the tool calls waiting for the
// client live in PostgreSQL (svc.agent_sessions), keyed by agent, the
// SHA-256 of the credential and the session key, so they survive a restart
// of svc dev and no other credential can read or continue them.
//
// The history rule of a durable turn: the server's history is
// authoritative. For a session that already has history, only the request's
// messages after its last assistant message are taken (a client may send
// just its newest turn, or resend everything); a new session takes every
// message the request carries, so a client may seed it.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sessionMaxKeyLength bounds a session key (header value or threadId).
const sessionMaxKeyLength = 512

// Errors of durable sessions that the wires answer in their own shape.
var (
	errSessionBusy        = errors.New("a turn of this session is already running; wait for it to finish")
	errSessionUnavailable = errors.New("durable sessions need the runtime's database, which is not available")
	errSessionNotFound    = errors.New("the stored session to continue was not found")
)

// sessionStore keeps durable sessions in PostgreSQL and lets one turn of a
// session run at a time: in this process (busy) and, when replicas share
// the engine (replicas), across them (a session-level advisory lock held
// for the turn on a connection of locks, which PostgreSQL releases if the
// replica dies).
type sessionStore struct {
	db       *pgxpool.Pool
	replicas bool

	mu       sync.Mutex
	busy     map[string]bool // sessionRef.lockKey of the sessions running a turn
	locks    *pgxpool.Pool   // made on first use: one connection per turn holding its lock
	locksErr error
}

// Bounds of the session locks' pool: at most this many durable turns run at
// once on a replica; one more waits up to sessionLockWait for a connection.
const (
	sessionLockMaxConns = 64
	sessionLockWait     = 5 * time.Second
)

// newSessionStore returns a store over db; replicas says whether other
// processes may run turns on the same database (the PostgreSQL engine).
func newSessionStore(db *pgxpool.Pool, replicas bool) *sessionStore {
	return &sessionStore{db: db, replicas: replicas, busy: map[string]bool{}}
}

// sessionRef names a durable session: agent, credential and key.
type sessionRef struct {
	Agent          string
	CredentialHash string
	Key            string
}

// newSessionRef scopes key to agent and the credential.
func newSessionRef(agent, credential, key string) sessionRef {
	sum := sha256.Sum256([]byte(credential))
	return sessionRef{Agent: agent, CredentialHash: hex.EncodeToString(sum[:]), Key: key}
}

// lockKey is the ref as one string.
func (r sessionRef) lockKey() string { return r.Agent + "\x00" + r.CredentialHash + "\x00" + r.Key }

// agentSession is a durable session's state.
type agentSession struct {
	Ref      sessionRef
	Messages []chatMessage
	Pending  []pendingCall
	Turns    int
	stored   bool   // it exists in the database
	turn     string // the turn in progress (takeLeft), whose record save removes
}

// acquire marks ref as running a turn, here and for every replica on the
// database; release undoes it. It fails with errSessionBusy when a turn of
// ref is already running anywhere.
func (s *sessionStore) acquire(ctx context.Context, ref sessionRef) (release func(), err error) {
	k := ref.lockKey()
	s.mu.Lock()
	if s.busy[k] {
		s.mu.Unlock()
		return nil, errSessionBusy
	}
	s.busy[k] = true
	unmark := func() {
		s.mu.Lock()
		delete(s.busy, k)
		s.mu.Unlock()
	}
	if !s.replicas { // one process runs every turn: busy is the whole lock
		s.mu.Unlock()
		return unmark, nil
	}
	if s.locks == nil && s.locksErr == nil {
		cfg := s.db.Config().Copy()
		cfg.MaxConns = sessionLockMaxConns
		s.locks, s.locksErr = pgxpool.NewWithConfig(context.Background(), cfg)
	}
	locks, lerr := s.locks, s.locksErr
	s.mu.Unlock()
	if lerr != nil {
		unmark()
		return nil, lerr // the driver's: wireErrorFor tells an unreachable database, and shows no detail
	}
	actx, cancel := context.WithTimeout(ctx, sessionLockWait)
	defer cancel()
	conn, err := locks.Acquire(actx)
	if err != nil {
		unmark()
		if locks.Stat().AcquiredConns() >= sessionLockMaxConns {
			return nil, fmt.Errorf("%w (no connection for its lock within %v: %d durable turns run at once here)", errSessionBusy, sessionLockWait, sessionLockMaxConns)
		}
		return nil, err // the driver's, as above
	}
	key := sessionLockID(k)
	var got bool
	if err := conn.QueryRow(actx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&got); err != nil || !got {
		conn.Release()
		unmark()
		if err != nil {
			return nil, err // the driver's, as above
		}
		return nil, errSessionBusy // another replica runs a turn of it
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.Background(), sessionLockWait)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
			conn.Conn().Close(uctx) // closing the connection releases the lock
		}
		conn.Release()
		unmark()
	}, nil
}

// sessionLockID is the advisory lock key of a session: the first 8 bytes of
// the SHA-256 of its lock key (collisions only make two sessions wait for
// each other).
func sessionLockID(k string) int64 {
	sum := sha256.Sum256([]byte("svc session\x00" + k))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// close releases the locks' pool without waiting for turns still holding
// a lock (pgxpool's Close waits for them; the process is ending).
func (s *sessionStore) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.locks != nil {
		go s.locks.Close()
	}
}

// load returns the session ref, empty when it does not exist yet.
func (s *sessionStore) load(ctx context.Context, ref sessionRef) (*agentSession, error) {
	sess := &agentSession{Ref: ref}
	var msgs, pending []byte
	err := s.db.QueryRow(ctx, `select messages, pending, turns from svc.agent_sessions
		where agent = $1 and credential_hash = $2 and session_key = $3`, ref.Agent, ref.CredentialHash, ref.Key).Scan(&msgs, &pending, &sess.Turns)
	if errors.Is(err, pgx.ErrNoRows) {
		return sess, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load session %q: %w", ref.Key, err)
	}
	if err := json.Unmarshal(msgs, &sess.Messages); err != nil {
		return nil, fmt.Errorf("load session %q: messages: %w", ref.Key, err)
	}
	if err := json.Unmarshal(pending, &sess.Pending); err != nil {
		return nil, fmt.Errorf("load session %q: pending: %w", ref.Key, err)
	}
	sess.stored = true
	return sess, nil
}

// save writes the session, creating it on its first turn, and removes the
// record of its turn in progress in the same statement.
func (s *sessionStore) save(ctx context.Context, sess *agentSession) error {
	msgs, pending, err := sessionEncode(sess.Messages, sess.Pending)
	if err != nil {
		return fmt.Errorf("save session %q: %w", sess.Ref.Key, err)
	}
	_, err = s.db.Exec(ctx, `with ended as (delete from svc.agent_turns where turn_id = $7)
		insert into svc.agent_sessions(agent, credential_hash, session_key, messages, pending, turns)
		values($1, $2, $3, $4, $5, $6)
		on conflict (agent, credential_hash, session_key) do update
		set messages = excluded.messages, pending = excluded.pending, turns = excluded.turns, updated_at = now()`,
		sess.Ref.Agent, sess.Ref.CredentialHash, sess.Ref.Key, msgs, pending, sess.Turns, sess.turn)
	if err != nil {
		return fmt.Errorf("save session %q: %w", sess.Ref.Key, err)
	}
	sess.stored = true
	return nil
}

// runningTurn is a durable turn in progress as svc.agent_turns keeps it
// (platform_migrations/0008_agent_turns.sql).
type runningTurn struct {
	Ref            sessionRef
	ID             string
	Wire           string
	ConversationID string
	Input          json.RawMessage // as the runs API shows it (turnInput)
	StartedAt      time.Time
}

// runningTurnColumns are the columns collectRunningTurns reads.
const runningTurnColumns = `agent, credential_hash, session_key, turn_id, wire, conversation_key, input, started_at`

// collectRunningTurns reads rows of runningTurnColumns.
func collectRunningTurns(rows pgx.Rows) ([]runningTurn, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (runningTurn, error) {
		var t runningTurn
		var input string
		err := row.Scan(&t.Ref.Agent, &t.Ref.CredentialHash, &t.Ref.Key, &t.ID, &t.Wire, &t.ConversationID, &input, &t.StartedAt)
		t.Input = json.RawMessage(input)
		return t, err
	})
}

// takeLeft removes and returns the turns of ref that a process left in
// progress when it died, and records next as the turn of ref now in
// progress (save removes that record), in one statement. The caller holds
// ref's lock (acquire), so no other turn of ref runs anywhere: every record
// found is a dead process's.
//
// The statement commits without waiting for its WAL to reach the disk
// (synchronous_commit off, set by its INSERT's condition, which runs
// exactly once): the turn's save, a synchronous commit, flushes it with the
// session a moment later. This spares a session's turn one of its two
// disk flushes. What a crash of PostgreSQL itself within that moment could
// undo: the record of a turn that died with it (which is then not reported
// as interrupted), or the removal of records left behind, which would come
// back and be reported twice; so when the statement removed any, a
// synchronous commit makes the removal durable before they are returned.
func (s *sessionStore) takeLeft(ctx context.Context, ref sessionRef, next runningTurn) ([]runningTurn, error) {
	rows, err := s.db.Query(ctx, `WITH left_behind AS (
    DELETE FROM svc.agent_turns WHERE agent = $1 AND credential_hash = $2 AND session_key = $3
    RETURNING `+runningTurnColumns+`),
  started AS (
    INSERT INTO svc.agent_turns (turn_id, agent, credential_hash, session_key, lock_key, wire, conversation_key, input, started_at)
    SELECT $4, $1, $2, $3, $5::bigint, $6, $7, $8, $9::timestamptz WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL)
SELECT `+runningTurnColumns+` FROM left_behind ORDER BY started_at`,
		ref.Agent, ref.CredentialHash, ref.Key, next.ID, sessionLockID(ref.lockKey()), next.Wire, next.ConversationID, string(next.Input), next.StartedAt)
	if err != nil {
		return nil, fmt.Errorf("turns in progress of session %q: %w", ref.Key, err)
	}
	left, err := collectRunningTurns(rows)
	if err != nil {
		return nil, fmt.Errorf("turns in progress of session %q: %w", ref.Key, err)
	}
	if len(left) > 0 {
		// A write committed synchronously flushes every commit before it.
		if _, err := s.db.Exec(ctx, `UPDATE svc.agent_turns SET started_at = started_at WHERE turn_id = $1`, next.ID); err != nil {
			return nil, fmt.Errorf("turns in progress of session %q: %w", ref.Key, err)
		}
	}
	return left, nil
}

// takeAbandoned removes and returns the turns in progress, of any session,
// whose process died. With replicas, those whose session lock nobody on
// the database holds: a turn takes it before its record is made and lets
// it go after the record is removed, and PostgreSQL lets it go when the
// holder's connection ends. Alone, every one: it is called at boot, before
// a turn can start.
func (s *sessionStore) takeAbandoned(ctx context.Context) ([]runningTurn, error) {
	rows, err := s.db.Query(ctx, `DELETE FROM svc.agent_turns t WHERE NOT $1::boolean OR NOT EXISTS (
    SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid::bigint = (t.lock_key >> 32) & 4294967295 AND l.objid::bigint = t.lock_key & 4294967295)
RETURNING `+runningTurnColumns, s.replicas)
	if err != nil {
		return nil, fmt.Errorf("turns in progress: %w", err)
	}
	left, err := collectRunningTurns(rows)
	if err != nil {
		return nil, fmt.Errorf("turns in progress: %w", err)
	}
	slices.SortFunc(left, func(a, b runningTurn) int { return a.StartedAt.Compare(b.StartedAt) })
	return left, nil
}

// endTurn removes the record of turn id in progress after its save failed
// (a save removes it itself), so that the turn, recorded as it ended, is
// not recorded as interrupted too.
func (s *sessionStore) endTurn(ctx context.Context, id string) {
	s.db.Exec(ctx, `DELETE FROM svc.agent_turns WHERE turn_id = $1`, id)
}

// sessionEncode returns the JSON arrays of messages and pending calls as
// a session or a kept response stores them ([] for none).
func sessionEncode(msgs []chatMessage, pending []pendingCall) ([]byte, []byte, error) {
	m, err := json.Marshal(sessionNonNil(msgs))
	if err != nil {
		return nil, nil, err
	}
	p, err := json.Marshal(sessionNonNil(pending))
	return m, p, err
}

// sessionNonNil returns s, or an empty slice for nil (so it encodes as []).
func sessionNonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// sessionAfterLastAssistant returns the messages after the last assistant message.
func sessionAfterLastAssistant(msgs []chatMessage) []chatMessage {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "assistant" {
			return msgs[i+1:]
		}
	}
	return msgs
}

// turnOutput is the output of an agent turn as the runs API shows it.
type turnOutput struct {
	Text       string        `json:"text"`
	ToolCalls  []pendingCall `json:"toolCalls,omitempty"`
	StopReason string        `json:"stopReason"`
	Usage      modelUsage    `json:"usage"`
}

// runTurn runs one turn of ag for wr on wire, authenticated by credential:
// it loads the durable session when wr names one (wr.SessionFrom, when set,
// is the stored session it continues under the new key; with wr.Responses
// they are kept responses, session_responses.go), runs the loop, saves the
// session or the new response (also after a failure, so tools that already
// ran are not lost or run twice) and records the turn as a run. emit
// receives the turn's events as they happen.
func (h *agentHost) runTurn(ctx context.Context, ag *agentDef, p *modelProvider, wire, credential string, wr *agentRequest, emit func(agentEvent)) (*agentResult, error) {
	started := time.Now()
	if p == nil {
		return nil, fmt.Errorf("%w: set OPENAI_API_KEY or ANTHROPIC_API_KEY (or SVC_MODEL_BASE_URL), or store a credential in the console", errNoModelProvider)
	}
	ctx, span := h.otelTurn(ctx, ag.Name, wire, wr.SessionKey)
	loop := newAgentLoop(h, ag, h.models(p), p, wr, emit)
	loop.actor = turnActor(credential)
	input := wr.Messages
	var recorded json.RawMessage // the turn's input as recorded (turnInput)
	var res *agentResult
	var err error
	if wr.SessionKey == "" {
		res, err = loop.run(ctx, nil, nil, input, nil)
		recorded = turnInput(sessionAfterLastAssistant(input))
	} else {
		if h.sessions == nil {
			return nil, errSessionUnavailable
		}
		ref := newSessionRef(ag.Name, credential, wr.SessionKey)
		release, aerr := h.sessions.acquire(ctx, ref)
		if aerr != nil {
			return nil, aerr
		}
		defer release()
		from := ref
		if wr.SessionFrom != "" {
			from = newSessionRef(ag.Name, credential, wr.SessionFrom)
		}
		sess, lerr := &agentSession{Ref: ref}, error(nil)
		switch {
		case !wr.Responses:
			sess, lerr = h.sessions.load(ctx, from)
		case wr.SessionFrom != "":
			sess, lerr = h.sessions.loadResponse(ctx, from)
		}
		if lerr != nil {
			return nil, lerr
		}
		if wr.SessionFrom != "" {
			if !sess.stored {
				return nil, fmt.Errorf("%w: %q (stored per agent and credential; a response made with store: false is not kept)", errSessionNotFound, wr.SessionFrom)
			}
			sess.Ref = ref // the continuation is kept under its own key; the one it continues stays as it was
		}
		if sess.stored {
			input = sessionAfterLastAssistant(input)
		}
		// The turn is recorded in progress until its session or response
		// is saved: should this process die first, the next turn of the
		// session (or a sweep, on any replica) records it as interrupted.
		sess.turn = randomID("turn_", 12)
		recorded = turnInput(input)
		left, terr := h.sessions.takeLeft(ctx, ref, runningTurn{ID: sess.turn, Wire: wire, ConversationID: wr.ConversationKey,
			Input: recorded, StartedAt: started})
		if terr != nil {
			return nil, terr
		}
		h.recordInterrupted(left)
		if !wr.Responses { // a kept response is written once, when its turn ends
			loop.checkpoint = func(progress *agentResult) {
				// The session as it would be if the turn ended here; its
				// record in progress stays (turn "").
				at := &agentSession{Ref: sess.Ref, Messages: append(slices.Clip(sess.Messages), progress.Messages...), Turns: sess.Turns}
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				if err := h.sessions.save(sctx, at); err != nil {
					h.log.Warn("keep the progress of a turn whose tools ran", "agent", ag.Name, "err", err)
				}
			}
		}
		res, err = loop.run(ctx, sess.Messages, sess.Pending, input, wr.Approvals)
		sess.Messages = append(sess.Messages, res.Messages...)
		sess.Pending = res.Pending
		sess.Turns++
		// Saved with its own bound: a client that hung up must not lose
		// the progress of a turn whose tools already ran.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		var serr error
		if wr.Responses { // a response keeps only what its turn added
			serr = h.sessions.saveResponse(sctx, responseRow{ID: ref.Key, Agent: ref.Agent, CredentialHash: ref.CredentialHash,
				Parent: wr.SessionFrom, Messages: res.Messages, Pending: res.Pending, Turns: sess.Turns, turn: sess.turn})
		} else {
			serr = h.sessions.save(sctx, sess)
		}
		if serr != nil { // the turn is recorded below as it ended: not as interrupted too
			h.sessions.endTurn(sctx, sess.turn)
		}
		cancel()
		if err == nil {
			err = serr
		} else if serr != nil {
			h.log.Error("save session after a failed turn", "agent", ag.Name, "err", serr)
		}
	}
	h.recordTurn(ag.Name, wire, wr, recorded, res, err, started)
	span.end(err)
	return res, err
}

// recordTurn records a finished turn in the runs API; a failure to record
// is logged, never returned (the turn itself happened).
func (h *agentHost) recordTurn(agent, wire string, wr *agentRequest, input json.RawMessage, res *agentResult, turnErr error, started time.Time) {
	if h.record == nil {
		return
	}
	t := agentTurn{Agent: agent, Wire: wire, SessionID: wr.SessionKey, ConversationID: wr.ConversationKey, StartedAt: started, Input: input}
	if res != nil {
		t.ToolCalls = res.Calls
		t.Output, _ = json.Marshal(turnOutput{Text: res.text(), ToolCalls: res.Pending, StopReason: res.StopReason, Usage: res.Usage})
	}
	var ue *upstreamError
	switch {
	case turnErr == nil:
	case errors.Is(turnErr, context.Canceled):
		// The client's request ended before the turn did: it hung up, or
		// the console's Stop aborted it. What ran is kept; the turn stops.
		t.Stopped = true
		t.Error = &runError{Name: "Stopped", Message: "the client stopped the turn before it ended (it disconnected, or pressed Stop)"}
	case errors.As(turnErr, &ue):
		t.Error = &runError{Name: "UpstreamError", Message: turnErr.Error()}
	default:
		t.Error = &runError{Name: "AgentError", Message: turnErr.Error()}
	}
	h.keepTurn(t)
}

// turnInterrupted is the error name of a turn left in progress by a
// process that died (sessionStore.takeLeft).
const turnInterrupted = "Interrupted"

// recordInterrupted records turns left in progress by a process that died
// as failed runs with the error Interrupted.
func (h *agentHost) recordInterrupted(left []runningTurn) {
	for _, lt := range left {
		h.keepTurn(agentTurn{Agent: lt.Ref.Agent, Wire: lt.Wire, SessionID: lt.Ref.Key, ConversationID: lt.ConversationID, Input: lt.Input, StartedAt: lt.StartedAt,
			Error: &runError{Name: turnInterrupted, Message: "The turn did not end: the process running it stopped (it was killed or crashed) before the turn was saved. The session keeps what its tools did, if any ran; the rest of the turn is lost: send its message again."}})
	}
}

// sweepInterrupted records the turns that processes left in progress when
// they died, of sessions whose next turn has not come yet (takeAbandoned),
// and logs what it did.
func (h *agentHost) sweepInterrupted(ctx context.Context) {
	left, err := h.sessions.takeAbandoned(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		h.log.Warn("record the chat turns left in progress by a process that stopped", "err", err)
	case len(left) > 0:
		h.log.Info("recorded chat turns left in progress by a process that stopped as interrupted", "turns", len(left))
	}
	h.recordInterrupted(left)
}

// startTurnSweep runs sweepInterrupted: with interval 0 (a process alone
// on its database: what it finds at boot was left by its previous run)
// once, before it returns; else every interval, off the requests' path,
// until the returned stop is called.
func (h *agentHost) startTurnSweep(interval time.Duration) (stop func()) {
	if interval <= 0 {
		ctx, cancel := context.WithTimeout(context.Background(), historyTimeout)
		defer cancel()
		h.sweepInterrupted(ctx)
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			h.sweepInterrupted(ctx)
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// keepTurn records t in the runs API; a failure to record is logged.
func (h *agentHost) keepTurn(t agentTurn) {
	if h.record == nil {
		return
	}
	if _, err := h.record(t); err != nil {
		h.log.Warn("record agent turn", "agent", t.Agent, "err", err)
	}
}

// turnInput is a turn's input as the runs API shows it.
func turnInput(input []chatMessage) json.RawMessage {
	b, _ := json.Marshal(struct {
		Messages []chatMessage `json:"messages"`
	}{sessionNonNil(input)})
	return b
}
