package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dop251/goja"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Limits of sql from user code.
const (
	// sqlMaxConns bounds the connections user code holds at once (queries
	// and open transactions of every step and tool together). It is a pool
	// of its own, so user code cannot starve the runtime's sessions and run
	// history; a query past it waits for a connection.
	sqlMaxConns = 10
	// sqlMaxResultRows and sqlMaxResultBytes bound one query's result (the
	// bytes are PostgreSQL's text form of the values): rows become JS objects
	// in the VM, and a step's result is JSON in the journal.
	sqlMaxResultRows  = 100_000
	sqlMaxResultBytes = 64 << 20
	// sqlRollbackTimeout bounds the ROLLBACK of a transaction whose VM was
	// abandoned (a timed-out step); past it the connection is closed, which
	// rolls back too.
	sqlRollbackTimeout = 5 * time.Second
	// sqlDatabaseWait bounds how long a statement waits for the database to
	// accept connections (longer than svc's restarts of its own cluster,
	// postgres_supervise.go); sqlReconnectFirst, doubling up to
	// sqlReconnectMax, spaces the attempts.
	sqlDatabaseWait   = 5 * time.Minute
	sqlReconnectFirst = 250 * time.Millisecond
	sqlReconnectMax   = 5 * time.Second
)

// sqlHost runs the SQL of user code (import { sql } from "svc") on the
// project's PostgreSQL: one bounded pgx pool, the JS API installed into step
// and tool VMs, and the bookkeeping that rolls back the transactions of VMs
// that will not run again. Built once by the dev boot; close ends it.
type sqlHost struct {
	pool   *pgxpool.Pool
	ctx    context.Context // ends at close: every query is cancelled
	cancel context.CancelFunc
	wg     sync.WaitGroup // workers, rollbacks of abandoned transactions

	mu   sync.Mutex
	live map[*jsLoop]*sqlSession // VMs with queries or transactions outstanding
}

// sqlSession is the outstanding SQL work of one VM: while it has any, its
// context cancels it when the VM is abandoned. Fields are guarded by the
// host's mu.
type sqlSession struct {
	ctx       context.Context
	cancel    context.CancelFunc
	ops       int                 // queries in flight and open transactions
	txs       map[*sqlTx]struct{} // open transactions
	abandoned bool                // the VM will not run again: post nothing
}

// sqlTx is one transaction of sql.begin: a connection of its own, used by
// one statement at a time in the order user code issued them.
type sqlTx struct {
	conn  *pgxpool.Conn
	tx    pgx.Tx
	last  chan struct{} // closed when the latest queued statement is done; guarded by host mu
	ended bool          // the callback settled (loop goroutine only)
}

// rollback rolls tx back and releases its connection. It is bounded by
// sqlRollbackTimeout; a failed ROLLBACK closes the connection, which rolls
// back too.
func (tx *sqlTx) rollback() {
	ctx, cancel := context.WithTimeout(context.Background(), sqlRollbackTimeout)
	defer cancel()
	tx.tx.Rollback(ctx)
	tx.conn.Release()
}

// newSQLHost returns a host on the database at url. Connections are made
// on first use; each has application_name "svc user sql", TimeZone UTC and
// ISO dates, which the decoding of results relies on.
func newSQLHost(url string) (*sqlHost, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("sql: parse database url: %w", err)
	}
	cfg.MaxConns = sqlMaxConns
	rp := cfg.ConnConfig.RuntimeParams
	rp["application_name"] = "svc user sql"
	rp["TimeZone"] = "UTC"
	rp["DateStyle"] = "ISO, YMD"
	rp["bytea_output"] = "hex"
	// One round trip per statement with every parameter sent as text of
	// unspecified type: PostgreSQL infers each from the statement and parses
	// the text as a literal of that type, and no cached plan goes stale when
	// the schema changes.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("sql: open pool: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &sqlHost{pool: pool, ctx: ctx, cancel: cancel, live: map[*jsLoop]*sqlSession{}}, nil
}

// close cancels every query, rolls back every open transaction, waits for
// the workers and closes the pool.
func (h *sqlHost) close() {
	h.cancel()
	h.mu.Lock()
	loops := make([]*jsLoop, 0, len(h.live))
	for l := range h.live {
		loops = append(loops, l)
	}
	h.mu.Unlock()
	for _, l := range loops {
		h.abandon(l)
	}
	h.wg.Wait()
	h.pool.Close()
}

// enter registers one outstanding operation of l's VM and returns its session.
func (h *sqlHost) enter(l *jsLoop) *sqlSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.live[l]
	if s == nil {
		s = &sqlSession{txs: map[*sqlTx]struct{}{}}
		s.ctx, s.cancel = context.WithCancel(h.ctx)
		h.live[l] = s
	}
	s.ops++
	return s
}

// leave ends one operation of s and reports whether its completion may be
// posted to the loop (false once the VM is abandoned).
func (h *sqlHost) leave(l *jsLoop, s *sqlSession) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.ops--
	if s.ops == 0 && !s.abandoned {
		s.cancel()
		delete(h.live, l)
	}
	return !s.abandoned
}

// abandon cancels the outstanding work of l's VM, which will not run again:
// in-flight statements are cancelled, open transactions roll back and
// their connections return to the pool.
func (h *sqlHost) abandon(l *jsLoop) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.live[l]
	if s == nil {
		return
	}
	delete(h.live, l)
	s.abandoned = true
	s.cancel()
	for tx := range s.txs {
		delete(s.txs, tx)
		h.wg.Add(1)
		go func(last chan struct{}) {
			defer h.wg.Done()
			<-last
			tx.rollback()
		}(tx.last)
	}
}

// work runs fn on a worker goroutine as one operation of l's VM and posts
// done with its outcome to the loop, unless the VM was abandoned meanwhile.
func (h *sqlHost) work(l *jsLoop, fn func(ctx context.Context) (*sqlResult, error), done func(*sqlResult, error)) {
	s := h.enter(l)
	l.begin()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		res, err := fn(s.ctx)
		if err != nil && pgUnreachable(err) {
			// The server went away under this operation: the pool's idle
			// connections were to it too, and one idle for under a second
			// is handed out unchecked. Drop them all, so that the step's
			// retry connects afresh (waiting in acquire while the database
			// is down) instead of failing on another dead connection.
			h.pool.Reset()
		}
		if h.leave(l, s) {
			l.post(func() { done(res, err) })
		}
	}()
}

// acquire takes a connection of the pool for a statement or a
// transaction. While the database cannot be reached (down, restarting,
// paused) it waits for it, up to sqlDatabaseWait or until ctx ends (the
// step's attempt is over): nothing was sent yet, so waiting is safe, and a
// step does not fail, nor its run, for an outage that is repaired
// meanwhile. A connection lost with a statement in flight is not retried
// here (the statement's outcome is unknown): that attempt fails and the
// step's retry waits here.
func (h *sqlHost) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	deadline := time.Now().Add(sqlDatabaseWait)
	delay := sqlReconnectFirst
	for {
		c, err := h.pool.Acquire(ctx)
		if err == nil || !pgUnreachable(err) || ctx.Err() != nil {
			return c, err
		}
		if time.Now().Add(delay).After(deadline) {
			return nil, fmt.Errorf("sql: the database did not accept connections for %v: %w", sqlDatabaseWait, err)
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
		delay = min(2*delay, sqlReconnectMax)
	}
}

// sqlStatement is what a worker runs: text with $1…$n, and the parameters
// in text form (nil for NULL); an array parameter's text depends on the
// type PostgreSQL infers for it.
type sqlStatement struct {
	text   string
	params []any // string, nil or sqlArrayParam
}

// sqlArrayParam is a JS array passed as a parameter: an array literal for
// a parameter of an array type, JSON otherwise.
type sqlArrayParam struct{ literal, json string }

// sqlConn is where a statement runs: a connection (*pgx.Conn), or a
// transaction (pgx.Tx).
type sqlConn interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error)
}

// sqlTypes answers which OIDs are array types (read only: safe to share).
var sqlTypes = pgtype.NewMap()

// sqlArrayQuote escapes an element of an array literal.
var sqlArrayQuote = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// sqlResult is a statement's outcome in Go values (see sqlDecode), turned
// into JS on the loop by toJS.
type sqlResult struct {
	columns  []string
	rows     [][]any
	command  string
	rowCount int64
}

// sqlJSON is the text of a json or jsonb value, parsed by the VM.
type sqlJSON string

// run executes st on c and decodes its result.
func (st *sqlStatement) run(ctx context.Context, c sqlConn) (*sqlResult, error) {
	args, err := st.args(ctx, c)
	if err != nil {
		return nil, err
	}
	rows, err := c.Query(ctx, st.text, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	fields := rows.FieldDescriptions()
	res := &sqlResult{columns: make([]string, len(fields))}
	for i, f := range fields {
		res.columns[i] = f.Name
	}
	types := rows.Conn().TypeMap() // this connection's: used by this goroutine alone
	size := 0
	for rows.Next() {
		raw := rows.RawValues()
		if len(res.rows) == sqlMaxResultRows {
			return nil, fmt.Errorf("sql: the result has more than %d rows: add a LIMIT, or page with WHERE … > last key", sqlMaxResultRows)
		}
		row := make([]any, len(raw))
		for i, v := range raw {
			size += len(v)
			if row[i], err = sqlDecode(types, fields[i].DataTypeOID, v); err != nil {
				return nil, fmt.Errorf("sql: column %q: %w", fields[i].Name, err)
			}
		}
		if size > sqlMaxResultBytes {
			return nil, fmt.Errorf("sql: the result is larger than %d MiB: select fewer rows or columns", sqlMaxResultBytes>>20)
		}
		res.rows = append(res.rows, row)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	tag := rows.CommandTag()
	res.rowCount = tag.RowsAffected()
	res.command, _, _ = strings.Cut(tag.String(), " ")
	return res, nil
}

// args returns the statement's parameters for pgx: array parameters become
// array literals or JSON by the parameter types PostgreSQL infers (asked
// only when there is an array).
func (st *sqlStatement) args(ctx context.Context, c sqlConn) ([]any, error) {
	args := make([]any, len(st.params))
	var sd *pgconn.StatementDescription
	for i, p := range st.params {
		a, ok := p.(sqlArrayParam)
		if !ok {
			args[i] = p
			continue
		}
		if sd == nil {
			var err error
			if sd, err = c.Prepare(ctx, "", st.text); err != nil {
				return nil, err
			}
		}
		args[i] = a.json
		if i < len(sd.ParamOIDs) {
			if t, ok := sqlTypes.TypeForOID(sd.ParamOIDs[i]); ok {
				if _, isArray := t.Codec.(*pgtype.ArrayCodec); isArray {
					args[i] = a.literal
				}
			}
		}
	}
	return args, nil
}

// sqlDecode turns PostgreSQL's text form of a value of type oid into the
// Go value toJS maps: float64 (int2, int4, float4, float8, oid), string
// (int8 and numeric exactly, date as YYYY-MM-DD, text and every other
// type's text form), bool, sqlJSON, time.Time (timestamp read as UTC,
// timestamptz), []byte (bytea), []any (arrays of known element types), nil.
func sqlDecode(types *pgtype.Map, oid uint32, raw []byte) (any, error) {
	if raw == nil {
		return nil, nil
	}
	switch oid {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Float4OID, pgtype.Float8OID, pgtype.OIDOID:
		return strconv.ParseFloat(string(raw), 64)
	case pgtype.BoolOID:
		return string(raw) == "t", nil
	case pgtype.JSONOID, pgtype.JSONBOID:
		return sqlJSON(raw), nil
	case pgtype.ByteaOID:
		b, ok := bytes0x(raw)
		if !ok {
			return nil, fmt.Errorf("bytea %.20q is not in hex form", raw)
		}
		return b, nil
	case pgtype.TimestampOID, pgtype.TimestamptzOID:
		var ts pgtype.Timestamptz
		if oid == pgtype.TimestampOID {
			var t pgtype.Timestamp
			if err := types.Scan(oid, pgtype.TextFormatCode, raw, &t); err != nil {
				return nil, err
			}
			ts = pgtype.Timestamptz{Time: t.Time, InfinityModifier: t.InfinityModifier}
		} else if err := types.Scan(oid, pgtype.TextFormatCode, raw, &ts); err != nil {
			return nil, err
		}
		if ts.InfinityModifier != pgtype.Finite {
			return string(raw), nil // "infinity" or "-infinity": no Date holds it
		}
		return ts.Time, nil
	}
	if t, ok := types.TypeForOID(oid); ok {
		if ac, ok := t.Codec.(*pgtype.ArrayCodec); ok {
			delim := byte(',')
			if ac.ElementType.OID == pgtype.BoxOID {
				delim = ';'
			}
			tree, err := sqlParseArray(string(raw), delim)
			if err != nil {
				return nil, err
			}
			return sqlDecodeTree(types, ac.ElementType.OID, tree)
		}
	}
	return string(raw), nil
}

// bytes0x decodes bytea's hex text form (\x…).
func bytes0x(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '\\' || raw[1] != 'x' {
		return nil, false
	}
	b := make([]byte, hex.DecodedLen(len(raw)-2))
	_, err := hex.Decode(b, raw[2:])
	return b, err == nil
}

// sqlDecodeTree decodes the elements of a parsed array (sqlParseArray).
func sqlDecodeTree(types *pgtype.Map, elem uint32, tree any) (any, error) {
	switch v := tree.(type) {
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			var err error
			if out[i], err = sqlDecodeTree(types, elem, e); err != nil {
				return nil, err
			}
		}
		return out, nil
	case string:
		return sqlDecode(types, elem, []byte(v))
	}
	return nil, nil
}

// sqlParseArray parses PostgreSQL's text form of an array ("{1,NULL,"a b"}",
// nested for more dimensions, optionally "[1:2]={…}") into []any of element
// texts (string) and NULLs (nil).
func sqlParseArray(s string, delim byte) (any, error) {
	if strings.HasPrefix(s, "[") {
		i := strings.IndexByte(s, '=')
		if i < 0 {
			return nil, fmt.Errorf("array %.40q: bad dimensions", s)
		}
		s = s[i+1:]
	}
	p := &sqlArrayParser{s: s, delim: delim}
	v, err := p.array()
	if err == nil && p.i != len(s) {
		err = fmt.Errorf("array %.40q: trailing text", s)
	}
	return v, err
}

// sqlArrayParser is the state of sqlParseArray.
type sqlArrayParser struct {
	s     string
	i     int
	delim byte
}

// array parses "{…}" at the parser's position.
func (p *sqlArrayParser) array() ([]any, error) {
	if p.i >= len(p.s) || p.s[p.i] != '{' {
		return nil, fmt.Errorf("array %.40q: want { at %d", p.s, p.i)
	}
	p.i++
	out := []any{}
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return out, nil
	}
	for p.i < len(p.s) {
		var v any
		var err error
		switch p.s[p.i] {
		case '{':
			v, err = p.array()
		case '"':
			v, err = p.quoted()
		default:
			v = p.bare()
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		if p.i >= len(p.s) {
			break
		}
		c := p.s[p.i]
		p.i++
		if c == '}' {
			return out, nil
		}
		if c != p.delim {
			return nil, fmt.Errorf("array %.40q: unexpected %q at %d", p.s, c, p.i-1)
		}
	}
	return nil, fmt.Errorf("array %.40q: unterminated", p.s)
}

// quoted parses a double-quoted element with backslash escapes.
func (p *sqlArrayParser) quoted() (any, error) {
	var b strings.Builder
	for p.i++; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; c {
		case '\\':
			p.i++
			if p.i < len(p.s) {
				b.WriteByte(p.s[p.i])
			}
		case '"':
			p.i++
			return b.String(), nil
		default:
			b.WriteByte(c)
		}
	}
	return nil, fmt.Errorf("array %.40q: unterminated quote", p.s)
}

// bare parses an unquoted element; NULL is nil.
func (p *sqlArrayParser) bare() any {
	start := p.i
	for p.i < len(p.s) && p.s[p.i] != p.delim && p.s[p.i] != '}' {
		p.i++
	}
	v := strings.TrimSpace(p.s[start:p.i])
	if strings.EqualFold(v, "NULL") {
		return nil
	}
	return v
}

// install sets ambient.sql in the VM of l: the tagged template, query and
// begin, running on h's pool.
func (h *sqlHost) install(l *jsLoop, ambient *goja.Object) {
	vm := l.vm
	sql := h.newQueryFunc(l, func(st *sqlStatement, done func(*sqlResult, error)) {
		h.work(l, func(ctx context.Context) (*sqlResult, error) {
			c, err := h.acquire(ctx)
			if err != nil {
				return nil, err
			}
			defer c.Release()
			return st.run(ctx, c.Conn())
		}, done)
	})
	sql.Set("begin", func(call goja.FunctionCall) goja.Value {
		if _, ok := goja.AssertFunction(call.Argument(0)); !ok {
			panic(vm.NewTypeError("sql.begin(fn): fn must be a function such as async (tx) => { … }"))
		}
		return h.begin(l, call.Argument(0))
	})
	ambient.Set("sql", sql)
}

// begin starts a transaction for sql.begin(fn): on a connection of its own,
// BEGIN, then fn(tx); COMMIT when fn's promise fulfils, ROLLBACK (and the
// same rejection) when it rejects. The transaction is one operation of the
// VM from the call until the connection is released.
func (h *sqlHost) begin(l *jsLoop, fn goja.Value) goja.Value {
	vm := l.vm
	p, resolve, reject := vm.NewPromise()
	s := h.enter(l) // held until the transaction ends, below or by abandon
	tx := &sqlTx{last: make(chan struct{})}
	close(tx.last)
	h.work(l, func(ctx context.Context) (*sqlResult, error) {
		c, err := h.acquire(ctx)
		if err != nil {
			return nil, err
		}
		if tx.tx, err = c.Begin(ctx); err != nil {
			c.Release()
			return nil, err
		}
		tx.conn = c
		h.mu.Lock()
		abandoned := s.abandoned
		if !abandoned {
			s.txs[tx] = struct{}{} // from now on abandon rolls it back
		}
		h.mu.Unlock()
		if abandoned {
			tx.rollback()
			return nil, context.Canceled
		}
		return nil, nil
	}, func(_ *sqlResult, err error) {
		if err != nil {
			h.leave(l, s)
			reject(sqlJSError(vm, err))
			return
		}
		txFn := h.newQueryFunc(l, func(st *sqlStatement, done func(*sqlResult, error)) {
			if tx.ended {
				panic(sqlJSError(vm, errors.New("sql: this transaction has ended: run statements on tx inside the callback of sql.begin, and await them before it returns")))
			}
			h.mu.Lock()
			prev, next := tx.last, make(chan struct{})
			tx.last = next
			h.mu.Unlock()
			h.work(l, func(ctx context.Context) (*sqlResult, error) {
				defer close(next)
				<-prev
				return st.run(ctx, tx.tx)
			}, done)
		})
		l.begin() // the transaction's end, posted by finish
		settled := callAsync(vm, fn, txFn)
		then, _ := goja.AssertFunction(vm.ToValue(settled).ToObject(vm).Get("then"))
		finish := func(commit bool) func(goja.Value) {
			return func(v goja.Value) {
				tx.ended = true
				h.mu.Lock()
				_, open := s.txs[tx]
				delete(s.txs, tx)
				last := tx.last
				h.mu.Unlock()
				if !open {
					return // abandoned: rolled back there
				}
				h.wg.Add(1)
				go func() {
					defer h.wg.Done()
					<-last
					var err error
					if commit {
						err = tx.tx.Commit(s.ctx)
						tx.conn.Release()
					} else {
						tx.rollback()
					}
					if h.leave(l, s) {
						l.post(func() {
							switch {
							case err != nil:
								reject(sqlJSError(vm, sqlCommitError(err)))
							case commit:
								resolve(v)
							default:
								reject(v)
							}
						})
					}
				}()
			}
		}
		then(vm.ToValue(settled), vm.ToValue(finish(true)), vm.ToValue(finish(false)))
	})
	return vm.ToValue(p)
}

// sqlCommitError explains a COMMIT that rolled back.
func sqlCommitError(err error) error {
	if errors.Is(err, pgx.ErrTxCommitRollback) {
		return errors.New("sql: the transaction was rolled back, not committed: a statement in it failed")
	}
	return err
}

// newQueryFunc returns the tagged template function (with its query
// method) whose statements exec runs; exec must call done on the loop.
func (h *sqlHost) newQueryFunc(l *jsLoop, exec func(st *sqlStatement, done func(*sqlResult, error))) *goja.Object {
	vm := l.vm
	promise := func(st *sqlStatement) goja.Value {
		p, resolve, reject := vm.NewPromise()
		span := l.trace.sql(st.text)
		exec(st, func(res *sqlResult, err error) {
			span.end(err)
			if err != nil {
				reject(sqlJSError(vm, err))
				return
			}
			v, err := res.toJS(vm)
			if err != nil {
				reject(sqlJSError(vm, err))
				return
			}
			resolve(v)
		})
		return vm.ToValue(p)
	}
	fn := vm.ToValue(func(call goja.FunctionCall) goja.Value {
		st, err := sqlTemplate(vm, call.Argument(0), call.Arguments[min(1, len(call.Arguments)):])
		if err != nil {
			panic(vm.NewTypeError(err.Error()))
		}
		return promise(st)
	}).ToObject(vm)
	fn.Set("query", func(call goja.FunctionCall) goja.Value {
		text, ok := call.Argument(0).Export().(string)
		if !ok {
			panic(vm.NewTypeError("sql.query(text, params): text must be a string"))
		}
		var list []goja.Value
		if ps := call.Argument(1); !goja.IsUndefined(ps) && !goja.IsNull(ps) {
			arr, ok := ps.(*goja.Object)
			if !ok || arr.ClassName() != "Array" {
				panic(vm.NewTypeError("sql.query(text, params): params must be an array (for $1, $2, …)"))
			}
			vm.ForOf(arr, func(v goja.Value) bool { list = append(list, v); return true })
		}
		st, err := sqlBind(vm, text, list)
		if err != nil {
			panic(vm.NewTypeError(err.Error()))
		}
		return promise(st)
	})
	return fn
}

// sqlTemplate builds the statement of sql`…${v}…`: each value becomes the
// next $n parameter, never part of the text.
func sqlTemplate(vm *goja.Runtime, strs goja.Value, values []goja.Value) (*sqlStatement, error) {
	o, ok := strs.(*goja.Object)
	if !ok || o.ClassName() != "Array" || goja.IsUndefined(o.Get("raw")) {
		return nil, errors.New("sql must be used as a tagged template, sql`select … where id = ${id}`, or call sql.query(text, params)")
	}
	var b strings.Builder
	n := int(o.Get("length").ToInteger())
	for i := range n {
		if i > 0 {
			b.WriteString("$" + strconv.Itoa(i))
		}
		b.WriteString(o.Get(strconv.Itoa(i)).String())
	}
	return sqlBind(vm, b.String(), values)
}

// sqlBind converts the parameters of text to their text forms.
func sqlBind(vm *goja.Runtime, text string, values []goja.Value) (*sqlStatement, error) {
	st := &sqlStatement{text: text, params: make([]any, len(values))}
	for i, v := range values {
		p, err := sqlParam(vm, v, true)
		if err != nil {
			return nil, fmt.Errorf("sql: parameter $%d: %w", i+1, err)
		}
		st.params[i] = p
	}
	return st, nil
}

// sqlParam converts a JS value to a parameter: nil for null and undefined,
// else the text PostgreSQL parses as a literal of the parameter's type:
// strings as they are, numbers and bigints as JS prints them, booleans,
// Dates as ISO 8601 UTC, bytes as bytea hex, arrays as sqlArrayParam
// (top level) and objects as JSON.
func sqlParam(vm *goja.Runtime, v goja.Value, top bool) (any, error) {
	if v == nil || goja.IsUndefined(v) || goja.IsNull(v) {
		return nil, nil
	}
	if _, ok := v.(*goja.Symbol); ok {
		return nil, errors.New("a symbol cannot be a parameter")
	}
	switch x := v.Export().(type) {
	case string:
		return x, nil
	case int64, float64, *big.Int:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	case time.Time:
		return x.UTC().Format("2006-01-02T15:04:05.000Z"), nil
	}
	if b, ok := sqlBytesFromJS(v); ok {
		return `\x` + hex.EncodeToString(b), nil
	}
	o, ok := v.(*goja.Object)
	if _, isFn := goja.AssertFunction(v); !ok || isFn {
		return nil, errors.New("pass a string, number, bigint, boolean, null, Date, Uint8Array, array or plain object")
	}
	if o.ClassName() == "Date" {
		return nil, errors.New("the Date is invalid")
	}
	js, err := jsonStringify(vm, v)
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if o.ClassName() != "Array" || !top {
		return string(js), nil
	}
	lit, err := sqlArrayLiteral(vm, o)
	if err != nil {
		return nil, err
	}
	return sqlArrayParam{literal: lit, json: string(js)}, nil
}

// sqlArrayLiteral writes a JS array as a PostgreSQL array literal, each
// element in its parameter text form, quoted.
func sqlArrayLiteral(vm *goja.Runtime, arr *goja.Object) (string, error) {
	var b strings.Builder
	b.WriteByte('{')
	var err error
	first := true
	vm.ForOf(arr, func(e goja.Value) bool {
		if !first {
			b.WriteByte(',')
		}
		first = false
		if eo, ok := e.(*goja.Object); ok && eo.ClassName() == "Array" {
			var inner string
			if inner, err = sqlArrayLiteral(vm, eo); err == nil {
				b.WriteString(inner)
			}
			return err == nil
		}
		var p any
		if p, err = sqlParam(vm, e, false); err != nil {
			return false
		}
		if p == nil {
			b.WriteString("NULL")
			return true
		}
		b.WriteByte('"')
		b.WriteString(sqlArrayQuote.Replace(p.(string)))
		b.WriteByte('"')
		return true
	})
	b.WriteByte('}')
	return b.String(), err
}

// toJS returns the result as a JS array of row objects (column names as
// keys; a later column of the same name wins) with non-enumerable,
// read-only rowCount and command properties.
func (r *sqlResult) toJS(vm *goja.Runtime) (goja.Value, error) {
	rows := make([]any, len(r.rows))
	for i, row := range r.rows {
		o := vm.NewObject()
		for j, v := range row {
			jv, err := sqlValueToJS(vm, v)
			if err != nil {
				return nil, fmt.Errorf("sql: column %q: %w", r.columns[j], err)
			}
			o.Set(r.columns[j], jv)
		}
		rows[i] = o
	}
	arr := vm.NewArray(rows...)
	arr.DefineDataProperty("rowCount", vm.ToValue(r.rowCount), goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE)
	arr.DefineDataProperty("command", vm.ToValue(r.command), goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE)
	return arr, nil
}

// sqlValueToJS maps a decoded value (sqlDecode) into the VM.
func sqlValueToJS(vm *goja.Runtime, v any) (goja.Value, error) {
	switch x := v.(type) {
	case nil:
		return goja.Null(), nil
	case sqlJSON:
		return jsonParse(vm, []byte(x))
	case time.Time:
		return vm.New(vm.Get("Date"), vm.ToValue(x.UnixMilli()))
	case []byte:
		return sqlBytesToJS(vm, x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			var err error
			if out[i], err = sqlValueToJS(vm, e); err != nil {
				return nil, err
			}
		}
		return vm.NewArray(out...), nil
	}
	return vm.ToValue(v), nil
}

// sqlBytesToJS returns b as a new Uint8Array.
func sqlBytesToJS(vm *goja.Runtime, b []byte) (goja.Value, error) {
	return vm.New(vm.Get("Uint8Array"), vm.ToValue(vm.NewArrayBuffer(b)))
}

// sqlBytesFromJS returns the bytes of a Uint8Array or ArrayBuffer.
func sqlBytesFromJS(v goja.Value) ([]byte, bool) {
	switch x := v.Export().(type) {
	case goja.ArrayBuffer:
		return x.Bytes(), true
	case []byte:
		return x, true
	}
	return nil, false
}

// sqlJSError turns an error of a statement into the JS error user code
// sees: a PostgreSQL error is an Error named "PostgresError" with code
// (SQLSTATE), detail, hint, position, schema, table, column and
// constraint when PostgreSQL gives them; anything else a plain Error.
func sqlJSError(vm *goja.Runtime, err error) goja.Value {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		msg := err.Error()
		if !strings.HasPrefix(msg, "sql") {
			msg = "sql: " + msg
		}
		e, _ := vm.New(vm.Get("Error"), vm.ToValue(msg))
		return e
	}
	e, _ := vm.New(vm.Get("Error"), vm.ToValue(pe.Message))
	e.Set("name", "PostgresError")
	e.Set("code", pe.Code)
	e.Set("severity", pe.Severity)
	for k, v := range map[string]string{"detail": pe.Detail, "hint": pe.Hint, "schema": pe.SchemaName, "table": pe.TableName,
		"column": pe.ColumnName, "constraint": pe.ConstraintName, "dataType": pe.DataTypeName, "where": pe.Where} {
		if v != "" {
			e.Set(k, v)
		}
	}
	if pe.Position > 0 {
		e.Set("position", pe.Position)
	}
	return e
}

// sqlUnavailable returns the stand-in for sql (and its query and begin)
// where it cannot be used: each throws why.
func sqlUnavailable(vm *goja.Runtime, why string) *goja.Object {
	throw := func(goja.FunctionCall) goja.Value { panic(sqlJSError(vm, errors.New(why))) }
	fn := vm.ToValue(throw).ToObject(vm)
	members := vm.ToValue(throw) // one function for both: each workflow VM makes these
	fn.Set("query", members)
	fn.Set("begin", members)
	return fn
}

// Why sql is unavailable.
const (
	sqlInWorkflow = `sql cannot be used in workflow code (it is replayed and must be deterministic): move it into a step (a function whose body starts with "use step")`
	sqlNoDatabase = "sql is not available: this runtime has no database (svc dev provides the project's PostgreSQL)"
)

// installSQL sets ambient.sql in the VM of l: the platform's, or a stand-in
// that throws when the runtime has no database.
func (p *jsPlatform) installSQL(l *jsLoop, ambient *goja.Object) {
	if p.sql == nil {
		ambient.Set("sql", sqlUnavailable(l.vm, sqlNoDatabase))
		return
	}
	p.sql.install(l, ambient)
}

// sqlDTS declares sql in the ambient module (appended to connect.d.ts).
const sqlDTS = `
declare module "svc" {
  /**
   * A query parameter. It is sent apart from the SQL text, never spliced
   * into it, as text that PostgreSQL parses as a literal of the type it
   * infers for the parameter (cast it, ${v}::int, where it cannot infer one):
   * string as is; number and bigint as JavaScript prints them; boolean;
   * null and undefined as NULL; Date as ISO 8601 UTC (timestamptz, timestamp,
   * date); Uint8Array and ArrayBuffer as bytea; an array as a PostgreSQL array
   * for a parameter of an array type, else JSON; any other object as JSON.
   */
  export type SqlValue =
    | string | number | bigint | boolean | null | undefined | Date
    | Uint8Array | ArrayBuffer | readonly unknown[] | { readonly [key: string]: unknown };

  /**
   * The rows of a statement, one object per row keyed by column name, with
   * rowCount (rows returned or affected: INSERT/UPDATE/DELETE without
   * RETURNING give [] and a rowCount) and command ("SELECT", "INSERT"…) as
   * non-enumerable properties. Values: int2, int4, float4, float8 → number;
   * int8 (bigint) and numeric → string, exact (a number cannot hold every
   * value, and step results are JSON); bool → boolean; text, varchar, uuid →
   * string; json, jsonb → the parsed value; timestamptz and timestamp → Date
   * (timestamp is read as UTC; milliseconds); date → "YYYY-MM-DD"; bytea →
   * Uint8Array; arrays → arrays; NULL → null; any other type → its text form.
   * At most 100000 rows and 64 MiB per result.
   */
  export type SqlRows<Row> = Row[] & { readonly rowCount: number; readonly command: string };

  /** Runs one statement; a PostgreSQL error rejects with a PostgresError. */
  export interface SqlQuery {
    /** sql` + "`" + `select * from orders where id = ${id}` + "`" + `: every ${…} is a parameter. */
    <Row = Record<string, unknown>>(strings: TemplateStringsArray, ...values: SqlValue[]): Promise<SqlRows<Row>>;
    /** One statement with $1, $2, … bound to params. */
    query<Row = Record<string, unknown>>(text: string, params?: readonly SqlValue[]): Promise<SqlRows<Row>>;
  }

  /** The statements of one transaction, run in the order issued. Usable until the callback's promise settles. */
  export interface SqlTx extends SqlQuery {}

  /** SQL on the project's PostgreSQL, from steps and agent tools (not workflow code). */
  export interface Sql extends SqlQuery {
    /**
     * Runs fn in a transaction on a connection of its own: COMMIT when fn's
     * promise fulfils (resolving to its value), ROLLBACK when it rejects (or
     * the step times out) with the same error.
     */
    begin<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T>;
  }

  /** Thrown for an error PostgreSQL reports; fields it did not give are absent. */
  export interface PostgresError extends Error {
    name: "PostgresError";
    /** SQLSTATE, e.g. "23505" (unique_violation). */
    code: string;
    severity: string;
    detail?: string;
    hint?: string;
    /** 1-based character position in the statement. */
    position?: number;
    where?: string;
    schema?: string;
    table?: string;
    column?: string;
    dataType?: string;
    constraint?: string;
  }

  export const sql: Sql;
}
`
