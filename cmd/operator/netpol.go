package main

import (
	"flag"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/sluice-dev/sluice/controllers/resources"
)

// networkPolicyFlags binds the flags that say who the operator is, for the
// NetworkPolicies it renders for each fleet, and returns what they say
// once parsed.
func networkPolicyFlags(fs *flag.FlagSet) func() (resources.NetworkPolicyOptions, error) {
	var ns, podLabels, monitoring string
	fs.StringVar(&ns, "operator-namespace", "", "the operator pods' `namespace`: when set, the operator renders a NetworkPolicy for each fleet's limiter and Redis pods that admits it there")
	fs.StringVar(&podLabels, "operator-pod-labels", "", "`labels` (k=v,k=v) that select the operator's pods in --operator-namespace (default: every pod there)")
	fs.StringVar(&monitoring, "monitoring-namespace", "", "`namespace` whose pods may scrape the limiters' /metrics on their admin port (default: none)")
	return func() (resources.NetworkPolicyOptions, error) {
		l, err := labels.ConvertSelectorToLabelsMap(podLabels)
		if err != nil {
			return resources.NetworkPolicyOptions{}, fmt.Errorf("--operator-pod-labels: %w", err)
		}
		return resources.NetworkPolicyOptions{OperatorNamespace: ns, OperatorPodLabels: l, MonitoringNamespace: monitoring}, nil
	}
}
