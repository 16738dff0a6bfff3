package main

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records durations in log-linear buckets, like HdrHistogram with
// two significant digits: values below 256ns are exact, and above that every
// power of two is split into 128 buckets, so a percentile is off by less than
// 1/128 (0.8%) of its value. Its memory is fixed (about 35 KiB) whatever the
// number of samples; values above maxTrackable are counted in the top bucket.
// It is not safe for concurrent use: keep one per goroutine and Merge them.
type Histogram struct {
	counts [histBuckets]uint64
	total  uint64
	min    int64
	max    int64
	sum    float64
}

const (
	histSubBits  = 7
	histSub      = 1 << histSubBits // buckets per power of two
	histExact    = 2 * histSub      // values below this are exact
	histMaxShift = 32               // 2^(32+8) ns ≈ 18 minutes
	histBuckets  = histExact + histMaxShift*histSub
	maxTrackable = int64(1)<<(histMaxShift+histSubBits+1) - 1
)

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram { return &Histogram{min: math.MaxInt64} }

func bucketOf(v int64) int {
	if v < 0 {
		v = 0
	}
	if v > maxTrackable {
		v = maxTrackable
	}
	if v < histExact {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - (histSubBits + 1)
	top := int(v >> uint(shift)) // in [histSub, 2*histSub)
	return histExact + (shift-1)*histSub + top - histSub
}

// bucketRange is the smallest and largest value that land in bucket i.
func bucketRange(i int) (lo, hi int64) {
	if i < histExact {
		return int64(i), int64(i)
	}
	shift := (i-histExact)/histSub + 1
	top := int64((i-histExact)%histSub + histSub)
	return top << uint(shift), (top+1)<<uint(shift) - 1
}

// Record adds one duration.
func (h *Histogram) Record(d time.Duration) { h.RecordValue(int64(d)) }

// RecordValue adds one value in nanoseconds.
func (h *Histogram) RecordValue(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	h.total++
	h.sum += float64(v)
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

// Merge adds o's samples to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.sum += o.sum
	if o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
}

// Count is the number of samples.
func (h *Histogram) Count() uint64 { return h.total }

// Max is the largest sample, exact; 0 when empty.
func (h *Histogram) Max() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.max)
}

// Min is the smallest sample, exact; 0 when empty.
func (h *Histogram) Min() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.min)
}

// Mean is the average sample; 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.total))
}

// Quantile returns the value at quantile q in [0, 1]: the smallest bucket
// whose cumulative count reaches ceil(q × count), reported as that bucket's
// highest value and clamped to the exact min and max. 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	if q <= 0 {
		return time.Duration(h.min)
	}
	if q >= 1 {
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	if rank < 1 {
		rank = 1
	}
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			_, hi := bucketRange(i)
			if hi > h.max {
				hi = h.max
			}
			if hi < h.min {
				hi = h.min
			}
			return time.Duration(hi)
		}
	}
	return time.Duration(h.max)
}
