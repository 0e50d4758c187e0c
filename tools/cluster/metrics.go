package cluster

// MetricsURL is where p serves its metrics in the Prometheus text format
// (GET /metrics on its HTTP address), or "" when it has no HTTP address.
func (p *Proc) MetricsURL() string {
	if p.HTTPAddr == "" {
		return ""
	}
	return "http://" + p.HTTPAddr + "/metrics"
}
