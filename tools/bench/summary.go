package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// reportedPercentiles are the percentiles every summary carries.
var reportedPercentiles = []float64{50, 90, 99, 99.9}

// summary is the result of one measured run. Requests counts the successful
// requests only; latencies and Requests/sec are over those.
type summary struct {
	Workload  string
	Endpoints []string
	Clients   int
	Conns     int
	// IdleWatchers were held on never-written keys during the run.
	IdleWatchers int
	// TLS ("tls" or "mutual") and User (--user's name, with Reauths, the
	// logins after a refused token) are empty without those flags.
	TLS     string
	User    string
	Reauths int64
	// CPU is what the --cpu-pid process used while measuring (0 without).
	CPU        time.Duration
	Total      time.Duration
	Requests   int64
	Errors     int64
	FirstError string
	RPS        float64
	latencyStats
	Percentiles []time.Duration // parallel to reportedPercentiles
	Histogram   []histogramBucket
}

func summarize(name string, res phaseResult) *summary {
	lats := mergeSorted(res.recs)
	s := &summary{
		Workload:     name,
		Total:        res.elapsed,
		Requests:     int64(len(lats)),
		Errors:       res.errors,
		latencyStats: statsOf(lats),
		Histogram:    histogram(lats, 10),
	}
	if res.firstErr != nil {
		s.FirstError = res.firstErr.Error()
	}
	if res.elapsed > 0 {
		s.RPS = float64(s.Requests) / res.elapsed.Seconds()
	}
	s.Percentiles = percentiles(lats)
	return s
}

// cpuPerRequest is the --cpu-pid process's CPU per request, failed ones
// included (they cost the server too), in microseconds.
func (s *summary) cpuPerRequest() float64 {
	if n := s.Requests + s.Errors; n > 0 && s.CPU > 0 {
		return float64(s.CPU) / float64(time.Microsecond) / float64(n)
	}
	return 0
}

func secs(d time.Duration) string { return fmt.Sprintf("%.4f secs.", d.Seconds()) }

// writeText prints the summary in the layout of etcd's benchmark tool.
func (s *summary) writeText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\nSummary (%s, %d clients over %d conns to %s):\n", s.Workload, s.Clients, s.Conns, strings.Join(s.Endpoints, ","))
	if s.IdleWatchers > 0 {
		fmt.Fprintf(&b, "  Idle watchers:\t%d\n", s.IdleWatchers)
	}
	if s.TLS != "" {
		fmt.Fprintf(&b, "  TLS:\t%s\n", s.TLS)
	}
	if s.User != "" {
		fmt.Fprintf(&b, "  User:\t%s (%d re-authentications)\n", s.User, s.Reauths)
	}
	fmt.Fprintf(&b, "  Total:\t%s\n", secs(s.Total))
	fmt.Fprintf(&b, "  Requests:\t%d\n", s.Requests)
	fmt.Fprintf(&b, "  Errors:\t%d\n", s.Errors)
	if s.FirstError != "" {
		fmt.Fprintf(&b, "  First error:\t%s\n", s.FirstError)
	}
	fmt.Fprintf(&b, "  Slowest:\t%s\n", secs(s.slowest))
	fmt.Fprintf(&b, "  Fastest:\t%s\n", secs(s.fastest))
	fmt.Fprintf(&b, "  Average:\t%s\n", secs(s.average))
	fmt.Fprintf(&b, "  Stddev:\t%s\n", secs(s.stddev))
	fmt.Fprintf(&b, "  Requests/sec:\t%.4f\n", s.RPS)
	if s.CPU > 0 {
		fmt.Fprintf(&b, "  Server CPU:\t%s (%.1f µs/request)\n", secs(s.CPU), s.cpuPerRequest())
	}
	if len(s.Histogram) > 0 {
		b.WriteString("\nResponse time histogram:\n")
		most := 0
		for _, h := range s.Histogram {
			most = max(most, h.count)
		}
		for _, h := range s.Histogram {
			bar := 0
			if most > 0 {
				bar = h.count * 40 / most
			}
			fmt.Fprintf(&b, "  %.4f [%d]\t|%s\n", h.mark.Seconds(), h.count, strings.Repeat("∎", bar))
		}
	}
	b.WriteString("\nLatency distribution:\n")
	writePercentiles(&b, s.Percentiles)
	_, err := io.WriteString(w, b.String())
	return err
}

// jsonSummary is the --json form: one object on one line, latencies in
// milliseconds, so scripts can pick fields without a JSON library.
type jsonSummary struct {
	Workload     string      `json:"workload"`
	Endpoints    []string    `json:"endpoints"`
	Clients      int         `json:"clients"`
	Conns        int         `json:"conns"`
	IdleWatchers int         `json:"idle_watchers"`
	TLS          string      `json:"tls,omitempty"`
	User         string      `json:"user,omitempty"`
	Reauths      int64       `json:"reauths,omitempty"`
	CPUSec       float64     `json:"server_cpu_sec,omitempty"`
	CPUPerReqUs  float64     `json:"server_cpu_us_per_req,omitempty"`
	TotalSec     float64     `json:"total_sec"`
	Requests     int64       `json:"requests"`
	Errors       int64       `json:"errors"`
	FirstError   string      `json:"first_error"`
	RPS          float64     `json:"rps"`
	LatencyMs    jsonLatency `json:"latency_ms"`
}

type jsonLatency struct {
	Fastest float64 `json:"fastest"`
	Slowest float64 `json:"slowest"`
	Average float64 `json:"average"`
	Stddev  float64 `json:"stddev"`
	P50     float64 `json:"p50"`
	P90     float64 `json:"p90"`
	P99     float64 `json:"p99"`
	P999    float64 `json:"p99_9"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// toJSON is st with pcts (parallel to reportedPercentiles), in milliseconds.
func (st latencyStats) toJSON(pcts []time.Duration) jsonLatency {
	return jsonLatency{
		Fastest: ms(st.fastest), Slowest: ms(st.slowest), Average: ms(st.average), Stddev: ms(st.stddev),
		P50: ms(pcts[0]), P90: ms(pcts[1]), P99: ms(pcts[2]), P999: ms(pcts[3]),
	}
}

// percentiles are the reportedPercentiles of sorted.
func percentiles(sorted []time.Duration) []time.Duration {
	out := make([]time.Duration, len(reportedPercentiles))
	for i, p := range reportedPercentiles {
		out[i] = percentile(sorted, p)
	}
	return out
}

// writePercentiles writes one line per reported percentile.
func writePercentiles(b *strings.Builder, pcts []time.Duration) {
	for i, p := range reportedPercentiles {
		fmt.Fprintf(b, "  %g%% in %s\n", p, secs(pcts[i]))
	}
}

func (s *summary) writeJSON(w io.Writer) error {
	out := jsonSummary{
		Workload:     s.Workload,
		Endpoints:    s.Endpoints,
		Clients:      s.Clients,
		Conns:        s.Conns,
		IdleWatchers: s.IdleWatchers,
		TLS:          s.TLS,
		User:         s.User,
		Reauths:      s.Reauths,
		CPUSec:       s.CPU.Seconds(),
		CPUPerReqUs:  s.cpuPerRequest(),
		TotalSec:     s.Total.Seconds(),
		Requests:     s.Requests,
		Errors:       s.Errors,
		FirstError:   s.FirstError,
		RPS:          s.RPS,
		LatencyMs:    s.latencyStats.toJSON(s.Percentiles),
	}
	return json.NewEncoder(w).Encode(out)
}
