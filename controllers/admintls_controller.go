package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/redisfleet"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// AdminTLSStatusFieldOwner is AdminTLSReconciler: it owns the AdminTLSReady
// condition.
const AdminTLSStatusFieldOwner = "sluice-operator-admintls"

// AdminTLSReconciler keeps each fleet's admin plane CA and serving
// certificate (the Secrets its limiter pods mount, admin_tls.go) and tells
// the admin clients which CA to trust. It writes AdminTLSReady alone, under
// AdminTLSStatusFieldOwner; the fleet reconciler folds it into Ready.
// Secrets are not watched (the operator reads them by name, uncached): it
// looks again every adminCertRecheck, and renews before expiry.
type AdminTLSReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	// APIReader reads Secrets uncached; nil means Client.
	APIReader client.Reader
	// Admin is told each fleet's admin CA; required.
	Admin AdminTrust

	adminCerts adminCertsSeen
	// secrets reads and writes the Secrets (OwnedSecret and WriteSecret
	// alone, which keep no state).
	secrets *redisfleet.Provisioner
}

// SetupWithManager registers the controller and what it watches.
func (r *AdminTLSReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.secrets = &redisfleet.Provisioner{Client: r.Client, Scheme: r.Scheme, APIReader: r.APIReader}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1beta1.LimiterFleet{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("admintls").
		Complete(r)
}

// Reconcile makes the fleet's admin TLS current and writes AdminTLSReady,
// only when it changed.
func (r *AdminTLSReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	fleet := &v1beta1.LimiterFleet{}
	if err := r.Get(ctx, req.NamespacedName, fleet); err != nil {
		if apierrors.IsNotFound(err) {
			r.Admin.Forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !fleet.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	err := r.reconcileAdminTLS(ctx, fleet)
	cond := metav1.Condition{Type: v1beta1.AdminTLSReadyCondition, ObservedGeneration: fleet.Generation, Status: metav1.ConditionTrue,
		Reason: v1beta1.CertificateCurrentReason, Message: "the admin plane's CA and certificate are current"}
	if err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1beta1.ReconcileErrorReason, err.Error()
	}
	next := fleet.DeepCopy()
	meta.SetStatusCondition(&next.Status.Conditions, cond)
	if werr := writeFleetStatus(ctx, r.Client, fleet, next, AdminTLSStatusFieldOwner); werr != nil {
		return ctrl.Result{}, werr
	}
	return ctrl.Result{RequeueAfter: adminCertRecheck}, err
}

// reconcileAdminTLS makes sure the fleet's admin CA and certificate exist
// and are current, and tells the admin clients which CA to trust. It reads
// the Secrets again at most every adminCertRecheck while the certificate
// is current.
func (r *AdminTLSReconciler) reconcileAdminTLS(ctx context.Context, fleet *v1beta1.LimiterFleet) error {
	now := time.Now()
	if r.adminCerts.fresh(fleet.UID, now) && r.Admin.Trusts(client.ObjectKeyFromObject(fleet)) {
		return nil
	}
	ca, err := r.adminCA(ctx, fleet, now)
	if err != nil {
		return err
	}
	existing, err := r.secrets.OwnedSecret(ctx, fleet, resources.AdminTLSSecretName(fleet))
	if err != nil {
		return err
	}
	data := map[string][]byte{}
	why := "none yet"
	if existing != nil {
		data = existing.Data
		why = adminCertCurrent(fleet, ca, existing.Data[corev1.TLSCertKey], now)
	}
	if why != "" {
		certPEM, keyPEM, err := IssueAdminCert(fleet, ca, now)
		if err != nil {
			return err
		}
		logf.FromContext(ctx).Info("Issuing the limiters' admin certificate", "fleet", client.ObjectKeyFromObject(fleet), "replaces", why)
		data = map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}
	}
	data[resources.RedisTLSCAKey] = ca.CertPEM
	secret, err := r.secrets.WriteSecret(ctx, fleet, existing, resources.BuildAdminSecret(fleet, resources.AdminTLSSecretName(fleet), data))
	if err != nil {
		return err
	}
	if err := r.Admin.SetCA(client.ObjectKeyFromObject(fleet), resources.AdminTLSServerName(fleet), secret.Data[resources.RedisTLSCAKey]); err != nil {
		return err
	}
	cert, err := redisfleet.ParseCert(secret.Data[corev1.TLSCertKey])
	if err != nil {
		return fmt.Errorf("Secret %s: %w", resources.AdminTLSSecretName(fleet), err)
	}
	r.adminCerts.record(fleet.UID, now, cert.NotAfter)
	return nil
}

// adminCA reads the fleet's admin CA, which it creates when missing or
// expired.
func (r *AdminTLSReconciler) adminCA(ctx context.Context, fleet *v1beta1.LimiterFleet, now time.Time) (*redisfleet.RedisCA, error) {
	existing, err := r.secrets.OwnedSecret(ctx, fleet, resources.AdminCASecretName(fleet))
	if err != nil {
		return nil, err
	}
	if existing != nil {
		if ca, err := redisfleet.ParseRedisCA(existing.Data[corev1.TLSCertKey], existing.Data[corev1.TLSPrivateKeyKey]); err == nil && now.Before(ca.Cert.NotAfter) {
			return ca, nil
		}
	}
	ca, keyPEM, err := NewAdminCA(fleet, now)
	if err != nil {
		return nil, err
	}
	logf.FromContext(ctx).Info("Creating the limiters' admin CA", "fleet", client.ObjectKeyFromObject(fleet))
	_, err = r.secrets.WriteSecret(ctx, fleet, existing, resources.BuildAdminSecret(fleet, resources.AdminCASecretName(fleet),
		map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: keyPEM}))
	return ca, err
}
