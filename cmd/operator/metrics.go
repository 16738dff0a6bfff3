package main

import (
	"net/http"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sluice-dev/sluice/limiter/adminauth"
)

// metricsAuth guards the operator's /metrics as the limiters guard theirs
// (and as controller-runtime's filters.WithAuthenticationAndAuthorization
// would, without its dependencies): a bearer token the API server
// authenticates (TokenReview), whose user may get the non-resource URL
// /metrics (SubjectAccessReview); 401 without one, 403 without the
// permission. Reviews are cached and bounded (see limiter/adminauth).
func metricsAuth(cfg *rest.Config, _ *http.Client) (metricsserver.Filter, error) {
	a, err := adminauth.New(cfg, adminauth.Options{})
	if err != nil {
		return nil, err
	}
	return func(_ logr.Logger, h http.Handler) (http.Handler, error) { return a.Wrap(h), nil }, nil
}
