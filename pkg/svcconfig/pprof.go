package svcconfig

import (
	"net/http"
	"net/http/pprof"

	"github.com/spf13/pflag"
)

// AddPProfFlag defines --pprof: serve Go's profiles on the service's HTTP
// endpoint. It is off by default: profiles say nothing about the data, but
// taking one costs the process CPU, so only an operator who asks gets them.
func AddPProfFlag(fs *pflag.FlagSet) {
	fs.Bool("pprof", false, "also serve Go's runtime profiles under /debug/pprof/ on --http-addr")
}

// HandlePProf serves the runtime profiles under /debug/pprof/ on mux, as
// net/http/pprof does on the default mux, which the services do not use.
func HandlePProf(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
