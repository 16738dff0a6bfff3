package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/api/limiterwire"
)

func top(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kubectl sluice top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var kf kubeFlags
	kf.add(fs)
	fs.StringVar(&kf.namespace, "n", "", "only this `namespace`'s policies (default: the kubeconfig context's namespace)")
	var af adminFlags
	af.add(fs)
	all := fs.Bool("A", false, "the policies of every namespace you may get ratelimitpolicies in")
	n := fs.Int("top", limiterwire.TopDefaultPolicies, fmt.Sprintf("how many policies, 1 to %d", limiterwire.TopMaxPolicies))
	sortBy := fs.String("sort", limiterwire.TopSortDecisions, "rank by decisions or limited (denials)")
	output := fs.String("o", "text", "output: text or json")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: kubectl sluice top --limiter URL --fleet NS/NAME [-A | -n NAMESPACE] [--sort decisions|limited] [--top N]")
		fmt.Fprintln(stderr, "The hottest policies on one limiter since it started, and their hottest keys. Flags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	err := af.check()
	switch {
	case err != nil:
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected arguments %q", fs.Args())
	case *all && kf.namespace != "":
		err = fmt.Errorf("-A and -n %s: give one", kf.namespace)
	case *n < 1 || *n > limiterwire.TopMaxPolicies:
		err = fmt.Errorf("--top %d: want 1 to %d", *n, limiterwire.TopMaxPolicies)
	case *sortBy != limiterwire.TopSortDecisions && *sortBy != limiterwire.TopSortLimited:
		err = fmt.Errorf("--sort %q: want %s or %s", *sortBy, limiterwire.TopSortDecisions, limiterwire.TopSortLimited)
	case *output != "text" && *output != "json":
		err = fmt.Errorf("-o %q: want text or json", *output)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kubectl sluice top: %v\n", err)
		fs.Usage()
		return 2
	}
	rc, ns, err := kf.config()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl sluice top: kubeconfig: %v\n", err)
		return 1
	}
	token, err := af.adminToken(context.Background(), rc)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl sluice top: %v\n", err)
		return 1
	}
	q := url.Values{"n": {strconv.Itoa(*n)}, "sort": {*sortBy}}
	if !*all {
		q.Set("namespace", ns)
	}
	var t limiterwire.Top
	if err := callAdmin(token, af.limiter, af.caFile, af.serverName, limiterwire.TopPath, q, &t); err != nil {
		fmt.Fprintf(stderr, "kubectl sluice top: %v\n", err)
		return 1
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(t)
		return 0
	}
	printTop(stdout, &t, af.limiter)
	return 0
}

// printTop prints t as a table of policies, then each one's hottest keys.
func printTop(w io.Writer, t *limiterwire.Top, limiter string) {
	fmt.Fprintf(w, "Limiter %s, counting since %s (snapshot %s), by %s\n\n", limiter, t.StartedAt.UTC().Format(time.RFC3339), t.SnapshotVersion, t.Sort)
	if len(t.Policies) == 0 {
		fmt.Fprintln(w, "No policy you may see has decided anything on this limiter.")
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "POLICY\tDECISIONS\tALLOWED\tLIMITED\tPENALIZED\tSHADOW\tSOFT\tFAILED OPEN\tFAILED CLOSED\tREFUSED")
		for _, p := range t.Policies {
			fmt.Fprintf(tw, "%s/%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", p.Namespace, p.Name, p.Decisions, p.Allowed, p.Limited,
				p.Penalized, p.ShadowLimited, p.SoftLimited, p.FailedOpen, p.FailedClosed, p.Refused)
		}
		_ = tw.Flush()
	}
	for _, p := range t.Policies {
		if len(p.Hottest) == 0 || p.HottestSince == nil {
			continue
		}
		fmt.Fprintf(w, "\nHottest keys of %s/%s in the interval from %s (hashed or truncated as in its status):\n", p.Namespace, p.Name, p.HottestSince.UTC().Format(time.RFC3339))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  KEY\tREQUESTS\tLIMITED\tERROR")
		for _, h := range p.Hottest {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\n", h.Value, h.Requests, h.Limited, h.Error)
		}
		_ = tw.Flush()
	}
	if t.Incomplete {
		fmt.Fprintf(w, "\nThe limiter stopped after reviewing your access to %d namespaces: give -n NAMESPACE to see further.\n", limiterwire.TopMaxNamespaceReviews)
	}
}
