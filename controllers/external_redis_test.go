package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/internal/redistest"
)

// TestExternalRedisTLSAndAuth: a fleet on an External Redis that requires
// TLS and a password, both from Secrets. The limiters run as the kubelet
// would run the rendered container: its arguments, its env vars resolved
// from their Secrets, its Secret volume written to disk. They count
// together in that Redis, and the password is nowhere in the Deployment.
// Limiters started with a wrong password make RedisReady False, naming
// Redis's refusal.
func TestExternalRedisTLSAndAuth(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	const password = "p@ss/w%rd with spaces"
	srv := redistest.StartTLS(t, "requirepass "+strconv.Quote(password)) // a redis.conf line: quoted, for the spaces
	ns := namespace(t, "redis-tls")
	caPEM, err := os.ReadFile(srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "redis-auth"}, StringData: map[string]string{"password": password}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "redis-ca"}, Data: map[string][]byte{"ca.crt": caPEM}},
	} {
		if err := k8s.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	fleet := &v1alpha1.LimiterFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tls"},
		Spec: v1alpha1.LimiterFleetSpec{
			Replicas:       ptr.To(int32(2)),
			PolicySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "tls"}},
			Redis: v1alpha1.RedisSpec{
				Mode:      ptr.To(v1alpha1.RedisExternal),
				Addresses: []string{srv.TLSAddr},
				Auth:      &v1alpha1.RedisAuth{SecretName: "redis-auth"},
				TLS:       &v1alpha1.RedisTLS{CASecretName: ptr.To("redis-ca"), ServerName: ptr.To(redistest.ServerName)},
			},
		},
	}
	if err := k8s.Create(ctx, fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, fleet) })

	dep := &appsv1.Deployment{}
	eventually(t, 30*time.Second, "the limiter Deployment", func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.LimiterName(betaOf(fleet))}, dep)
	})
	if b, _ := yaml.Marshal(dep); strings.Contains(string(b), password) {
		t.Fatalf("the Deployment holds the password:\n%s", b)
	}
	args, env := asKubelet(t, dep)
	store := argValue(args, "--store")
	if want := "rediss://" + srv.TLSAddr; store != want {
		t.Fatalf("--store=%s, want %s", store, want)
	}
	var redisArgs []string
	for _, a := range args {
		if strings.HasPrefix(a, "--redis-") {
			redisArgs = append(redisArgs, a)
		}
	}
	// First with a wrong password, as after a rotated Secret: the fleet
	// says its limiters can't use Redis, and why.
	var wrongEnv []string
	for _, e := range env {
		if strings.HasPrefix(e, limiterwire.RedisPasswordEnv+"=") {
			e = limiterwire.RedisPasswordEnv + "=wrong"
		}
		wrongEnv = append(wrongEnv, e)
	}
	pods := fleetPodsWithEnv(t, fleet, 2, store, wrongEnv, append(redisArgs, "--redis-timeout=2s")...)
	rf := &redisFleet{fleet: fleet}
	eventually(t, 30*time.Second, "RedisReady=False naming both pods and WRONGPASS", func() error {
		c := condition(rf.get(t).Status.Conditions, v1beta1.RedisReadyCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1beta1.StoreUnreachableReason ||
			!strings.Contains(c.Message, "2/2 limiter pods can't use Redis") || !strings.Contains(c.Message, "WRONGPASS") {
			return fmt.Errorf("RedisReady %+v", c)
		}
		t.Logf("RedisReady=False %s: %s", c.Reason, c.Message)
		return nil
	})
	// The pods restart with the Secret's password.
	for _, p := range pods {
		p.stop()
		p.env = env
		p.start(t)
	}
	rf.waitRedisReady(t, 30*time.Second, metav1.ConditionTrue, v1beta1.RedisExternalReason)

	policy := statsPolicy(ns, "three", "tls", "tls-api", 3, false)
	if err := k8s.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, ns, "three", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	awayFromTheHour(t, time.Minute)
	for i := range 5 {
		code := pods[i%2].check(t, "tls-api", "user", "ann")
		if want := map[bool]int{true: http.StatusOK, false: http.StatusTooManyRequests}[i < 3]; code != want {
			t.Fatalf("request %d: %d, want %d\n%s", i+1, code, want, pods[i%2].log)
		}
	}
	waitEnforcement(t, ns, "three", counted(3, 2, 0))
}

// asKubelet returns the args and env (NAME=value) of the Deployment's
// limiter container as the kubelet would run it: env vars from
// secretKeyRefs read from their Secrets, and Secret volumes written to a
// directory that replaces their mount path in the args.
func asKubelet(t *testing.T, dep *appsv1.Deployment) (args, env []string) {
	t.Helper()
	ctx := context.Background()
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	secret := func(name string) *corev1.Secret {
		s := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: dep.Namespace, Name: name}, s); err != nil {
			t.Fatalf("Secret %s of the limiter pod: %v", name, err)
		}
		return s
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secret(ref.Name).Data[ref.Key]
			if !ok {
				t.Fatalf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			env = append(env, e.Name+"="+string(v))
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		default:
			t.Fatalf("env %s: a source this stand-in kubelet can't resolve: %+v", e.Name, e.ValueFrom)
		}
	}
	args = c.Args
	for _, m := range c.VolumeMounts {
		var vol *corev1.Volume
		for i := range spec.Volumes {
			if spec.Volumes[i].Name == m.Name {
				vol = &spec.Volumes[i]
			}
		}
		if vol == nil || vol.Secret == nil {
			t.Fatalf("mount %s: not a Secret volume: %+v", m.Name, vol)
		}
		dir := t.TempDir()
		s := secret(vol.Secret.SecretName)
		for _, item := range vol.Secret.Items {
			if err := os.WriteFile(filepath.Join(dir, item.Path), s.Data[item.Key], 0o444); err != nil {
				t.Fatal(err)
			}
		}
		var out []string
		for _, a := range args {
			out = append(out, strings.ReplaceAll(a, m.MountPath, dir))
		}
		args = out
	}
	return args, env
}

// argValue is the value of --name=value in args, or "".
func argValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}
