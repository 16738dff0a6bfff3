package config_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/config"
)

func manyPolicies(n int) []v1alpha1.RateLimitPolicy {
	out := make([]v1alpha1.RateLimitPolicy, n)
	for i := range out {
		out[i] = v1alpha1.RateLimitPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns-" + strconv.Itoa(i%10), Name: fmt.Sprintf("p-%05d", i), UID: types.UID("uid-" + strconv.Itoa(i)), Generation: 1},
			Spec: v1alpha1.RateLimitPolicySpec{
				Domain:      "domain-" + strconv.Itoa(i%20),
				Descriptors: []v1alpha1.Descriptor{{Key: "tenant"}, {Key: "route", Value: ptr.To("/v1/items/" + strconv.Itoa(i))}},
				Rate:        v1alpha1.Rate{Limit: int64(100 + i), Period: metav1.Duration{Duration: time.Minute}},
			},
		}
	}
	return out
}

// BenchmarkSnapshot2000 is the operator's compile (encode) and a limiter's
// load (parse and compile) of a 2,000-policy snapshot.
func BenchmarkSnapshot2000(b *testing.B) {
	srcs := alphaSources(b, manyPolicies(2000)...)
	var data []byte
	b.Run("encode", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			data, _ = config.EncodeDocument(config.DocumentFor(srcs, config.EnforcementEnabled))
		}
		b.ReportMetric(float64(len(data)), "bytes")
	})
	b.Run("parse", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := config.ParseDocument(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
