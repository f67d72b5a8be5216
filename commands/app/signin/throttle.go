package signin

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/deploy/errcode"
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

// A password guard counts failed passwords only. Each check first takes
// an in-flight slot; a check is allowed while failures plus checks in
// flight stay under the limit, so parallel guesses cannot overrun it,
// and a check that finds the limit taken only by others in flight waits
// for them instead of being refused: ten parallel right passwords all
// succeed and none of them counts.
var (
	guardAcquire = redis.NewScript(`
local n = #KEYS / 2
for i = 1, n do
  local fails = tonumber(redis.call('GET', KEYS[2*i-1]) or '0')
  if fails >= tonumber(ARGV[i]) then
    return {-1, redis.call('PTTL', KEYS[2*i-1])}
  end
end
for i = 1, n do
  local fails = tonumber(redis.call('GET', KEYS[2*i-1]) or '0')
  local busy = tonumber(redis.call('GET', KEYS[2*i]) or '0')
  if fails + busy >= tonumber(ARGV[i]) then
    return {0, 0}
  end
end
for i = 1, n do
  redis.call('INCR', KEYS[2*i])
  redis.call('PEXPIRE', KEYS[2*i], ARGV[n+1])
end
return {1, 0}
`)
	guardRelease = redis.NewScript(`
local n = #KEYS / 2
for i = 1, n do
  if tonumber(redis.call('DECR', KEYS[2*i])) <= 0 then
    redis.call('DEL', KEYS[2*i])
  end
  if ARGV[1] == '1' then
    redis.call('INCR', KEYS[2*i-1])
    if redis.call('PTTL', KEYS[2*i-1]) < 0 then
      redis.call('PEXPIRE', KEYS[2*i-1], ARGV[2])
    end
  end
end
return 1
`)
)

// inFlightTTL bounds how long a slot of a crashed process stays taken.
const inFlightTTL = 30 * time.Second

// guardPoll is how often a check waiting for others in flight looks again.
const guardPoll = 15 * time.Millisecond

// GuardKey is one counter of a password guard and its limit.
type GuardKey struct {
	Key   string
	Limit int
}

// ThrottledError says a call was refused by a limit (failed passwords, or
// with ErrIPThrottled the per-IP OTP limits); RetryAfter is when the
// window ends.
type ThrottledError struct {
	RetryAfter time.Duration
	cause      error
}

func (e *ThrottledError) Error() string {
	what := "too many failed sign-in attempts"
	if e.cause != nil {
		what = e.cause.Error()
	}
	return fmt.Sprintf("%s; retry in %s", what, e.RetryAfter.Round(time.Second))
}

// As offers the error to transports as errcode.RateLimited; a sign-in
// with a password says more in its own words.
func (e *ThrottledError) As(target any) bool {
	p, ok := target.(**errcode.Error)
	if ok {
		*p = errcode.RetryLater("Too many requests", e.RetryAfter)
	}
	return ok
}

// Unwrap gives the limit that refused the call, if it is not the failed
// passwords one.
func (e *ThrottledError) Unwrap() error { return e.cause }

// Guard runs check under the failure limits of keys. check reports whether
// the credentials failed (and its error, returned as is); only then is a
// failure counted. A refused
// attempt runs nothing and counts nothing.
func (l *Limiter) Guard(ctx context.Context, window time.Duration, keys []GuardKey, check func() (failed bool, err error)) error {
	if len(keys) == 0 {
		_, err := check()
		return err
	}
	rk := make([]string, 0, 2*len(keys))
	args := make([]any, 0, len(keys)+1)
	for _, k := range keys {
		rk = append(rk, l.prefix+"fail:"+k.Key, l.prefix+"busy:"+k.Key)
		args = append(args, k.Limit)
	}
	args = append(args, inFlightTTL.Milliseconds())
	for {
		res, err := guardAcquire.Run(ctx, l.rdb, rk, args...).Int64Slice()
		if err != nil {
			return fmt.Errorf("rate limiter: %w", err)
		}
		if res[0] == 1 {
			break
		}
		if res[0] == -1 {
			wait := time.Duration(res[1]) * time.Millisecond
			if wait <= 0 {
				wait = window
			}
			return &ThrottledError{RetryAfter: wait}
		}
		select {
		case <-ctx.Done():
			return &ThrottledError{RetryAfter: time.Second}
		case <-time.After(guardPoll):
		}
	}
	failed, err := check()
	// The release must happen even when the caller has gone.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	flag := "0"
	if failed {
		flag = "1"
	}
	if rerr := guardRelease.Run(rctx, l.rdb, rk, flag, window.Milliseconds()).Err(); rerr != nil && err == nil {
		return fmt.Errorf("rate limiter: %w", rerr)
	}
	return err
}
