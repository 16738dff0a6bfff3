package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/regions"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// RegionConfig places a limiter in one region of several that share the
// policies of scope Global (limiter/regions): --region, --region-token-file,
// --peer, --peer-token-file, --peer-addr and --partition-share.
type RegionConfig struct {
	// Name is this region's name; empty: no regions, Global policies count
	// in the store as a region alone.
	Name string
	// TokenFile holds the token peers must present on this region's peer
	// endpoint.
	TokenFile string
	// Peers are the other regions.
	Peers []RegionPeer
	// Addr is the peer endpoint's listen address.
	Addr string
	// PartitionSharePercent is the share of a Global limit this region
	// admits per period for a key whose home it can't reach; 0: 100/N.
	PartitionSharePercent int
	// CallTimeout bounds a grant call to a peer; 0: the default.
	CallTimeout time.Duration
}

// RegionPeer is one --peer NAME=URL with its --peer-token-file NAME=FILE.
type RegionPeer struct {
	Name, URL, TokenFile string
}

// DefaultPeerAddr is the peer endpoint's default listen address.
const DefaultPeerAddr = "127.0.0.1:8083"

// openRegions returns the region st serves in, nil without --region.
func openRegions(cfg RegionConfig, st store.Store, log *slog.Logger) (*regions.Regions, error) {
	if cfg.Name == "" {
		if len(cfg.Peers) > 0 || cfg.TokenFile != "" || cfg.PartitionSharePercent != 0 {
			return nil, errors.New("--peer, --region-token-file and --partition-share need --region")
		}
		return nil, nil
	}
	if _, mem := st.(*memory.Store); mem && len(cfg.Peers) > 0 {
		return nil, fmt.Errorf("--region %s with peers needs a Redis --store: a region's store must grant units to the others (each region counts its Global keys in its own Redis)", cfg.Name)
	}
	opts := regions.Options{Region: cfg.Name, PartitionSharePercent: int32(cfg.PartitionSharePercent), CallTimeout: cfg.CallTimeout, Logger: log}
	if cfg.PartitionSharePercent < 0 || cfg.PartitionSharePercent > 100 {
		return nil, fmt.Errorf("--partition-share %d: want 1 to 100, or 0 for an even share", cfg.PartitionSharePercent)
	}
	var err error
	if len(cfg.Peers) > 0 {
		if opts.Token, err = readToken("--region-token-file", cfg.TokenFile); err != nil {
			return nil, err
		}
	}
	for _, p := range cfg.Peers {
		if p.TokenFile == "" {
			return nil, fmt.Errorf("--peer %s: give its token with --peer-token-file %s=FILE", p.Name, p.Name)
		}
		tok, err := readToken("--peer-token-file "+p.Name, p.TokenFile)
		if err != nil {
			return nil, err
		}
		opts.Peers = append(opts.Peers, regions.Peer{Name: p.Name, URL: p.URL, Token: tok})
	}
	return regions.New(st, opts)
}

func readToken(flag, path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%s is required with --peer", flag)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	return strings.TrimSpace(string(data)), nil
}

// ParsePeers parses the --peer NAME=URL and --peer-token-file NAME=FILE
// values into peers.
func ParsePeers(urls, tokenFiles []string) ([]RegionPeer, error) {
	var out []RegionPeer
	idx := map[string]int{}
	for _, v := range urls {
		name, u, ok := strings.Cut(v, "=")
		if !ok || name == "" || u == "" {
			return nil, fmt.Errorf("--peer %q: want NAME=URL", v)
		}
		if _, dup := idx[name]; dup {
			return nil, fmt.Errorf("--peer %s: given twice", name)
		}
		idx[name] = len(out)
		out = append(out, RegionPeer{Name: name, URL: u})
	}
	for _, v := range tokenFiles {
		name, f, ok := strings.Cut(v, "=")
		if !ok || name == "" || f == "" {
			return nil, fmt.Errorf("--peer-token-file %q: want NAME=FILE", v)
		}
		i, known := idx[name]
		if !known {
			return nil, fmt.Errorf("--peer-token-file %s: no --peer %s=URL", name, name)
		}
		out[i].TokenFile = f
	}
	return out, nil
}

// startRegions opens the region cfg names (nil without --region),
// registers its metrics and serves its peer endpoint in wg until ctx ends.
func startRegions(ctx context.Context, cfg RegionConfig, st store.Store, reg prometheus.Registerer, wg *sync.WaitGroup, log *slog.Logger) (*regions.Regions, error) {
	rg, err := openRegions(cfg, st, log)
	if err != nil || rg == nil {
		return nil, err
	}
	reg.MustRegister(rg.Metrics().Collectors()...)
	run, err := servePeers(ctx, rg, cfg.Addr, log)
	if err != nil {
		_ = rg.Close()
		return nil, err
	}
	wg.Go(func() {
		if err := run(); err != nil {
			log.Error("The peer endpoint stopped", "error", err)
		}
	})
	return rg, nil
}

// servePeers serves the peer endpoint on addr until ctx ends.
func servePeers(ctx context.Context, r *regions.Regions, addr string, log *slog.Logger) (func() error, error) {
	if addr == "" {
		addr = DefaultPeerAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--peer-addr: %w", err)
	}
	srv := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, MaxHeaderBytes: 8 << 10}
	log.Info("Serving the peer endpoint", "region", r.Region(), "addr", ln.Addr().String())
	run := func() error {
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
	return run, nil
}
