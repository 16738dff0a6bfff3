package resources

import (
	"net/url"
	"strconv"

	"github.com/sluice-dev/sluice/api/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Tracing: spec.tracing becomes the limiter's --tracing and
// --trace-sample-ratio flags (see limiter/tracing) and the standard OTLP
// exporter variables, and the endpoint's port is opened in the limiters'
// egress (limiterEgress). Nothing is rendered without spec.tracing, so a
// fleet that does not trace keeps the pod template it had.

// DefaultTraceSamplesPerMillion is spec.tracing.samplesPerMillion's
// default: 1%.
const DefaultTraceSamplesPerMillion = 10000

// LimiterServiceName is the OTEL_SERVICE_NAME of the limiter pods.
const LimiterServiceName = "sluice-limiter"

// tracingArgs are the limiter's tracing flags: --tracing and the sample
// ratio, samplesPerMillion as a decimal fraction (10000 is 0.01); none
// without spec.tracing.
func tracingArgs(fleet *v1beta1.LimiterFleet) []string {
	t := fleet.Spec.Tracing
	if t == nil {
		return nil
	}
	perMillion := ptr.Deref(t.SamplesPerMillion, DefaultTraceSamplesPerMillion)
	return []string{"--tracing", "--trace-sample-ratio=" + strconv.FormatFloat(float64(perMillion)/1e6, 'f', -1, 64)}
}

// tracingEnv is the OTLP exporter's environment: the traces endpoint, the
// service name, and the fleet as resource attributes (names the API server
// validated as DNS labels, so they need no escaping); none without
// spec.tracing.
func tracingEnv(fleet *v1beta1.LimiterFleet) []corev1.EnvVar {
	t := fleet.Spec.Tracing
	if t == nil {
		return nil
	}
	return []corev1.EnvVar{
		{Name: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", Value: t.Endpoint},
		{Name: "OTEL_SERVICE_NAME", Value: LimiterServiceName},
		{Name: "OTEL_RESOURCE_ATTRIBUTES", Value: "k8s.namespace.name=" + fleet.Namespace + ",sluice.fleet=" + fleet.Name},
	}
}

// tracingPort is the TCP port of spec.tracing.endpoint, which the schema
// requires; 0 without spec.tracing or with an endpoint that does not parse.
func tracingPort(fleet *v1beta1.LimiterFleet) int {
	t := fleet.Spec.Tracing
	if t == nil {
		return 0
	}
	u, err := url.Parse(t.Endpoint)
	if err != nil {
		return 0
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil || port < 1 || port > 65535 {
		return 0
	}
	return port
}
