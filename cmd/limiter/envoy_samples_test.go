package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3" // resolves the router's typed_config
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"
)

const (
	ratelimitFilterName = "envoy.filters.http.ratelimit"
	// limiterService is the gateways fleet's Service in the samples; 8081
	// is the limiter's gRPC port (resources.LimiterGRPCPort).
	limiterService = "gateways-limiter.sluice-system.svc.cluster.local"
	// limiterHeadless is its headless Service (controllers.
	// LimiterHeadlessName), which Envoy clusters resolve to every pod.
	limiterHeadless = "gateways-limiter-headless.sluice-system.svc.cluster.local"
	limiterGRPC     = 8081
)

// envoyRateLimits is what an Envoy-family sample tells Envoy about Sluice:
// the ratelimit filter's config and the route's rate_limits actions.
type envoyRateLimits struct {
	filter  *ratelimitv3.RateLimit
	actions []*routev3.RateLimit
}

// Loaders of the samples. Each parses the Envoy parts into
// go-control-plane's protos, strictly, resolving typed_config, and runs
// ValidateAll on everything, typed_configs included.
var envoySamples = []struct {
	file string
	load func([]byte) (envoyRateLimits, error)
}{
	{"envoy/envoy.yaml", loadEnvoyBootstrap},
	{"istio/envoyfilter.yaml", loadIstioEnvoyFilter},
	{"envoy-gateway/envoypatchpolicy.yaml", loadEnvoyPatchPolicy},
}

// parseEnvoy decodes YAML or JSON into m with protojson (unknown fields and
// unresolvable Any types are errors) and validates it deeply.
func parseEnvoy(data []byte, m proto.Message) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return err
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		return fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return validateDeep(m.ProtoReflect())
}

// validateDeep runs ValidateAll on m and on every message inside it,
// unpacking Any fields (typed_config), which ValidateAll leaves alone.
func validateDeep(m protoreflect.Message) error {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("%s: %w", a.GetTypeUrl(), err)
		}
		return validateDeep(inner.ProtoReflect())
	}
	if v, ok := m.Interface().(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("%s: %w", m.Descriptor().FullName(), err)
		}
	}
	var errs []error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				errs = append(errs, validateDeep(mv.Message()))
				return true
			})
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				errs = append(errs, validateDeep(v.List().Get(i).Message()))
			}
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			errs = append(errs, validateDeep(v.Message()))
		}
		return true
	})
	return errors.Join(errs...)
}

// ratelimitFilter unpacks the ratelimit filter of an HTTP filter list.
func ratelimitFilter(filters []*hcmv3.HttpFilter) (*ratelimitv3.RateLimit, error) {
	for _, f := range filters {
		if f.GetName() == ratelimitFilterName {
			rl := &ratelimitv3.RateLimit{}
			if err := f.GetTypedConfig().UnmarshalTo(rl); err != nil {
				return nil, fmt.Errorf("%s typed_config: %w", ratelimitFilterName, err)
			}
			return rl, nil
		}
	}
	return nil, fmt.Errorf("no %s filter", ratelimitFilterName)
}

func loadEnvoyBootstrap(data []byte) (envoyRateLimits, error) {
	var out envoyRateLimits
	b := &bootstrapv3.Bootstrap{}
	if err := parseEnvoy(data, b); err != nil {
		return out, err
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		return out, err
	}
	var err error
	if out.filter, err = ratelimitFilter(hcm.GetHttpFilters()); err != nil {
		return out, err
	}
	out.actions = hcm.GetRouteConfig().GetVirtualHosts()[0].GetRateLimits()
	cluster := out.filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == cluster {
			return out, checkLimiterCluster(c)
		}
	}
	return out, fmt.Errorf("the ratelimit filter's cluster %q is not defined", cluster)
}

// checkLimiterCluster checks that c reaches the limiter's gRPC port over
// HTTP/2, balancing each call over every ready pod: STRICT_DNS on the
// headless Service, round robin, pods that stop answering skipped by a gRPC
// health check, and keepalives that find dead connections.
func checkLimiterCluster(c *clusterv3.Cluster) error {
	addr := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if addr.GetAddress() != limiterHeadless || addr.GetPortValue() != limiterGRPC {
		return fmt.Errorf("cluster %s points at %s:%d, want the limiter's gRPC port on the headless Service %s:%d (a ClusterIP Service balances connections, not calls)",
			c.GetName(), addr.GetAddress(), addr.GetPortValue(), limiterHeadless, limiterGRPC)
	}
	if c.GetType() != clusterv3.Cluster_STRICT_DNS || c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN || !c.GetRespectDnsTtl() {
		return fmt.Errorf("cluster %s: type %s, lb_policy %s, respect_dns_ttl %t: want STRICT_DNS, ROUND_ROBIN and the DNS TTL respected, so that every pod gets calls",
			c.GetName(), c.GetType(), c.GetLbPolicy(), c.GetRespectDnsTtl())
	}
	if hc := c.GetHealthChecks(); len(hc) == 0 || hc[0].GetGrpcHealthCheck() == nil {
		return fmt.Errorf("cluster %s has no gRPC health check: a limiter that stops answering keeps getting calls until DNS forgets it", c.GetName())
	}
	opts := &httpv3.HttpProtocolOptions{}
	raw, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if !ok || raw.UnmarshalTo(opts) != nil || opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		return fmt.Errorf("cluster %s does not speak HTTP/2, which gRPC needs", c.GetName())
	}
	if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions().GetConnectionKeepalive() == nil {
		return fmt.Errorf("cluster %s: no HTTP/2 connection_keepalive: a connection to a vanished pod lives until the kernel's TCP timeout", c.GetName())
	}
	return nil
}

// istioEnvoyFilter is the part of an Istio EnvoyFilter the sample uses.
type istioEnvoyFilter struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		WorkloadSelector map[string]any `json:"workloadSelector"`
		ConfigPatches    []struct {
			ApplyTo string         `json:"applyTo"`
			Match   map[string]any `json:"match"`
			Patch   struct {
				Operation string          `json:"operation"`
				Value     json.RawMessage `json:"value"`
			} `json:"patch"`
		} `json:"configPatches"`
	} `json:"spec"`
}

func loadIstioEnvoyFilter(data []byte) (envoyRateLimits, error) {
	var out envoyRateLimits
	var ef istioEnvoyFilter
	if err := yaml.UnmarshalStrict(data, &ef); err != nil {
		return out, err
	}
	if ef.APIVersion != "networking.istio.io/v1alpha3" || ef.Kind != "EnvoyFilter" {
		return out, fmt.Errorf("got %s %s, want networking.istio.io/v1alpha3 EnvoyFilter", ef.APIVersion, ef.Kind)
	}
	for i, p := range ef.Spec.ConfigPatches {
		switch p.ApplyTo + " " + p.Patch.Operation {
		case "HTTP_FILTER INSERT_BEFORE":
			f := &hcmv3.HttpFilter{}
			if err := parseEnvoy(p.Patch.Value, f); err != nil {
				return out, fmt.Errorf("configPatches[%d]: %w", i, err)
			}
			rl, err := ratelimitFilter([]*hcmv3.HttpFilter{f})
			if err != nil {
				return out, fmt.Errorf("configPatches[%d]: %w", i, err)
			}
			out.filter = rl
		case "VIRTUAL_HOST MERGE":
			// A partial VirtualHost: validate what it sets.
			vh := &routev3.VirtualHost{}
			if err := protojson.Unmarshal(p.Patch.Value, vh); err != nil {
				return out, fmt.Errorf("configPatches[%d]: %w", i, err)
			}
			for j, rl := range vh.GetRateLimits() {
				if err := validateDeep(rl.ProtoReflect()); err != nil {
					return out, fmt.Errorf("configPatches[%d].rate_limits[%d]: %w", i, j, err)
				}
			}
			out.actions = vh.GetRateLimits()
		default:
			return out, fmt.Errorf("configPatches[%d]: unexpected applyTo %s with operation %s", i, p.ApplyTo, p.Patch.Operation)
		}
	}
	if want := "outbound|8081||" + limiterService; out.filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName() != want {
		return out, fmt.Errorf("the ratelimit filter's cluster is not Istio's cluster of the limiter's gRPC port, %s", want)
	}
	return out, nil
}

// envoyPatchPolicy is the part of an Envoy Gateway EnvoyPatchPolicy the
// sample uses.
type envoyPatchPolicy struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		TargetRef   map[string]string `json:"targetRef"`
		Type        string            `json:"type"`
		JSONPatches []struct {
			Type      string `json:"type"`
			Name      string `json:"name"`
			Operation struct {
				Op    string          `json:"op"`
				Path  string          `json:"path"`
				Value json.RawMessage `json:"value"`
			} `json:"operation"`
		} `json:"jsonPatches"`
	} `json:"spec"`
}

func loadEnvoyPatchPolicy(data []byte) (envoyRateLimits, error) {
	var out envoyRateLimits
	var epp envoyPatchPolicy
	if err := yaml.UnmarshalStrict(data, &epp); err != nil {
		return out, err
	}
	if epp.APIVersion != "gateway.envoyproxy.io/v1alpha1" || epp.Kind != "EnvoyPatchPolicy" || epp.Spec.Type != "JSONPatch" {
		return out, fmt.Errorf("got %s %s of type %s, want a gateway.envoyproxy.io/v1alpha1 EnvoyPatchPolicy of type JSONPatch", epp.APIVersion, epp.Kind, epp.Spec.Type)
	}
	clusters := map[string]*clusterv3.Cluster{}
	for i, p := range epp.Spec.JSONPatches {
		op := p.Operation
		var err error
		switch {
		case p.Type == "type.googleapis.com/envoy.config.cluster.v3.Cluster" && op.Op == "add" && op.Path == "":
			c := &clusterv3.Cluster{}
			if err = parseEnvoy(op.Value, c); err == nil {
				clusters[c.GetName()], err = c, checkLimiterCluster(c)
			}
		case p.Type == "type.googleapis.com/envoy.config.listener.v3.Listener" && op.Op == "add" && strings.HasSuffix(op.Path, "/http_filters/0"):
			f := &hcmv3.HttpFilter{}
			if err = parseEnvoy(op.Value, f); err == nil {
				out.filter, err = ratelimitFilter([]*hcmv3.HttpFilter{f})
			}
		case p.Type == "type.googleapis.com/envoy.config.route.v3.RouteConfiguration" && op.Op == "add" && strings.HasSuffix(op.Path, "/rate_limits"):
			var items []json.RawMessage
			if err = json.Unmarshal(op.Value, &items); err == nil {
				out.actions = make([]*routev3.RateLimit, len(items))
				for j, item := range items {
					out.actions[j] = &routev3.RateLimit{}
					if err = parseEnvoy(item, out.actions[j]); err != nil {
						break
					}
				}
			}
		default:
			err = fmt.Errorf("unexpected %s %s at %q", op.Op, p.Type, op.Path)
		}
		if err != nil {
			return out, fmt.Errorf("jsonPatches[%d]: %w", i, err)
		}
	}
	if name := out.filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(); clusters[name] == nil {
		return out, fmt.Errorf("the ratelimit filter's cluster %q is not added", name)
	}
	return out, nil
}

// envoyRequest is a request as the route actions see it.
type envoyRequest struct {
	headers map[string]string // lower-case names
	remote  string            // the client's address
}

// descriptorsFor builds the descriptors Envoy sends for req: one per
// rate_limits entry whose actions all produce an entry, as Envoy does. It
// knows the actions the samples use and fails on any other, so that a
// sample can't grow an action this test does not model.
func descriptorsFor(t *testing.T, rls []*routev3.RateLimit, req envoyRequest) []*rlv3.RateLimitDescriptor {
	t.Helper()
	var out []*rlv3.RateLimitDescriptor
	for _, rl := range rls {
		d := &rlv3.RateLimitDescriptor{}
		complete := true
		for _, a := range rl.GetActions() {
			switch s := a.GetActionSpecifier().(type) {
			case *routev3.RateLimit_Action_RequestHeaders_:
				v, ok := req.headers[strings.ToLower(s.RequestHeaders.GetHeaderName())]
				switch {
				case ok:
					d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: s.RequestHeaders.GetDescriptorKey(), Value: v})
				case !s.RequestHeaders.GetSkipIfAbsent():
					complete = false // Envoy drops the whole descriptor
				}
			case *routev3.RateLimit_Action_RemoteAddress_:
				d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: "remote_address", Value: req.remote})
			case *routev3.RateLimit_Action_GenericKey_:
				key := s.GenericKey.GetDescriptorKey()
				if key == "" {
					key = "generic_key"
				}
				d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: key, Value: s.GenericKey.GetDescriptorValue()})
			default:
				t.Fatalf("descriptorsFor does not model the action %T: teach it before using it in a sample", s)
			}
		}
		if complete && len(d.Entries) > 0 {
			out = append(out, d)
		}
	}
	return out
}

func entry(k, v string) *rlv3.RateLimitDescriptor_Entry {
	return &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v}
}

func readSample(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(gatewaySamples, name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestEnvoySamples validates the Envoy, Istio and Envoy Gateway samples with
// go-control-plane, and shows that the descriptors their actions build for
// a request are limited by a real limiter running the sample policies, over
// the RLS gRPC API.
func TestEnvoySamples(t *testing.T) {
	lim := startLimiter(t, "--policies", gatewayPolicies)
	conn, err := grpc.NewClient(lim.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rls := rlsv3.NewRateLimitServiceClient(conn)

	withKey := envoyRequest{headers: map[string]string{"x-api-key": "", "user-agent": "curl"}, remote: "198.51.100.7"}
	for i, s := range envoySamples {
		t.Run(s.file, func(t *testing.T) {
			cfg, err := s.load(readSample(t, s.file))
			if err != nil {
				t.Fatalf("%s: %v", s.file, err)
			}
			if cfg.filter.GetDomain() != "gateway" || cfg.filter.GetFailureModeDeny() {
				t.Fatalf("ratelimit filter: domain %q, failure_mode_deny %v; want gateway, fail open", cfg.filter.GetDomain(), cfg.filter.GetFailureModeDeny())
			}

			// Without X-Api-Key, Envoy sends only the address.
			noKey := envoyRequest{headers: map[string]string{}, remote: "198.51.100.7"}
			want := []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{entry("remote_address", "198.51.100.7")}}}
			if diff := cmp.Diff(want, descriptorsFor(t, cfg.actions, noKey), protocmp.Transform()); diff != "" {
				t.Fatalf("descriptors without X-Api-Key (-want +got):\n%s", diff)
			}

			// With one, a descriptor per action list, each limited by its
			// own policy: 5 requests a minute per key.
			withKey.headers["x-api-key"] = fmt.Sprintf("key-%d", i)
			descs := descriptorsFor(t, cfg.actions, withKey)
			want = []*rlv3.RateLimitDescriptor{
				{Entries: []*rlv3.RateLimitDescriptor_Entry{entry("api_key", withKey.headers["x-api-key"])}},
				{Entries: []*rlv3.RateLimitDescriptor_Entry{entry("remote_address", "198.51.100.7")}},
			}
			if diff := cmp.Diff(want, descs, protocmp.Transform()); diff != "" {
				t.Fatalf("descriptors (-want +got):\n%s", diff)
			}
			req := &rlsv3.RateLimitRequest{Domain: cfg.filter.GetDomain(), Descriptors: descs}
			for n := 1; n <= apiKeyLimit+1; n++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := rls.ShouldRateLimit(ctx, req)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				st := resp.GetStatuses()
				if len(st) != 2 || st[0].GetCurrentLimit().GetName() != "default/requests-per-api-key" ||
					st[1].GetCurrentLimit().GetName() != "default/requests-per-client" {
					t.Fatalf("request %d: statuses %v: want the sample policies requests-per-api-key and requests-per-client", n, st)
				}
				wantCode := rlsv3.RateLimitResponse_OK
				if n > apiKeyLimit {
					wantCode = rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if resp.GetOverallCode() != wantCode || st[0].GetCode() != wantCode || st[1].GetCode() != rlsv3.RateLimitResponse_OK {
					t.Fatalf("request %d: %v (api_key %v, remote_address %v), want %v", n, resp.GetOverallCode(), st[0].GetCode(), st[1].GetCode(), wantCode)
				}
			}
		})
	}
}

// TestEnvoySampleTypos shows that a typo in a sample fails the test: a
// misspelt field, an unknown typed_config type, an invalid value.
func TestEnvoySampleTypos(t *testing.T) {
	for _, tc := range []struct {
		file, old, new string
		want           string
	}{
		{"envoy/envoy.yaml", "descriptor_key: api_key", "descriptor_kye: api_key", `unknown field "descriptor_kye"`},
		{"envoy/envoy.yaml", "ratelimit.v3.RateLimit\n", "ratelimit.v3.RateLimits\n", "envoy.extensions.filters.http.ratelimit.v3.RateLimits"},
		{"envoy/envoy.yaml", "domain: gateway", `domain: ""`, "RateLimit.Domain: value length must be at least 1 runes"},
		{"envoy/envoy.yaml", "transport_api_version: V3", "transport_api_version: V4", "V4"},
		{"envoy/envoy.yaml", "port_value: 8081", "port_value: 80810", "PortValue: value must be less than or equal to 65535"},
		{"istio/envoyfilter.yaml", "header_name: x-api-key", "header_nme: x-api-key", `unknown field "header_nme"`},
		{"istio/envoyfilter.yaml", "failure_mode_deny: false", "failure_mode_deny: nope", `invalid value for bool field failureModeDeny: "nope"`},
		{"istio/envoyfilter.yaml", "operation: MERGE", "operation: MERGED", "unexpected applyTo VIRTUAL_HOST with operation MERGED"},
		{"envoy-gateway/envoypatchpolicy.yaml", "timeout: 0.05s", "timeout: 50ms", `invalid google.protobuf.Duration value "50ms"`},
		{"envoy-gateway/envoypatchpolicy.yaml", "remote_address: {}", "remote_adress: {}", `unknown field "remote_adress"`},
		{"envoy-gateway/envoypatchpolicy.yaml", "jsonPatches:", "jsonPatchs:", `unknown field "jsonPatchs"`},
	} {
		t.Run(tc.file+": "+tc.new, func(t *testing.T) {
			data := string(readSample(t, tc.file))
			if !strings.Contains(data, tc.old) {
				t.Fatalf("%s no longer holds %q", tc.file, tc.old)
			}
			broken := strings.Replace(data, tc.old, tc.new, 1)
			for _, s := range envoySamples {
				if s.file != tc.file {
					continue
				}
				_, err := s.load([]byte(broken))
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("with %q: got %v, want an error containing %q", tc.new, err, tc.want)
				}
				t.Logf("%v", err)
			}
		})
	}
}

// TestEnvoyGatewayConfigSample checks that the EnvoyGateway configuration
// sample turns EnvoyPatchPolicy on and leaves Envoy Gateway's own rate-limit
// service off.
func TestEnvoyGatewayConfigSample(t *testing.T) {
	var cm struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   map[string]string `json:"metadata"`
		Data       map[string]string `json:"data"`
	}
	if err := yaml.UnmarshalStrict(readSample(t, "envoy-gateway/envoy-gateway-config.yaml"), &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.Metadata["name"] != "envoy-gateway-config" || cm.Metadata["namespace"] != "envoy-gateway-system" {
		t.Fatalf("got %s %s/%s, want ConfigMap envoy-gateway-system/envoy-gateway-config", cm.Kind, cm.Metadata["namespace"], cm.Metadata["name"])
	}
	var eg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["envoy-gateway.yaml"]), &eg); err != nil {
		t.Fatal(err)
	}
	if eg["kind"] != "EnvoyGateway" || eg["apiVersion"] != "gateway.envoyproxy.io/v1alpha1" {
		t.Fatalf("envoy-gateway.yaml: %v %v", eg["apiVersion"], eg["kind"])
	}
	if ext, _ := eg["extensionApis"].(map[string]any); ext["enableEnvoyPatchPolicy"] != true {
		t.Fatalf("extensionApis.enableEnvoyPatchPolicy is not true: %v", eg["extensionApis"])
	}
	if _, ok := eg["rateLimit"]; ok {
		t.Fatal("rateLimit is set: Envoy Gateway would add its own ratelimit filter next to Sluice's")
	}
}
