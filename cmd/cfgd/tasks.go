package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/modules"
	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/deploy/process"

	"github.com/gorilla/mux"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/api/pages"
	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/api/rest/taskadmin"
	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/reactors"
	"github.com/cfgd/cfgd/projections/sinks"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// tasksModule is task-queue management: the queue and worker endpoints and
// dashboard, the tasks.control reactor and the tasks.queues views (run in
// the shared pipeline) and the lifecycle sink that feeds the statistics.
// The workers themselves run in `cfgd worker`.
func tasksModule(_ context.Context, w wiring, a *auth.API) (modules.Module, error) {
	cfg := w.app.Tasks
	rdb, closeRedis, err := tasksRedis(w, cfg.RedisURL)
	if err != nil {
		return modules.Module{}, err
	}
	app, err := taskqueues.New(cfg, taskqueues.Deps{Pool: w.deps.pg, Events: w.deps.events, Redis: rdb, Log: w.log, Now: time.Now})
	if err != nil {
		closeRedis()
		return modules.Module{}, err
	}
	// Lifecycle records are signed and verified with the events' key.
	signer := w.signer
	sink := sinks.NewLifecycle(w.deps.pg, w.bus, signer, w.log)
	cut := w.cutover(tasks.TopicLifecycle)
	sink.Cutover = cut
	if err := sink.SetMetrics(w.sinkMetrics); err != nil {
		closeRedis()
		return modules.Module{}, err
	}
	if w.metrics != nil {
		// Queue sizes and processed/failed counts, read at each scrape.
		if err := w.metrics.Register(taskview.NewQueueCollector(app.Inspector, cfg.QueueNames(), w.log)); err != nil {
			closeRedis()
			return modules.Module{}, fmt.Errorf("task queue metrics: %w", err)
		}
	}
	pub, err := tasks.NewProducer(w.bus, signer, w.log)
	if err != nil {
		closeRedis()
		return modules.Module{}, err
	}
	var appends store.DB = w.deps.pg
	if w.deps.events != nil {
		appends = w.deps.events.Bind(w.deps.pg)
	}
	staff := a.Staff()
	var monitor io.Closer // asynqmon's Redis connections, once mounted
	checks := []process.Check{{Name: "tasks-lifecycle-sink", Ping: sink.Ready}}
	if rdb != w.deps.redis {
		checks = append(checks, process.Check{Name: "tasks-redis", Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})
	}
	return modules.Module{
		Name: "tasks",
		Routes: func(r *mux.Router) error {
			taskadmin.Mount(r, staff, app)
			m, err := taskadmin.MountAsynqmon(r, staff, cfg.RedisURL)
			if err != nil {
				return err
			}
			monitor = m
			return pages.MountTaskDashboard(r, staff, w.assets)
		},
		Projections: []*projections.Projection{reactors.Control(app.Inspector, app.Registry, pub, appends), sinks.ViewsWithLifecycle(w.bus, signer, cut, w.log)},
		Checks:      checks,
		Background: []process.Runner{
			{Name: "tasks-lifecycle-sink", Run: sink.Run},
			{Name: "tasks-close", Run: func(ctx context.Context) error {
				<-ctx.Done()
				_ = app.Close()
				_ = pub.Close()
				if monitor != nil {
					_ = monitor.Close()
				}
				closeRedis()
				return nil
			}},
		},
	}, nil
}

// tasksRedis shares the core Redis client when the task queues live on
// the same server, else opens one for them.
func tasksRedis(w wiring, url string) (redis.UniversalClient, func(), error) {
	if url == w.app.Core.RedisURL {
		return w.deps.redis, func() {}, nil
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("TASKS__REDIS_URL: %w", config.RedactError(err, url))
	}
	c := redis.NewClient(o)
	return c, func() { _ = c.Close() }, nil
}
