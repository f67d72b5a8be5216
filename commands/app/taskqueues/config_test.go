package taskqueues_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/commands/app/taskqueues"
)

func TestParseQueues(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   []string
		want []taskqueues.Queue
		err  string
	}{
		{[]string{"default", "high", "low"}, []taskqueues.Queue{{"default", 3}, {"high", 6}, {"low", 1}}, ""},
		{[]string{"reports", "high:10"}, []taskqueues.Queue{{"reports", 1}, {"high", 10}}, ""},
		{[]string{"x:0"}, nil, "weight must be an integer from 1 to 100"},
		{[]string{"x:1", "y:100"}, []taskqueues.Queue{{"x", 1}, {"y", 100}}, ""},
		{[]string{"x:101"}, nil, "weight must be an integer from 1 to 100"},
		{[]string{"x:abc"}, nil, "weight must be an integer from 1 to 100"},
	}
	for _, c := range cases {
		got, err := taskqueues.ParseQueues(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || len(got) != len(c.want) {
			t.Fatalf("%v: %v %v", c.in, got, err)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%v: %v, want %v", c.in, got, c.want)
			}
		}
	}
}

func TestConfigValidateJoinsEveryProblem(t *testing.T) {
	t.Parallel()
	defaults := taskqueues.DefaultConfig()
	defaults.RedisURL = "redis://127.0.0.1:6379/0"
	if err := defaults.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	c := taskqueues.DefaultConfig()
	c.RedisURL = "http://nope"
	c.Processes, c.Threads, c.MaxRetries = 0, 0, -1
	c.Queues = []taskqueues.Queue{{"a b", 1}, {"x", 1}, {"x", 0}}
	c.WorkerID = "bad id"
	c.Heartbeat = 0
	c.RetryDelay = -time.Second
	err := c.Validate()
	for _, want := range []string{"redis url", "processes", "threads", "max retries", `queue name "a b"`, `queue "x" listed twice`,
		`queue "x": priority`, "worker id", "heartbeat", "retry delay"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
}

func TestValidatePayload(t *testing.T) {
	t.Parallel()
	cases := []struct {
		typ, payload string
		ok           bool
	}{
		{taskqueues.TypeSleep, `{"ms": 10}`, true},
		{taskqueues.TypeSleep, ``, true},
		{taskqueues.TypeSleep, `{"ms": -1}`, false},
		{taskqueues.TypeSleep, `{"ms": "x"}`, false},
		{taskqueues.TypeEcho, `{"a": 1}`, true},
		{taskqueues.TypeEcho, `{`, false},
		{taskqueues.TypeFail, `{"message": "boom"}`, true},
		{"nope", ``, false},
	}
	for _, c := range cases {
		if err := taskqueues.ValidatePayload(c.typ, []byte(c.payload)); (err == nil) != c.ok {
			t.Errorf("%s %s: %v", c.typ, c.payload, err)
		}
	}
}

// The smallest valid values pass; one below fails.
func TestConfigValidateBounds(t *testing.T) {
	t.Parallel()
	c := taskqueues.DefaultConfig()
	c.RedisURL = "redis://127.0.0.1:6379/0"
	c.Processes, c.Threads, c.MaxRetries = 1, 1, 0
	if err := c.Validate(); err != nil {
		t.Fatalf("processes 1, threads 1, max retries 0: %v", err)
	}
}
