package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// Schema is the schema name scripts/bench.sh --json writes; the plot tool
// reads this one only.
const Schema = "kvd-bench/1"

// Report is the JSON that scripts/bench.sh --json writes (fields the plots do
// not use are left out; unknown fields are ignored).
type Report struct {
	Schema    string     `json:"schema"`
	Date      string     `json:"date"`
	GitCommit string     `json:"git_commit"`
	GitDirty  bool       `json:"git_dirty"`
	GoVersion string     `json:"go_version"`
	Machine   Machine    `json:"machine"`
	Duration  *string    `json:"duration"`
	Total     *int64     `json:"total"`
	Warmup    string     `json:"warmup"`
	Rounds    int        `json:"rounds"`
	Members   int        `json:"members"`
	Conns     int        `json:"conns"`
	Servers   []string   `json:"servers"`
	Workloads []Workload `json:"workloads"`
	Results   []Result   `json:"results"`
}

// Machine is where the run was made.
type Machine struct {
	Cores    int    `json:"cores"`
	CPUModel string `json:"cpu_model"`
}

// Workload is one workload of the run, in the run's order.
type Workload struct {
	Name    string `json:"name"`
	Label   string `json:"label"`
	Clients int    `json:"clients"`
}

// Result is one server's figures for one workload.
type Result struct {
	Server   string  `json:"server"`
	Workload string  `json:"workload"`
	Label    string  `json:"label"`
	Clients  int     `json:"clients"`
	Members  int     `json:"members"`
	Median   *Median `json:"median"` // nil: no round measured
	Errors   int64   `json:"errors"`
	Failure  *string `json:"failure"`
	PerRound []Round `json:"per_round"`
}

// Median holds the medians over the rounds that measured.
type Median struct {
	RPS    float64 `json:"rps"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p99_9_ms"`
}

// Round is one round's figures, or its failure.
type Round struct {
	Round   int      `json:"round"`
	RPS     *float64 `json:"rps"`
	P50Ms   *float64 `json:"p50_ms"`
	P99Ms   *float64 `json:"p99_ms"`
	P999Ms  *float64 `json:"p99_9_ms"`
	Errors  *int64   `json:"errors"`
	Failure *string  `json:"failure"`
}

// ReadReport reads and checks a report: it must be one JSON object of
// schema kvd-bench/1 with at least one server, one workload and one measured
// result, every result naming a listed server and workload.
func ReadReport(r io.Reader) (*Report, error) {
	rep, err := decodeOne[Report](r, "scripts/bench.sh --json")
	if err != nil {
		return nil, err
	}
	if err := rep.check(); err != nil {
		return nil, err
	}
	return rep, nil
}

// decodeOne reads exactly one JSON value of type T from r, with errors that
// say what is wrong in terms of the input: from names the script whose JSON
// is wanted, for an empty input.
func decodeOne[T any](r io.Reader, from string) (*T, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("empty input: want the JSON of %s", from)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var v T
	if err := dec.Decode(&v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return nil, fmt.Errorf("not valid JSON at byte %d: %v", se.Offset, err)
		case errors.As(err, &te) && te.Field == "":
			return nil, fmt.Errorf("not valid JSON for a report: want an object, got %s", te.Value)
		case errors.As(err, &te):
			return nil, fmt.Errorf("JSON field %q: want %s, got %s", te.Field, te.Type, te.Value)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, errors.New("not valid JSON: truncated")
		}
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, errors.New("not valid JSON: more than one value")
	}
	return &v, nil
}

func (rep *Report) check() error {
	servers, err := checkHeader(rep.Schema, Schema, "scripts/bench.sh", rep.Servers)
	if err != nil {
		return err
	}
	if len(rep.Workloads) == 0 {
		return errors.New("no workloads in the report")
	}
	if len(rep.Results) == 0 {
		return errors.New("no results in the report")
	}
	workloads := map[string]bool{}
	for _, w := range rep.Workloads {
		if w.Name == "" || workloads[w.Name] {
			return fmt.Errorf("workload %q empty or listed twice", w.Name)
		}
		workloads[w.Name] = true
	}
	seen := map[[2]string]bool{}
	measured := 0
	for i, r := range rep.Results {
		if !servers[r.Server] {
			return fmt.Errorf("result %d: server %q is not in \"servers\"", i, r.Server)
		}
		if !workloads[r.Workload] {
			return fmt.Errorf("result %d: workload %q is not in \"workloads\"", i, r.Workload)
		}
		k := [2]string{r.Server, r.Workload}
		if seen[k] {
			return fmt.Errorf("result %d: %s %s given twice", i, r.Server, r.Workload)
		}
		seen[k] = true
		if r.Median == nil {
			continue
		}
		for _, v := range []struct {
			name string
			v    float64
		}{{"rps", r.Median.RPS}, {"p50_ms", r.Median.P50Ms}, {"p99_ms", r.Median.P99Ms}, {"p99_9_ms", r.Median.P999Ms}} {
			if v.v < 0 || math.IsNaN(v.v) || math.IsInf(v.v, 0) {
				return fmt.Errorf("result %d (%s %s): median %s is %v", i, r.Server, r.Workload, v.name, v.v)
			}
		}
		measured++
	}
	if measured == 0 {
		return errors.New("no result has a median: every run failed")
	}
	return nil
}

// result returns the result of server s on workload w, or nil.
func (rep *Report) result(s, w string) *Result {
	for i := range rep.Results {
		if rep.Results[i].Server == s && rep.Results[i].Workload == w {
			return &rep.Results[i]
		}
	}
	return nil
}

// label is the workload's label, its name without one.
func (w Workload) label() string {
	if w.Label != "" {
		return w.Label
	}
	return w.Name
}

// describe is the one-line description of the run under a plot's title.
func (rep *Report) describe() string {
	var parts []string
	if rep.Members > 1 {
		parts = append(parts, fmt.Sprintf("%d-member clusters", rep.Members))
	} else {
		parts = append(parts, "single member")
	}
	clients := rep.Workloads[0].Clients
	for _, w := range rep.Workloads {
		if w.Clients != clients {
			clients = 0
		}
	}
	if clients > 0 {
		parts = append(parts, fmt.Sprintf("%d clients", clients))
	}
	switch {
	case rep.Total != nil:
		parts = append(parts, fmt.Sprintf("%d requests per workload", *rep.Total))
	case rep.Duration != nil:
		parts = append(parts, *rep.Duration+" per workload")
	}
	if rep.Rounds > 1 {
		parts = append(parts, fmt.Sprintf("medians of %d rounds", rep.Rounds))
	}
	if rep.Machine.Cores > 0 {
		parts = append(parts, fmt.Sprintf("%d shared cores", rep.Machine.Cores))
	}
	if rep.GitCommit != "" {
		c := rep.GitCommit
		if len(c) > 7 {
			c = c[:7]
		}
		parts = append(parts, "kvd "+c)
	}
	if d, _, ok := strings.Cut(rep.Date, "T"); ok {
		parts = append(parts, d)
	}
	return strings.Join(parts, " · ")
}

// checkHeader checks what both report schemas share: the schema named, by
// the script that writes it, and a list of distinct servers, returned as a
// set.
func checkHeader(schema, want, script string, servers []string) (map[string]bool, error) {
	switch schema {
	case want:
	case "":
		return nil, fmt.Errorf("no \"schema\" field: not the JSON of %s --json (want schema %q)", script, want)
	default:
		return nil, fmt.Errorf("schema %q: this tool reads %q", schema, want)
	}
	if len(servers) == 0 {
		return nil, errors.New("no servers in the report")
	}
	set := map[string]bool{}
	for _, s := range servers {
		if s == "" || set[s] {
			return nil, fmt.Errorf("server %q empty or listed twice", s)
		}
		set[s] = true
	}
	return set, nil
}
