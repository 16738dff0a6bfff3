package adminauth

import (
	"context"
	"net/http"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Policy resource whose get in a namespace lets a caller see that
// namespace's policies in full (CanGetPolicies).
const (
	PolicyGroup    = "ratelimit.sluice.dev"
	PolicyResource = "ratelimitpolicies"
)

// CanGetPolicies says whether the caller of r, a request Wrap let through,
// may get ratelimitpolicies in namespace: a SubjectAccessReview of the
// user's own RBAC, cached as the non-resource ones are. The admin plane's
// explain shows a policy in full only to such a caller.
func (a *Authorizer) CanGetPolicies(r *http.Request, namespace string) (bool, error) {
	user, ok := r.Context().Value(userKey{}).(authnv1.UserInfo)
	if !ok {
		return false, nil
	}
	key := accessKey(user, "resource:"+PolicyGroup+"/"+PolicyResource+"@"+namespace, "get")
	if ok, found := lookup(a, a.allowed, key); found {
		return ok, nil
	}
	if err := a.acquire(r.Context()); err != nil {
		return false, err
	}
	defer a.release()
	ctx, cancel := context.WithTimeout(r.Context(), a.opts.ReviewTimeout)
	defer cancel()
	sar, err := a.sars.Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extraOf(user),
		ResourceAttributes: &authzv1.ResourceAttributes{Namespace: namespace, Verb: "get", Group: PolicyGroup, Resource: PolicyResource},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	allowed := sar.Status.Allowed && !sar.Status.Denied
	ttl := a.opts.DenyTTL
	if allowed {
		ttl = a.opts.AllowTTL
	}
	store(a, a.allowed, key, allowed, ttl)
	return allowed, nil
}

func extraOf(user authnv1.UserInfo) map[string]authzv1.ExtraValue {
	extra := make(map[string]authzv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	return extra
}
