package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/redisacl"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/rediscluster"
)

// The users of the operator's Redis Cluster. Every node runs with the
// default user off, so a client that does not authenticate can run
// nothing, and three users whose rules come from the code that uses them:
//
//   - RedisLimiterUser, for the limiters: the store's commands and its
//     scripts' on its own keys (api/redisacl.LimiterRules, which
//     a test of limiter/store/redis checks against its scripts). It can't
//     flush, reconfigure, reset, shut down or list keys.
//   - RedisOperatorUser, for the operator's cluster engine
//     (rediscluster.OperatorACLRules).
//   - RedisReplicationUser, which replicas authenticate to their primary as
//     (masteruser): PSYNC, REPLCONF and PING.
//
// The passwords live in the Secret <fleet>-redis-auth, which the operator
// generates and owns, with the users file built from them. Redis pods mount
// that one key as a file that redis.conf includes; limiter pods get their
// password from a secretKeyRef env var. No password is in a pod's
// arguments, in a ConfigMap or in a plain env var: the users file holds
// SHA-256 hashes of them, and the replication password, which a replica
// must send, only in the Secret.
const (
	RedisLimiterUser     = "sluice-limiter"
	RedisOperatorUser    = "sluice-operator"
	RedisReplicationUser = "sluice-replication"

	// Keys of the auth Secret.
	RedisLimiterPasswordKey     = "limiter-password"
	RedisOperatorPasswordKey    = "operator-password"
	RedisReplicationPasswordKey = "replication-password"
	RedisUsersKey               = "users.conf"

	// RedisAuthHashAnnotation on the Redis pod template is a hash of the
	// users file, so that a new password or rule rolls the pods.
	RedisAuthHashAnnotation = "ratelimit.sluice.dev/redis-auth-hash"
	// RedisLimiterAuthAnnotation on the limiter pod template is
	// RedisLimiterAuthHash: a new limiter password rolls the limiters, which
	// read it from their environment at start only.
	RedisLimiterAuthAnnotation = "ratelimit.sluice.dev/redis-limiter-auth-hash"

	redisAuthVolume = "auth"
	redisAuthDir    = "/etc/redis-auth"
)

// RedisAuthSecretName is the name of the Secret with the passwords and the
// users file of a Cluster fleet, "<fleet>-redis-auth".
func RedisAuthSecretName(fleet *v1beta1.LimiterFleet) string { return fleet.Name + "-redis-auth" }

// RedisPasswords are the passwords of the three users.
type RedisPasswords struct {
	Limiter, Operator, Replication string
}

// RedisUsersConf is the users file of every node: the default user off,
// the three users with their rules and the SHA-256 of their passwords,
// and the replication user and password that replicas authenticate with.
// Generated passwords are base64url; a limiter password from store.cluster.auth is
// only ever hashed here, so it may hold any byte.
func RedisUsersConf(pw RedisPasswords) string {
	user := func(name, password, rules string) string {
		sum := sha256.Sum256([]byte(password))
		return fmt.Sprintf("user %s on resetpass #%s %s", name, hex.EncodeToString(sum[:]), rules)
	}
	return strings.Join([]string{
		"user default off resetpass resetkeys resetchannels -@all",
		user(RedisLimiterUser, pw.Limiter, redisacl.LimiterRules("")),
		user(RedisOperatorUser, pw.Operator, rediscluster.OperatorACLRules()),
		user(RedisReplicationUser, pw.Replication, rediscluster.ReplicaACLRules()),
		"masteruser " + RedisReplicationUser,
		"masterauth " + pw.Replication,
	}, "\n") + "\n"
}

// BuildRedisAuthSecret builds the auth Secret from the passwords. The
// limiter's password is left out when it comes from store.cluster.auth's Secret.
func BuildRedisAuthSecret(fleet *v1beta1.LimiterFleet, pw RedisPasswords) *corev1.Secret {
	data := map[string][]byte{
		RedisOperatorPasswordKey:    []byte(pw.Operator),
		RedisReplicationPasswordKey: []byte(pw.Replication),
		RedisUsersKey:               []byte(RedisUsersConf(pw)),
	}
	if fleet.Spec.RedisAuth() == nil {
		data[RedisLimiterPasswordKey] = []byte(pw.Limiter)
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: redisMeta(fleet, RedisAuthSecretName(fleet)),
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
}

// redisLimiterPasswordRef is where limiter pods of a Cluster fleet read
// their password: store.cluster.auth's Secret and key, or the auth Secret.
func redisLimiterPasswordRef(fleet *v1beta1.LimiterFleet) (secret, key string) {
	if auth := fleet.Spec.RedisAuth(); auth != nil {
		return auth.SecretName, fleet.Spec.EffectiveAuthKey()
	}
	return RedisAuthSecretName(fleet), RedisLimiterPasswordKey
}

// TLS of the operator's Redis Cluster (spec.store.cluster.tls).
//
// Every node serves clients, replication and the cluster bus over TLS only
// (port 0, tls-port 6379, tls-replication and tls-cluster yes), with one
// certificate per fleet that names RedisTLSServerName and the pods' DNS
// names, for server and client use (a node is a client of its primary and
// of the bus). Clients dial node IPs, which no certificate names, and
// verify that name instead (the limiters' --redis-tls-server-name, the
// operator's tls.Config.ServerName). Redis verifies its peers' chains on
// the bus and for replication; it asks clients for no certificate
// (tls-auth-clients optional): they authenticate with their ACL users.
//
// The CA is the fleet's own, <fleet>-redis-ca, which the operator creates
// (ECDSA P-256, valid RedisCAValidity), or spec.store.cluster.tls.caSecretName's
// tls.crt and tls.key. The node certificate and the CA certificate live in
// <fleet>-redis-tls, which Redis pods mount whole and limiter pods mount
// ca.crt of. The operator issues a new certificate when the current one
// has less than RedisCertRenewBefore left, was not signed by the CA, or
// names other hosts; its hash on the pod template rolls the Redis pods,
// which read certificates only when they start.
const (
	// Keys of the TLS Secrets, as kubernetes.io/tls Secrets have them.
	RedisTLSCAKey   = "ca.crt"
	RedisTLSCertKey = corev1.TLSCertKey
	RedisTLSKeyKey  = corev1.TLSPrivateKeyKey

	// RedisTLSHashAnnotation on the Redis pod template is a hash of the
	// node certificate, so that a new one rolls the pods.
	RedisTLSHashAnnotation = "ratelimit.sluice.dev/redis-tls-hash"

	// RedisCAValidity is how long a CA the operator creates is valid. It
	// is not renewed: replace it by deleting <fleet>-redis-ca.
	RedisCAValidity = 10 * 365 * 24 * time.Hour
	// RedisCertValidity is how long a node certificate is valid, and
	// RedisCertRenewBefore how long before it expires the operator issues
	// the next.
	RedisCertValidity    = 90 * 24 * time.Hour
	RedisCertRenewBefore = 30 * 24 * time.Hour

	redisTLSVolume = "tls"
	redisTLSDir    = "/etc/redis-tls"
)

// RedisTLSEnabled reports whether the fleet's own Redis Cluster runs TLS.
func RedisTLSEnabled(fleet *v1beta1.LimiterFleet) bool {
	return fleet.Spec.EffectiveStoreType() == v1beta1.StoreCluster && clusterStore(fleet).TLS != nil
}

// RedisCASecretName is "<fleet>-redis-ca", the CA the operator creates.
func RedisCASecretName(fleet *v1beta1.LimiterFleet) string { return fleet.Name + "-redis-ca" }

// RedisTLSSecretName is "<fleet>-redis-tls": the node certificate, its key
// and the CA certificate.
func RedisTLSSecretName(fleet *v1beta1.LimiterFleet) string { return fleet.Name + "-redis-tls" }

// RedisTLSServerName is the name every node's certificate carries and
// every client verifies: the headless Service's, <fleet>-redis.<ns>.svc.
func RedisTLSServerName(fleet *v1beta1.LimiterFleet) string {
	return RedisName(fleet) + "." + fleet.Namespace + ".svc"
}

// BuildRedisSecret builds a Secret of the fleet's Redis (the CA's or the
// TLS Secret) with data.
func BuildRedisSecret(fleet *v1beta1.LimiterFleet, name string, typ corev1.SecretType, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: redisMeta(fleet, name),
		Type:       typ,
		Data:       data,
	}
}

// TLS of the limiters' admin plane.
//
// The operator calls every limiter pod's admin plane (the snapshot long
// poll, the stats) with a bearer token. The limiters serve it over HTTPS
// only, with a certificate the operator issues from a CA of the fleet's
// own, <limiter>-admin-ca (ECDSA P-256, valid RedisCAValidity, created by
// the operator), into <limiter>-admin-tls, which the limiter pods mount at
// AdminTLSDir and read again when it changes (no roll). The operator dials
// pod IPs, which no certificate names, and verifies AdminTLSServerName
// with the fleet's CA instead: a listener that can't show a certificate of
// that CA for that name never sees the token. The certificate is renewed
// RedisCertRenewBefore before it expires.
const (
	// AdminTLSDir is where limiter pods mount the admin TLS Secret.
	AdminTLSDir = "/etc/sluice/admin-tls"
)

// AdminCASecretName is "<limiter>-admin-ca", the CA of the fleet's admin
// plane certificates.
func AdminCASecretName(fleet *v1beta1.LimiterFleet) string { return LimiterName(fleet) + "-admin-ca" }

// AdminTLSSecretName is "<limiter>-admin-tls": the admin plane's
// certificate, its key and the CA certificate.
func AdminTLSSecretName(fleet *v1beta1.LimiterFleet) string {
	return LimiterName(fleet) + "-admin-tls"
}

// AdminTLSServerName is the name every limiter's admin certificate
// carries and the operator verifies: the limiter Service's,
// <limiter>.<ns>.svc.
func AdminTLSServerName(fleet *v1beta1.LimiterFleet) string {
	return LimiterName(fleet) + "." + fleet.Namespace + ".svc"
}

// AdminTLSArgs are the limiter flags of the mounted certificate.
func AdminTLSArgs() []string {
	return []string{
		limiterwire.AdminTLSCertFlag + "=" + AdminTLSDir + "/" + corev1.TLSCertKey,
		limiterwire.AdminTLSKeyFlag + "=" + AdminTLSDir + "/" + corev1.TLSPrivateKeyKey,
	}
}

// adminTLSVolume mounts the certificate and key (not the CA's key, which
// is in another Secret), read-only; the pod has no fsGroup, so the files
// are readable by all (the limiter container is the pod's only one).
func adminTLSVolume(fleet *v1beta1.LimiterFleet) (corev1.Volume, corev1.VolumeMount) {
	const name = "admin-tls"
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: AdminTLSSecretName(fleet),
			Items: []corev1.KeyToPath{{Key: corev1.TLSCertKey, Path: corev1.TLSCertKey},
				{Key: corev1.TLSPrivateKeyKey, Path: corev1.TLSPrivateKeyKey}},
			DefaultMode: ptr.To[int32](0o444),
		}}},
		corev1.VolumeMount{Name: name, MountPath: AdminTLSDir, ReadOnly: true}
}

// BuildAdminSecret builds the fleet's admin TLS Secret name (its CA or its
// serving certificate) with data.
func BuildAdminSecret(fleet *v1beta1.LimiterFleet, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: limiterMeta(fleet, name),
		Type:       corev1.SecretTypeTLS,
		Data:       data,
	}
}

// TopKKeySecretName names the Secret of a fleet's hottest-values key.
func TopKKeySecretName(fleet *v1beta1.LimiterFleet) string { return LimiterName(fleet) + "-topk-key" }

// WantsTopKKey reports whether the fleet's limiters report hottest values,
// and so need the key.
func WantsTopKKey(fleet *v1beta1.LimiterFleet) bool {
	st := fleet.Spec.Stats
	return st != nil && ptr.Deref(st.TopDescriptors, 0) > 0
}

// BuildTopKKeySecret builds the Secret that holds key, the fleet's
// hottest-values key. Owner references are set by the controller.
func BuildTopKKeySecret(fleet *v1beta1.LimiterFleet, key []byte) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: limiterMeta(fleet, TopKKeySecretName(fleet)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{limiterwire.TopKKeyName: key},
	}
}

// limiterTopKKey mounts the key's Secret, read-only, and names its file in
// the environment, when the fleet reports hottest values; else nothing.
func limiterTopKKey(fleet *v1beta1.LimiterFleet) ([]corev1.Volume, []corev1.VolumeMount, []corev1.EnvVar) {
	if !WantsTopKKey(fleet) {
		return nil, nil, nil
	}
	const name = "topk-key"
	return []corev1.Volume{{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  TopKKeySecretName(fleet),
			Items:       []corev1.KeyToPath{{Key: limiterwire.TopKKeyName, Path: limiterwire.TopKKeyName}},
			DefaultMode: ptr.To[int32](0o444),
		}}}},
		[]corev1.VolumeMount{{Name: name, MountPath: limiterwire.TopKKeyDir, ReadOnly: true}},
		[]corev1.EnvVar{{Name: limiterwire.TopKKeyFileEnv, Value: limiterwire.TopKKeyFile}}
}
