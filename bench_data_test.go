package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

// BenchmarkStepDataPath runs 1000 runs of a workflow whose one step does a
// sql round trip (an insert returning its id) and a storage put of a small
// file, against a real svc dev (its PostgreSQL, its object storage), and
// reports the step's duration as the run record shows it (p50, p99):
//
//	go test -run '^$' -bench BenchmarkStepDataPath -benchtime 1x .
func BenchmarkStepDataPath(b *testing.B) {
	dir := projectDir(b)
	writeFile(b, dir, "src/schema.ts", `import { pgTable, serial, text } from "drizzle-orm/pg-core";
export const notes = pgTable("notes", { id: serial("id").primaryKey(), body: text("body").notNull() });
`)
	writeFile(b, dir, "workflows/note.workflow.ts", `import { sql, storage } from "svc";
async function save(body: string) {
  "use step";
  const [row] = await sql<{ id: number }>`+"`insert into notes (body) values (${body}) returning id`"+`;
  await storage.put("notes/" + row.id + ".txt", body);
  return row.id;
}
export default async function note(input: { body: string }) {
  "use workflow";
  return { id: await save(input.body) };
}
`)
	d := startDev(b, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(b), "OPENAI_API_KEY=sk-bench"))
	client := &http.Client{Timeout: time.Minute}
	for range b.N {
		var steps []time.Duration
		for i := range 1000 {
			var rc startReceipt
			if st := httpJSON(b, "POST", d.url("/api/workflows/note/start"), fmt.Sprintf(`{"body":"note %d"}`, i), &rc); st != http.StatusAccepted && st != http.StatusOK {
				b.Fatalf("start = %d", st)
			}
			resp, err := client.Get(d.url("/api/runs/" + rc.RunID + "?wait=60s"))
			if err != nil {
				b.Fatal(err)
			}
			var got struct{ Run runRecord }
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			if err != nil || got.Run.Status != runCompleted || len(got.Run.Steps) != 1 || got.Run.Steps[0].EndedAt == nil {
				b.Fatalf("run = %+v (%v)", got.Run, err)
			}
			s := got.Run.Steps[0]
			steps = append(steps, s.EndedAt.Sub(s.StartedAt))
		}
		sort.Slice(steps, func(i, k int) bool { return steps[i] < steps[k] })
		b.ReportMetric(percentile(steps, 50), "step-p50-ms")
		b.ReportMetric(percentile(steps, 99), "step-p99-ms")
	}
	if !strings.Contains(d.stderr.String(), "create table notes") {
		b.Logf("auto-migrate did not log the notes table:\n%s", d.stderr.String())
	}
}
