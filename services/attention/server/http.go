package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// Handler serves GET /attention (the list as JSON, as on NATS), GET / (the
// list as a page that refreshes itself), GET /healthz (200 when ready) and,
// with Options.MetricsHandler, GET /metrics.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.serveHealth)
	mux.HandleFunc("GET /attention", s.serveJSON)
	mux.HandleFunc("GET /{$}", s.servePage)
	mountMetrics(mux, s.opts.MetricsHandler)
	return mux
}

func (s *Service) serveHealth(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	ok, why := s.Ready()
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	s.writeBody(w, "/healthz", []byte(why+"\n"))
}

// writeBody sends an answer's body. A failed write means the client went
// away; there is no one left to tell but the log.
func (s *Service) writeBody(w http.ResponseWriter, path string, body []byte) {
	if _, err := w.Write(body); err != nil {
		s.log.Debug("write http answer", "path", path, "err", err)
	}
}

func (s *Service) serveJSON(w http.ResponseWriter, _ *http.Request) {
	reply, _, ok := s.List()
	var body any = reply
	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
		body = wire.ErrorReply{Error: wire.Errorf(wire.CodeUnavailable, "attention has not pulled the coordinators' state yet")}
	}
	data, err := json.Marshal(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	s.writeBody(w, "/attention", append(data, '\n'))
}

// pageData is what the page shows.
type pageData struct {
	Ready          bool
	Reason         string
	Version        uint64
	At             string
	PulledAgo      string
	NodesHeard     int
	RefreshSeconds int
	Counts         string
	Entries        []pageEntry
}

type pageEntry struct {
	Severity, Kind, Stream, Node, Headline string
	Figures                                []string
	Since, For                             string
}

func (s *Service) servePage(w http.ResponseWriter, _ *http.Request) {
	reply, st, ok := s.List()
	now := time.UnixMilli(reply.AtMS)
	d := pageData{
		Ready:          ok,
		Version:        reply.Version,
		At:             now.UTC().Format(time.RFC3339),
		NodesHeard:     st.NodesHeard,
		RefreshSeconds: int(max(1, math.Round(s.opts.Refresh.Seconds()))),
	}
	if !ok {
		_, d.Reason = s.Ready()
	} else {
		d.PulledAgo = now.Sub(st.PulledAt).Round(100 * time.Millisecond).String()
	}
	count := map[string]int{}
	for _, e := range reply.Entries {
		count[e.Severity]++
		since := time.UnixMilli(e.SinceMS)
		d.Entries = append(d.Entries, pageEntry{
			Severity: e.Severity, Kind: e.Kind, Stream: e.Stream, Node: e.Node, Headline: e.Headline,
			Figures: figureLines(e.Figures),
			Since:   since.UTC().Format(time.RFC3339),
			For:     now.Sub(since).Round(time.Second).String(),
		})
	}
	d.Counts = fmt.Sprintf("%d critical, %d warning, %d info",
		count[wire.SeverityCritical], count[wire.SeverityWarning], count[wire.SeverityInfo])

	var buf bytes.Buffer
	if err := page.Execute(&buf, d); err != nil {
		s.log.Error("render attention page", "err", err)
		http.Error(w, "render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	s.writeBody(w, "/", buf.Bytes())
}

// figureLines renders figures as "name=value", sorted by name.
func figureLines(fig map[string]any) []string {
	out := make([]string, 0, len(fig))
	for k, v := range fig {
		out = append(out, k+"="+figureValue(v))
	}
	slices.Sort(out)
	return out
}

func figureValue(v any) string {
	switch x := v.(type) {
	case []string:
		return "[" + strings.Join(x, ", ") + "]"
	case map[string]any:
		return "{" + strings.Join(figureLines(x), ", ") + "}"
	case string:
		return x
	default:
		return fmt.Sprint(x)
	}
}

// page is the human-readable list. html/template escapes every value.
var page = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{.RefreshSeconds}}">
<title>brook attention{{if .Entries}} ({{len .Entries}}){{end}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .35rem .5rem; border-bottom: 1px solid #ddd; vertical-align: top; }
th { background: #f4f4f4; }
.critical { color: #b00020; font-weight: bold; }
.warning { color: #a15c00; font-weight: bold; }
.info { color: #555; }
.figures { font-family: ui-monospace, monospace; font-size: .85em; }
.muted { color: #666; }
</style>
</head>
<body>
<h1>brook attention</h1>
{{if .Ready}}
<p class="muted">Judged at {{.At}} from coordinator state version {{.Version}} (pulled {{.PulledAgo}} before); heartbeats heard from {{.NodesHeard}} nodes. {{.Counts}}.</p>
{{if .Entries}}
<table>
<thead><tr><th>severity</th><th>kind</th><th>stream</th><th>node</th><th>what</th><th>figures</th><th>since</th></tr></thead>
<tbody>
{{range .Entries}}<tr>
<td class="{{.Severity}}">{{.Severity}}</td>
<td>{{.Kind}}</td>
<td>{{.Stream}}</td>
<td>{{.Node}}</td>
<td>{{.Headline}}</td>
<td class="figures">{{range .Figures}}{{.}}<br>{{end}}</td>
<td>{{.Since}}<br><span class="muted">for {{.For}}</span></td>
</tr>
{{end}}</tbody>
</table>
{{else}}
<p>Nothing needs attention.</p>
{{end}}
{{else}}
<p class="warning">Not ready: {{.Reason}}.</p>
{{end}}
</body>
</html>
`))
