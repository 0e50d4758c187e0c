// Package metricstest reads the Prometheus text format a brook service
// serves at /metrics, for tests: Scrape fetches and parses it with
// expfmt's text parser, and Families answers questions about the result.
package metricstest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are parsed metric families by name (the Prometheus name:
// brook_host_publish_confirmed_total, a histogram's base name).
type Families map[string]*dto.MetricFamily

// Parse reads the Prometheus text format.
func Parse(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return Families(fams), nil
}

// Scrape GETs url (http://addr/metrics) asking for the text format and
// parses the answer.
func Scrape(ctx context.Context, url string) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return Parse(resp.Body)
}

// Names returns the families' names, sorted.
func (f Families) Names() []string {
	out := make([]string, 0, len(f))
	for n := range f {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// matches reports whether m carries every label of pairs (name, value,
// name, value, ...); a value of "" matches a missing label too.
func matches(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		got := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == pairs[i] {
				got = l.GetValue()
				break
			}
		}
		if got != pairs[i+1] {
			return false
		}
	}
	return true
}

// Value sums the values of name's series that carry the labels of pairs
// (name, value, ...): a counter's or gauge's value, a histogram's sample
// count. ok is false when the family does not exist or no series matches.
func (f Families) Value(name string, pairs ...string) (v float64, ok bool) {
	fam := f[name]
	if fam == nil {
		return 0, false
	}
	for _, m := range fam.GetMetric() {
		if !matches(m, pairs) {
			continue
		}
		ok = true
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			v += m.GetUntyped().GetValue()
		case m.Summary != nil:
			v += float64(m.GetSummary().GetSampleCount())
		}
	}
	return v, ok
}

// Sum sums the observations (a histogram's sample sum) of name's series
// that carry the labels of pairs.
func (f Families) Sum(name string, pairs ...string) float64 {
	var s float64
	if fam := f[name]; fam != nil {
		for _, m := range fam.GetMetric() {
			if matches(m, pairs) && m.Histogram != nil {
				s += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return s
}

// LabelValues returns the values label takes among name's series, sorted
// and without repeats.
func (f Families) LabelValues(name, label string) []string {
	seen := map[string]bool{}
	if fam := f[name]; fam != nil {
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					seen[l.GetValue()] = true
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// Type is the family's type, or "" when it does not exist.
func (f Families) Type(name string) string {
	fam := f[name]
	if fam == nil {
		return ""
	}
	return strings.ToLower(fam.GetType().String())
}

// LabelNames returns the label names name's series carry, sorted and
// without repeats.
func (f Families) LabelNames(name string) []string {
	seen := map[string]bool{}
	if fam := f[name]; fam != nil {
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				seen[l.GetName()] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
