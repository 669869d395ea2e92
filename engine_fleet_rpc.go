package main

// Calls between the replicas of a fleet (engine_fleet.go): a call about a
// partition another replica owns is forwarded to it as POST
// /internal/fleet/{op}?p={partition} with the fleet's token
// (svc_engine.fleet) in fleetTokenHeader, a JSON body of the call's
// arguments, and a JSON answer {"result", "error"}. The route is outside
// the public API and its guard: it admits nothing but the fleet's token
// (compared in constant time), and only when the engine is on PostgreSQL;
// on the file journal it does not exist (404). The replica that answers
// serves the call from its own partitions only, never forwarding it again:
// a partition it does not (or no longer) hold answers 409, and the caller
// reads the members again and retries.

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Operations of the calls between replicas.
const (
	fleetOpStart      = "start"
	fleetOpFind       = "find"
	fleetOpWait       = "wait"
	fleetOpCancel     = "cancel"
	fleetOpResume     = "resume"
	fleetOpRerun      = "rerun"
	fleetOpStream     = "stream"
	fleetOpStreamWait = "stream-wait"
	fleetOpTurn       = "turn"
	fleetOpRuns       = "runs"
	fleetOpStats      = "stats"
	fleetOpSchedule   = "schedule"
)

// fleetRPCPath prefixes the calls between replicas.
const fleetRPCPath = "/internal/fleet/"

// fleetTokenHeader carries the fleet's token.
const fleetTokenHeader = "X-Svc-Fleet-Token"

// Bounds of the calls between replicas.
const (
	// fleetCallTimeout bounds a call that does not wait on a run.
	fleetCallTimeout = 30 * time.Second
	// fleetStreamPoll bounds one long poll of a stream on its owner.
	fleetStreamPoll = 25 * time.Second
	// fleetCallTries bounds the tries of a call whose partition moved.
	fleetCallTries = 5
	// fleetMaxBody bounds a call's body and its answer: a start carries
	// at most its input (4 MiB) and the calls a retry reuses.
	fleetMaxBody = 16 << 20
)

// Arguments and answers of the calls.
type (
	fleetIDArgs     struct{ ID string }
	fleetResumeArgs struct {
		Token   string
		Payload json.RawMessage
	}
	fleetStreamArgs struct {
		ID    string
		After int
	}
	fleetScheduleArgs struct {
		Workflow string
		Paused   *bool // nil: read it
	}
	fleetFound struct {
		Run   runRecord
		Found bool
	}
	fleetRuns struct {
		Runs   []runRecord
		Queued []queuedTrigger
	}
	fleetStats struct {
		Runs   []runRecord
		Active map[string]int
	}
	// fleetStreamPage is a streamPage on the wire (its superseded attempts
	// as a list: JSON has no array keys).
	fleetStreamPage struct {
		Entries    []streamEntry
		Ended      bool
		Status     string
		Superseded [][2]int
	}
)

// fleetStartArgs and fleetRerunArgs are the requests as they travel.
type (
	fleetStartArgs startRequest
	fleetRerunArgs rerunRequest
)

// page is the streamPage the answer describes (no channels yet).
func (p fleetStreamPage) page() streamPage {
	out := streamPage{Entries: p.Entries, Ended: p.Ended, Status: p.Status, Superseded: map[[2]int]bool{}}
	for _, k := range p.Superseded {
		out.Superseded[k] = true
	}
	return out
}

// fleetWireError is an error as it travels: a start's refusal with its
// code, or the name of a failure callers branch on, and the message.
type fleetWireError struct {
	Kind       string            `json:"kind"` // "start", a sentinel's name, or "other"
	Code       string            `json:"code,omitempty"`
	Message    string            `json:"message"`
	Violations []schemaViolation `json:"violations,omitempty"`
}

// fleetAnswer is the body of every answer.
type fleetAnswer struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *fleetWireError `json:"error,omitempty"`
}

// fleetSentinels are the failures that keep their identity across a call.
var fleetSentinels = []struct {
	name string
	err  error
}{
	{"run_not_found", errRunNotFound}, {"run_ended", errRunEnded}, {"hook_not_found", errHookNotFound}, {"hook_used", errHookUsed},
	{"outcome_unknown", errJournalOutcomeUnknown}, {"journal_unavailable", errJournalUnavailable}, {"journal_closed", errJournalClosed},
	{"lease_lost", errEngineLeaseLost}, {"schedule_not_found", errScheduleNotFound}, {"workflow_not_found", errWorkflowNotFound},
	{"gate_closed", errGateClosed}, {"canceled", context.Canceled}, {"deadline", context.DeadlineExceeded},
}

// fleetRemoteError is a failure an owner answered: its message as said
// there, and the sentinel it is.
type fleetRemoteError struct {
	msg string
	is  error
}

func (e *fleetRemoteError) Error() string { return e.msg }
func (e *fleetRemoteError) Unwrap() error { return e.is }

// encodeFleetError is err as it travels.
func encodeFleetError(err error) *fleetWireError {
	if err == nil {
		return nil
	}
	var se *startError
	if errors.As(err, &se) {
		return &fleetWireError{Kind: "start", Code: se.Code, Message: se.Message, Violations: se.Violations}
	}
	for _, s := range fleetSentinels {
		if errors.Is(err, s.err) {
			return &fleetWireError{Kind: s.name, Message: err.Error()}
		}
	}
	return &fleetWireError{Kind: "other", Message: err.Error()}
}

// decode is the error w describes.
func (w *fleetWireError) decode() error {
	if w == nil {
		return nil
	}
	if w.Kind == "start" {
		se := &startError{Code: w.Code, Message: w.Message, Violations: w.Violations}
		switch w.Code {
		case "workflow_not_found":
			se.Err = errWorkflowNotFound
		case "gate_closed":
			se.Err = errGateClosed
		}
		return se
	}
	for _, s := range fleetSentinels {
		if s.name == w.Kind {
			return &fleetRemoteError{msg: w.Message, is: s.err}
		}
	}
	return errors.New(w.Message)
}

// errFleetNotOwner is the answer of a replica that does not hold the
// partition a call names.
var errFleetNotOwner = errors.New("this replica does not hold the partition")

// call forwards op about partition p to its owner, decoding the answer's
// result into out (nil: none expected). A partition that moved is looked
// up again, up to fleetCallTries times.
func (m *fleetMembers) call(ctx context.Context, p int, op string, args, out any) error {
	body, err := json.Marshal(args)
	if err != nil {
		return err
	}
	var last error
	for try := range fleetCallTries {
		if try > 0 {
			m.kickRenew()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(try) * 200 * time.Millisecond):
			}
			if e := m.f.engineFor(ctx, p); e != nil {
				// It came here meanwhile: serve it as the owner would.
				a := fleetAnswerOf(m.f.serveOp(ctx, e, op, body))
				return decodeFleetResult(a.Result, a.Error.decode(), out)
			}
		}
		owner, ok := m.view().ownerOf(p)
		if !ok || owner.Owner == m.pg.owner {
			last = fmt.Errorf("%w: partition %d is being opened on this replica; retry", errJournalUnavailable, p)
			continue
		}
		res, err := m.post(ctx, owner, op, p, body)
		if errors.Is(err, errFleetNotOwner) {
			last = fmt.Errorf("%w: partition %d is moving between replicas; retry", errJournalUnavailable, p)
			continue
		}
		return decodeFleetResult(res, err, out)
	}
	return last
}

// decodeFleetResult decodes res into out (when both are set) and returns
// err.
func decodeFleetResult(res json.RawMessage, err error, out any) error {
	if out != nil && len(res) > 0 {
		if derr := json.Unmarshal(res, out); derr != nil && err == nil {
			return fmt.Errorf("%w: a replica's answer could not be read: %v", errJournalUnavailable, derr)
		}
	}
	return err
}

// post sends one call to member to and returns its result and error.
// p < 0 names no partition (a call every replica answers from its own).
func (m *fleetMembers) post(ctx context.Context, to fleetMember, op string, p int, body []byte) (json.RawMessage, error) {
	url := strings.TrimRight(to.Address, "/") + fleetRPCPath + op
	if p >= 0 {
		url += "?p=" + strconv.Itoa(p)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set(fleetTokenHeader, m.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: the replica that holds this run did not answer (%v); retry", errJournalUnavailable, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, fleetMaxBody))
	if err != nil {
		return nil, fmt.Errorf("%w: the replica that holds this run did not answer (%v); retry", errJournalUnavailable, err)
	}
	if resp.StatusCode == http.StatusConflict {
		return nil, errFleetNotOwner
	}
	var a fleetAnswer
	if err := json.Unmarshal(b, &a); err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: a replica answered %d; retry", errJournalUnavailable, resp.StatusCode)
	}
	return a.Result, a.Error.decode()
}

// fleetFanOut asks every other live member for op (no partition), in
// parallel, and returns the answers of those that gave one: a member that
// does not answer (it died, and its lease has yet to expire) is left out,
// as its runs are until another replica takes them.
func fleetFanOut[T any](ctx context.Context, m *fleetMembers, op string, args any) ([]T, error) {
	body, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	v := m.view()
	var mu sync.Mutex
	var out []T
	var wg sync.WaitGroup
	for _, to := range v.members {
		if to.Owner == v.self {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, fleetCallTimeout)
			defer cancel()
			res, err := m.post(cctx, to, op, -1, body)
			var t T
			if err == nil {
				err = json.Unmarshal(res, &t)
			}
			if err != nil {
				m.pg.log.Warn("a replica did not answer; its active runs are left out", "op", op, "replica", to.Owner, "err", err)
				return
			}
			mu.Lock()
			out = append(out, t)
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, nil
}

// errFleetBadCall is a call between replicas that names no partition of
// this fleet.
var errFleetBadCall = errors.New("p must be a partition of this fleet")

// serveCall answers a call from another replica whose token checked (see
// the file's comment): op about partition ps ("": from every partition
// held here), from body. errFleetNotOwner when this replica does not hold
// the partition.
func (f *fleet) serveCall(ctx context.Context, op, ps string, body []byte) (any, error) {
	if ps == "" {
		return f.serveAll(ctx, op, body)
	}
	p, err := strconv.Atoi(ps)
	if err != nil || p < 0 || p >= f.parts {
		return nil, errFleetBadCall
	}
	e := f.engineFor(ctx, p)
	if e == nil {
		return nil, errFleetNotOwner
	}
	return f.serveOp(ctx, e, op, body)
}

// fleetTokenValid reports whether token is the fleet's (in constant time);
// never on the file journal, which has no calls between replicas.
func (f *fleet) fleetTokenValid(token string) bool {
	return f.m != nil && subtle.ConstantTimeCompare([]byte(token), []byte(f.m.token)) == 1
}

// fleetAnswerOf is the answer of a served call.
func fleetAnswerOf(res any, err error) fleetAnswer {
	a := fleetAnswer{Error: encodeFleetError(err)}
	if res != nil {
		if b, merr := json.Marshal(res); merr == nil {
			a.Result = b
		} else if a.Error == nil {
			a.Error = encodeFleetError(merr)
		}
	}
	return a
}

// serveOp serves op about one of e's runs, from body, as the owner.
func (f *fleet) serveOp(ctx context.Context, e *engine, op string, body []byte) (any, error) {
	switch op {
	case fleetOpStart:
		var a fleetStartArgs
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, err
		}
		return e.start(startRequest(a))
	case fleetOpFind:
		var a fleetIDArgs
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, err
		}
		run, ok, err := e.find(ctx, a.ID)
		return fleetFound{Run: run, Found: ok}, err
	case fleetOpWait:
		var a fleetIDArgs
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, err
		}
		return nil, e.wait(ctx, a.ID)
	case fleetOpCancel:
		var a fleetIDArgs
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, err
		}
		return e.cancelRun(a.ID)
	case fleetOpResume:
		var a fleetResumeArgs
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, err
		}
		return e.resumeHook(a.Token, a.Payload)
	case fleetOpRerun:
		var a fleetRerunArgs
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, err
		}
		return e.rerun(ctx, rerunRequest(a))
	case fleetOpStream, fleetOpStreamWait:
		var a fleetStreamArgs
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, err
		}
		page, err := e.streamRead(ctx, a.ID, a.After)
		if err != nil {
			return nil, err
		}
		if op == fleetOpStreamWait {
			if len(page.Entries) == 0 && !page.Ended {
				t := time.NewTimer(fleetStreamPoll)
				defer t.Stop()
				select {
				case <-page.Wake:
				case <-page.Done:
				case <-page.Stop:
				case <-ctx.Done():
				case <-t.C:
				}
			}
			return nil, nil
		}
		out := fleetStreamPage{Entries: page.Entries, Ended: page.Ended, Status: page.Status}
		for k := range page.Superseded {
			out.Superseded = append(out.Superseded, k)
		}
		return out, nil
	case fleetOpTurn:
		var a agentTurn
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, err
		}
		return e.recordTurn(a)
	case fleetOpSchedule:
		var a fleetScheduleArgs
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, err
		}
		if f.sched == nil {
			return nil, errScheduleNotFound
		}
		return f.sched.serveLocal(ctx, e, a)
	}
	return nil, fmt.Errorf("unknown call %q", op)
}

// serveAll serves op from every partition open here: this replica's part
// of a list or an overview.
func (f *fleet) serveAll(ctx context.Context, op string, body []byte) (any, error) {
	switch op {
	case fleetOpRuns:
		var q runQuery
		if err := json.Unmarshal(body, &q); err != nil {
			return nil, err
		}
		var out fleetRuns
		for _, e := range f.engines() {
			runs, qs := e.memoryRuns(q)
			out.Runs, out.Queued = append(out.Runs, runs...), append(out.Queued, qs...)
		}
		// The page's worth, newest first: the caller merges the pages.
		var err error
		out.Runs, out.Queued, _, err = mergeRunPages(ctx, nil, q, out.Runs, out.Queued)
		return out, err
	case fleetOpStats:
		var since time.Time
		if err := json.Unmarshal(body, &since); err != nil {
			return nil, err
		}
		out := fleetStats{Active: f.activeByStatus()}
		for _, e := range f.engines() {
			out.Runs = append(out.Runs, e.memoryRunsSince(since)...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown call %q", op)
}
