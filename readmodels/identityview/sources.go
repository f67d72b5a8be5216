package identityview

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SourceCount is one registration source and how many users it brought.
type SourceCount struct {
	ID    int64  `json:"id"`
	URL   string `json:"url"`
	Name  string `json:"name"`
	Users int64  `json:"users"`
}

// TopSourcesLimit is the length of the top list (docs/api.md, registration-source analytics).
const TopSourcesLimit = 10

// TopSources ranks sources by linked users, most first (ties by id).
func TopSources(ctx context.Context, db DB) ([]SourceCount, error) {
	rows, err := db.Query(ctx, topSources, TopSourcesLimit)
	if err != nil {
		return nil, fmt.Errorf("top sources: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SourceCount, error) {
		var c SourceCount
		return c, r.Scan(&c.ID, &c.URL, &c.Name, &c.Users)
	})
	if err != nil {
		return nil, fmt.Errorf("top sources: %w", err)
	}
	return out, nil
}

// topSources ranks sources by linked users, at most $1.
const topSources = `
	SELECT s.id, s.url, s.name, count(l.user_id) AS users
	FROM registration_sources s LEFT JOIN user_registration_sources l ON l.source_id = s.id
	GROUP BY s.id ORDER BY users DESC, s.id LIMIT $1`

// LinkCount is how many links a source URL got within a window.
type LinkCount struct {
	URL   string `json:"url"`
	Name  string `json:"name"`
	Links int64  `json:"links"`
}

// LinksSince groups the links created at or after since by source URL,
// most first.
func LinksSince(ctx context.Context, db DB, since time.Time) ([]LinkCount, error) {
	rows, err := db.Query(ctx, linksSince, since)
	if err != nil {
		return nil, fmt.Errorf("links by source: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LinkCount, error) {
		var c LinkCount
		return c, r.Scan(&c.URL, &c.Name, &c.Links)
	})
	if err != nil {
		return nil, fmt.Errorf("links by source: %w", err)
	}
	return out, nil
}

// linksSince counts the links made at or after $1 per source URL.
const linksSince = `
	SELECT s.url, s.name, count(*) AS links
	FROM user_registration_sources l JOIN registration_sources s ON s.id = l.source_id
	WHERE l.created_at >= $1
	GROUP BY s.url, s.name ORDER BY links DESC, s.url`
