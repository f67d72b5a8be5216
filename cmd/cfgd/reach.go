package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/events/kafka"
)

// reachWithin bounds how long a one-shot command waits for a dependency
// before it says which one and what to do: an operator at a prompt should
// not wait 30 s to learn that nothing listens.
const reachWithin = 3 * time.Second

// dependency is something a command needs, named as an operator knows it.
type dependency struct {
	name    string // "postgres", "redis", "kafka"
	setting string // the variable that points at it
	where   string // host:port or the broker list, for the message
	hint    string // the next step
	ping    func(ctx context.Context) error
}

// reach pings each dependency within reachWithin and returns one error
// naming the first that does not answer, with the next step.
func reach(ctx context.Context, deps ...dependency) error {
	for _, d := range deps {
		pctx, cancel := context.WithTimeout(ctx, reachWithin)
		err := d.ping(pctx)
		cancel()
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s", reachWithin)
		}
		return fmt.Errorf("%s at %s (%s) is not reachable: %w; %s", d.name, d.where, d.setting, err, d.hint)
	}
	return nil
}

func postgresDep(d *deps) dependency {
	cfg := d.pg.Config().ConnConfig
	return dependency{name: "postgres", setting: "POSTGRES__URL", where: fmt.Sprintf("%s:%d", cfg.Host, cfg.Port),
		hint: "is it running? (`make stack-up` starts the local one)", ping: d.pg.Ping}
}

func redisDep(setting, url string, ping func(ctx context.Context) error) dependency {
	return dependency{name: "redis", setting: setting, where: config.Redact(url),
		hint: "is Redis up there? (`make stack-up` starts the local one)", ping: ping}
}

// kafkaDep is the broker a one-shot command talks to: KAFKA__BROKERS, or
// the embedded broker inside a running `cfgd serve` (or `cfgd broker`).
func kafkaDep(c settings.Core) dependency {
	bus := clientBus(c)
	hint := "is `cfgd serve` (or `cfgd broker`) running? Without KAFKA__BROKERS the CLI uses the embedded broker inside it"
	setting := "KAFKA__EMBEDDED_ADDR"
	if len(c.KafkaBrokers) > 0 {
		hint, setting = "are the brokers up?", "KAFKA__BROKERS"
	}
	return dependency{name: "kafka", setting: setting, where: fmt.Sprint(bus.Brokers), hint: hint,
		ping: func(ctx context.Context) error { return kafka.Ping(ctx, bus) }}
}
