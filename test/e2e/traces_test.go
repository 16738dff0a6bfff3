package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/internal/otlptest"
)

// traces is the journey's span tree: nginx's fleet traces every decision
// to an OTLP/gRPC receiver (the collector's TraceService, served by this
// test on the node's address) through spec.tracing; one request through
// nginx, under the client's traceparent, reaches the receiver as a
// forward-auth span that is the client span's child in the client's trace,
// with the store call as its child, and no span carries the request's
// descriptor value.
func (j *journey) traces(t *testing.T) {
	c := j.c
	if j.gateway.Name == "" {
		t.Skip("no gateway fleet: step 5 did not make it")
	}
	recv := otlptest.Start(t, c.nodeIP(t))
	endpoint := "http://" + recv.Addr
	setTracing := func(tr *v1alpha1.FleetTracing) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			f := c.fleet(t, j.gateway.Namespace, j.gateway.Name)
			f.Spec.Tracing = tr
			return c.c.Update(context.Background(), f)
		})
		if err != nil {
			t.Fatalf("spec.tracing of fleet %s: %v", j.gateway, err)
		}
	}
	setTracing(&v1alpha1.FleetTracing{Endpoint: endpoint, SamplesPerMillion: ptr.To[int32](1_000_000)})
	t.Cleanup(func() { setTracing(nil) })
	dep := "deployment/" + resources.LimiterName(betaOf(c.fleet(t, j.gateway.Namespace, j.gateway.Name)))
	waitFor(t, "the gateway limiters rendered with the tracing endpoint", 2*time.Minute, func() (bool, string) {
		out := c.kubectl(t, "get", "-n", j.gateway.Namespace, dep, "-o", "jsonpath={.spec.template.spec.containers[0]}")
		return strings.Contains(out, recv.Addr), "not yet"
	})
	c.kubectl(t, "rollout", "status", "-n", j.gateway.Namespace, dep, "--timeout=3m")
	t.Cleanup(func() {
		if t.Failed() {
			// What the limiters said of their exporter, for the failure.
			sel := labels.SelectorFromSet(resources.LimiterSelectorLabels(betaOf(c.fleet(t, j.gateway.Namespace, j.gateway.Name)))).String()
			out, errOut, _ := c.cmd("", c.kubectlBin, "logs", "-n", j.gateway.Namespace, "-l", sel, "--tail=40", "--prefix")
			t.Logf("the gateway limiters' last lines:\n%s%s", out, errOut)
		}
	})

	// The request is sent again until its spans arrive, each time as a new
	// client span: right after the rollout, nginx's kept-alive upstream
	// connections may still reach an old limiter pod (draining for
	// --drain-delay, rendered without tracing), whose answer has no span.
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	const key = "trace-carol-7731"
	var parents []string
	send := func() {
		parent := fmt.Sprintf("00f067aa0ba9%04x", len(parents)+1)
		parents = append(parents, parent)
		var answers []struct{ Status int }
		c.execJSON(t, &answers, appNS, clientPod, "/e2eclient", "http", "-url", "http://nginx."+appNS+".svc.cluster.local:8088/charges",
			"-header", "X-Api-Key: "+key, "-header", "traceparent: 00-"+traceID+"-"+parent+"-01")
		if len(answers) != 1 || answers[0].Status != 200 {
			t.Fatalf("the traced request through nginx: %+v, want 200", answers)
		}
	}
	send()
	lastSent := time.Now()
	var root *tracepb.Span
	var spans []*tracepb.Span
	waitFor(t, "a request's forward-auth span and its store call in the receiver", 2*time.Minute, func() (bool, string) {
		spans = recv.Trace(traceID)
		root = nil
		for _, sp := range spans {
			if sp.GetName() == "sluice.forward_auth" && slices.Contains(parents, hex.EncodeToString(sp.GetParentSpanId())) {
				root = sp
			}
		}
		if root == nil {
			if time.Since(lastSent) > 10*time.Second {
				send()
				lastSent = time.Now()
			}
			return false, fmt.Sprintf("%d requests sent; %d spans of the trace: %s; %d spans in all", len(parents), len(spans), spanNames(spans), len(recv.Spans()))
		}
		return slices.ContainsFunc(spans, func(sp *tracepb.Span) bool {
			return sp.GetName() == "sluice.store" && string(sp.GetParentSpanId()) == string(root.GetSpanId())
		}), "spans: " + spanNames(spans)
	})
	for _, sp := range recv.Spans() {
		if strings.Contains(sp.String(), key) {
			j.errorf(t, "span %s carries the request's descriptor value %q: %s", sp.GetName(), key, sp.String())
		}
	}
	j.mark("a request through nginx under the client's traceparent reached a real OTLP receiver as %s (%d requests sent)", spanNames(spans), len(parents))
}

// spanNames lists spans as name(parent-of-whom) for messages.
func spanNames(spans []*tracepb.Span) string {
	var out []string
	for _, sp := range spans {
		out = append(out, fmt.Sprintf("%s[%s<-%s]", sp.GetName(), hex.EncodeToString(sp.GetSpanId()), hex.EncodeToString(sp.GetParentSpanId())))
	}
	return strings.Join(out, " ")
}

// nodeIP is the address the API server listens on, the first node's: pods
// of every node reach it.
func (c *cluster) nodeIP(t *testing.T) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	return u.Hostname()
}
