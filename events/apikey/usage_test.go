package apikey

import (
	"errors"
	"testing"
	"time"
)

// The usage records round-trip, and anything else is refused.
func TestUsesCodec(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	uses := []Use{{KeyID: 1, Requests: 3, LastUsed: at}, {KeyID: 1 << 40, Requests: 1, LastUsed: at.Add(time.Microsecond)}}
	got, err := DecodeUses(AppendUses(nil, uses), nil)
	if err != nil || len(got) != 2 || got[0] != uses[0] || got[1] != uses[1] {
		t.Fatalf("round trip: %v %v", got, err)
	}
	for _, bad := range [][]byte{nil, {0}, {2, 1, 1, 0}, {1, 1}, {1, 0, 1, 0}, {1, 1, 0, 0}} {
		if _, err := DecodeUses(bad, nil); !errors.Is(err, ErrBadUses) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}
