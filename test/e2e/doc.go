// Package e2e holds the user's journey on a real one-node Kubernetes: a
// kubelet, containerd, runc, a CNI bridge, kube-proxy and CoreDNS, which
// hack/cluster/up.sh starts on this machine. `make e2e` brings the cluster
// up, runs these tests against it with client-go and the real helm and
// kubectl, and tears it down; `make test` runs it after the other tests.
//
// Without a cluster (SLUICE_E2E_CLUSTER_DIR unset, as under a plain
// `go test ./...`) the tests skip and say how to run them; make e2e sets
// SLUICE_E2E_REQUIRED=1, under which a missing cluster fails instead.
//
// Before the journey, harness_test.go attacks the cluster itself as another
// local user and as a neighbour on the network would (its keys, etcd, its
// listening sockets, its volumes); after hack/cluster/down.sh, make e2e runs
// TestAttackDownRemovesForeignRules on the iptables rules it planted before
// up.sh, which down.sh must leave.
//
// The journey, one subtest per step, each printing how long it took:
//
//  1. helm install the previous release's chart (hack/previous-release)
//     with its images (hack/cluster/build.sh builds them from this clone's
//     history; without that commit, this tree's chart, and step 3 says the
//     upgrade was not exercised), as the README says, with only the image
//     settings changed; the operator becomes Available under the
//     restricted Pod Security profile.
//  2. A LimiterFleet in redis.mode Cluster (3 shards; on two nodes a
//     replica each): the Redis StatefulSets run, the operator forms the
//     cluster, the limiters reach Redis by the DNS names the operator gives
//     them.
//  3. helm upgrade to this tree's chart and images under steady load (a
//     policy that allows it all, one that denies): the operator and every
//     limiter pod run the new images, the snapshot says format 2, no
//     decision failed, and the denying policy still denies.
//  4. kubectl apply -f config/samples/: every policy Enforced; the README's
//     request through the limiter Service from a pod gets 200 five times,
//     then 429; so do Envoy RLS calls; kubectl get rlp -A shows the counts.
//  5. nginx, with the shipped sample configuration, in front of an app pod,
//     through Service names: 429 at the limit, the headers passed on.
//  6. NetworkPolicies, enforced: who may reach the limiters and Redis.
//  7. kubectl sluice explain, as tenants and as the platform team.
//  8. Traces from nginx's fleet to an OTLP receiver the test serves.
//  9. Faults under steady load from a pod, each printing the decisions that
//     failed and how long until none did: a Redis pod deleted, a limiter
//     rolling restart, the operator pod deleted, every Redis container of
//     the node killed at once, a node stopped and drained.
//  10. helm upgrade with a changed value, then helm uninstall: the CRDs and
//     the policies stay.
package e2e
