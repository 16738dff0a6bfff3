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

package v1alpha1

// Bounds of spec.priority.
const (
	MaxPriorityLevels            = 16
	MaxPriorityValueLength       = 253
	MaxPriorityShare       int32 = 100
)

// PriorityShedding sheds low-priority requests first as a counter fills
// (spec.priority): every priority spends the one counter of the policy, and
// a request is admitted only while the counter's usage, with its cost, stays
// within its priority's share of the capacity.
// +kubebuilder:validation:XValidation:rule="self.levels.all(l, self.levels.exists_one(m, m.value == l.value))",message="spec.priority.levels' values must be unique",fieldPath=".levels"
// +kubebuilder:validation:XValidation:rule="self.levels.map(l, -l.share).isSorted()",message="spec.priority.levels' shares must not increase from one level to the next: list the highest priority first",fieldPath=".levels"
// +kubebuilder:validation:XValidation:rule="self.levels.exists(l, l.value == self.default)",message="spec.priority.default must be the value of one of spec.priority.levels",fieldPath=".default"
type PriorityShedding struct {
	// key is the descriptor entry that carries a request's priority, such
	// as "priority". It is not one of spec.descriptors' keys: all
	// priorities share the policy's counters. A priority is a privilege:
	// the gateway must fill this entry from the caller's authenticated
	// identity, never from a client header (forward-auth refuses a mapping
	// that fills it from a header). Denials by a level's share are never a
	// penalty's strikes.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`

	// levels are the priorities, highest first, each with the share of the
	// capacity it may use. Shares must not increase down the list. 1 to 16
	// levels.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Levels []PriorityLevel `json:"levels"`

	// default is the level (one of levels' values) of a request whose
	// priority entry is missing or names no level.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Default string `json:"default"`
}

// PriorityLevel is one priority and its share of the capacity.
type PriorityLevel struct {
	// value is the priority entry's value, such as "critical" or "batch".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Value string `json:"value"`

	// share is the percentage of the capacity (burst, rate.limit, or
	// concurrency.maxInFlight) that
	// requests of this priority may use, from 0 to 100: one is admitted only
	// while the counter's usage plus its cost is at most share% of the
	// capacity, rounded down. 100 may use it all; 0 is always shed.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Share int32 `json:"share"`
}

// Reserve is how many units of capacity a request of this level must leave
// for higher priorities: capacity less share% of it, rounded down.
func (l PriorityLevel) Reserve(capacity int64) int64 {
	return capacity - capacity*int64(l.Share)/100
}
