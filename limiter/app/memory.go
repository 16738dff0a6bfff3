package app

import (
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// MinMemoryMaxBytes is the least --memory-max-bytes: each of the memory
// store's 64 shards must hold at least one SlidingLog of the largest limit
// (10,000 entries of 16 bytes, and its array's spare room).
const MinMemoryMaxBytes = 16 << 20

// DefaultMemoryMaxBytes is --memory-max-bytes when no container memory
// limit is found.
const DefaultMemoryMaxBytes = memory.DefaultMaxBytes

// cgroupMemoryFiles hold the container's memory limit: cgroup v2, then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// MemoryMaxBytesDefault is the default of --memory-max-bytes: half the
// container's memory limit (cgroup v2 memory.max, else v1
// memory.limit_in_bytes), at least MinMemoryMaxBytes; DefaultMemoryMaxBytes
// when there is no limit. The other half is the process's own: the Go
// runtime, connections, policies, idempotency records and the estimate's
// error. It also says where the value came from.
func MemoryMaxBytesDefault() (int64, string) {
	for _, f := range cgroupMemoryFiles {
		limit, ok := readMemoryLimit(f)
		if ok {
			return max(MinMemoryMaxBytes, limit/2), "half the memory limit " + strconv.FormatInt(limit, 10) + " of " + f
		}
	}
	return DefaultMemoryMaxBytes, "no container memory limit found"
}

// readMemoryLimit reads a cgroup memory limit file: a number of bytes, or
// "max" (v2) or a number near 2^63 (v1) for none.
func readMemoryLimit(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v <= 0 || v >= 1<<60 {
		return 0, false
	}
	return v, true
}

// memoryCollectors export the memory store's estimated bytes, its bound
// and its evictions.
func memoryCollectors(ms *memory.Store) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_memory_store_bytes",
			Help: "Estimated memory of the memory store's counters and penalty states (see --memory-max-bytes).",
		}, func() float64 { return float64(ms.Bytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_memory_store_max_bytes",
			Help: "The memory store's bound on sluice_memory_store_bytes (--memory-max-bytes).",
		}, func() float64 { return float64(ms.MaxBytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_memory_store_keys",
			Help: "Counters in the memory store, expired ones included until swept.",
		}, func() float64 { return float64(ms.Len()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_memory_store_evictions_total",
			Help: "Live counters and penalty states the memory store evicted because it was full (--memory-max-keys, --memory-max-bytes).",
		}, func() float64 { return float64(ms.Evicted()) }),
	}
}
