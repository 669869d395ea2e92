package main

import (
	"strings"
	"testing"
	"time"
)

// mustZone loads an IANA zone or fails the test.
func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// mustCron parses expr in zone under dst or fails the test.
func mustCron(t *testing.T, expr, zone, dst string) *scheduleCron {
	t.Helper()
	c, err := parseScheduleCron(expr, mustZone(t, zone), dst)
	if err != nil {
		t.Fatalf("parse %q: %v", expr, err)
	}
	return c
}

// mustTime parses an RFC 3339 time or fails the test.
func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// expectNextFires fails unless the fires of c after from are want, in
// order (RFC 3339 times); what names the case.
func expectNextFires(t *testing.T, c *scheduleCron, what, from string, want []string) {
	t.Helper()
	at := mustTime(t, from)
	for i, w := range want {
		at = c.next(at)
		if !at.Equal(mustTime(t, w)) {
			t.Errorf("%s from %s: fire %d = %s; want %s", what, from, i+1, at.UTC().Format(time.RFC3339), w)
			return
		}
	}
}

// TestScheduleCronNext: the fires of expressions, names and field forms,
// in UTC and in a zone, from a given instant.
func TestScheduleCronNext(t *testing.T) {
	for _, tc := range []struct {
		expr, zone, from string
		want             []string // the next fires, in order
	}{
		{"0 9 * * 1-5", "UTC", "2026-11-27T10:00:00Z", []string{"2026-11-30T09:00:00Z", "2026-12-01T09:00:00Z"}}, // Friday after 9: Monday
		{"*/20 * * * *", "UTC", "2026-01-01T00:00:00Z", []string{"2026-01-01T00:20:00Z", "2026-01-01T00:40:00Z", "2026-01-01T01:00:00Z"}},
		{"5,10-12 3 * * *", "UTC", "2026-01-01T03:10:00Z", []string{"2026-01-01T03:11:00Z", "2026-01-01T03:12:00Z", "2026-01-02T03:05:00Z"}},
		{"0 0 13 * 5", "UTC", "2026-02-01T00:00:00Z", []string{"2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z"}}, // 13th or Friday
		{"0 0 */10 * 5", "UTC", "2026-02-01T00:00:00Z", []string{"2026-05-01T00:00:00Z", "2026-07-31T00:00:00Z"}},                       // dom starts with *: a Friday the 1st, 11th, 21st or 31st
		{"0 12 * jan-feb sun", "UTC", "2026-02-25T00:00:00Z", []string{"2027-01-03T12:00:00Z"}},
		{"0 12 * * 7", "UTC", "2026-11-26T00:00:00Z", []string{"2026-11-29T12:00:00Z"}}, // 7 is Sunday
		{"0 0 29 2 *", "UTC", "2026-01-01T00:00:00Z", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"@hourly", "UTC", "2026-01-01T00:30:00Z", []string{"2026-01-01T01:00:00Z"}},
		{"@daily", "Europe/Paris", "2026-06-01T12:00:00Z", []string{"2026-06-01T22:00:00Z"}}, // midnight at +02:00
		{"@weekly", "UTC", "2026-11-26T00:00:00Z", []string{"2026-11-29T00:00:00Z"}},
		{"@monthly", "UTC", "2026-11-26T00:00:00Z", []string{"2026-12-01T00:00:00Z"}},
		{"@yearly", "UTC", "2026-11-26T00:00:00Z", []string{"2027-01-01T00:00:00Z"}},
		{"0 9 * * 1-5", "Asia/Kolkata", "2026-11-27T00:00:00Z", []string{"2026-11-27T03:30:00Z", "2026-11-30T03:30:00Z"}},
	} {
		expectNextFires(t, mustCron(t, tc.expr, tc.zone, scheduleDSTOnce), tc.expr+" in "+tc.zone, tc.from, tc.want)
	}
}

// TestScheduleCronDST: in America/New_York, 02:30 on the spring-forward
// day does not exist: it fires at 03:00 EDT (once) or not at all (skip);
// 01:30 on the fall-back day occurs twice: it fires once, at its first
// occurrence, under both policies. Wall times of a gap fire once.
func TestScheduleCronDST(t *testing.T) {
	for _, tc := range []struct {
		expr, dst, from string
		want            []string
	}{
		// 2026-03-08 02:00 EST → 03:00 EDT (07:00Z).
		{"30 2 * * *", scheduleDSTOnce, "2026-03-07T12:00:00Z", []string{"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"30 2 * * *", scheduleDSTSkip, "2026-03-07T12:00:00Z", []string{"2026-03-09T06:30:00Z"}},
		{"*/15 2 * * *", scheduleDSTOnce, "2026-03-07T12:00:00Z", []string{"2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"}},
		{"0,30 2-3 * * *", scheduleDSTOnce, "2026-03-08T06:00:00Z", []string{"2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z", "2026-03-09T06:00:00Z"}},
		// 2026-11-01 02:00 EDT → 01:00 EST: 01:30 is 05:30Z and again 06:30Z.
		{"30 1 * * *", scheduleDSTOnce, "2026-10-31T12:00:00Z", []string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"30 1 * * *", scheduleDSTSkip, "2026-10-31T12:00:00Z", []string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		// From inside the repeated hour: its wall times have fired already.
		{"*/30 * * * *", scheduleDSTOnce, "2026-11-01T06:10:00Z", []string{"2026-11-01T07:00:00Z", "2026-11-01T07:30:00Z"}},
	} {
		expectNextFires(t, mustCron(t, tc.expr, "America/New_York", tc.dst), tc.expr+" dst="+tc.dst, tc.from, tc.want)
	}
}

// TestScheduleCronLatest: the last fire of a window, near and far back,
// and none when the window holds none.
func TestScheduleCronLatest(t *testing.T) {
	now := mustTime(t, "2026-06-10T12:34:56Z")
	for _, tc := range []struct {
		expr, after, want string // want "" for none
	}{
		{"* * * * *", "2026-06-10T10:00:00Z", "2026-06-10T12:34:00Z"},
		{"0 0 1 1 *", "2020-01-01T00:00:00Z", "2026-01-01T00:00:00Z"},
		{"0 0 1 1 *", "2026-01-01T00:00:00Z", ""},
		{"0 3 * * *", "2026-05-01T00:00:00Z", "2026-06-10T03:00:00Z"},
	} {
		got, ok := mustCron(t, tc.expr, "UTC", scheduleDSTOnce).latest(mustTime(t, tc.after), now)
		if tc.want == "" {
			if ok {
				t.Errorf("latest %q after %s = %s; want none", tc.expr, tc.after, got)
			}
			continue
		}
		if !ok || !got.Equal(mustTime(t, tc.want)) {
			t.Errorf("latest %q after %s = %s %v; want %s", tc.expr, tc.after, got, ok, tc.want)
		}
	}
}

// TestScheduleCronErrors: malformed expressions are refused with what is
// wrong and what is accepted.
func TestScheduleCronErrors(t *testing.T) {
	for expr, want := range map[string]string{
		"61 * * * *":   "minute field",
		"* * *":        "3 fields",
		"@every 5m":    "2 fields",
		"@often":       "unknown name @often",
		"0 0 30 2 *":   "never fires",
		"5-1 * * * *":  "runs backwards",
		"*/0 * * * *":  "step",
		"0 0 * foo *":  "JAN-DEC",
		"0 0 * * 8":    "SUN-SAT",
		"0 24 * * *":   "0 to 23",
		"0 0 0 * *":    "1 to 31",
		"a b c d e":    "minute field",
		"0 9 * * 1-5,": "day of week",
	} {
		_, err := parseScheduleCron(expr, time.UTC, scheduleDSTOnce)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parse %q = %v; want an error naming %q", expr, err, want)
		}
	}
}

// TestScheduleDeclErrors: the declaration's options are checked, each
// refusal saying what is accepted; the defaults are filled in.
func TestScheduleDeclErrors(t *testing.T) {
	for raw, want := range map[string]string{
		`{"cron":"* * * * *","timezone":"Mars/Olympus"}`: "not an IANA time zone",
		`{"cron":"* * * * *","timezone":"Local"}`:        "depends on the machine",
		`{"cron":"* * * * *","overlap":"drop"}`:          "want skip, queue or allow",
		`{"cron":"* * * * *","catchUp":"all"}`:           "want latest or none",
		`{"cron":"* * * * *","dst":"twice"}`:             "want once or skip",
		`{"cron":"* * * * *","every":"1m"}`:              "unknown field",
		`{"timezone":"UTC"}`:                             "cron is missing",
		`42`:                                             "want a cron string",
		`"0 25 * * *"`:                                   "hour field",
	} {
		if _, err := parseScheduleDecl([]byte(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("declaration %s = %v; want an error naming %q", raw, err, want)
		}
	}
	d, err := parseScheduleDecl([]byte(`"0 9 * * 1-5"`))
	if err != nil || d.Timezone != "UTC" || d.Overlap != scheduleOverlapSkip || d.CatchUp != scheduleCatchUpLatest || d.DST != scheduleDSTOnce {
		t.Errorf("defaults = %+v %v", d, err)
	}
}
