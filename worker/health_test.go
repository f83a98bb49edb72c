package worker

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestProfilesServedOnlyWhenAskedFor(t *testing.T) {
	for _, profiling := range []bool{false, true} {
		mux := http.NewServeMux()
		HealthRoutes(mux, nil, prometheus.NewRegistry(), profiling)
		srv := httptest.NewServer(mux)
		for path, want := range map[string]int{
			"/metrics":                 http.StatusOK,
			"/debug/pprof/":            http.StatusNotFound,
			"/debug/pprof/heap?gc=1":   http.StatusNotFound,
			"/debug/pprof/goroutine":   http.StatusNotFound,
			"/debug/pprof/nonexistent": http.StatusNotFound,
		} {
			if profiling && strings.HasPrefix(path, "/debug/pprof/") && path != "/debug/pprof/nonexistent" {
				want = http.StatusOK
			}
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("profiling %v: GET %s = %d, want %d", profiling, path, resp.StatusCode, want)
			}
		}
		srv.Close()
	}
}
