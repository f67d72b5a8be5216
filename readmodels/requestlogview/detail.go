package requestlogview

import (
	"context"
	"fmt"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// Request returns the request logged with id, or a not_found error.
func (s *Store) Request(ctx context.Context, id uint64) (Request, error) {
	return retry(ctx, func() (Request, error) { return s.requestAttempt(ctx, id) })
}

func (s *Store) requestAttempt(ctx context.Context, id uint64) (Request, error) {
	rs, _, err := s.requestsAttempt(ctx, Filter{ID: &id, PageSize: 1})
	if err != nil {
		return Request{}, err
	}
	if len(rs) == 0 {
		return Request{}, errcode.New(errcode.NotFound, fmt.Sprintf("no request %d in the request log", id))
	}
	return rs[0], nil
}
