/*
Copyright 2026 The Sluice Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/controllers/redisfleet"
	"github.com/sluice-dev/sluice/controllers/resources"
)

func tlsCluster(f *v1alpha1.LimiterFleet) { f.Spec.Redis.TLS = &v1alpha1.RedisTLS{} }

// TestRedisCertificates: the operator's CA signs node certificates that
// verify for the Service's name and every pod's, for server and client
// use; a certificate is current until 30 days before it expires, and not
// when another CA signed it or it names another fleet's hosts.
func TestRedisCertificates(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	fleet := resFleet("ns", "f", resCluster(tlsCluster))
	ca, caKey, err := redisfleet.NewRedisCA(betaOf(fleet), now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := redisfleet.ParseRedisCA(ca.CertPEM, caKey); err != nil {
		t.Fatalf("the CA's own PEM: %v", err)
	}
	certPEM, keyPEM, err := redisfleet.IssueRedisCert(betaOf(fleet), ca, now)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if kb, _ := pem.Decode(keyPEM); kb == nil || kb.Type != "EC PRIVATE KEY" {
		t.Fatalf("key PEM %q", keyPEM)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, name := range []string{"f-redis.ns.svc", "f-redis-0-1.f-redis.ns.svc", "f-redis-2-0.f-redis.ns.svc.cluster.local"} {
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("%s for usage %v: %v", name, usage, err)
			}
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "g-redis.ns.svc", Roots: roots, CurrentTime: now}); err == nil {
		t.Error("the certificate verifies for another fleet's name")
	}
	if got := resources.RedisTLSServerName(betaOf(fleet)); got != "f-redis.ns.svc" {
		t.Errorf("server name %s", got)
	}

	other, _, err := redisfleet.NewRedisCA(betaOf(fleet), now)
	if err != nil {
		t.Fatal(err)
	}
	otherFleet := resFleet("ns", "g", resCluster(tlsCluster))
	for _, tc := range []struct {
		name  string
		fleet *v1alpha1.LimiterFleet
		ca    *redisfleet.RedisCA
		at    time.Time
		cert  []byte
		want  string
	}{
		{"new", fleet, ca, now, certPEM, ""},
		{"61 days on, 29 left", fleet, ca, now.Add(61 * 24 * time.Hour), certPEM, "expires at 2027-02-21T12:00:00Z"},
		{"59 days on", fleet, ca, now.Add(59 * 24 * time.Hour), certPEM, ""},
		{"another CA", fleet, other, now, certPEM, "not signed by the CA"},
		{"another fleet", otherFleet, ca, now, certPEM, "names other hosts"},
		{"garbage", fleet, ca, now, []byte("not PEM"), "no valid certificate"},
	} {
		if got := redisfleet.RedisCertCurrent(betaOf(tc.fleet), tc.ca, tc.cert, tc.at); !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
			t.Errorf("%s: RedisCertCurrent %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestParseRedisCA: a CA Secret of your own is read with an ECDSA key in
// SEC 1 or PKCS#8; a key of another type or of another certificate, or a
// certificate that is no CA, is refused with a reason.
func TestParseRedisCA(t *testing.T) {
	now := time.Now()
	fleet := resFleet("ns", "f", resCluster(tlsCluster))
	ca, sec1, err := redisfleet.NewRedisCA(betaOf(fleet), now)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(sec1)
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8 := mustPKCS8(t, key)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _, err := redisfleet.IssueRedisCert(betaOf(fleet), ca, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		cert, key []byte
		want      string
	}{
		{"SEC 1", ca.CertPEM, sec1, ""},
		{"PKCS#8", ca.CertPEM, pkcs8, ""},
		{"another key", ca.CertPEM, mustPKCS8(t, other), "CA key does not match the CA certificate"},
		{"RSA", ca.CertPEM, mustPKCS8(t, rsaKey), "the operator signs with ECDSA CA keys only"},
		{"not a CA", leaf, sec1, "not a CA"},
		{"no key", ca.CertPEM, nil, "CA key: no PEM block"},
	} {
		_, err := redisfleet.ParseRedisCA(tc.cert, tc.key)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func mustPKCS8(t *testing.T, key any) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}
