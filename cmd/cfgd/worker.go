package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/api/worker"
	"github.com/cfgd/cfgd/deploy/buildinfo"
	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/tasks"
)

// worker runs one worker process (TASKS__* settings) until ctx ends.
func runWorker(ctx context.Context, log *slog.Logger, app appSettings, stdout io.Writer) error {
	log.Info("cfgd worker starting", buildinfo.Read().LogAttrs()...)
	rdb, err := taskRedis(app)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := retry(ctx, log, "redis (TASKS__REDIS_URL)", func(ctx context.Context) error { return rdb.Ping(ctx).Err() }); err != nil {
		return nil // stopped while waiting
	}
	em, err := lifecycleEmitter(ctx, log, app)
	if err != nil {
		return err
	}
	if em == nil {
		return nil // stopped while waiting for Kafka
	}
	defer func() {
		if err := em.Close(); err != nil {
			log.Warn("lifecycle producer", "err", err)
		}
	}()
	wk, err := worker.NewWorker(app.Tasks, rdb, em, log, worker.Handlers(log))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cfgd worker %s serving %v (%d x %d)\n", wk.ID(), app.Tasks.QueueNames(), app.Tasks.Processes, app.Tasks.Threads)
	return wk.Run(ctx)
}

func taskRedis(app appSettings) (*redis.Client, error) {
	o, err := redis.ParseURL(app.Tasks.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("TASKS__REDIS_URL: %w", config.RedactError(err, app.Tasks.RedisURL))
	}
	return redis.NewClient(o), nil
}

// taskBus is where workers and the CLI produce lifecycle records.
func taskBus(app appSettings) kafka.Config { return clientBus(app.Core) }

// lifecycleEmitter waits for Kafka; nil when ctx ended first.
func lifecycleEmitter(ctx context.Context, log *slog.Logger, app appSettings) (*tasks.Producer, error) {
	signer, _, err := eventSigner(app.Core, app.Signin.KeysDir)
	if err != nil {
		return nil, err
	}
	em, err := tasks.NewProducer(taskBus(app), signer, log)
	if err != nil {
		return nil, err
	}
	err = retry(ctx, log, "kafka", em.Connect)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, err
	}
	return em, nil
}
