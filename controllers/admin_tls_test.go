package controllers_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// Attack (issue 24, 3): the operator sends its token to every limiter pod
// in clear. Whoever answers at a limiter pod's address (a pod that took
// the IP of one that died, anyone on the path) reads the operator's
// ServiceAccount token, which can create Deployments and read Secrets, and
// may answer whatever it likes. Now the admin plane is HTTPS only, from a
// certificate the operator issues with the fleet's own CA for
// <limiter>.<ns>.svc: the real limiters are read over TLS (the policy is
// enforced and counted), and an impostor at a pod address of the fleet,
// which speaks plain HTTP and TLS with a certificate of another CA for the
// very name, sees no token in clear and has its certificate refused. The
// token the operator sends is one for the limiters' audience: its
// ServiceAccount's ordinary token is refused by the limiters.
func TestAttackAdminPlaneImpostor(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	fleet, pods := newFleet(t, "admin-tls", "admin-tls", 1)
	ns := fleet.Namespace
	p := statsPolicy(ns, "five", "admin-tls", "admin-tls-api", 5, false)
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
	waitPolicy(t, ns, "five", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	awayFromTheHour(t, 2*time.Minute)
	for range 7 {
		pods[0].check(t, "admin-tls-api", "user", "max")
	}
	waitEnforcement(t, ns, "five", counted(5, 2, 0))

	// The impostor: a pod of the fleet, as the API says, at another address.
	ca, _, err := controllers.NewAdminCA(betaOf(fleet), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := controllers.IssueAdminCert(betaOf(fleet), ca, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	imp := startImpostor(t, pods[0], 9, &tls.Config{Certificates: []tls.Certificate{cert}})
	addStandIns(t, fleet, imp.podAddr)

	eventually(t, 60*time.Second, "the operator calls the impostor", func() error {
		if imp.calls() == 0 {
			return errors.New("no connection yet")
		}
		return nil
	})
	if tokens := imp.plainTokens(); len(tokens) > 0 {
		t.Fatalf("the operator sent its bearer token in clear to %s: %d plain HTTP calls with Authorization, e.g. %.24s...",
			imp.podAddr, len(tokens), tokens[0])
	}
	eventually(t, 60*time.Second, "the operator refuses the impostor's certificate", func() error {
		if n := imp.trusted(); n > 0 {
			return fmt.Errorf("the operator completed %d TLS handshakes with a certificate of another CA", n)
		}
		if errs := imp.handshakeErrors(); !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, "bad certificate") }) {
			return fmt.Errorf("handshakes failed with %q, want the client's bad certificate alert", errs)
		}
		return nil
	})
	if n := imp.trusted(); n > 0 {
		t.Errorf("the operator completed %d TLS handshakes with a certificate of another CA", n)
	}
	if tokens := imp.plainTokens(); len(tokens) > 0 {
		t.Errorf("the operator sent its bearer token in clear to %s", imp.podAddr)
	}

	// The operator's ServiceAccount's token for the API server is no key
	// to the limiters.
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "sluice-identities", Name: "sluice-operator"}}
	if err := k8s.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		which, token string
		want         int
	}{
		{"the API server's", tr.Status.Token, http.StatusUnauthorized},
		{limiterwire.AdminAudience + "'s", operatorToken, http.StatusOK},
	} {
		resp, err := getWithToken("https://"+pods[0].adminAddr+limiterwire.StatsPath, tc.token)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("the operator's token for %s audience: %s answered %s, want %d", tc.which, limiterwire.StatsPath, resp.Status, tc.want)
		}
	}
}

// impostor listens at a pod address of the fleet and answers plain HTTP
// and TLS (with its own certificate), recording what arrives.
type impostor struct {
	podAddr string

	mu     sync.Mutex
	n      int
	tokens []string // Authorization headers of plain HTTP calls
	hsErrs []string // server-side TLS handshake errors
	hsOK   int
}

func startImpostor(t *testing.T, like *limiterProc, host int, cfg *tls.Config) *impostor {
	t.Helper()
	ip, port, _ := net.SplitHostPort(like.adminAddr)
	lo := ip[:strings.LastIndex(ip, ".")+1] + strconv.Itoa(host)
	l, err := net.Listen("tcp", net.JoinHostPort(lo, port))
	if err != nil {
		t.Fatal(err)
	}
	imp := &impostor{podAddr: net.JoinHostPort(podNetwork.podIP(lo), port)}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { imp.serve(conn, cfg) })
		}
	})
	return imp
}

// peeked is a connection whose first bytes were read into r.
type peeked struct {
	net.Conn
	r *bufio.Reader
}

func (p *peeked) Read(b []byte) (int, error) { return p.r.Read(b) }

func (imp *impostor) serve(conn net.Conn, cfg *tls.Config) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	first, err := br.Peek(1)
	imp.mu.Lock()
	imp.n++
	imp.mu.Unlock()
	if err != nil {
		return
	}
	var c net.Conn = &peeked{Conn: conn, r: br}
	if first[0] == 0x16 { // a TLS handshake record
		tc := tls.Server(c, cfg)
		err := tc.Handshake()
		imp.mu.Lock()
		if err != nil {
			imp.hsErrs = append(imp.hsErrs, err.Error())
		} else {
			imp.hsOK++
		}
		imp.mu.Unlock()
		if err != nil {
			return
		}
		c = tc
	}
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	if _, isTLS := c.(*tls.Conn); !isTLS && req.Header.Get("Authorization") != "" {
		imp.mu.Lock()
		imp.tokens = append(imp.tokens, req.Header.Get("Authorization"))
		imp.mu.Unlock()
	}
	body := `{"version":"made-up","enforcement":"Enabled","policies":[]}`
	_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}

func (imp *impostor) calls() int {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	return imp.n
}

func (imp *impostor) plainTokens() []string {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	return append([]string(nil), imp.tokens...)
}

func (imp *impostor) handshakeErrors() []string {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	return append([]string(nil), imp.hsErrs...)
}

func (imp *impostor) trusted() int {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	return imp.hsOK
}

// Every fleet's limiters mount their admin certificate and key (not the
// CA's key) read-only and serve the admin plane with them; the certificate
// names the Service, which the operator verifies.
func TestLimiterAdminTLS(t *testing.T) {
	fleet := resFleet("ns", "f")
	pod := resources.BuildLimiterDeployment(betaOf(fleet), resources.LimiterDeploymentOptions{DefaultImage: "limiter:test", StoreURL: "memory"}).Spec.Template.Spec
	c := pod.Containers[0]
	var vol *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Secret != nil && pod.Volumes[i].Secret.SecretName == "f-limiter-admin-tls" {
			vol = &pod.Volumes[i]
		}
	}
	if vol == nil || len(vol.Secret.Items) != 2 || vol.Secret.Items[0].Key != "tls.crt" || vol.Secret.Items[1].Key != "tls.key" {
		t.Fatalf("volumes %+v: want tls.crt and tls.key of Secret f-limiter-admin-tls", pod.Volumes)
	}
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == vol.Name {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("mounts %+v: want %s read-only", c.VolumeMounts, vol.Name)
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--admin-tls-cert=" + mount.MountPath + "/tls.crt", "--admin-tls-key=" + mount.MountPath + "/tls.key",
		"--admin-token-audience=" + limiterwire.FleetAdminAudience(fleet.Namespace, fleet.Name) + " "} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	ca, _, err := controllers.NewAdminCA(betaOf(fleet), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := controllers.IssueAdminCert(betaOf(fleet), ca, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: resources.AdminTLSServerName(betaOf(fleet))}); err != nil ||
		resources.AdminTLSServerName(betaOf(fleet)) != "f-limiter.ns.svc" {
		t.Errorf("the certificate for %s: %v", resources.AdminTLSServerName(betaOf(fleet)), err)
	}
}
