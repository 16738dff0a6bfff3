package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The admin plane reviews the token it receives with the API server. The
// plugin never sends the kubeconfig's own credential: a compromised
// limiter would collect the API tokens of everyone who runs it. It sends
// a token for the admin plane's audience alone, which the API server
// refuses for anything else: minted with the TokenRequest API for a
// ServiceAccount (--service-account, or the kubeconfig's user when it is
// one), or read from --token-file; and it checks the token's aud claim
// before sending it.

// mintedTokenSeconds is the minted token's lifetime, the least the API
// server grants.
const mintedTokenSeconds = 600

// saUserPrefix starts a ServiceAccount's user name.
const saUserPrefix = "system:serviceaccount:"

// adminToken returns the token to send to the admin plane: for its
// audience alone, and never the kubeconfig's.
func (a *adminFlags) adminToken(ctx context.Context, rc *rest.Config) (string, error) {
	aud := a.adminAudience()
	var tok string
	var err error
	if a.tokenFile != "" {
		b, rerr := os.ReadFile(a.tokenFile)
		if rerr != nil {
			return "", fmt.Errorf("--token-file: %w", rerr)
		}
		tok = strings.TrimSpace(string(b))
	} else if tok, err = a.mint(ctx, rc, aud); err != nil {
		return "", err
	}
	if err := checkAudience(tok, aud); err != nil {
		return "", err
	}
	if own := kubeconfigToken(rc); own != "" && own == tok {
		return "", errors.New("refusing to send the kubeconfig's own token to a limiter")
	}
	return tok, nil
}

// mint asks the API server, as the kubeconfig's user, for a token of the
// ServiceAccount for aud.
func (a *adminFlags) mint(ctx context.Context, rc *rest.Config, aud string) (string, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return "", err
	}
	ns, name, err := a.tokenServiceAccount(ctx, cs)
	if err != nil {
		return "", err
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{aud}, ExpirationSeconds: ptrTo(int64(mintedTokenSeconds)),
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("minting a token of ServiceAccount %s/%s for audience %s (you need create on its serviceaccounts/token): %w", ns, name, aud, err)
	}
	return tr.Status.Token, nil
}

// tokenServiceAccount is --service-account, or else the kubeconfig's user
// when the API server says it is a ServiceAccount.
func (a *adminFlags) tokenServiceAccount(ctx context.Context, cs kubernetes.Interface) (string, string, error) {
	if a.serviceAccount != "" {
		return namespacedName("--service-account", a.serviceAccount)
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("asking the API server who you are: %w", err)
	}
	user := r.Status.UserInfo.Username
	if ns, name, ok := strings.Cut(strings.TrimPrefix(user, saUserPrefix), ":"); ok && strings.HasPrefix(user, saUserPrefix) {
		return ns, name, nil
	}
	return "", "", fmt.Errorf("you are %q, not a ServiceAccount: name one to mint the admin token of with --service-account NAMESPACE/NAME, "+
		"or give --token-file (the kubeconfig's own credential is never sent to a limiter)", user)
}

// checkAudience refuses a token whose aud claim is not aud alone. The
// claim is read, not verified: this only keeps the plugin from sending a
// token meant for someone else (the limiter verifies it).
func checkAudience(token, aud string) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return errors.New("the admin token is not a JWT: refusing to send it")
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return fmt.Errorf("the admin token's claims: %w", err)
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return fmt.Errorf("the admin token's claims: %w", err)
	}
	var auds []string
	var one string
	if json.Unmarshal(claims.Aud, &one) == nil {
		auds = []string{one}
	} else if err := json.Unmarshal(claims.Aud, &auds); err != nil {
		return fmt.Errorf("the admin token's aud claim %s: %w", claims.Aud, err)
	}
	if !slices.Equal(auds, []string{aud}) {
		return fmt.Errorf("the admin token is for audiences %q, not %q alone: refusing to send it", auds, aud)
	}
	return nil
}

// kubeconfigToken is the kubeconfig's bearer token, "" for none.
func kubeconfigToken(rc *rest.Config) string {
	if rc.BearerToken != "" {
		return strings.TrimSpace(rc.BearerToken)
	}
	if rc.BearerTokenFile != "" {
		if b, err := os.ReadFile(rc.BearerTokenFile); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

func ptrTo[T any](v T) *T { return &v }
