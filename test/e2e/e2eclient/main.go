// Command e2eclient runs inside the pods of the end-to-end journey
// (test/e2e), where the tests reach it with kubectl exec. It is the
// client a user or a gateway would be: it sends the README's requests to a
// limiter's Service, Envoy RLS calls, and steady load during faults; and it
// is the app behind nginx.
//
//	e2eclient wait                                  # the client pod's process: waits for SIGTERM
//	e2eclient app -addr :8000                       # an app: 200 and the request's headers as JSON
//	e2eclient http -url URL [-method POST] [-data JSON] [-header 'K: V'] [-n 6] [-new-conn]
//	e2eclient rls -addr HOST:8081 -domain D -descriptor 'k=v,k=v' [-n 6] [-new-conn] [-keys K]
//	e2eclient resolve NAME...                       # the addresses each name resolves to, as JSON
//	e2eclient dial [-timeout 1m] HOST:PORT          # waits until a TCP connection opens; prints how long, as JSON
//	e2eclient load -addr HOST:8081|dns:///NAME:8081 -domain D -descriptor 'key=%d' [-keys 1000] [-rate 200] [-conns 4] [-interval 250ms]
//
// http and rls print one JSON array of the answers. load sends -rate calls
// a second until its stdin closes (or -duration passes) and prints a JSON
// line per -interval: calls answered OK, OVER_LIMIT, and failed (an RPC
// error, or OVER_LIMIT with a reason in the dynamic metadata, which is a
// decision a policy's failureMode made because Redis could not); then a
// line with the totals.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/health" // client-side health checks of balancedConfig
	"google.golang.org/grpc/status"
)

func main() {
	// A lookup one of whose queries times out fails rather than say "no
	// such host", which gRPC's dns:/// resolver would read as no pod at
	// all (loadgen's strictLookups says why).
	net.DefaultResolver.StrictErrors = true
	if len(os.Args) < 2 {
		usage()
	}
	args := os.Args[2:]
	var err error
	switch os.Args[1] {
	case "wait":
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		<-sigs
	case "app":
		err = runApp(args)
	case "http":
		err = runHTTP(args)
	case "rls":
		err = runRLS(args)
	case "load":
		err = runLoad(args)
	case "resolve":
		err = runResolve(args)
	case "dial":
		err = runDial(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2eclient:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: e2eclient wait|app|http|rls|load|resolve|dial [flags]")
	os.Exit(2)
}

// runResolve prints the addresses each name resolves to, or its error.
func runResolve(names []string) error {
	out := map[string]any{}
	for _, n := range names {
		addrs, err := net.LookupHost(n)
		if err != nil {
			out[n] = err.Error()
			continue
		}
		out[n] = addrs
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// runDial opens TCP connections to an address until one opens (a new
// Service answers once kube-proxy has its endpoints), and prints how long
// that took. It sends nothing: no request is counted.
func runDial(args []string) error {
	fs := flag.NewFlagSet("dial", flag.ExitOnError)
	timeout := fs.Duration("timeout", time.Minute, "give up after `d`")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("dial takes one HOST:PORT, got %q", fs.Args())
	}
	start := time.Now()
	for {
		conn, err := net.DialTimeout("tcp", fs.Arg(0), time.Second)
		if err == nil {
			conn.Close()
			return json.NewEncoder(os.Stdout).Encode(map[string]string{"after": time.Since(start).Round(time.Millisecond).String()})
		}
		if time.Since(start) > *timeout {
			return fmt.Errorf("%s: no connection after %v: %w", fs.Arg(0), *timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runApp answers every request with 200 and the request as JSON.
func runApp(args []string) error {
	fs := flag.NewFlagSet("app", flag.ExitOnError)
	addr := fs.String("addr", ":8000", "listen `address`")
	_ = fs.Parse(args)
	return http.ListenAndServe(*addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-App", "e2e")
		_ = json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "path": r.URL.Path, "headers": r.Header})
	}))
}

// HTTPAnswer is one answer of the http command.
type HTTPAnswer struct {
	Status  int         `json:"status,omitempty"`
	Headers http.Header `json:"headers,omitempty"`
	Body    string      `json:"body,omitempty"`
	Error   string      `json:"error,omitempty"`
}

type headerFlag []string

func (h *headerFlag) String() string     { return strings.Join(*h, ", ") }
func (h *headerFlag) Set(v string) error { *h = append(*h, v); return nil }

func runHTTP(args []string) error {
	fs := flag.NewFlagSet("http", flag.ExitOnError)
	var headers headerFlag
	url := fs.String("url", "", "`URL` to send to")
	method := fs.String("method", "GET", "HTTP `method`")
	data := fs.String("data", "", "request `body`")
	n := fs.Int("n", 1, "requests, one after the other")
	newConn := fs.Bool("new-conn", false, "a new connection for each request (a Service then spreads them over its pods)")
	fs.Var(&headers, "header", "request header `K: V`; repeatable")
	bearerFile := fs.String("bearer-file", "", "`file` whose content is sent as Authorization: Bearer")
	caPEM := fs.String("ca-pem", "", "PEM `certificates` that verify an https:// URL's server (default: the system's)")
	serverName := fs.String("server-name", "", "the `name` an https:// URL's server certificate must carry, instead of the URL's host")
	_ = fs.Parse(args)
	tlsConfig := &tls.Config{ServerName: *serverName, MinVersion: tls.VersionTLS12}
	if *caPEM != "" {
		tlsConfig.RootCAs = x509.NewCertPool()
		if !tlsConfig.RootCAs.AppendCertsFromPEM([]byte(*caPEM)) {
			return fmt.Errorf("-ca-pem: no PEM certificate")
		}
	}
	if *bearerFile != "" {
		token, err := os.ReadFile(*bearerFile)
		if err != nil {
			return err
		}
		headers = append(headers, "Authorization: Bearer "+strings.TrimSpace(string(token)))
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: *newConn, TLSClientConfig: tlsConfig}}
	answers := make([]HTTPAnswer, 0, *n)
	for range *n {
		var body io.Reader
		if *data != "" {
			body = strings.NewReader(*data)
		}
		req, err := http.NewRequest(*method, *url, body)
		if err != nil {
			return err
		}
		for _, h := range headers {
			k, v, _ := strings.Cut(h, ":")
			req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
		resp, err := client.Do(req)
		if err != nil {
			answers = append(answers, HTTPAnswer{Error: err.Error()})
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers = append(answers, HTTPAnswer{Status: resp.StatusCode, Headers: resp.Header, Body: string(b)})
	}
	return json.NewEncoder(os.Stdout).Encode(answers)
}

// RLSAnswer is one answer of the rls command.
type RLSAnswer struct {
	Code     string            `json:"code,omitempty"`
	Statuses []string          `json:"statuses,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	Error    string            `json:"error,omitempty"`
}

func runRLS(args []string) error {
	fs := flag.NewFlagSet("rls", flag.ExitOnError)
	addr := fs.String("addr", "", "RLS gRPC `host:port`")
	domain := fs.String("domain", "", "rate limit `domain`")
	desc := fs.String("descriptor", "", "`entries` k=v separated by ',', descriptors by ';'")
	n := fs.Int("n", 1, "calls, one after the other (for each key with -keys)")
	newConn := fs.Bool("new-conn", false, "a new connection for each call")
	keys := fs.Int("keys", 0, "send the calls for each key index 0..keys-1 in turn, substituted for %d in -descriptor")
	_ = fs.Parse(args)
	if _, err := request(*domain, *desc, -1); err != nil {
		return err
	}
	var reqs []*rlsv3.RateLimitRequest
	for k := range max(1, *keys) {
		idx := -1
		if *keys > 0 {
			idx = k
		}
		req, _ := request(*domain, *desc, idx)
		for range *n {
			reqs = append(reqs, req)
		}
	}
	var (
		cc  *grpc.ClientConn
		err error
	)
	answers := make([]RLSAnswer, 0, len(reqs))
	for _, req := range reqs {
		if cc == nil {
			if cc, err = dial(*addr); err != nil {
				return err
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, req, grpc.WaitForReady(true))
		cancel()
		answers = append(answers, rlsAnswer(resp, err))
		if *newConn {
			cc.Close()
			cc = nil
		}
	}
	if cc != nil {
		cc.Close()
	}
	return json.NewEncoder(os.Stdout).Encode(answers)
}

func rlsAnswer(resp *rlsv3.RateLimitResponse, err error) RLSAnswer {
	if err != nil {
		return RLSAnswer{Error: status.Convert(err).String()}
	}
	a := RLSAnswer{Code: resp.GetOverallCode().String(), Headers: map[string]string{}}
	for _, s := range resp.GetStatuses() {
		a.Statuses = append(a.Statuses, s.GetCode().String())
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		a.Headers[h.GetKey()] = h.GetValue()
	}
	if md := resp.GetDynamicMetadata(); md != nil {
		a.Reason = md.GetFields()["reason"].GetStringValue()
	}
	return a
}

// balancedConfig is the service config of a dns:/// target, as the docs
// tell gateways to reach the headless Service: calls go round robin over
// every ready pod the name answers, and a pod whose connection fails, or
// whose gRPC health says NOT_SERVING (its store warming up, or draining),
// gets none until it serves.
const balancedConfig = `{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":"envoy.service.ratelimit.v3.RateLimitService"}}`

// dial connects to addr: host:port as it is (through a Service's cluster
// IP, kube-proxy picks one pod per connection), or dns:///name:port
// balanced per call (balancedConfig).
func dial(addr string) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUserAgent("sluice-e2eclient")}
	if strings.HasPrefix(addr, "dns:///") {
		return grpc.NewClient(addr, append(opts, grpc.WithDefaultServiceConfig(balancedConfig))...)
	}
	return grpc.NewClient("passthrough:///"+addr, opts...)
}

// request builds a RateLimitRequest from "k=v,k=v;k=v", with %d in values
// replaced by key when key >= 0.
func request(domain, desc string, key int) (*rlsv3.RateLimitRequest, error) {
	if domain == "" || desc == "" {
		return nil, fmt.Errorf("-domain and -descriptor are required")
	}
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: 1}
	for _, d := range strings.Split(desc, ";") {
		rd := &rlv3.RateLimitDescriptor{}
		for _, e := range strings.Split(d, ",") {
			k, v, ok := strings.Cut(e, "=")
			if !ok {
				return nil, fmt.Errorf("descriptor entry %q is not k=v", e)
			}
			if key >= 0 {
				v = strings.ReplaceAll(v, "%d", strconv.Itoa(key))
			}
			rd.Entries = append(rd.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	return req, nil
}

// Interval is one line of the load command's output. T is the end of the
// interval, in Unix milliseconds.
type Interval struct {
	T         int64            `json:"t"`
	OK        int64            `json:"ok"`
	OverLimit int64            `json:"overLimit"`
	Failed    int64            `json:"failed"`
	Skipped   int64            `json:"skipped,omitempty"`
	Errors    map[string]int64 `json:"errors,omitempty"`
	Done      bool             `json:"done,omitempty"`
}

func (iv *Interval) add(o *Interval) {
	iv.OK += o.OK
	iv.OverLimit += o.OverLimit
	iv.Failed += o.Failed
	iv.Skipped += o.Skipped
	for k, v := range o.Errors {
		if iv.Errors == nil {
			iv.Errors = map[string]int64{}
		}
		iv.Errors[k] += v
	}
}

func runLoad(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	addr := fs.String("addr", "", "RLS gRPC `host:port`")
	domain := fs.String("domain", "", "rate limit `domain`")
	desc := fs.String("descriptor", "", "`entries` k=v separated by ','; %d is the key index")
	keys := fs.Int("keys", 1000, "distinct key indexes, cycled through")
	rate := fs.Int("rate", 200, "calls a second")
	conns := fs.Int("conns", 4, "gRPC connections, the calls spread over them")
	workers := fs.Int("workers", 32, "calls in flight at most; a call that finds them all busy is skipped")
	timeout := fs.Duration("timeout", time.Second, "deadline of each call")
	interval := fs.Duration("interval", 250*time.Millisecond, "report every")
	duration := fs.Duration("duration", 10*time.Minute, "stop after, if stdin is still open")
	_ = fs.Parse(args)
	if _, err := request(*domain, *desc, 0); err != nil {
		return err
	}
	var ccs []rlsv3.RateLimitServiceClient
	for range *conns {
		cc, err := dial(*addr)
		if err != nil {
			return err
		}
		defer cc.Close()
		cc.Connect()
		ccs = append(ccs, rlsv3.NewRateLimitServiceClient(cc))
	}

	ctx, stop := context.WithTimeout(context.Background(), *duration)
	defer stop()
	go func() { // stdin closed: the test is done with us
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	var (
		mu    sync.Mutex
		cur   = &Interval{}
		total = &Interval{}
	)
	record := func(f func(iv *Interval)) {
		mu.Lock()
		f(cur)
		mu.Unlock()
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range jobs {
				req, _ := request(*domain, *desc, k)
				cctx, cancel := context.WithTimeout(context.Background(), *timeout)
				resp, err := ccs[(k+w)%len(ccs)].ShouldRateLimit(cctx, req)
				cancel()
				a := rlsAnswer(resp, err)
				record(func(iv *Interval) {
					switch {
					case a.Error != "":
						iv.Failed++
						iv.countError(a.Error)
					case a.Reason != "":
						iv.Failed++
						iv.countError(a.Reason)
					case a.Code == rlsv3.RateLimitResponse_OVER_LIMIT.String():
						iv.OverLimit++
					default:
						iv.OK++
					}
				})
			}
		}()
	}

	out := bufio.NewWriter(os.Stdout)
	report := func(done bool) {
		mu.Lock()
		iv := cur
		cur = &Interval{}
		mu.Unlock()
		iv.T = time.Now().UnixMilli()
		total.add(iv)
		b, _ := json.Marshal(iv)
		out.Write(append(b, '\n'))
		out.Flush()
		if done {
			total.T, total.Done = iv.T, true
			b, _ := json.Marshal(total)
			out.Write(append(b, '\n'))
			out.Flush()
		}
	}
	send := time.NewTicker(time.Second / time.Duration(max(1, *rate)))
	defer send.Stop()
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for k := 0; ; {
		select {
		case <-ctx.Done():
			close(jobs)
			wg.Wait()
			report(true)
			return nil
		case <-tick.C:
			report(false)
		case <-send.C:
			select {
			case jobs <- k % *keys:
				k++
			default:
				record(func(iv *Interval) { iv.Skipped++ })
			}
		}
	}
}

// countError counts msg among the interval's errors, its first 200
// characters.
func (iv *Interval) countError(msg string) {
	if len(msg) > 200 {
		msg = msg[:200]
	}
	if iv.Errors == nil {
		iv.Errors = map[string]int64{}
	}
	iv.Errors[msg]++
}
