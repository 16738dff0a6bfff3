package main

import (
	"errors"
	"flag"
	"strings"

	"github.com/sluice-dev/sluice/controllers"
)

// webhookFlags binds the conversion webhook's flags; the returned function
// gives its options once the flags are parsed (enabled false with
// --webhook-port=0).
func webhookFlags(fs *flag.FlagSet) func(operatorNamespace string) (o controllers.WebhookOptions, enabled bool, err error) {
	var port int
	var host, certDir, secret, service, extra, ns string
	fs.StringVar(&host, "webhook-host", "", "`address` the conversion webhook listens on; empty: every address of the pod")
	fs.IntVar(&port, "webhook-port", 9443, "`port` of the CRDs' conversion webhook (HTTPS, path "+controllers.ConversionWebhookPath+"); 0 disables it: the API server then can't serve v1alpha1 objects, while the operator, which reads v1beta1 only, runs on")
	fs.StringVar(&certDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "`directory` of the webhook's tls.crt and tls.key, reloaded when they change")
	fs.StringVar(&secret, "webhook-cert-secret", "", "`name` of the Secret in --webhook-namespace where the operator issues and rotates the webhook's certificate (mounted at --webhook-cert-dir) and from which it injects the CA into the CRDs' conversion caBundle; empty: the certificate comes from elsewhere (cert-manager)")
	fs.StringVar(&ns, "webhook-namespace", "", "`namespace` of the webhook's Service and certificate Secret (default: --operator-namespace)")
	fs.StringVar(&service, "webhook-service", "", "`name` of the webhook's Service in --webhook-namespace: the certificate is for <name>.<namespace>.svc")
	fs.StringVar(&extra, "webhook-extra-dns-names", "", "comma-separated further DNS `names` of the webhook's certificate")
	return func(operatorNamespace string) (controllers.WebhookOptions, bool, error) {
		if ns == "" {
			ns = operatorNamespace
		}
		o := controllers.WebhookOptions{Host: host, Port: port, CertDir: certDir, SecretName: secret, Namespace: ns, ServiceName: service}
		for _, n := range strings.Split(extra, ",") {
			if n = strings.TrimSpace(n); n != "" {
				o.ExtraDNSNames = append(o.ExtraDNSNames, n)
			}
		}
		if port == 0 {
			return o, false, nil
		}
		if secret != "" && (ns == "" || service == "") {
			return o, false, errors.New("--webhook-cert-secret needs --webhook-namespace (or --operator-namespace) and --webhook-service: the certificate names the Service")
		}
		return o, true, nil
	}
}
