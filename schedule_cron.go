package main

// The cron expressions of workflow schedules (issue 21): five fields
// (minute, hour, day of month, month, day of week) and the @hourly-style
// names, evaluated in an IANA time zone. The tz database is embedded
// (time/tzdata), so a container without /usr/share/zoneinfo reads the same
// zones. Daylight saving follows a policy of the schedule's own: a wall
// time that does not exist fires at the next valid minute (scheduleDSTOnce)
// or not at all (scheduleDSTSkip); one that occurs twice fires once, at its
// first occurrence.

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // the zones of schedules without the system's zoneinfo
)

// The daylight-saving policies of a schedule.
const (
	scheduleDSTOnce = "once" // a nonexistent wall time fires at the next valid minute; a repeated one fires once
	scheduleDSTSkip = "skip" // a nonexistent wall time does not fire; a repeated one fires once
)

// scheduleCronNames are the named schedules and the fields they stand for.
var scheduleCronNames = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
	"@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

// scheduleCronSyntax says what an expression may be, for errors.
const scheduleCronSyntax = `five fields "minute hour day-of-month month day-of-week" (each *, a number, a range a-b, a step */n or a-b/n, or a comma list; months JAN-DEC, days SUN-SAT, 7 is Sunday too) or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly`

// scheduleCronField is one field's bounds and names.
type scheduleCronField struct {
	name     string
	min, max int
	names    []string // names[i] stands for min+i
}

// The five fields, in order.
var scheduleCronFields = [5]scheduleCronField{
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day of month", min: 1, max: 31},
	{name: "month", min: 1, max: 12, names: []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}},
	{name: "day of week", min: 0, max: 7, names: []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}},
}

// scheduleCron is a parsed expression in its zone: each field a bit set of
// the values it matches.
type scheduleCron struct {
	minute, hour, dom, month, dow uint64
	// domAny and dowAny say the day fields start with *: when both are
	// restricted a day matches either (cron's rule), else both.
	domAny, dowAny bool
	loc            *time.Location
	dst            string
}

// parseScheduleCron parses expr for zone loc under the DST policy dst.
func parseScheduleCron(expr string, loc *time.Location, dst string) (*scheduleCron, error) {
	fields := strings.Fields(expr)
	if len(fields) == 1 && strings.HasPrefix(fields[0], "@") {
		named, ok := scheduleCronNames[strings.ToLower(fields[0])]
		if !ok {
			return nil, fmt.Errorf("unknown name %s: want %s", fields[0], scheduleCronSyntax)
		}
		fields = strings.Fields(named)
	}
	if len(fields) != 5 {
		return nil, fmt.Errorf("%q has %d fields: want %s", expr, len(fields), scheduleCronSyntax)
	}
	c := &scheduleCron{loc: loc, dst: dst, domAny: strings.HasPrefix(fields[2], "*"), dowAny: strings.HasPrefix(fields[4], "*")}
	for i, field := range []*uint64{&c.minute, &c.hour, &c.dom, &c.month, &c.dow} {
		set, err := parseScheduleCronField(fields[i], scheduleCronFields[i])
		if err != nil {
			return nil, fmt.Errorf("%q: %s field %q: %v", expr, scheduleCronFields[i].name, fields[i], err)
		}
		*field = set
	}
	if c.dow&(1<<7) != 0 { // 7 is Sunday
		c.dow |= 1
	}
	if !c.domAny && c.dowAny && !c.someMonthHasDay() {
		return nil, fmt.Errorf("%q never fires: no month it names has the day of month it names", expr)
	}
	return c, nil
}

// someMonthHasDay reports whether a day of the day-of-month field exists
// in a month of the month field (February counted with 29 days).
func (c *scheduleCron) someMonthHasDay() bool {
	length := [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for m := 1; m <= 12; m++ {
		if c.month&(1<<m) != 0 && bits.TrailingZeros64(c.dom) <= length[m] {
			return true
		}
	}
	return false
}

// parseScheduleCronField parses one field into the bit set of its values.
func parseScheduleCronField(s string, f scheduleCronField) (uint64, error) {
	var set uint64
	for _, part := range strings.Split(s, ",") {
		rng, stepText, hasStep := strings.Cut(part, "/")
		lo, hi := f.min, f.max
		switch {
		case rng == "*":
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			var err error
			if lo, err = scheduleCronValue(a, f); err != nil {
				return 0, err
			}
			if hi, err = scheduleCronValue(b, f); err != nil {
				return 0, err
			}
			if lo > hi {
				return 0, fmt.Errorf("range %s runs backwards", rng)
			}
		default:
			v, err := scheduleCronValue(rng, f)
			if err != nil {
				return 0, err
			}
			lo = v
			if !hasStep {
				hi = v
			}
		}
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 || n > f.max {
				return 0, fmt.Errorf("step %q: want a number from 1 to %d", stepText, f.max)
			}
			step = n
		}
		for v := lo; v <= hi; v += step {
			set |= 1 << v
		}
	}
	return set, nil
}

// scheduleCronValue reads one value of field f: a number in its bounds or
// one of its names.
func scheduleCronValue(s string, f scheduleCronField) (int, error) {
	for i, n := range f.names {
		if strings.EqualFold(s, n) {
			return f.min + i, nil
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < f.min || v > f.max {
		want := fmt.Sprintf("a number from %d to %d", f.min, f.max)
		if len(f.names) > 0 {
			want += " or a name " + f.names[0] + "-" + f.names[len(f.names)-1]
		}
		return 0, fmt.Errorf("%q is not %s", s, want)
	}
	return v, nil
}

// scheduleCronHorizon bounds the search for the next fire: every valid
// expression fires within it (February 29 comes back within eight years).
const scheduleCronHorizon = 9 * 366

// dayMatches reports whether the civil day d matches the day fields.
func (c *scheduleCron) dayMatches(d time.Time) bool {
	if c.month&(1<<int(d.Month())) == 0 {
		return false
	}
	dom, dow := c.dom&(1<<d.Day()) != 0, c.dow&(1<<int(d.Weekday())) != 0
	if !c.domAny && !c.dowAny {
		return dom || dow
	}
	return dom && dow
}

// next returns the first fire strictly after t, or the zero time when
// there is none within the horizon. The fires of consecutive wall times
// never go backwards, so the first one after t in wall order is the next.
func (c *scheduleCron) next(t time.Time) time.Time {
	local := t.In(c.loc)
	day := time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, time.UTC) // a civil date
	for range scheduleCronHorizon {
		if c.dayMatches(day) {
			for h := 0; h < 24; h++ {
				if c.hour&(1<<h) == 0 {
					continue
				}
				for m := 0; m < 60; m++ {
					if c.minute&(1<<m) == 0 {
						continue
					}
					if at, ok := c.instant(day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute)); ok && at.After(t) {
						return at
					}
				}
			}
		}
		day = day.AddDate(0, 0, 1)
	}
	return time.Time{}
}

// latest returns the last fire in (after, now], if any. It looks back from
// now a widening window at a time, so a schedule that fires often costs
// one short walk.
func (c *scheduleCron) latest(after, now time.Time) (time.Time, bool) {
	for _, back := range []time.Duration{time.Hour, 25 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour, 0} {
		from := now.Add(-back)
		if back == 0 || from.Before(after) {
			from = after
		}
		var last time.Time
		for at := c.next(from); !at.IsZero() && !at.After(now); at = c.next(at) {
			last = at
		}
		if !last.IsZero() {
			return last, true
		}
		if !from.After(after) {
			return time.Time{}, false
		}
	}
	return time.Time{}, false
}

// instant returns when the wall time w (a civil time, in UTC's fields)
// fires in the zone: the instant it names; the first of two when the
// clocks went back; the next valid minute (scheduleDSTOnce) or nothing
// (scheduleDSTSkip) when the clocks jumped over it.
func (c *scheduleCron) instant(w time.Time) (time.Time, bool) {
	var found []time.Time
	for _, probe := range []time.Duration{-24 * time.Hour, 0, 24 * time.Hour} {
		_, offset := w.Add(probe).In(c.loc).Zone()
		at := w.Add(-time.Duration(offset) * time.Second)
		if scheduleWall(at.In(c.loc)).Equal(w) && !containsTime(found, at) {
			found = append(found, at)
		}
	}
	if len(found) > 0 {
		first := found[0]
		for _, at := range found[1:] {
			if at.Before(first) {
				first = at
			}
		}
		return first, true
	}
	if c.dst == scheduleDSTSkip {
		return time.Time{}, false
	}
	// In a gap: the instants of the offsets on either side straddle it;
	// the first minute whose wall time is not before w ends it.
	_, before := w.Add(-24 * time.Hour).In(c.loc).Zone()
	_, after := w.Add(24 * time.Hour).In(c.loc).Zone()
	lo, hi := w.Add(-time.Duration(max(before, after))*time.Second), w.Add(-time.Duration(min(before, after))*time.Second)
	lo, hi = lo.Truncate(time.Minute), hi.Truncate(time.Minute).Add(time.Minute)
	for hi.Sub(lo) > time.Minute {
		mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Minute)
		if scheduleWall(mid.In(c.loc)).Before(w) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, true
}

// scheduleWall returns the wall-clock fields of t as a civil time in UTC.
func scheduleWall(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
}

// containsTime reports whether list holds the instant t.
func containsTime(list []time.Time, t time.Time) bool {
	for _, x := range list {
		if x.Equal(t) {
			return true
		}
	}
	return false
}
