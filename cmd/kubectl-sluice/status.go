package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

const group = "ratelimit.sluice.dev"

// statusTimeout bounds the calls to the API server.
const statusTimeout = time.Minute

func status(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kubectl sluice status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var kf kubeFlags
	kf.add(fs)
	fs.StringVar(&kf.namespace, "n", "", "`namespace` to show (default: the context's)")
	all := fs.Bool("A", false, "show every namespace")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kubectl sluice status: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	rc, ns, err := kf.config()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl sluice status: kubeconfig: %v\n", err)
		return 1
	}
	if *all {
		ns = metav1.NamespaceAll
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	fleets, policies, err := list(ctx, rc, ns)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl sluice status: %v\n", err)
		return 1
	}
	printStatus(stdout, fleets, policies)
	return 0
}

// list reads the LimiterFleets and RateLimitPolicies of ns ("" for all),
// each in the version the API server prefers.
func list(ctx context.Context, rc *rest.Config, ns string) (fleets, policies []unstructured.Unstructured, err error) {
	dc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	get := func(kind string) ([]unstructured.Unstructured, error) {
		m, err := mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind})
		if err != nil {
			return nil, fmt.Errorf("%s: %w (is Sluice installed?)", kind, err)
		}
		l, err := dyn.Resource(m.Resource).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", m.Resource.Resource, err)
		}
		sort.Slice(l.Items, func(i, j int) bool {
			a, b := l.Items[i], l.Items[j]
			return a.GetNamespace()+"/"+a.GetName() < b.GetNamespace()+"/"+b.GetName()
		})
		return l.Items, nil
	}
	if fleets, err = get("LimiterFleet"); err != nil {
		return nil, nil, err
	}
	if policies, err = get("RateLimitPolicy"); err != nil {
		return nil, nil, err
	}
	return fleets, policies, nil
}

// condition is one of an object's status conditions.
type condition struct{ status, reason string }

func conditions(u unstructured.Unstructured) map[string]condition {
	out := map[string]condition{}
	cs, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range cs {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		t, _ := m["type"].(string)
		s, _ := m["status"].(string)
		r, _ := m["reason"].(string)
		out[t] = condition{s, r}
	}
	return out
}

// show is a condition as a column: its status, and its reason unless it
// is the expected one.
func show(c condition, ok string) string {
	switch {
	case c.status == "":
		return "-"
	case c.status == ok:
		return c.status
	default:
		return c.status + " (" + c.reason + ")"
	}
}

func printStatus(w io.Writer, fleets, policies []unstructured.Unstructured) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "FLEETS (%d)\n", len(fleets))
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tREADY\tSNAPSHOT SYNCED\tREDIS READY\tREDIS CLUSTER")
	for _, f := range fleets {
		c := conditions(f)
		primaries, found, _ := unstructured.NestedSlice(f.Object, "status", "redis", "primaries")
		state, _, _ := unstructured.NestedString(f.Object, "status", "redis", "clusterState")
		sh := "-"
		if found || state != "" {
			sh = fmt.Sprintf("%d primaries, cluster %s", len(primaries), state)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.GetNamespace(), f.GetName(), show(c["Ready"], "True"),
			show(c["SnapshotSynced"], "True"), show(c["RedisReady"], "True"), sh)
	}
	fmt.Fprintln(tw)
	counts := map[string]int{}
	fmt.Fprintf(tw, "POLICIES (%d)\n", len(policies))
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tDOMAIN\tACCEPTED\tENFORCED\tDEGRADED")
	for _, p := range policies {
		c := conditions(p)
		domain, _, _ := unstructured.NestedString(p.Object, "spec", "domain")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.GetNamespace(), p.GetName(), domain,
			show(c["Accepted"], "True"), show(c["Enforced"], "True"), show(c["Degraded"], "False"))
		switch {
		case c["Enforced"].status == "True":
			counts["enforced"]++
		case c["Enforced"].reason != "":
			counts[c["Enforced"].reason]++
		default:
			counts["not yet reconciled"]++
		}
		if c["Degraded"].status == "True" {
			counts["degraded ("+c["Degraded"].reason+")"]++
		}
	}
	_ = tw.Flush()
	var sum []string
	for k, v := range counts {
		sum = append(sum, fmt.Sprintf("%d %s", v, k))
	}
	sort.Strings(sum)
	if len(sum) > 0 {
		fmt.Fprintf(w, "\nPolicies: %s\n", strings.Join(sum, ", "))
	}
}
