package regions

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

const (
	// GrantDivisor sizes a grant: limit / (GrantDivisor · regions).
	GrantDivisor = 20
	// DefaultGrantTTL is the longest a grant may be spent.
	DefaultGrantTTL = 5 * time.Second
	// DefaultMaxKeys bounds the Global keys a region tracks; past it, new
	// keys are decided from the partition share.
	DefaultMaxKeys = 100_000
	// MaxLedger bounds the grants a home remembers for credits.
	MaxLedger = 100_000
	// ProbeInterval is how often a key whose home is down may try a grant
	// call again.
	ProbeInterval = 500 * time.Millisecond
	// grantHorizon is the traffic a grant is for: near a window's end a
	// window algorithm's grant shrinks in proportion to the time left.
	grantHorizon = time.Second
	// DefaultCallTimeout bounds one grant call unless Options say.
	DefaultCallTimeout = 2 * time.Second
	// maxInFlight bounds the grant calls in flight to one peer, and
	// maxSpendInFlight the calls of requests that cost more than a grant.
	maxInFlight      = 64
	maxSpendInFlight = 16
)

// Peer is another region.
type Peer struct {
	Name string
	// URL is the base URL of its peer endpoint: https, or http in the lab
	// (Options.Insecure).
	URL string
	// Token is what this region presents there in the lab (the peer's own
	// token); unused with TLS.
	Token string
}

// Options configure a region.
type Options struct {
	// Region is this region's name.
	Region string
	// ClientTLS is the TLS of this region's grant calls (ClientTLS): its
	// certificate, whose Common Name is Region, and the CA of the peers'.
	// Required with peers unless Insecure. The peer endpoint's listener
	// serves ServerTLS; the handler takes a caller's region from its
	// verified certificate.
	ClientTLS *tls.Config
	// ServerTLS is what the peer endpoint's listener serves (ServerTLS),
	// nil in the lab; the region only hands it on (Regions.ServerTLS).
	ServerTLS *tls.Config
	// Insecure is the lab: plain http:// peer endpoints and one bearer
	// token per region (Token), the caller's region taken from the call's
	// body, so that any holder of the token can act as any region. Never
	// in production.
	Insecure bool
	// Token is what peers must present on this region's endpoint in the
	// lab (Insecure).
	Token string
	Peers []Peer
	// PartitionSharePercent is the share of a limit this region admits per
	// period for a key whose home it can't reach; 0 means 100/N.
	PartitionSharePercent int32
	// GrantTTL is the longest a grant lives; 0 means DefaultGrantTTL.
	GrantTTL time.Duration
	// MaxKeys bounds the keys tracked; 0 means DefaultMaxKeys.
	MaxKeys int
	// CallTimeout bounds one grant call; 0 means DefaultCallTimeout. A call
	// that takes longer counts as the home unreachable.
	CallTimeout time.Duration
	// Client makes the grant calls; nil means a client with CallTimeout
	// and, unless Insecure, ClientTLS, one per peer.
	Client *http.Client
	Logger *slog.Logger
}

// Policy is a Global policy as the regions see it.
type Policy struct {
	ID    string
	Limit algo.Limit
}

// Regions is one region's side of the Global limits: the home of some
// counters (answering peers from its store) and a grant holder for the
// others. It is safe for concurrent use.
type Regions struct {
	opts    Options
	local   store.Store
	granter store.Granter // nil: the local store grants nothing
	names   []string      // every region, sorted
	peers   map[string]*peer
	// self is this region as the home of its own keys: its grant calls go
	// to its own store (callSelf); it is not one of the peers.
	self     *peer
	share    *memory.Store // partition shares and cold advances, per key
	start    time.Time
	policies atomic.Pointer[map[string]*Policy]
	log      *slog.Logger
	metrics  *Metrics

	mu   sync.Mutex
	keys map[store.Key]*entry

	ledger ledger
	// callsSent counts grant calls sent to peers.
	callsSent atomic.Int64
	stop      chan struct{}
	wg        sync.WaitGroup
}

// New validates opts and returns a region deciding Global limits over
// local, its own store. Close it to stop its calls.
func New(local store.Store, opts Options) (*Regions, error) {
	if err := validate(&opts); err != nil {
		return nil, err
	}
	if opts.GrantTTL <= 0 {
		opts.GrantTTL = DefaultGrantTTL
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Regions{opts: opts, local: local, names: []string{opts.Region}, peers: map[string]*peer{},
		share: memory.New(memory.Options{MaxKeys: opts.MaxKeys}), start: time.Now(), log: opts.Logger,
		metrics: newMetrics(), keys: map[store.Key]*entry{}, stop: make(chan struct{})}
	r.granter, _ = local.(store.Granter)
	r.self = newPeer(Peer{Name: opts.Region})
	r.ledger.m = map[ledgerKey]ledgerEntry{}
	for _, p := range opts.Peers {
		r.names = append(r.names, p.Name)
		r.peers[p.Name] = newPeer(p)
		r.peers[p.Name].client = r.clientOf(p.Name)
	}
	slices.Sort(r.names)
	r.policies.Store(&map[string]*Policy{})
	for _, p := range r.peers {
		r.metrics.reachable.WithLabelValues(p.Name).Set(0)
	}
	return r, nil
}

// clientOf is the client of grant calls to region name.
func (r *Regions) clientOf(name string) *http.Client {
	switch {
	case r.opts.Client != nil:
		return r.opts.Client
	case r.opts.Insecure:
		return &http.Client{Timeout: r.opts.CallTimeout}
	}
	return peerClient(r.opts.ClientTLS, name, r.opts.CallTimeout)
}

func validate(o *Options) error {
	if !isLabel(o.Region) {
		return fmt.Errorf("region %q: must be a DNS label (lower-case letters, digits and '-', at most 63)", o.Region)
	}
	if len(o.Peers) > 0 && o.Insecure && len(o.Token) < MinTokenBytes {
		return fmt.Errorf("region %s: the peer token peers must present here is %d bytes, want at least %d", o.Region, len(o.Token), MinTokenBytes)
	}
	if len(o.Peers) > 0 && !o.Insecure && (o.ClientTLS == nil || o.ServerTLS == nil) {
		return fmt.Errorf("region %s: peers need mutual TLS (a certificate of this region and the regions' CA), or the insecure lab mode", o.Region)
	}
	if o.PartitionSharePercent < 0 || o.PartitionSharePercent > 100 {
		return fmt.Errorf("partition share %d%%: must be from 1 to 100", o.PartitionSharePercent)
	}
	seen := map[string]bool{o.Region: true}
	for _, p := range o.Peers {
		if !isLabel(p.Name) {
			return fmt.Errorf("peer %q: its name must be a DNS label", p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("peer %s: named twice, or this region's own name", p.Name)
		}
		seen[p.Name] = true
		if err := validateURL(p, o.Insecure); err != nil {
			return err
		}
		if o.Insecure && len(p.Token) < MinTokenBytes {
			return fmt.Errorf("peer %s: its token is %d bytes, want at least %d", p.Name, len(p.Token), MinTokenBytes)
		}
	}
	return nil
}

// validateURL checks p's endpoint: an https URL of a host and an optional
// port, or http in the lab.
func validateURL(p Peer, insecure bool) error {
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("peer %s: endpoint %q must be an https URL of a host and an optional port", p.Name, p.URL)
	}
	if u.Scheme == "http" && !insecure {
		return fmt.Errorf("peer %s: endpoint %q is plain HTTP: peers need https (mutual TLS), http only in the insecure lab mode", p.Name, p.URL)
	}
	return nil
}

func isLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ServerTLS is the peer endpoint's TLS, nil in the lab (Insecure).
func (r *Regions) ServerTLS() *tls.Config { return r.opts.ServerTLS }

// Region is this region's name.
func (r *Regions) Region() string { return r.opts.Region }

// Metrics are the region's Prometheus collectors, to register.
func (r *Regions) Metrics() *Metrics { return r.metrics }

// Swap installs the Global policies of a new snapshot.
func (r *Regions) Swap(ps []Policy) {
	m := make(map[string]*Policy, len(ps))
	for i := range ps {
		p := ps[i]
		m[p.ID] = &p
	}
	r.policies.Store(&m)
}

// GrantSize is g, the most units a region holds on one key of l.
func (r *Regions) GrantSize(l algo.Limit) int64 {
	return max(1, l.Limit/int64(GrantDivisor*len(r.names)))
}

// ReachBound is B, the most units the regions admit above l per period
// while every region reaches every home: 2·N·g.
func (r *Regions) ReachBound(l algo.Limit) int64 {
	return 2 * int64(len(r.names)) * r.GrantSize(l)
}

// Bound is what the regions admit above l per period at most, partitions
// included: B, plus every region's partition share (a region cut off from
// a key's home, or a home cut off from all, or one whose store is down,
// admits its share on top of the counter). A peer's share is the percent
// it last sent in a grant call or answer; one not heard from yet counts
// as 100%.
func (r *Regions) Bound(l algo.Limit) int64 {
	b := r.ReachBound(l) + shareUnits(l, r.sharePercent())
	for _, pe := range r.peers {
		pct := pe.share.Load()
		if pct == 0 {
			pct = 100
		}
		b += shareUnits(l, pct)
	}
	return b
}

// shareUnits is the most a partition share of pct percent of l admits per
// period: its limit, and its burst too for TokenBucket and GCRA.
func shareUnits(l algo.Limit, pct int32) int64 {
	s := shareOf(l, pct)
	if s.Algorithm.UsesBurst() {
		return s.Limit + s.Burst
	}
	return s.Limit
}

// Regions is how many regions share the Global limits, this one
// included.
func (r *Regions) Regions() int { return len(r.names) }

// sharePercent is this region's partition share in percent.
func (r *Regions) sharePercent() int32 {
	if r.opts.PartitionSharePercent > 0 {
		return r.opts.PartitionSharePercent
	}
	return int32(100 / len(r.names))
}

// shareLimit is this region's partition share of l.
func (r *Regions) shareLimit(l algo.Limit) algo.Limit { return shareOf(l, r.sharePercent()) }

func shareOf(l algo.Limit, pct int32) algo.Limit {
	s := l
	s.Limit = max(1, l.Limit*int64(pct)/100)
	if s.Burst > 0 {
		s.Burst = max(1, l.Burst*int64(pct)/100)
	}
	return s
}

// Close stops the grant calls in flight from being started again and
// waits for them.
func (r *Regions) Close() error {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.wg.Wait()
	return r.share.Close()
}

// now is monotonic nanoseconds since the region started.
func (r *Regions) now() int64 { return int64(time.Since(r.start)) }

// Store is p's way to its counters, as a store.Store.
func (r *Regions) Store(p Policy) store.Store { return policyStore{r: r, p: p} }

type policyStore struct {
	r *Regions
	p Policy
}

func (s policyStore) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	return s.r.Take(ctx, s.p, req)
}

// Close does nothing: the regions are the caller's.
func (s policyStore) Close() error { return nil }
