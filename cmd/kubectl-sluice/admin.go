package main

import (
	"errors"
	"flag"

	"k8s.io/client-go/rest"
)

// adminFlags say which limiter's admin plane to call and how: explain's
// and top's.
type adminFlags struct {
	limiter, caFile, serverName, tokenFile string
}

func (a *adminFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&a.limiter, "limiter", "", "`URL` of a limiter's admin plane, such as https://127.0.0.1:8082 after kubectl port-forward to the fleet's limiter Service's admin port (required)")
	fs.StringVar(&a.caFile, "limiter-ca", "", "PEM `file` of the CA that issued the admin plane's certificate (ca.crt of the fleet's <fleet>-limiter-admin-tls Secret); default: the system's")
	fs.StringVar(&a.serverName, "tls-server-name", "", "the `name` the admin plane's certificate must carry, such as <fleet>-limiter.<namespace>.svc (default: the URL's host)")
	fs.StringVar(&a.tokenFile, "token-file", "", "`file` of the bearer token to call the admin plane with, issued for its audience sluice-limiter-admin (kubectl create token SA --audience sluice-limiter-admin); default: the kubeconfig's token")
}

// check says what is missing.
func (a *adminFlags) check() error {
	if a.limiter == "" {
		return errors.New("--limiter is required: the URL of a limiter's admin plane")
	}
	return nil
}

// useToken makes rc call with --token-file, when given.
func (a *adminFlags) useToken(rc *rest.Config) {
	if a.tokenFile != "" {
		rc.BearerToken, rc.BearerTokenFile = "", a.tokenFile
	}
}
