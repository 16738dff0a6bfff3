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

// The fleets of the pure tests left here (those of package resources'
// builders are in controllers/resources, with their own copy).

package controllers_test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/convert"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

func resFleet(namespace, name string, mutate ...func(*v1alpha1.LimiterFleet)) *v1alpha1.LimiterFleet {
	f := &v1alpha1.LimiterFleet{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "LimiterFleet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: "7b1f6c1e-0000-4000-8000-000000000001", Generation: 4},
	}
	for _, m := range mutate {
		m(f)
	}
	return f
}

func resCluster(mutate ...func(*v1alpha1.LimiterFleet)) func(*v1alpha1.LimiterFleet) {
	return func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis = v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisCluster)}
		for _, m := range mutate {
			m(f)
		}
	}
}

// betaOf is fleet as the operator reads it: in v1beta1, converted as the
// API server converts it. The tests that create fleets as v1alpha1 clients
// hand it to the operator's functions, which take v1beta1.
func betaOf(fleet *v1alpha1.LimiterFleet) *v1beta1.LimiterFleet {
	b, err := convert.Fleet(fleet)
	if err != nil {
		panic(err)
	}
	return b
}

// storedOne is a policy a v1alpha1 client wrote as the API server stores
// it, and the operator reads it: in v1beta1, converted.
func storedOne(p *v1alpha1.RateLimitPolicy) *v1beta1.RateLimitPolicy {
	b := &v1beta1.RateLimitPolicy{}
	if err := p.DeepCopy().ConvertTo(b); err != nil {
		panic(err)
	}
	b.APIVersion, b.Kind = v1beta1.GroupVersion.String(), "RateLimitPolicy"
	return b
}
