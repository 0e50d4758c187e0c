package cluster

// MetricsURL is where p serves its metrics in the Prometheus text format
// (GET /metrics on its HTTP address), or "" when it has no HTTP address.
func (p *Proc) MetricsURL() string {
	addr := p.HTTPAddr()
	if addr == "" {
		return ""
	}
	return "http://" + addr + "/metrics"
}
