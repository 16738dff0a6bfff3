package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/conversion"
)

// The operator serves the CRDs' conversion webhook: RateLimitPolicy and
// LimiterFleet are stored as v1beta1, and the API server converts every
// v1alpha1 read and write through it (the conversion functions are in
// api/v1alpha1, registered in the scheme cmd/operator hands the manager).
// The operator itself reads and writes v1beta1 only, so it needs the
// webhook for nothing of its own: only v1alpha1 clients do.

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=update;patch,resourceNames=ratelimitpolicies.ratelimit.sluice.dev;limiterfleets.ratelimit.sluice.dev

// ConvertedCRDs are the CRDs whose conversion the operator serves, and
// whose caBundle it injects when it rotates its own certificate.
var ConvertedCRDs = []string{"ratelimitpolicies.ratelimit.sluice.dev", "limiterfleets.ratelimit.sluice.dev"}

// ConversionWebhookPath is the path of the conversion webhook.
const ConversionWebhookPath = "/convert"

// WebhookOptions configure the conversion webhook's server and certificate.
type WebhookOptions struct {
	// Host and Port are where the webhook listens (Host "" is every address).
	Host string
	Port int
	// CertDir holds tls.crt and tls.key, reloaded when they change.
	CertDir string
	// SecretName, when set, makes the operator issue, rotate and inject
	// its own serving certificate (open-policy-agent/cert-controller): a
	// CA and a certificate for ServiceName.Namespace.svc kept in this
	// Secret of Namespace, which the pod mounts at CertDir, and the CA
	// injected into each of ConvertedCRDs' conversion caBundle. Empty: the
	// certificate in CertDir comes from elsewhere (cert-manager).
	SecretName  string
	Namespace   string
	ServiceName string
	// ExtraDNSNames are further names of the serving certificate.
	ExtraDNSNames []string
}

// SetupConversionWebhook adds the conversion webhook's server to mgr. With
// SecretName it first adds the certificate rotator, and starts the server
// once the certificate is in CertDir and the CA injected. The returned
// check reports ready once the server answers.
func SetupConversionWebhook(ctx context.Context, mgr manager.Manager, o WebhookOptions) (healthz.Checker, error) {
	srv := webhook.NewServer(webhook.Options{Host: o.Host, Port: o.Port, CertDir: o.CertDir})
	srv.Register(ConversionWebhookPath, conversion.NewWebhookHandler(mgr.GetScheme()))
	if o.SecretName == "" {
		if err := mgr.Add(srv); err != nil {
			return nil, err
		}
		return srv.StartedChecker(), nil
	}
	if o.Namespace == "" || o.ServiceName == "" {
		return nil, errors.New("the conversion webhook's certificate rotation needs the operator's namespace and the webhook Service's name")
	}
	ready := make(chan struct{})
	var webhooks []rotator.WebhookInfo
	for _, name := range ConvertedCRDs {
		webhooks = append(webhooks, rotator.WebhookInfo{Name: name, Type: rotator.CRDConversion})
	}
	err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName},
		CertDir:        o.CertDir,
		CAName:         "sluice-webhook-ca",
		CAOrganization: "sluice",
		DNSName:        fmt.Sprintf("%s.%s.svc", o.ServiceName, o.Namespace),
		ExtraDNSNames:  o.ExtraDNSNames,
		IsReady:        ready,
		Webhooks:       webhooks,
		// Every replica serves conversions, so every one keeps the
		// certificate it mounts current.
		RequireLeaderElection: false,
	})
	if err != nil {
		return nil, fmt.Errorf("adding the webhook certificate rotator: %w", err)
	}
	log := ctrl.Log.WithName("conversion-webhook")
	if mountedCertValid(o.CertDir, time.Now()) {
		// A restart: the Secret's certificate is mounted already, and its
		// CA injected. Serve it at once, before the manager's caches sync
		// (the rotator starts only after they have): v1alpha1 clients need
		// it meanwhile. The operator's own caches read v1beta1, the
		// storage version, and never wait on it (an earlier release's
		// listed v1alpha1 through this very webhook, and a lone operator
		// restarted in place waited for ever).
		log.Info("Serving the mounted certificate; starting the conversion webhook", "address", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
		if err := mgr.Add(srv); err != nil {
			return nil, err
		}
		return srv.StartedChecker(), nil
	}
	go func() {
		select {
		case <-ready:
		case <-ctx.Done():
			return
		}
		log.Info("Serving certificate ready; starting the conversion webhook", "address", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
		if err := mgr.Add(srv); err != nil {
			log.Error(err, "Unable to start the conversion webhook")
		}
	}()
	return func(req *http.Request) error {
		select {
		case <-ready:
			return srv.StartedChecker()(req)
		default:
			return errors.New("waiting for the webhook's serving certificate")
		}
	}, nil
}

// mountedCertValid reports that dir holds a serving key pair
// (tls.crt, tls.key) whose certificate is valid for at least another
// minute at now.
func mountedCertValid(dir string, now time.Time) bool {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil || len(pair.Certificate) == 0 {
		return false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	return err == nil && now.After(leaf.NotBefore) && now.Add(time.Minute).Before(leaf.NotAfter)
}
