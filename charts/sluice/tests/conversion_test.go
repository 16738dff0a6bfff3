package tests

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluice-dev/sluice/internal/conversiontest"
)

// startConversion stands in for the operator's conversion webhook, which
// the chart's CRD reaches through a Service that envtest's API server
// can't route to (no pods, no kube-proxy): the test serves the same
// conversion on loopback until whole ends, and the chart is installed with
// operator.webhook.url pointing there (values). The operator runs with
// --webhook-port=0 (startOperator); cmd/operator's
// TestOperatorServesConversionWebhook tests its own webhook server.
func startConversion(whole *testing.T) *envtest.WebhookInstallOptions {
	whole.Helper()
	o := &envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"}
	if err := o.PrepWithoutInstalling(); err != nil {
		whole.Fatal(err)
	}
	stop, err := conversiontest.ServeWith(o, conversiontest.Scheme())
	if err != nil {
		whole.Fatal(err)
	}
	whole.Cleanup(func() {
		stop()
		_ = o.Cleanup()
	})
	return o
}

// trustConversion checks that the installed CRDs (RateLimitPolicy and
// LimiterFleet) convert through the webhook at operator.webhook.url, and
// puts the test webhook's CA in their caBundle, as the operator does with
// its own.
func trustConversion(t *testing.T, o *envtest.WebhookInstallOptions) {
	t.Helper()
	for _, name := range []string{"ratelimitpolicies.ratelimit.sluice.dev", "limiterfleets.ratelimit.sluice.dev"} {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			t.Fatal(err)
		}
		conv := crd.Spec.Conversion
		if conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter || conv.Webhook == nil || conv.Webhook.ClientConfig == nil ||
			conv.Webhook.ClientConfig.URL == nil || *conv.Webhook.ClientConfig.URL != conversiontest.URL(o) {
			t.Fatalf("the chart's CRD %s does not convert through the webhook at %s: %+v", name, conversiontest.URL(o), conv)
		}
		conv.Webhook.ClientConfig.CABundle = o.LocalServingCAData
		if err := k8s.Update(ctx, &crd); err != nil {
			t.Fatal(err)
		}
	}
}
