package main

// The schedules' HTTP routes (GET /api/schedules, POST
// /api/schedules/{workflow}/pause and /resume) and `svc schedules`, which
// calls them.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"
)

// handleListSchedules serves every schedule of the catalog.
func (s *server) handleListSchedules(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion, "items": s.rt.sched.list(r.Context())})
}

// handlePauseSchedule pauses a workflow's schedule.
func (s *server) handlePauseSchedule(w http.ResponseWriter, r *http.Request) {
	s.setSchedulePaused(w, r, true)
}

// handleResumeSchedule resumes a workflow's schedule.
func (s *server) handleResumeSchedule(w http.ResponseWriter, r *http.Request) {
	s.setSchedulePaused(w, r, false)
}

// setSchedulePaused pauses or resumes the schedule of {workflow} and
// answers it.
func (s *server) setSchedulePaused(w http.ResponseWriter, r *http.Request, paused bool) {
	it, err := s.rt.sched.setPaused(r.Context(), r.PathValue("workflow"), paused)
	switch {
	case errors.Is(err, errScheduleNotFound):
		writeAPIError(w, http.StatusNotFound, apiError{Code: "schedule_not_found", Message: err.Error() + "; GET /api/schedules lists the schedules"})
	case writeUnavailable(w, err):
	case err != nil:
		s.log.Error("pause schedule", "err", err)
		writeAPIError(w, http.StatusInternalServerError, apiError{Code: "internal", Message: "could not record the change"})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion, "schedule": it})
	}
}

// scheduleVerbs are the `svc schedules` verbs.
func scheduleVerbs() []*verb {
	return []*verb{
		{name: "list", example: "svc schedules list", summary: "list the workflows' schedules: cron, time zone, next fires, last run, paused", newFlags: targetFlags("list"), run: runSchedulesList},
		{name: "pause", example: "svc schedules pause nightly", summary: "pause a workflow's schedule (durable; the fires while paused are dropped)", usage: "<workflow>", newFlags: targetFlags("pause"), run: runSchedulesPause},
		{name: "resume", example: "svc schedules resume nightly", summary: "resume a paused schedule from its next fire", usage: "<workflow>", newFlags: targetFlags("resume"), run: runSchedulesResume},
	}
}

// runSchedulesList is `svc schedules list`.
func runSchedulesList(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	out, err := fetchList[scheduleItem](ctx, c, fs, "/api/schedules")
	if err != nil {
		return err
	}
	c.emit(out, func(w io.Writer) {
		if len(out.Items) == 0 {
			fmt.Fprintln(w, `No workflow declares a schedule (export const schedule = "0 9 * * 1-5").`)
			return
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "WORKFLOW\tCRON\tTIMEZONE\tNEXT FIRES\tLAST RUN\tPAUSED")
		for _, it := range out.Items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", it.Workflow, it.Cron, it.Timezone, scheduleNextText(it), scheduleLastRunText(it), yesNo(it.Paused))
		}
		tw.Flush()
	})
	return nil
}

// scheduleNextText is the NEXT FIRES column: the upcoming fires.
func scheduleNextText(it scheduleItem) string {
	if it.Paused {
		return "- (paused)"
	}
	var fires []string
	for _, f := range it.NextFires {
		fires = append(fires, f.Format("2006-01-02 15:04 MST"))
	}
	if len(fires) == 0 {
		return "-"
	}
	return strings.Join(fires, ", ")
}

// scheduleLastRunText is the LAST RUN column: the run, its fire and status.
func scheduleLastRunText(it scheduleItem) string {
	if it.LastRun == nil {
		return "-"
	}
	return fmt.Sprintf("%s (%s, %s)", it.LastRun.RunID, it.LastRun.ScheduledAt.Format(time.DateTime), orDash(it.LastRun.Status))
}

// orDash returns s, or "-" when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// yesNo says a flag in a table.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// runSchedulesPause is `svc schedules pause <workflow>`.
func runSchedulesPause(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	return setSchedulePausedCLI(ctx, c, fs, "pause")
}

// runSchedulesResume is `svc schedules resume <workflow>`.
func runSchedulesResume(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	return setSchedulePausedCLI(ctx, c, fs, "resume")
}

// setSchedulePausedCLI sends a pause or resume (action) and prints the
// schedule it answers.
func setSchedulePausedCLI(ctx context.Context, c *cmd, fs *flag.FlagSet, action string) error {
	name, t, err := argAndTarget(ctx, c, fs, "workflow name")
	if err != nil {
		return err
	}
	var out struct {
		SchemaVersion int          `json:"schema_version"`
		Schedule      scheduleItem `json:"schedule"`
	}
	if err := t.call(ctx, http.MethodPost, "/api/schedules/"+url.PathEscape(name)+"/"+action, nil, nil, &out); err != nil {
		if ce := (*cliError)(nil); errors.As(err, &ce) && ce.Code == "schedule_not_found" {
			ce.Hint = "`svc schedules list` lists the workflows with a schedule"
		}
		return err
	}
	c.emit(out, func(w io.Writer) {
		if out.Schedule.Paused {
			fmt.Fprintf(w, "Schedule of %s paused: it fires no more until `svc schedules resume %s`.\n", name, name)
			return
		}
		fmt.Fprintf(w, "Schedule of %s running: next fires %s.\n", name, scheduleNextText(out.Schedule))
	})
	return nil
}
