package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/internal/otlptest"
)

// TestFleetTracing: a fleet's spec.tracing reaches its limiter Deployment,
// and a limiter started as the kubelet would start that Deployment's
// container (its args and env) exports a decision's span to the collector
// at the endpoint, as the fleet's resource; removing spec.tracing takes it
// all out of the Deployment again.
func TestFleetTracing(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	ns := namespace(t, "fleet-tracing")
	recv := otlptest.Start(t, "")
	fleet := &v1alpha1.LimiterFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "traced"},
		Spec: v1alpha1.LimiterFleetSpec{
			Replicas: ptr.To(int32(1)),
			Tracing:  &v1alpha1.FleetTracing{Endpoint: "http://" + recv.Addr, SamplesPerMillion: ptr.To[int32](1000000)},
		},
	}
	if err := k8s.Create(ctx, fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, fleet) })

	key := client.ObjectKey{Namespace: ns, Name: resources.LimiterName(betaOf(fleet))}
	dep := &appsv1.Deployment{}
	eventually(t, 2*time.Minute, "the limiter Deployment with --tracing", func() error {
		if err := k8s.Get(ctx, key, dep); err != nil {
			return err
		}
		if args := dep.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--tracing") || argValue(args, "--trace-sample-ratio") != "1" {
			return fmt.Errorf("args %q", args)
		}
		return nil
	})
	args, env := asKubelet(t, dep)
	var tracing []string
	for _, a := range args {
		if strings.HasPrefix(a, "--trac") {
			tracing = append(tracing, a)
		}
	}
	// Export at once rather than after the batch processor's 5 seconds.
	env = append(env, "OTEL_BSP_SCHEDULE_DELAY=100")
	pods := fleetPodsWithEnv(t, fleet, 1, "memory", env, tracing...)
	if code := pods[0].check(t, "traced-domain", "user", "alice"); code != http.StatusOK {
		t.Fatalf("check: %d", code)
	}
	eventually(t, 2*time.Minute, "the decision's span in the collector, from the fleet's limiter", func() error {
		for _, sp := range recv.Received() {
			if sp.GetName() == "sluice.check" && sp.Resource["service.name"] == "sluice-limiter" &&
				sp.Resource["sluice.fleet"] == fleet.Name && sp.Resource["k8s.namespace.name"] == ns {
				return nil
			}
		}
		return fmt.Errorf("spans %+v", recv.Received())
	})

	updateFleet(t, client.ObjectKeyFromObject(fleet), func(f *v1alpha1.LimiterFleet) { f.Spec.Tracing = nil })
	eventually(t, 2*time.Minute, "the limiter Deployment without tracing", func() error {
		if err := k8s.Get(ctx, key, dep); err != nil {
			return err
		}
		c := dep.Spec.Template.Spec.Containers[0]
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--trac") {
				return fmt.Errorf("args %q", c.Args)
			}
		}
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, "OTEL_") {
				return fmt.Errorf("env %+v", c.Env)
			}
		}
		return nil
	})
}
