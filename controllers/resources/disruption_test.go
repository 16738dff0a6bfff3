/*
Copyright 2026 The Sluice Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package resources_test

import (
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"

	"github.com/sluice-dev/sluice/controllers/resources"
)

// A limiter pod's grace period covers its drain, the shutdown of what is
// in flight and the return of its grants; its PodDisruptionBudget lets one
// pod go at a time, even unready.
func TestLimiterDisruption(t *testing.T) {
	f := resFleet("ns", "f")
	d := resources.BuildLimiterDeployment(f, resources.LimiterDeploymentOptions{DefaultImage: resDefaultImage, StoreURL: "memory"})
	grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second != resources.LimiterGracePeriod ||
		resources.LimiterGracePeriod < resources.LimiterDrainDelay+10*time.Second {
		t.Fatalf("terminationGracePeriodSeconds %v, grace period %v, drain delay %v", grace, resources.LimiterGracePeriod, resources.LimiterDrainDelay)
	}
	pdb := resources.BuildLimiterPDB(f)
	if pdb.Name != resources.LimiterName(f) || pdb.Namespace != "ns" || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 ||
		pdb.Spec.MinAvailable != nil || pdb.Spec.UnhealthyPodEvictionPolicy == nil || *pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
		t.Fatalf("PDB %s/%s spec %+v", pdb.Namespace, pdb.Name, pdb.Spec)
	}
	for k, v := range resources.LimiterSelectorLabels(f) {
		if pdb.Spec.Selector.MatchLabels[k] != v {
			t.Fatalf("PDB selector %v lacks %s=%s", pdb.Spec.Selector.MatchLabels, k, v)
		}
	}
}
