package controllers

import (
	"context"
	"net"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/controllers/observe"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// observeEndpoints finds the fleet's ready limiter pods through its
// Service's EndpointSlices.
func (r *LimiterFleetReconciler) observeEndpoints(ctx context.Context, s *fleetScope) error {
	var slices discoveryv1.EndpointSliceList
	if err := r.List(ctx, &slices, client.InNamespace(s.fleet.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: resources.LimiterName(s.fleet)}); err != nil {
		return err
	}
	s.endpoints = readyEndpoints(slices.Items, resources.LimiterAdminPortName)
	var err error
	s.endpoints, s.untrusted, err = observe.TrustedEndpoints(ctx, r.Client, s.fleet, slices.Items, s.endpoints)
	return err
}

// observeAcks reads what each ready pod has loaded.
func (r *LimiterFleetReconciler) observeAcks(_ context.Context, s *fleetScope) error {
	key := client.ObjectKeyFromObject(s.fleet)
	r.Acks.Serve(key, s.served)
	r.Acks.Track(key, s.endpoints, s.version)
	s.acks, s.complete = r.Acks.Acks(key)
	return nil
}

// readyEndpoints lists host:port of every ready endpoint of the slices, on
// the named port, sorted and without duplicates.
func readyEndpoints(items []discoveryv1.EndpointSlice, portName string) []string {
	var out []string
	for _, sl := range items {
		var port int32
		for _, p := range sl.Ports {
			if p.Name != nil && *p.Name == portName && p.Port != nil {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				out = append(out, net.JoinHostPort(a, strconv.Itoa(int(port))))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
