package gateway

import (
	"errors"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/httpapi/usageapi"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// wireUsage serves GET /v1/usage and /v1/admin/usage from the queue's
// usage counters and counts smsgw_producer_units_total at accept, for the
// producers the configuration names.
func wireUsage(s *httpapi.Server, admit *admission.Pipeline, cfg config.Config, d deps, b *backend) error {
	reader, ok := b.queue.(queue.UsageReader)
	if !ok {
		return errors.New("gateway: the queue keeps no usage")
	}
	names := make([]string, 0, len(cfg.Producers))
	classes := make(map[string][]sms.Class, len(cfg.Producers))
	for _, p := range cfg.Producers {
		names = append(names, p.Name)
		for _, c := range p.Classes {
			if cl, err := sms.ParseClass(c); err == nil {
				classes[p.Name] = append(classes[p.Name], cl)
			}
		}
	}
	units, err := usageapi.NewUnits(d.reg, classes)
	if err != nil {
		return err
	}
	admit.CountUnits = units.Add
	s.Served.Usage = &usageapi.Handler{Reader: reader, Producers: names, Retention: cfg.Messages.Retention, Now: d.now,
		Producer: s.ProducerName, WriteError: s.WriteError}
	return nil
}
