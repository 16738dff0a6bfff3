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

// The fleets the builders' tests render.

package resources_test

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/convert"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

const resDefaultImage = "ghcr.io/sluice-dev/sluice-limiter:test"

func resFleet(namespace, name string, mutate ...func(*v1alpha1.LimiterFleet)) *v1beta1.LimiterFleet {
	f := &v1alpha1.LimiterFleet{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "LimiterFleet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: "7b1f6c1e-0000-4000-8000-000000000001", Generation: 4},
	}
	for _, m := range mutate {
		m(f)
	}
	b, err := convert.Fleet(f)
	if err != nil {
		panic(err)
	}
	return b
}

func resExternal(cluster *bool, addrs ...string) func(*v1alpha1.LimiterFleet) {
	return func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis = v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisExternal), Addresses: addrs, Cluster: cluster}
	}
}

func resCluster(mutate ...func(*v1alpha1.LimiterFleet)) func(*v1alpha1.LimiterFleet) {
	return func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis = v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisCluster)}
		for _, m := range mutate {
			m(f)
		}
	}
}

// resFleets are fleets that exercise every branch of the builders.
func resFleets() []*v1beta1.LimiterFleet {
	return []*v1beta1.LimiterFleet{
		resFleet("sluice-system", "default"),
		resFleet("team-a", strings.Repeat("f", v1alpha1.MaxFleetNameLength), func(f *v1alpha1.LimiterFleet) {
			f.Spec.Replicas = ptr.To[int32](5)
			f.Spec.Image = ptr.To("registry.example.com/limiter:v1")
			f.Spec.Enforcement = ptr.To(v1alpha1.EnforcementDisabled)
			f.Spec.Resources = &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")},
			}
			f.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold", "app": "x"}}
		}, resExternal(nil, "redis-0:6379", "redis-1:6379", "redis-2:6379")),
		resFleet("edge", "zero", func(f *v1alpha1.LimiterFleet) { f.Spec.Replicas = ptr.To[int32](0) }, resExternal(nil, "redis:6379")),
	}
}
