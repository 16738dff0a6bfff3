package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/api/limiterwire"
)

// explainTimeout bounds the call to the limiter.
const explainTimeout = 30 * time.Second

// entryPrefix marks a query parameter as a descriptor entry of the status
// and explain query (a key named domain is then no domain).
const entryPrefix = "entry."

func explain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kubectl sluice explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var kf kubeFlags
	kf.add(fs)
	var af adminFlags
	af.add(fs)
	domain := fs.String("domain", "", "the request's `domain` (required)")
	output := fs.String("o", "text", "output: text or json")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: kubectl sluice explain --limiter URL --fleet NS/NAME --domain DOMAIN key=value ...")
		fmt.Fprintln(stderr, "Explains one request without spending anything. Flags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	q, err := explainQuery(*domain, fs.Args())
	if err == nil {
		err = af.check()
	}
	if err == nil && *output != "text" && *output != "json" {
		err = fmt.Errorf("-o %q: want text or json", *output)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kubectl sluice explain: %v\n", err)
		fs.Usage()
		return 2
	}
	rc, _, err := kf.config()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl sluice explain: kubeconfig: %v\n", err)
		return 1
	}
	token, err := af.adminToken(context.Background(), rc)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl sluice explain: %v\n", err)
		return 1
	}
	ex, err := callExplain(token, af.limiter, af.caFile, af.serverName, q)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl sluice explain: %v\n", err)
		return 1
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(ex)
		return 0
	}
	printExplanation(stdout, ex, fs.Args())
	return 0
}

// explainQuery is the query of limiterwire.ExplainPath for domain and the
// key=value arguments.
func explainQuery(domain string, pairs []string) (url.Values, error) {
	if domain == "" {
		return nil, errors.New("--domain is required")
	}
	if len(pairs) == 0 {
		return nil, errors.New("give the request's descriptor entries as key=value arguments")
	}
	q := url.Values{"domain": {domain}}
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("argument %q: want key=value", kv)
		}
		if q.Has(entryPrefix + k) {
			return nil, fmt.Errorf("key %q is given twice: give each key once", k)
		}
		q.Set(entryPrefix+k, v)
	}
	return q, nil
}

// callExplain asks the admin plane at base to explain q, with token
// (callAdmin).
func callExplain(token, base, caFile, serverName string, q url.Values) (*limiterwire.Explanation, error) {
	var ex limiterwire.Explanation
	if err := callAdmin(token, base, caFile, serverName, limiterwire.ExplainPath, q, &ex); err != nil {
		return nil, err
	}
	return &ex, nil
}

// callAdmin GETs path with query q from the admin plane at base, with
// token (adminToken's), into out. The token goes over HTTPS, or plain HTTP
// to a loopback address only (a port-forward).
func callAdmin(token, base, caFile, serverName, path string, q url.Values, out any) error {
	if err := checkLimiterURL(base); err != nil {
		return err
	}
	u, err := url.Parse(base)
	if err != nil {
		return err
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return fmt.Errorf("--limiter-ca: %w", err)
		}
		tlsConf.RootCAs = x509.NewCertPool()
		if !tlsConf.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--limiter-ca %s: no PEM certificate in it", caFile)
		}
	}
	client := &http.Client{Timeout: explainTimeout, Transport: &http.Transport{TLSClientConfig: tlsConf, Proxy: http.ProxyFromEnvironment}}
	u = u.JoinPath(path)
	u.RawQuery = q.Encode()
	req, err := http.NewRequest(http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		return fmt.Errorf("the limiter answered %s: %s\nThe admin plane takes tokens issued for its fleet's audience only: "+
			"check --fleet (or --audience for a limiter started by hand)", resp.Status, strings.TrimSpace(string(body)))
	default:
		return fmt.Errorf("the limiter answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("the limiter's answer: %w", err)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// verdict says whether the request would be allowed now and, if not, by
// which policies and within how long it would pass.
func verdict(ex *limiterwire.Explanation) string {
	if len(ex.Policies) == 0 {
		return "ALLOWED: no policy of domain " + ex.Domain + " matches this request."
	}
	var by []string
	var wait int64
	for _, p := range ex.Policies {
		if !p.WouldDeny || p.Shadow || p.Soft {
			continue
		}
		by = append(by, policyName(p))
		wait = max(wait, p.RetryAfterSeconds)
	}
	if len(by) == 0 {
		return "ALLOWED: every enforcing policy it matches has room."
	}
	return fmt.Sprintf("DENIED by %s: it would pass in %s at most.", strings.Join(by, ", "), time.Duration(wait)*time.Second)
}

func policyName(p limiterwire.ExplainedPolicy) string {
	if p.Redacted {
		return "a policy you may not see"
	}
	return p.Namespace + "/" + p.Name
}

func printExplanation(w io.Writer, ex *limiterwire.Explanation, pairs []string) {
	fmt.Fprintf(w, "Domain %s, request %s (snapshot %s)\n\n", ex.Domain, strings.Join(pairs, " "), ex.SnapshotVersion)
	if len(ex.Policies) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "POLICY\tALGORITHM\tLIMIT\tREMAINING\tRESET\tFAILURE MODE\tNOTES")
		for _, p := range ex.Policies {
			if p.Redacted {
				fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t%s\n", policyName(p), notes(p))
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%d per %s (burst %d)\t%d\t%s\t%s\t%s\n", policyName(p), p.Algorithm, p.Limit,
				time.Duration(p.PeriodSeconds)*time.Second, p.Burst, p.Remaining, time.Duration(p.ResetSeconds)*time.Second, p.FailureMode, notes(p))
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, verdict(ex))
}

// notes are what a row says besides its figures.
func notes(p limiterwire.ExplainedPolicy) string {
	var n []string
	switch {
	case p.Penalized:
		n = append(n, fmt.Sprintf("penalized: denied for %s", time.Duration(p.RetryAfterSeconds)*time.Second))
	case p.WouldDeny && p.Shadow:
		n = append(n, "shadow: would deny, not enforced")
	case p.WouldDeny && p.Soft:
		n = append(n, "soft: over its threshold, the request is marked")
	case p.WouldDeny:
		n = append(n, fmt.Sprintf("would deny, passes in %s", time.Duration(p.RetryAfterSeconds)*time.Second))
	case p.Redacted:
		n = append(n, "has room")
	}
	if p.Shadow && !p.WouldDeny {
		n = append(n, "shadow")
	}
	if p.Hidden {
		n = append(n, "hidden from clients")
	}
	if p.Holds {
		n = append(n, "holds until the request ends")
	}
	if p.Reason != "" {
		n = append(n, p.Reason)
	}
	return strings.Join(n, "; ")
}
