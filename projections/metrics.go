package projections

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/events/kafka"
)

// InitMetrics creates every series of groups at 0 before Run (which
// starts only once the migrations ran), so a dashboard and an alert see
// each projection from the process's start: events by outcome, errors,
// gaps, dead letters by reason, the lag gauge and the consumer group's
// lag and readiness. Without Config.Metrics it does nothing.
func (r *Runner) InitMetrics(groups ...Group) error {
	if r.cfg.Metrics == nil {
		return nil
	}
	m := r.metrics
	for _, g := range groups {
		m.failed.WithLabelValues(g.Name)
		m.gaps.WithLabelValues(g.Name)
		// Refused before any projection saw them: counted under the group.
		m.deadletters.WithLabelValues(g.Name, kafka.ReasonBadSignature)
		m.deadletters.WithLabelValues(g.Name, kafka.ReasonUndecodable)
		for _, p := range g.Projections {
			for _, o := range []Outcome{Applied, Duplicate, Ignored, DeadLettered} {
				m.events.WithLabelValues(p.Name, o.String())
			}
			m.deadletters.WithLabelValues(p.Name, kafka.ReasonUndecodable)
			m.deadletters.WithLabelValues(p.Name, kafka.ReasonHandler)
			if err := r.registerLag(p.Name); err != nil {
				return err
			}
		}
		if err := kafka.InitConsumerMetrics(r.cfg.Metrics, r.cfg.Bus, g.ConsumerGroup(), kafka.TopicEvents); err != nil {
			return err
		}
	}
	return nil
}

// alreadyRegistered tells an error of a second registration of the same
// metric (InitMetrics, then Run), which is no error.
func alreadyRegistered(err error) bool {
	var are prometheus.AlreadyRegisteredError
	return errors.As(err, &are)
}
