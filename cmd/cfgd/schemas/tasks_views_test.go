package schemas_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/schemas"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/migrate"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/projectors"
	"github.com/cfgd/cfgd/projections/replay"
)

// The task views move from the tasks.control reactor to tasks.queues: the
// view starts at the reactor's checkpoints, and the clear counts only the
// old reactor knew become events, so the live view and a replay of it
// agree on them.
func TestTasksViewsMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.EmptyPostgres(t)
	owners, err := schemas.Postgres()
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate.PostgresTo(ctx, pool, 11, owners...); err != nil {
		t.Fatal(err)
	}
	// What the old reactor left: queue a paused and cleared twice (5 tasks
	// removed), queue b resumed; its checkpoints at the end of both.
	at := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	appendEv := func(stream string, version int64, e events.Event, when time.Time) {
		env, err := events.New(stream, e, events.Metadata{}, when)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO events (event_id, stream_id, stream_version, type, occurred_at, data) VALUES ($1, $2, $3, $4, $5, $6)`,
			env.ID, stream, version, env.Type, env.OccurredAt, env.Data); err != nil {
			t.Fatal(err)
		}
	}
	appendEv("queue-a", 1, tasks.QueuePaused{Queue: "a", At: at}, at)
	appendEv("queue-a", 2, tasks.QueueCleared{Queue: "a", At: at.Add(time.Minute)}, at.Add(time.Minute))
	appendEv("queue-a", 3, tasks.QueueCleared{Queue: "a", At: at.Add(2 * time.Minute)}, at.Add(2*time.Minute))
	appendEv("queue-b", 1, tasks.QueueResumed{Queue: "b", At: at}, at)
	for _, q := range []string{
		fmt.Sprintf(`INSERT INTO task_queues VALUES ('a', true, 'clear', 5, 3, '%s'), ('b', false, 'resume', 0, 1, '%s')`,
			at.Add(2*time.Minute).Format(time.RFC3339), at.Format(time.RFC3339)),
		`INSERT INTO projection_checkpoints VALUES ('tasks.control', 'queue-a', 3), ('tasks.control', 'queue-b', 1)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := schemas.UpPostgres(ctx, pool, testenv.Quiet()); err != nil {
		t.Fatal(err)
	}
	var cps string
	if err := pool.QueryRow(ctx, `SELECT string_agg(stream_id || '@' || version, ' ' ORDER BY stream_id) FROM projection_checkpoints WHERE projection = $1`,
		projectors.QueuesName).Scan(&cps); err != nil || cps != "queue-a@3 queue-b@1" {
		t.Fatalf("tasks.queues checkpoints %q %v", cps, err)
	}
	// The live view applies what the relay delivers after the migration.
	reg, err := events.NewRegistry(tasks.Events()...)
	if err != nil {
		t.Fatal(err)
	}
	views := projectors.TaskQueues()
	rows, err := pool.Query(ctx, `SELECT event_id, stream_id, stream_version, position, type, occurred_at, metadata, data FROM events ORDER BY position`)
	if err != nil {
		t.Fatal(err)
	}
	var all []events.Envelope
	for rows.Next() {
		var e events.Envelope
		if err := rows.Scan(&e.ID, &e.Stream, &e.Version, &e.Position, &e.Type, &e.OccurredAt, &e.Metadata, &e.Data); err != nil {
			t.Fatal(err)
		}
		all = append(all, e)
	}
	rows.Close()
	for _, e := range all {
		if _, err := projections.Apply(ctx, pool, reg, views, e); err != nil {
			t.Fatal(err)
		}
	}
	dump := func() string {
		var b strings.Builder
		rows, err := pool.Query(ctx, `SELECT name, is_paused, last_action, cleared, version, updated_at FROM task_queues ORDER BY name`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, vals...)
		}
		return b.String()
	}
	live := dump()
	if !strings.Contains(live, "a true clear 5 4 ") || !strings.Contains(live, "b false resume 0 1 ") {
		t.Fatalf("live view after the migration:\n%s", live)
	}
	if _, err := replay.Run(ctx, pool, reg, projectors.TaskQueues(), replay.Config{}, nil); err != nil {
		t.Fatal(err)
	}
	if again := dump(); again != live {
		t.Fatalf("replay after the migration:\n%s\nlive:\n%s", again, live)
	}
}
