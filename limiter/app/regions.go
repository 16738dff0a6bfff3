package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/adminauth"
	"github.com/sluice-dev/sluice/limiter/regions"
	"github.com/sluice-dev/sluice/limiter/store"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// RegionConfig places a limiter in one region of several that share the
// policies of scope Global (limiter/regions): --region, --peer,
// --peer-cert-file, --peer-key-file, --peer-ca-file, --peer-addr and
// --partition-share, or in the lab --peer-insecure-lab with
// --region-token-file and --peer-token-file.
type RegionConfig struct {
	// Name is this region's name; empty: no regions, Global policies count
	// in the store as a region alone.
	Name string
	// CertFile and KeyFile are this region's certificate (its Common Name
	// the region's name) and key, for the peer endpoint and the grant
	// calls; CAFile the CA every region's certificate chains to.
	CertFile, KeyFile, CAFile string
	// InsecureLab allows http:// peer endpoints and bearer tokens, with
	// which the caller's region is what its call says.
	InsecureLab bool
	// TokenFile holds the token peers must present on this region's peer
	// endpoint in the lab.
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
	opts := regions.Options{Region: cfg.Name, PartitionSharePercent: int32(cfg.PartitionSharePercent), CallTimeout: cfg.CallTimeout,
		Insecure: cfg.InsecureLab, Logger: log}
	if cfg.PartitionSharePercent < 0 || cfg.PartitionSharePercent > 100 {
		return nil, fmt.Errorf("--partition-share %d: want 1 to 100, or 0 for an even share", cfg.PartitionSharePercent)
	}
	for _, p := range cfg.Peers {
		if strings.HasPrefix(p.URL, "http://") && !cfg.InsecureLab {
			return nil, fmt.Errorf("--peer %s=%s: plain HTTP lets anyone on the path act as a region; give an https:// endpoint (mutual TLS), or --peer-insecure-lab in a lab", p.Name, p.URL)
		}
		opts.Peers = append(opts.Peers, regions.Peer{Name: p.Name, URL: p.URL})
	}
	var err error
	if cfg.InsecureLab {
		err = labTokens(cfg, &opts)
	} else if len(cfg.Peers) > 0 {
		err = peerTLS(cfg, &opts, log)
	}
	if err != nil {
		return nil, err
	}
	return regions.New(st, opts)
}

// labTokens reads the lab's bearer tokens into opts.
func labTokens(cfg RegionConfig, opts *regions.Options) error {
	if len(cfg.Peers) == 0 {
		return nil
	}
	var err error
	if opts.Token, err = readToken("--region-token-file", cfg.TokenFile); err != nil {
		return err
	}
	for i, p := range cfg.Peers {
		if p.TokenFile == "" {
			return fmt.Errorf("--peer %s: give its token with --peer-token-file %s=FILE (--peer-insecure-lab)", p.Name, p.Name)
		}
		if opts.Peers[i].Token, err = readToken("--peer-token-file "+p.Name, p.TokenFile); err != nil {
			return err
		}
	}
	return nil
}

// peerTLS loads this region's certificate and the regions' CA into opts
// and cfg's serverTLS.
func peerTLS(cfg RegionConfig, opts *regions.Options, log *slog.Logger) error {
	if cfg.TokenFile != "" || slices.ContainsFunc(cfg.Peers, func(p RegionPeer) bool { return p.TokenFile != "" }) {
		return errors.New("--region-token-file and --peer-token-file are the insecure lab's (--peer-insecure-lab): peers authenticate with --peer-cert-file")
	}
	if cfg.CertFile == "" || cfg.KeyFile == "" || cfg.CAFile == "" {
		return errors.New("--peer needs --peer-cert-file, --peer-key-file and --peer-ca-file (mutual TLS between regions), or --peer-insecure-lab in a lab")
	}
	cert, err := adminauth.CertReloader("--peer-cert-file", cfg.CertFile, cfg.KeyFile, log)
	if err != nil {
		return err
	}
	if err := certNamesRegion(cert(), cfg.Name); err != nil {
		return err
	}
	data, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return fmt.Errorf("--peer-ca-file: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data) {
		return fmt.Errorf("--peer-ca-file %s: no PEM certificate in it", cfg.CAFile)
	}
	opts.ClientTLS = regions.ClientTLS(cert, roots)
	opts.ServerTLS = regions.ServerTLS(cert, roots)
	return nil
}

// certNamesRegion checks that cert's Common Name is region, the name the
// other regions will know this one by.
func certNamesRegion(cert *tls.Certificate, region string) error {
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("--peer-cert-file: %w", err)
	}
	if leaf.Subject.CommonName != region {
		return fmt.Errorf("--peer-cert-file: its Common Name is %q, want this region's name %q (--region): peers know a region by its certificate's name", leaf.Subject.CommonName, region)
	}
	return nil
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
	run, err := servePeers(ctx, rg, cfg.Addr, rg.ServerTLS(), log)
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

// servePeers serves the peer endpoint on addr until ctx ends, with TLS
// unless tlsCfg is nil (the lab).
func servePeers(ctx context.Context, r *regions.Regions, addr string, tlsCfg *tls.Config, log *slog.Logger) (func() error, error) {
	if addr == "" {
		addr = DefaultPeerAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--peer-addr: %w", err)
	}
	srv := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, MaxHeaderBytes: 8 << 10,
		// A refused handshake is any scanner's to cause: logged at debug.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	log.Info("Serving the peer endpoint", "region", r.Region(), "addr", ln.Addr().String(), "tls", tlsCfg != nil)
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
