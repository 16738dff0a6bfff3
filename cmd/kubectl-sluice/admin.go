package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"

	"github.com/sluice-dev/sluice/api/limiterwire"
)

// adminFlags say which limiter's admin plane to call and how: explain's
// and top's.
type adminFlags struct {
	limiter, caFile, serverName, tokenFile string
	fleet, audience, serviceAccount        string
}

func (a *adminFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&a.limiter, "limiter", "", "`URL` of a limiter's admin plane, such as https://127.0.0.1:8082 after kubectl port-forward to the fleet's limiter Service's admin port (required)")
	fs.StringVar(&a.fleet, "fleet", "", "the limiter's LimiterFleet, `namespace/name`: the token is minted for its audience, "+limiterwire.FleetAdminAudience("NAMESPACE", "NAME")+", and for nothing else (required, or --audience)")
	fs.StringVar(&a.audience, "audience", "", "the admin plane's `audience`, for a limiter started by hand (--admin-token-audience; default "+limiterwire.AdminAudience+"); instead of --fleet")
	fs.StringVar(&a.serviceAccount, "service-account", "", "`namespace/name` of the ServiceAccount to mint the token of (TokenRequest: you need create on its serviceaccounts/token); default: the kubeconfig's user, when it is a ServiceAccount")
	fs.StringVar(&a.caFile, "limiter-ca", "", "PEM `file` of the CA that issued the admin plane's certificate (ca.crt of the fleet's <fleet>-limiter-admin-tls Secret); default: the system's")
	fs.StringVar(&a.serverName, "tls-server-name", "", "the `name` the admin plane's certificate must carry, such as <fleet>-limiter.<namespace>.svc (default: the URL's host)")
	fs.StringVar(&a.tokenFile, "token-file", "", "`file` of a token issued for the admin plane's audience alone (kubectl create token SA --audience "+limiterwire.FleetAdminAudience("NAMESPACE", "FLEET")+"), instead of minting one; the kubeconfig's own token is never sent")
}

// check says what is missing or wrong.
func (a *adminFlags) check() error {
	if a.limiter == "" {
		return errors.New("--limiter is required: the URL of a limiter's admin plane")
	}
	if err := checkLimiterURL(a.limiter); err != nil {
		return err
	}
	switch {
	case a.fleet == "" && a.audience == "":
		return errors.New("--fleet is required: the limiter's LimiterFleet, namespace/name, whose audience the token is minted for (or --audience for a limiter started by hand)")
	case a.fleet != "" && a.audience != "":
		return fmt.Errorf("--fleet %s and --audience %s: give one", a.fleet, a.audience)
	case a.fleet != "":
		if _, _, err := namespacedName("--fleet", a.fleet); err != nil {
			return err
		}
	}
	if a.serviceAccount != "" {
		if a.tokenFile != "" {
			return errors.New("--service-account and --token-file: give one")
		}
		if _, _, err := namespacedName("--service-account", a.serviceAccount); err != nil {
			return err
		}
	}
	return nil
}

// adminAudience is the audience the token must be for.
func (a *adminFlags) adminAudience() string {
	if a.audience != "" {
		return a.audience
	}
	ns, name, _ := namespacedName("--fleet", a.fleet)
	return limiterwire.FleetAdminAudience(ns, name)
}

// namespacedName parses flag's value, namespace/name.
func namespacedName(flag, v string) (string, string, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%s %q: want namespace/name", flag, v)
	}
	return ns, name, nil
}

// checkLimiterURL refuses a URL the token would cross the network over in
// the clear: HTTPS, or plain HTTP to a loopback address only.
func checkLimiterURL(base string) error {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("--limiter %q: want https://host:port (or http:// to a loopback address)", base)
	}
	if u.Scheme == "http" && !isLoopback(u.Hostname()) {
		return fmt.Errorf("--limiter %q: your token would cross the network in the clear; use https://, or http:// to a loopback port-forward", base)
	}
	return nil
}
