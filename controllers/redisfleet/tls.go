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

package redisfleet

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// redisCertDNSNames are the names a node certificate carries: the
// Service's and every pod's, short and with cluster.local.
func redisCertDNSNames(fleet *v1beta1.LimiterFleet) []string {
	svc := resources.RedisTLSServerName(fleet)
	return []string{svc, "*." + svc, svc + ".cluster.local", "*." + svc + ".cluster.local"}
}

// RedisCA is a CA that signs node certificates.
type RedisCA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
}

// NewRedisCA creates a self-signed CA valid from now for RedisCAValidity.
func NewRedisCA(fleet *v1beta1.LimiterFleet, now time.Time) (*RedisCA, []byte, error) {
	return NewCA(fmt.Sprintf("sluice Redis CA %s/%s", fleet.Namespace, fleet.Name), now)
}

// NewCA creates a self-signed CA named commonName, valid from now for
// RedisCAValidity, and returns it with its key, PEM.
func NewCA(commonName string, now time.Time) (*RedisCA, []byte, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(resources.RedisCAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	certPEM, keyPEM, err := SignCert(tmpl, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	ca, err := ParseRedisCA(certPEM, keyPEM)
	return ca, keyPEM, err
}

// ParseRedisCA reads a CA certificate and its ECDSA key, PEM: SEC 1
// ("EC PRIVATE KEY") or PKCS#8 ("PRIVATE KEY").
func ParseRedisCA(certPEM, keyPEM []byte) (*RedisCA, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("CA certificate: not a CA (basicConstraints CA:FALSE)")
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("CA key: no PEM block")
	}
	var key *ecdsa.PrivateKey
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		var k any
		if k, err = x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
			var ok bool
			if key, ok = k.(*ecdsa.PrivateKey); !ok {
				err = fmt.Errorf("a %T key: the operator signs with ECDSA CA keys only", k)
			}
		}
	default:
		err = fmt.Errorf("PEM block %q: want an ECDSA key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("CA key does not match the CA certificate")
	}
	return &RedisCA{Cert: cert, Key: key, CertPEM: certPEM}, nil
}

// IssueRedisCert issues a node certificate for the fleet, valid from now
// for RedisCertValidity, and returns it and its key, PEM.
func IssueRedisCert(fleet *v1beta1.LimiterFleet, ca *RedisCA, now time.Time) (certPEM, keyPEM []byte, err error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: resources.RedisTLSServerName(fleet)},
		DNSNames:    redisCertDNSNames(fleet),
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(resources.RedisCertValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	return SignCert(tmpl, ca.Cert, ca.Key)
}

// RedisCertCurrent says why the node certificate in certPEM must be
// replaced at now, or "" when it is current: signed by ca, for the
// fleet's names, and more than RedisCertRenewBefore from expiry.
func RedisCertCurrent(fleet *v1beta1.LimiterFleet, ca *RedisCA, certPEM []byte, now time.Time) string {
	cert, err := ParseCert(certPEM)
	switch {
	case err != nil:
		return "no valid certificate: " + err.Error()
	case cert.CheckSignatureFrom(ca.Cert) != nil:
		return "not signed by the CA"
	case !slices.Equal(cert.DNSNames, redisCertDNSNames(fleet)):
		return "names other hosts"
	case now.Add(resources.RedisCertRenewBefore).After(cert.NotAfter):
		return "expires at " + cert.NotAfter.UTC().Format(time.RFC3339)
	}
	return ""
}

// SignCert signs tmpl with parent's key (tmpl itself when parent is tmpl)
// and returns the certificate and its new key, PEM.
func SignCert(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128)); err != nil {
		return nil, nil, err
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// ParseCert parses the first certificate of certPEM.
func ParseCert(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// RedisTLSHash is a short hash of the node certificate, for the pod
// template; "" without TLS.
func RedisTLSHash(secret *corev1.Secret) string {
	if secret == nil {
		return ""
	}
	sum := sha256.Sum256(secret.Data[resources.RedisTLSCertKey])
	return hex.EncodeToString(sum[:8])
}

// RedisClientTLS is the tls.Config that verifies the fleet's nodes with
// the CA certificate in the TLS Secret.
func RedisClientTLS(fleet *v1beta1.LimiterFleet, secret *corev1.Secret) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(secret.Data[resources.RedisTLSCAKey]) {
		return nil, fmt.Errorf("Secret %s/%s: no PEM certificate in %s", secret.Namespace, secret.Name, resources.RedisTLSCAKey)
	}
	return &tls.Config{RootCAs: pool, ServerName: resources.RedisTLSServerName(fleet), MinVersion: tls.VersionTLS12}, nil
}

// reconcileRedisTLS makes sure a TLS fleet's CA and node certificate
// exist and are current, and returns the TLS Secret (nil without TLS).
// Errors about a CA the operator can't use are errRedisAuth; a Secret in
// the way, errSecretNotOwned.
func (r *Provisioner) reconcileRedisTLS(ctx context.Context, fleet *v1beta1.LimiterFleet, now time.Time) (*corev1.Secret, error) {
	if !resources.RedisTLSEnabled(fleet) {
		return nil, nil
	}
	ca, err := r.redisCA(ctx, fleet, now)
	if err != nil {
		return nil, err
	}
	existing, err := r.OwnedSecret(ctx, fleet, resources.RedisTLSSecretName(fleet))
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{}
	why := "none yet"
	if existing != nil {
		data = existing.Data
		why = RedisCertCurrent(fleet, ca, existing.Data[resources.RedisTLSCertKey], now)
	}
	if why != "" {
		certPEM, keyPEM, err := IssueRedisCert(fleet, ca, now)
		if err != nil {
			return nil, err
		}
		logf.FromContext(ctx).Info("Issuing a Redis node certificate", "fleet", client.ObjectKeyFromObject(fleet), "replaces", why)
		data = map[string][]byte{resources.RedisTLSCertKey: certPEM, resources.RedisTLSKeyKey: keyPEM}
	}
	data[resources.RedisTLSCAKey] = ca.CertPEM
	return r.WriteSecret(ctx, fleet, existing, resources.BuildRedisSecret(fleet, resources.RedisTLSSecretName(fleet), corev1.SecretTypeTLS, data))
}

// redisCA reads spec.store.cluster.tls.caSecretName's CA, or the fleet's own,
// which it creates when missing.
func (r *Provisioner) redisCA(ctx context.Context, fleet *v1beta1.LimiterFleet, now time.Time) (*RedisCA, error) {
	if name := fleet.Spec.Store.Cluster.TLS.CASecretName; name != nil {
		secret := &corev1.Secret{}
		err := r.secretReader().Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: *name}, secret)
		switch {
		case apierrors.IsNotFound(err):
			return nil, errRedisAuth{fmt.Errorf("spec.store.cluster.tls.caSecretName: Secret %s/%s not found", fleet.Namespace, *name)}
		case err != nil:
			return nil, errRedisAuth{fmt.Errorf("spec.store.cluster.tls.caSecretName: reading Secret %s/%s: %w", fleet.Namespace, *name, err)}
		}
		ca, err := ParseRedisCA(secret.Data[resources.RedisTLSCertKey], secret.Data[resources.RedisTLSKeyKey])
		if err != nil {
			return nil, errRedisAuth{fmt.Errorf("spec.store.cluster.tls.caSecretName: Secret %s/%s: %w", fleet.Namespace, *name, err)}
		}
		return ca, nil
	}
	existing, err := r.OwnedSecret(ctx, fleet, resources.RedisCASecretName(fleet))
	if err != nil {
		return nil, err
	}
	if existing != nil {
		if ca, err := ParseRedisCA(existing.Data[resources.RedisTLSCertKey], existing.Data[resources.RedisTLSKeyKey]); err == nil && now.Before(ca.Cert.NotAfter) {
			return ca, nil
		}
	}
	ca, keyPEM, err := NewRedisCA(fleet, now)
	if err != nil {
		return nil, err
	}
	logf.FromContext(ctx).Info("Creating a Redis CA", "fleet", client.ObjectKeyFromObject(fleet))
	_, err = r.WriteSecret(ctx, fleet, existing, resources.BuildRedisSecret(fleet, resources.RedisCASecretName(fleet), corev1.SecretTypeTLS,
		map[string][]byte{resources.RedisTLSCertKey: ca.CertPEM, resources.RedisTLSKeyKey: keyPEM}))
	return ca, err
}

// OwnedSecret reads the fleet's Secret name: nil when there is none, and
// errSecretNotOwned when the fleet does not control it.
func (r *Provisioner) OwnedSecret(ctx context.Context, fleet *v1beta1.LimiterFleet, name string) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: fleet.Namespace, Name: name}
	err := r.secretReader().Get(ctx, key, secret)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s: %w", key, err)
	case !metav1.IsControlledBy(secret, fleet):
		return nil, errSecretNotOwned{key.Namespace, key.Name, fleet.Name}
	}
	return secret, nil
}

// WriteSecret creates desired, controlled by the fleet, or updates
// existing to its data and labels when they differ, and returns what is
// stored.
func (r *Provisioner) WriteSecret(ctx context.Context, fleet *v1beta1.LimiterFleet, existing, desired *corev1.Secret) (*corev1.Secret, error) {
	key := client.ObjectKeyFromObject(desired)
	if existing == nil {
		if err := controllerutil.SetControllerReference(fleet, desired, r.Scheme); err != nil {
			return nil, err
		}
		logf.FromContext(ctx).Info("Creating a Redis Secret", "secret", key)
		if err := r.Create(ctx, desired); err != nil {
			return nil, fmt.Errorf("creating Secret %s: %w", key, err)
		}
		return desired, nil
	}
	same := len(existing.Data) == len(desired.Data)
	for k, v := range desired.Data {
		same = same && bytes.Equal(existing.Data[k], v)
	}
	if same && subset(desired.Labels, existing.Labels) {
		return existing, nil
	}
	logf.FromContext(ctx).Info("Updating a Redis Secret", "secret", key)
	existing.Data = desired.Data
	existing.Labels = mergeStrings(existing.Labels, desired.Labels)
	if err := r.Update(ctx, existing); err != nil {
		return nil, fmt.Errorf("updating Secret %s: %w", key, err)
	}
	return existing, nil
}
