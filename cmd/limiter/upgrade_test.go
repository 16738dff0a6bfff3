package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/limiter/config"
)

// previousRelease is the last commit whose operator wrote the snapshot
// document in format 1 (v1alpha1 specs) and whose limiter knows no other:
// hack/previous-release, which the e2e journey's upgrade reads too
// (hack/cluster/build.sh builds its images).
var previousRelease = func() string {
	b, err := os.ReadFile("../../hack/previous-release")
	if err != nil {
		return "unknown (hack/previous-release: " + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}()

// formatOneDocument is what the operator of previousRelease writes for one
// policy of domain shop, limit requests a minute per user: format 1, with
// no format field.
const formatOneDocument = `{"enforcement":"Enabled","policies":[{"namespace":"shop","name":"per-user","uid":"uid-per-user","generation":5,` +
	`"spec":{"domain":"shop","descriptors":[{"key":"user"}],"algorithm":"TokenBucket","rate":{"limit":5,"period":"1m0s"},"shadow":false,"failureMode":"Open"}}]}`

// TestUpgradeAcrossSnapshotFormats runs, on one snapshot ConfigMap, the
// limiter of previousRelease (built from this clone's history) beside
// this one, as during a rolling upgrade. Both load the previous
// operator's format-1 document and enforce it. When the new operator
// writes format 2, this limiter loads it; the previous one refuses it,
// saying why, and keeps enforcing its last good snapshot, ready.
func TestUpgradeAcrossSnapshotFormats(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release's limiter")
	}
	oldBin := buildPreviousLimiter(t)
	c, kubeconfig := apiServer(t)
	ctx := t.Context()
	ns := createNamespace(t, c, "upgrade")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap"},
		Data: map[string]string{config.DocumentKey: formatOneDocument}} // no data[version]: optional, and the previous limiter's hash is its own
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	args := []string{"--snapshot-configmap", ns + "/snap", "--kubeconfig", kubeconfig}
	old := startLimiterBinary(t, oldBin, nil, args...)
	cur := startLimiter(t, args...)
	for name, p := range map[string]*process{"previous": old, "this": cur} {
		waitLoaded(t, name, p, func(s string) bool { return s == "" })
		p.expectLimit(t, "ann", 5)
	}

	doc, v2 := snapshotDocument(2)
	if !strings.Contains(string(doc), `"format":2`) {
		t.Fatalf("the operator's document is not format 2: %.200s", doc)
	}
	setDocument(t, cm, doc, v2, false)
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if got := cur.admin(t, v2); got.LastError != "" {
		t.Errorf("this limiter on format 2: %+v", got)
	}
	cur.expectLimit(t, "bea", 2)

	refused := waitLoaded(t, "previous", old, func(s string) bool { return s != "" })
	if !strings.Contains(refused, "format") {
		t.Errorf("the previous limiter's error should name the format field: %q", refused)
	}
	old.expectLimit(t, "bea", 5) // its last good snapshot
	if code, rd := old.readyz(t); code != 200 {
		t.Errorf("the previous limiter is not ready on its last good snapshot: %d %+v", code, rd)
	}
	t.Logf("the previous release's limiter on a format-2 document: %s (still enforcing limit 5); this one loaded it (limit 2)", refused)
}

// waitLoaded polls p's admin endpoint until its last error satisfies ok,
// and returns that error.
func waitLoaded(t *testing.T, name string, p *process, ok func(lastError string) bool) string {
	t.Helper()
	deadline := time.Now().Add(settle)
	for {
		s := p.admin(t, "")
		if s.Version != "" && ok(s.LastError) {
			return s.LastError
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s limiter: not as awaited within %v; last seen %+v", name, settle, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// buildPreviousLimiter builds cmd/limiter of previousRelease from this
// clone's history into a temporary directory. Without that commit (a
// shallow clone) the test cannot run, and says so.
func buildPreviousLimiter(t *testing.T) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	repo := strings.TrimSpace(string(root))
	if err := exec.Command("git", "-C", repo, "cat-file", "-e", previousRelease+"^{commit}").Run(); err != nil {
		t.Skipf("commit %s is not in this clone's history (shallow?): %v", previousRelease, err)
	}
	dir := t.TempDir()
	archive := exec.Command("sh", "-c", "git -C \"$1\" archive --format=tar \"$2\" | tar -x -C \"$3\"", "sh", repo, previousRelease, dir)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("extracting %s: %v\n%s", previousRelease, err, out)
	}
	bin := filepath.Join(dir, "limiter-"+previousRelease)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/limiter")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the limiter of %s: %v\n%s", previousRelease, err, out)
	}
	return bin
}
