package auth

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Limiter counts hits in fixed windows in Redis, so a limit holds across
// every cfgd instance. A window starts at its first hit and lasts window.
type Limiter struct {
	rdb    redis.Cmdable
	prefix string
}

// NewLimiter returns a limiter whose keys start with prefix.
func NewLimiter(rdb redis.Cmdable, prefix string) *Limiter {
	return &Limiter{rdb: rdb, prefix: prefix}
}

// Hit counts one hit on key and reports whether it is within limit; when
// it is not, retryAfter says when the window ends.
func (l *Limiter) Hit(ctx context.Context, key string, limit int, window time.Duration) (ok bool, retryAfter time.Duration, err error) {
	k := l.prefix + key
	var incr *redis.IntCmd
	var ttl *redis.DurationCmd
	// MULTI/EXEC: the counter never exists without its expiry, even if the
	// client dies between the two commands.
	_, err = l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		incr = p.Incr(ctx, k)
		p.ExpireNX(ctx, k, window)
		ttl = p.PTTL(ctx, k)
		return nil
	})
	if err != nil {
		return false, 0, fmt.Errorf("rate limiter: %w", err)
	}
	if incr.Val() <= int64(limit) {
		return true, 0, nil
	}
	wait := ttl.Val()
	if wait <= 0 {
		wait = window
	}
	return false, wait, nil
}

// Undo takes back one hit on key (a login that turned out to succeed).
func (l *Limiter) Undo(ctx context.Context, key string) error {
	if err := l.rdb.Decr(ctx, l.prefix+key).Err(); err != nil {
		return fmt.Errorf("rate limiter: %w", err)
	}
	return nil
}
