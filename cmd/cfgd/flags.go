package main

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// daysDuration is a duration flag that also takes days: "30d", "1d12h",
// besides anything time.ParseDuration reads ("720h", "90m"). Lifetimes
// such as an API key's are counted in days, which time.ParseDuration
// lacks.
type daysDuration struct{ d *time.Duration }

func newDaysDuration(d *time.Duration) daysDuration { return daysDuration{d: d} }

const day = 24 * time.Hour

var errDaysDuration = errors.New(`expected a duration such as 720h, 30d or 1d12h`)

func (v daysDuration) Set(s string) error {
	d, err := parseDaysDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// String is whole days as "30d"; "0" for zero, so that help shows no
// default.
func (v daysDuration) String() string {
	if v.d == nil || *v.d == 0 {
		return "0"
	}
	if *v.d%day == 0 {
		return strconv.FormatInt(int64(*v.d/day), 10) + "d"
	}
	return v.d.String()
}

func (v daysDuration) Type() string { return "duration" }

// parseDaysDuration reads an optional sign, then whole days ("30d") and
// an optional time.ParseDuration rest ("12h"), or a time.ParseDuration
// string alone.
func parseDaysDuration(s string) (time.Duration, error) {
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 {
		return 0, errDaysDuration
	}
	digits, rest, ok := strings.Cut(body, "d")
	if !ok {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, errDaysDuration
		}
		return d, nil
	}
	days, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || days > math.MaxInt64/int64(day) {
		return 0, errDaysDuration
	}
	d := time.Duration(days) * day
	if rest != "" {
		if rest[0] < '0' || rest[0] > '9' {
			return 0, errDaysDuration
		}
		r, err := time.ParseDuration(rest)
		if err != nil || r > math.MaxInt64-d {
			return 0, errDaysDuration
		}
		d += r
	}
	if strings.HasPrefix(s, "-") {
		d = -d
	}
	return d, nil
}
