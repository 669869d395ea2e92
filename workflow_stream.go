package main

// The run history's half of run streams (engine_stream.go): an archived
// run's stream lives in svc.run_streams (platform migration
// 0007_run_streams.sql), written in the archive's transaction with its run
// and deleted with it by the prune (ON DELETE CASCADE).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// runStreamUpsertSQL stores an archived run's stream, replacing any.
const runStreamUpsertSQL = `INSERT INTO svc.run_streams (run_id, entries) VALUES ($1, $2)
ON CONFLICT (run_id) DO UPDATE SET entries = excluded.entries`

// queueStreams adds to batch the streams of the runs that have one; the
// batch must already hold the runs.
func queueStreams(batch *pgx.Batch, runs []runRecord) error {
	for i := range runs {
		r := &runs[i]
		if r.stream == nil || len(r.stream.entries) == 0 {
			continue
		}
		b, err := json.Marshal(r.stream.entries)
		if err != nil {
			return fmt.Errorf("archive run %s: encode its stream: %w", r.RunID, err)
		}
		batch.Queue(runStreamUpsertSQL, r.RunID, strings.ToValidUTF8(string(b), "\uFFFD"))
	}
	return nil
}

// stream returns the stream of archived run runID (empty when it wrote
// none).
func (h *pgRunHistory) stream(ctx context.Context, runID string) ([]streamEntry, error) {
	var text string
	err := h.db.QueryRow(ctx, `SELECT entries FROM svc.run_streams WHERE run_id = $1`, runID).Scan(&text)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the stream of archived run %s: %w", runID, err)
	}
	var entries []streamEntry
	if err := json.Unmarshal([]byte(text), &entries); err != nil {
		return nil, fmt.Errorf("read the stream of archived run %s: decode: %w", runID, err)
	}
	return entries, nil
}
