package main

import (
	"math"
	"slices"
	"time"
)

// recorder keeps every latency one client loop measured. Each loop owns its
// recorder, so recording takes no lock and, once the slice has grown (or was
// sized up front from --total), no allocation.
type recorder struct {
	lats []time.Duration
}

func (r *recorder) record(d time.Duration) { r.lats = append(r.lats, d) }

// mergeSorted joins the recorders' samples into one ascending slice.
func mergeSorted(recs []recorder) []time.Duration {
	n := 0
	for i := range recs {
		n += len(recs[i].lats)
	}
	all := make([]time.Duration, 0, n)
	for i := range recs {
		all = append(all, recs[i].lats...)
	}
	slices.Sort(all)
	return all
}

// percentile returns the nearest-rank p-th percentile of sorted: the smallest
// sample such that at least p percent of the samples are less than or equal
// to it. sorted must be ascending and p in (0, 100]; an empty slice gives 0.
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// The epsilon keeps float error from bumping an exact rank up by one
	// (99.9/100*1000 is 999.0000000000001 in float64).
	rank := int(math.Ceil(p/100*float64(n) - 1e-9))
	rank = max(1, min(rank, n))
	return sorted[rank-1]
}

// latencyStats are the moments of a sample set.
type latencyStats struct {
	fastest, slowest, average, stddev time.Duration
}

func statsOf(sorted []time.Duration) latencyStats {
	n := len(sorted)
	if n == 0 {
		return latencyStats{}
	}
	var sum float64
	for _, d := range sorted {
		sum += float64(d)
	}
	mean := sum / float64(n)
	var sq float64
	for _, d := range sorted {
		dev := float64(d) - mean
		sq += dev * dev
	}
	return latencyStats{
		fastest: sorted[0],
		slowest: sorted[n-1],
		average: time.Duration(math.Round(mean)),
		stddev:  time.Duration(math.Round(math.Sqrt(sq / float64(n)))),
	}
}

// histogramBucket counts the samples at or below mark (and above the
// previous bucket's mark).
type histogramBucket struct {
	mark  time.Duration
	count int
}

// histogram splits [fastest, slowest] into n equal-width buckets, the way
// etcd's benchmark tool draws its response time histogram.
func histogram(sorted []time.Duration, n int) []histogramBucket {
	if len(sorted) == 0 || n <= 0 {
		return nil
	}
	lo, hi := sorted[0], sorted[len(sorted)-1]
	width := (hi - lo) / time.Duration(n)
	buckets := make([]histogramBucket, n)
	for i := range buckets {
		buckets[i].mark = lo + width*time.Duration(i+1)
	}
	buckets[n-1].mark = hi
	b := 0
	for _, d := range sorted {
		for d > buckets[b].mark {
			b++
		}
		buckets[b].count++
	}
	return buckets
}
