package process

import "context"

// Check pings one dependency.
type Check struct {
	Name string
	Ping func(ctx context.Context) error
}
