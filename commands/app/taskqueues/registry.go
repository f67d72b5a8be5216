package taskqueues

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/events/tasks"
)

// Registry is the live view of worker processes in Redis: each worker
// writes its state under a key that expires after three missed
// heartbeats, so a killed worker disappears on its own. It also carries
// the latest start/stop/restart command to each worker.
type Registry struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// NewRegistry returns the registry under prefix; heartbeat is the workers'
// beat interval.
func NewRegistry(rdb redis.UniversalClient, prefix string, heartbeat time.Duration) *Registry {
	return &Registry{rdb: rdb, prefix: prefix, ttl: 3 * heartbeat}
}

func (r *Registry) setKey() string              { return r.prefix + "workers" }
func (r *Registry) stateKey(id string) string   { return r.prefix + "worker:" + id }
func (r *Registry) commandKey(id string) string { return r.prefix + "worker:" + id + ":command" }

// Beat stores s until the next beat is due.
func (r *Registry) Beat(ctx context.Context, s tasks.WorkerState) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, r.stateKey(s.WorkerID), b, r.ttl)
		p.SAdd(ctx, r.setKey(), s.WorkerID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("worker heartbeat: %w", err)
	}
	return nil
}

// Remove forgets a worker that is shutting down.
func (r *Registry) Remove(ctx context.Context, id string) error {
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, r.stateKey(id), r.commandKey(id))
		p.SRem(ctx, r.setKey(), id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("worker deregister: %w", err)
	}
	return nil
}

// Get returns the live state of worker id; nil when it is not alive.
func (r *Registry) Get(ctx context.Context, id string) (*tasks.WorkerState, error) {
	b, err := r.rdb.Get(ctx, r.stateKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", id, err)
	}
	var s tasks.WorkerState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("worker %s: %w", id, err)
	}
	return &s, nil
}

// Live lists every live worker, sorted by id. Ids whose state expired are
// dropped from the set on the way.
func (r *Registry) Live(ctx context.Context) ([]tasks.WorkerState, error) {
	ids, err := r.rdb.SMembers(ctx, r.setKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	slices.Sort(ids)
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = r.stateKey(id)
	}
	vals, err := r.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	var out []tasks.WorkerState
	var gone []any
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			gone = append(gone, ids[i])
			continue
		}
		var st tasks.WorkerState
		if err := json.Unmarshal([]byte(s), &st); err != nil {
			return nil, fmt.Errorf("worker %s: %w", ids[i], err)
		}
		out = append(out, st)
	}
	if len(gone) > 0 {
		// Best effort: a worker that beats again re-adds itself.
		_ = r.rdb.SRem(ctx, r.setKey(), gone...).Err()
	}
	return out, nil
}

// Command is the latest start/stop/restart addressed to a worker. Seq is
// the worker stream version that asked for it, so a worker applies each
// command once and the API can tell when it was applied.
type Command struct {
	Seq    int64  `json:"seq"`
	Action string `json:"action"`
}

// SetCommand records the command for worker id; a stale one (lower Seq,
// from a redelivery) never replaces a newer one.
func (r *Registry) SetCommand(ctx context.Context, id string, seq int64, action string) error {
	b, err := json.Marshal(Command{Seq: seq, Action: action})
	if err != nil {
		return err
	}
	key := r.commandKey(id)
	err = r.rdb.Watch(ctx, func(tx *redis.Tx) error {
		cur, err := tx.Get(ctx, key).Bytes()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if err == nil {
			var c Command
			if json.Unmarshal(cur, &c) == nil && c.Seq >= seq {
				return nil
			}
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, key, b, 0)
			return nil
		})
		return err
	}, key)
	if err != nil {
		return fmt.Errorf("worker %s command: %w", id, err)
	}
	return nil
}

// PendingCommand returns worker id's command; ok is false when there is none.
func (r *Registry) PendingCommand(ctx context.Context, id string) (Command, bool, error) {
	b, err := r.rdb.Get(ctx, r.commandKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Command{}, false, nil
	}
	if err != nil {
		return Command{}, false, fmt.Errorf("worker %s command: %w", id, err)
	}
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return Command{}, false, fmt.Errorf("worker %s command: %w", id, err)
	}
	return c, true, nil
}

// clearNoteTTL bounds how long the notes of a clear outlive it when its
// end was never recorded (the queue's stream was deleted, say).
const clearNoteTTL = 7 * 24 * time.Hour

func (r *Registry) clearKey(clear string) string { return r.prefix + "clear:" + clear }

// NoteClearing records, before they are deleted, the tasks (id → type)
// the clear named clear is about to remove, so that a clear interrupted
// halfway knows, when it runs again, which tasks it removed already: the
// deleted tasks are gone from asynq, and only these notes can close them
// in the statistics.
func (r *Registry) NoteClearing(ctx context.Context, clear string, ts map[string]string) error {
	if len(ts) == 0 {
		return nil
	}
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, r.clearKey(clear), ts)
		p.Expire(ctx, r.clearKey(clear), clearNoteTTL)
		return nil
	})
	if err != nil {
		return fmt.Errorf("clear %s: note: %w", clear, err)
	}
	return nil
}

// Unnote drops tasks the clear noted but did not remove (a worker took
// them first).
func (r *Registry) Unnote(ctx context.Context, clear string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := r.rdb.HDel(ctx, r.clearKey(clear), ids...).Err(); err != nil {
		return fmt.Errorf("clear %s: unnote: %w", clear, err)
	}
	return nil
}

// Noted returns the tasks (id → type) the clear noted.
func (r *Registry) Noted(ctx context.Context, clear string) (map[string]string, error) {
	m, err := r.rdb.HGetAll(ctx, r.clearKey(clear)).Result()
	if err != nil {
		return nil, fmt.Errorf("clear %s: notes: %w", clear, err)
	}
	return m, nil
}

// ForgetClear drops the notes of a clear whose outcome is recorded.
func (r *Registry) ForgetClear(ctx context.Context, clear string) error {
	if err := r.rdb.Del(ctx, r.clearKey(clear)).Err(); err != nil {
		return fmt.Errorf("clear %s: forget: %w", clear, err)
	}
	return nil
}
