package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/tasks"
)

func TestReplayCommand(t *testing.T) {
	url := testenv.PostgresURL(t)
	baseEnv(t, url)
	// --all replays the request-log tables, the API keys' usage and the task
	// views from Kafka too.
	kc, _ := clickhouseReplayEnv(t)
	// One task's lifecycle on the topic: the replay of the task views
	// reads it through the configured kafka.
	// The records are signed with the key the replay verifies them with.
	t.Setenv("EVENTS__SIGNING_KEY", "replay-test-signing-key-0123456789abcdef")
	signer, err := events.NewSigner([]byte("replay-test-signing-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := tasks.NewProducer(kc, signer, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.PublishLifecycle(context.Background(), []tasks.Lifecycle{{TaskID: "t1", Queue: "q", Type: "demo:echo", Step: tasks.StepEnqueued, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args   []string
		code   int
		stderr string // in the error or on stderr
		stdout []string
	}{
		{[]string{"replay"}, 2, "Usage:\n  cfgd replay NAME... | --all | --list", nil},
		{[]string{"replay", "--all", "--list"}, 2, "one of them", nil},
		{[]string{"replay", "--all", "identity.users"}, 2, "one of them", nil},
		{[]string{"replay", "nope"}, 2, `unknown projection "nope"`, nil},
		{[]string{"replay", "tasks.control"}, 2, "tasks.control is a reactor; replay never runs reactors", nil},
		{[]string{"replay", "--batch", "0", "identity.users"}, 2, "batch size 0", nil},
		{[]string{"replay", "--bogus"}, 2, "unknown flag: --bogus", nil},
		// Events in the store, no projection has run yet.
		{[]string{"user", "create-superuser", "--email", "replay@example.com"}, 0, "", []string{"superuser created"}},
		{[]string{"replay", "--list"}, 0, "", []string{"identity.users", "users,profiles,registration_sources,user_registration_sources", "tasks.control", "reactor", "apikey.keys",
			"tasks.queues", "task_queues,task_worker_commands,task_lifecycle,task_runs",
			// The logs each is built from.
			"event store + " + kc.Topic(kafka.TopicAPIKeyUsage), "event store + " + kc.Topic(tasks.TopicLifecycle)}},
		{[]string{"replay", "identity.users"}, 0, "", []string{"identity.users: 2/2 events (100.0%)", "events/s, ETA", "identity.users: replayed 2 events (1 applied)"}},
		{[]string{"replay", "--all"}, 0, "", []string{"identity.users: replayed", "identity.revocations: replayed",
			"apikey.keys: replayed 2 events (0 applied) and 0 records of its feeds", "tasks.queues: replayed 2 events (0 applied) and 1 records of its feeds",
			"tasks.queues feed tasks.lifecycle: 1/1 records (100.0%)", "records/s, ETA"}},
	}
	for _, tc := range tests {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, &stdout, &stderr)
		code := 0
		ee := (*exitError)(nil)
		switch {
		case errors.As(err, &ee):
			code = ee.code
		case err != nil:
			code = 1
		}
		msg := stderr.String()
		if err != nil && (ee == nil || ee.err != nil) {
			msg += err.Error()
		}
		ok := code == tc.code && strings.Contains(msg, tc.stderr)
		for _, s := range tc.stdout {
			ok = ok && strings.Contains(stdout.String(), s)
		}
		if !ok {
			t.Errorf("%q: exit %d (%v), stderr %q, stdout %q", tc.args, code, err, stderr.String(), stdout.String())
		}
	}

	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var email, state string
	if err := pool.QueryRow(context.Background(), `SELECT email FROM users`).Scan(&email); err != nil || email != "replay@example.com" {
		t.Fatalf("replayed users: %q %v", email, err)
	}
	if err := pool.QueryRow(context.Background(), `SELECT state FROM task_runs WHERE task_id = 't1'`).Scan(&state); err != nil || state != tasks.StepEnqueued {
		t.Fatalf("replayed task statistics: %q %v", state, err)
	}
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"replay", "--list"}, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "identity.users" && f[len(f)-1] != "0" {
			t.Fatalf("lag after replay: %q in\n%s", line, stdout.String())
		}
	}
}

func TestProgressLine(t *testing.T) {
	for _, tc := range []struct {
		done, total int64
		elapsed     time.Duration
		want        string
	}{
		{0, 100, 0, "p: 0/100 events (0.0%), 0 events/s, ETA ?"},
		{50, 100, 2 * time.Second, "p: 50/100 events (50.0%), 25 events/s, ETA 2s"},
		{0, 0, time.Second, "p: 0/0 events (100.0%), 0 events/s, ETA ?"},
	} {
		if got := progressLine("p", "events", tc.done, tc.total, tc.elapsed); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// On a terminal the progress is a bar of barWidth cells whatever the
// name's length, with the count, the rate and the time left.
func TestProgressBarOnATerminal(t *testing.T) {
	for _, name := range []string{"identity.users", "tasks.queues feed cfgd.tasks.lifecycle with a very long name that fills a line"} {
		var out bytes.Buffer
		progress, feed, finish := newProgress(&out, true, name, "events")
		feed("cfgd.tasks.lifecycle", 5, 10)
		time.Sleep(150 * time.Millisecond) // past the bar's redraw throttle
		progress(50, 100)
		time.Sleep(150 * time.Millisecond)
		progress(100, 100)
		finish(nil)
		text := out.String()
		last := text[strings.LastIndex(text, "\r")+1:]
		if strings.Count(text, "█") < barWidth || !strings.Contains(text, "50/100") || !strings.Contains(text, "events/s") {
			t.Errorf("%s: no bar of %d cells with count and rate:\n%q", name, barWidth, text)
		}
		if !strings.Contains(text, "100%") && !strings.Contains(last, "100/100") {
			t.Errorf("%s: the bar does not end full:\n%q", name, text)
		}
	}
}
