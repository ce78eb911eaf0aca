package daemon

// FailAt makes New call fail with the name of each step it reaches
// ("store", "policy", "audit", ...) before running it, and fail there
// with fail's error; restore puts the default back.
func FailAt(fail func(step string) error) (restore func()) {
	prev := failStep
	failStep = fail
	return func() { failStep = prev }
}

// MetricNames lists the metrics registered on d's registry.
func (d *Daemon) MetricNames() []string { return d.metrics.Names() }
