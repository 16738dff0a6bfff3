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

// Package conversiontest serves the RateLimitPolicy conversion webhook
// (v1alpha1 <-> v1beta1, the storage version) to an envtest API server, so
// that a suite can read and write either version. envtest points the CRD's
// conversion at a local address with a certificate it made; Serve answers
// there with controller-runtime's conversion handler, the one the operator
// serves in a cluster.
//
//	env := &envtest.Environment{CRDDirectoryPaths: ...}
//	conversiontest.Prepare(env)
//	cfg, err := env.Start()
//	stop, err := conversiontest.Serve(env)
//	defer stop()
package conversiontest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/conversion"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Scheme returns a scheme with the Kubernetes types and both versions of
// Sluice's API.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	utilruntime.Must(v1beta1.AddToScheme(s))
	return s
}

// Prepare makes env point the conversion of every CRD whose types convert
// (RateLimitPolicy) at the local webhook Serve starts. Call it before
// env.Start.
func Prepare(env *envtest.Environment) {
	env.Scheme = Scheme()
	env.CRDInstallOptions.Scheme = env.Scheme
	if env.WebhookInstallOptions.LocalServingHost == "" {
		env.WebhookInstallOptions.LocalServingHost = "127.0.0.1"
	}
}

// Serve starts the conversion webhook where env (prepared, started) sends
// conversions, and returns once it answers TLS connections. stop ends it.
func Serve(env *envtest.Environment) (stop func(), err error) {
	return ServeWith(&env.WebhookInstallOptions, env.Scheme)
}

// ServeWith starts the conversion webhook where o says (LocalServingHost,
// LocalServingPort, LocalServingCertDir; o.PrepWithoutInstalling makes
// them), converting with scheme, and returns once it answers TLS
// connections. A CRD's conversion reaches it at URL(o), trusting
// o.LocalServingCAData.
func ServeWith(o *envtest.WebhookInstallOptions, scheme *runtime.Scheme) (stop func(), err error) {
	if o.LocalServingPort == 0 || o.LocalServingCertDir == "" {
		return nil, errors.New("conversiontest: no local webhook address: call Prepare before env.Start, or o.PrepWithoutInstalling")
	}
	srv := webhook.NewServer(webhook.Options{Host: o.LocalServingHost, Port: o.LocalServingPort, CertDir: o.LocalServingCertDir})
	srv.Register("/convert", conversion.NewWebhookHandler(scheme))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	stop = func() {
		cancel()
		<-done
	}
	addr := net.JoinHostPort(o.LocalServingHost, strconv.Itoa(o.LocalServingPort))
	deadline := time.Now().Add(30 * time.Second)
	for {
		d := &net.Dialer{Timeout: time.Second}
		conn, dialErr := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a readiness probe of our own server
		if dialErr == nil {
			_ = conn.Close()
			return stop, nil
		}
		select {
		case err := <-done:
			cancel()
			return nil, fmt.Errorf("the conversion webhook on %s stopped: %v", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("the conversion webhook on %s did not answer within 30s; last error: %v", addr, dialErr)
		}
	}
}

// URL is where a CRD's conversion reaches the webhook ServeWith(o) serves.
func URL(o *envtest.WebhookInstallOptions) string {
	return "https://" + net.JoinHostPort(o.LocalServingHost, strconv.Itoa(o.LocalServingPort)) + "/convert"
}
