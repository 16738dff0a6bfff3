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

package e2e

import (
	"github.com/sluice-dev/sluice/api/convert"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// betaOf is a fleet written as v1alpha1 as the operator reads it, in
// v1beta1 (converted as the API server converts it), for the operator's
// builders, which take v1beta1.
func betaOf(fleet *v1alpha1.LimiterFleet) *v1beta1.LimiterFleet {
	b, err := convert.Fleet(fleet)
	if err != nil {
		panic(err)
	}
	return b
}
