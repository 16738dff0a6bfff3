// Package docs_test checks the manual (README.md and docs/) against the real
// thing: every YAML object it shows is created on a real API server with the
// CRDs (server-side dry run) and loaded as a policy file, every command it shows
// against the standalone limiter runs against a real limiter process started
// as make run starts it and gets the documented status codes, its relative
// links resolve, and the limiter flags reference lists the limiter's flags.
// See markdown_test.go for how a block says how it is checked.
//
// TestDocBlocks and TestLimiterFlagsReference start an envtest API server and
// limiter processes (on ports the kernel gives, so beside any other run):
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s go test -race ./docs/
package docs_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/conversiontest"
	"github.com/sluice-dev/sluice/limiter/config"
)

// root is the repository, from this package's directory.
const root = ".."

var (
	k8s        client.Client
	limiterBin string
)

func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard())
	code := m.Run()
	if stopWebhook != nil {
		stopWebhook()
	}
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
			code = 1
		}
	}
	if work != "" {
		os.RemoveAll(work)
	}
	os.Exit(code)
}

var (
	env              *envtest.Environment
	stopWebhook      func()
	work             string
	startEnv, buildL sync.Once
	envErr, buildErr error
)

// apiServer starts the envtest API server with the CRDs the first time a
// test needs it (the checker's own tests and the link check need none).
func apiServer(t *testing.T) client.Client {
	t.Helper()
	startEnv.Do(func() {
		env = &envtest.Environment{
			CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
			ErrorIfCRDPathMissing: true,
			// KUBEBUILDER_ASSETS wins when set; hack/setup-envtest.sh builds these.
			BinaryAssetsDirectory: filepath.Join(root, "bin", "k8s"),
		}
		// RateLimitPolicy and LimiterFleet are stored as v1beta1: the
		// manual's v1alpha1 objects convert through the conversion webhook.
		conversiontest.Prepare(env)
		cfg, err := env.Start()
		if err != nil {
			_ = env.Stop()
			env, envErr = nil, fmt.Errorf("starting envtest (run make envtest): %w", err)
			return
		}
		if stopWebhook, envErr = conversiontest.Serve(env); envErr != nil {
			return
		}
		k8s, envErr = client.New(cfg, client.Options{Scheme: conversiontest.Scheme()})
	})
	if envErr != nil {
		t.Fatal(envErr)
	}
	return k8s
}

// limiterBinary builds cmd/limiter once.
func limiterBinary(t *testing.T) string {
	t.Helper()
	buildL.Do(func() {
		if work, buildErr = os.MkdirTemp("", "sluice-docs-"); buildErr != nil {
			return
		}
		limiterBin = filepath.Join(work, "limiter")
		build := exec.Command("go", "build", "-o", limiterBin, "./cmd/limiter")
		var out bytes.Buffer
		build.Dir, build.Stdout, build.Stderr = root, &out, &out
		if err := build.Run(); err != nil {
			buildErr = fmt.Errorf("building the limiter: %w\n%s", err, out.String())
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return limiterBin
}

// TestDocLinks fails on a relative link of the manual to a file that does not
// exist, or to an anchor its target has no heading for.
func TestDocLinks(t *testing.T) {
	files, err := manualFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		problems, err := checkLinks(root, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
	}
}

// TestDocBlocks runs or creates every fenced block of the manual, as its
// marker (or lack of one) says.
func TestDocBlocks(t *testing.T) {
	files, err := manualFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		content, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := parseBlocks(f, string(content))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			n++
			t.Run(fmt.Sprintf("%s:%d", f, b.line), func(t *testing.T) {
				// A panic would end the binary before TestMain stops envtest,
				// leaving its processes running.
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s: the checker panicked: %v", b, r)
					}
				}()
				checkBlock(t, b)
			})
		}
	}
	if n < 40 {
		t.Errorf("found %d blocks in the manual; the parser lost some", n)
	}
}

// checkBlock checks one block as its marker or info string says.
func checkBlock(t *testing.T, b block) {
	t.Helper()
	kind, arg, _ := strings.Cut(b.marker, ":")
	kind, arg = strings.TrimSpace(kind), strings.TrimSpace(arg)
	switch {
	case kind == "skip":
		if arg == "" {
			t.Errorf("%s: doccheck skip needs a reason (what runs it instead)", b)
		}
	case kind == "policy-spec", kind == "fleet-spec":
		obj, err := mergeFragment(kind, b.text)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		checkObjects(t, b, []map[string]any{obj}, "")
	case kind == "rejected":
		if arg == "" {
			t.Fatalf("%s: doccheck rejected needs the message the API server answers", b)
		}
		objs, err := decodeObjects(b.text)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		checkObjects(t, b, objs, arg)
	case strings.HasPrefix(b.marker, "limiter"):
		policies := []string{defaultPolicies(t)}
		for _, f := range strings.Fields(strings.TrimPrefix(b.marker, "limiter")) {
			v, ok := strings.CutPrefix(f, "policies=")
			if !ok {
				t.Fatalf("%s: doccheck limiter takes policies=FILE,FILE, not %q", b, f)
			}
			policies = strings.Split(v, ",")
		}
		runAgainstLimiter(t, b, policies)
	case b.marker != "":
		t.Fatalf("%s: unknown doccheck marker %q", b, b.marker)
	default:
		checkUnmarked(t, b)
	}
}

func checkUnmarked(t *testing.T, b block) {
	t.Helper()
	lang, _, _ := strings.Cut(strings.TrimSpace(b.info), " ")
	switch lang {
	case "", "text":
		// A drawing or output: nothing to run.
	case "yaml", "yml":
		objs, err := decodeObjects(b.text)
		if err != nil {
			t.Fatalf("%s: %v; mark it <!-- doccheck: skip: REASON --> if it is not for Sluice's API server", b, err)
		}
		checkObjects(t, b, objs, "")
	case "sh", "shell", "bash", "console":
		if !strings.Contains(b.text, "127.0.0.1:8080") && !strings.Contains(b.text, "localhost:8080") {
			t.Fatalf("%s: a command block that does not call the standalone limiter: mark it <!-- doccheck: skip: REASON --> naming what runs it", b)
		}
		runAgainstLimiter(t, b, []string{defaultPolicies(t)})
	default:
		t.Fatalf("%s: a ```%s block can't be run: mark it <!-- doccheck: skip: REASON -->", b, lang)
	}
}

// --- YAML: the API server and limiter/config ---------------------------------

const group = "ratelimit.sluice.dev"

// decodeObjects reads a block's YAML documents, each a RateLimitPolicy or a
// LimiterFleet.
func decodeObjects(text string) ([]map[string]any, error) {
	var objs []map[string]any
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(text, -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var obj map[string]any
		if err := yaml.UnmarshalStrict([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		apiVersion, _ := obj["apiVersion"].(string)
		kind, _ := obj["kind"].(string)
		if !strings.HasPrefix(apiVersion, group+"/") || (kind != "RateLimitPolicy" && kind != "LimiterFleet") {
			return nil, fmt.Errorf("document %d is %s %s, not a RateLimitPolicy or LimiterFleet of %s (a fragment? mark it policy-spec or fleet-spec)", i, apiVersion, kind, group)
		}
		objs = append(objs, obj)
	}
	if len(objs) == 0 {
		return nil, errors.New("no YAML document")
	}
	return objs, nil
}

// The objects a spec fragment is merged onto: a fragment's fields replace
// theirs, and a RateLimitPolicy fragment that names a domain is a whole spec.
const (
	basePolicy = `apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: docs-fragment, namespace: docs}
spec:
  domain: docs-api
  descriptors: [{key: user_id}]
  limit: {type: Rate, rate: {limit: 5, period: 1m}}
`
	baseFleet = `apiVersion: ratelimit.sluice.dev/v1beta1
kind: LimiterFleet
metadata: {name: docs-fragment, namespace: docs}
spec: {}
`
)

func mergeFragment(kind, text string) (map[string]any, error) {
	var frag struct {
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.UnmarshalStrict([]byte(text), &frag); err != nil {
		return nil, fmt.Errorf("a %s block must be one YAML object with spec: only: %w", kind, err)
	}
	if len(frag.Spec) == 0 {
		return nil, fmt.Errorf("a %s block needs spec: with fields", kind)
	}
	base := basePolicy
	if kind == "fleet-spec" {
		base = baseFleet
	}
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(base), &obj); err != nil {
		return nil, err
	}
	spec := obj["spec"].(map[string]any)
	if _, whole := frag.Spec["domain"]; whole && kind == "policy-spec" {
		spec = map[string]any{}
	}
	for k, v := range frag.Spec {
		spec[k] = v
	}
	obj["spec"] = spec
	return obj, nil
}

// checkObjects creates each object on the API server with a server-side dry
// run (and loads them as a limiter's policy file): all must be
// accepted, or, with rejected set, each refused with that text in the answer.
func checkObjects(t *testing.T, b block, objs []map[string]any, rejected string) {
	t.Helper()
	var (
		policyFile bytes.Buffer
		fleets     int
	)
	for i, obj := range objs {
		u := &unstructured.Unstructured{Object: obj}
		if u.GetNamespace() == "" {
			u.SetNamespace("default")
		}
		ensureNamespace(t, u.GetNamespace())
		err := apiServer(t).Create(context.Background(), u, client.DryRunAll)
		switch {
		case rejected == "" && err != nil:
			t.Errorf("%s: the API server refuses %s %s: %v", b, u.GetKind(), u.GetName(), err)
		case rejected != "" && err == nil:
			t.Errorf("%s: the API server accepts %s %s, which the manual shows as refused", b, u.GetKind(), u.GetName())
		case rejected != "" && !strings.Contains(err.Error(), rejected):
			t.Errorf("%s: the API server refuses %s %s with %q, not with the manual's %q", b, u.GetKind(), u.GetName(), err, rejected)
		}
		// A policy file holds policies and at most one LimiterFleet (its
		// forwardAuth, enforcement and entries).
		if u.GetKind() == "LimiterFleet" {
			if fleets++; fleets > 1 {
				continue
			}
		}
		js, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			policyFile.WriteString("---\n")
		}
		policyFile.Write(js)
		policyFile.WriteString("\n")
	}
	if policyFile.Len() == 0 {
		return
	}
	_, err := config.Parse(b.String(), policyFile.Bytes())
	switch {
	case rejected == "" && err != nil:
		t.Errorf("%s: limiter/config refuses it as a policy file: %v", b, err)
	case rejected != "" && err == nil:
		t.Errorf("%s: limiter/config accepts it as a policy file; the manual shows it refused", b)
	}
}

var namespaces sync.Map

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	if _, done := namespaces.Load(name); done {
		return
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := apiServer(t).Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	namespaces.Store(name, true)
}

// --- Commands: a real limiter, as make run starts it ----------------------------

// makeRun returns the limiter's arguments in the Makefile's run target, with
// its variables (POLICIES, the three addresses) still in them.
func makeRun(t *testing.T) []string {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^run:.*\n(?:\t.*\n)*?\t\$\(BIN\)/limiter (.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile's run target has no $(BIN)/limiter line")
	}
	return strings.Fields(string(m[1]))
}

func defaultPolicies(t *testing.T) string {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^POLICIES \?= (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile sets no POLICIES")
	}
	return string(m[1])
}

// limiter is a limiter process on free loopback ports.
type limiter struct {
	http, grpc, admin string // host:port
	log               bytes.Buffer
	mu                sync.Mutex
}

func (l *limiter) logs() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.log.String()
}

// startLimiter runs the limiter with make run's arguments on the policy files
// (joined into one), on port 0 of the addresses make run uses.
func startLimiter(t *testing.T, policies []string) *limiter {
	t.Helper()
	var joined bytes.Buffer
	for i, p := range policies {
		data, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatalf("doccheck limiter policies: %v", err)
		}
		if i > 0 {
			joined.WriteString("\n---\n")
		}
		joined.Write(data)
	}
	file := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(file, joined.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"$(POLICIES)": file, "$(HTTP_ADDR)": "127.0.0.1:0", "$(GRPC_ADDR)": "127.0.0.1:0", "$(ADMIN_ADDR)": "127.0.0.1:0"}
	args := makeRun(t)
	for i, a := range args {
		if v, ok := vars[a]; ok {
			args[i] = v
		} else if strings.Contains(a, "$(") {
			t.Fatalf("make run's limiter argument %q: the test knows no such variable", a)
		}
	}
	// JSON logs tell the addresses it serves on; no drain: nothing routes to it.
	args = append(args, "--log-format", "json", "--drain-delay", "0s")
	cmd := exec.Command(limiterBinary(t), args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l := &limiter{}
	serving := make(chan [3]string, 1)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			l.mu.Lock()
			l.log.Write(sc.Bytes())
			l.log.WriteByte('\n')
			l.mu.Unlock()
			var rec struct{ Msg, GRPC, HTTP, Admin string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "Serving" {
				serving <- [3]string{rec.GRPC, rec.HTTP, rec.Admin}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("limiter exited with %v after SIGTERM, want 0\n%s", err, l.logs())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("limiter did not exit within 30s of SIGTERM\n%s", l.logs())
		}
	})
	select {
	case a := <-serving:
		l.grpc, l.http, l.admin = a[0], a[1], a[2]
	case err := <-exited:
		exited <- err
		t.Fatalf("limiter (%s) exited before serving: %v\n%s", strings.Join(args, " "), err, l.logs())
	case <-time.After(60 * time.Second):
		t.Fatalf("limiter did not serve within 60s\n%s", l.logs())
	}
	return l
}

var (
	statusLineRE = regexp.MustCompile(`^HTTP/[0-9.]+ (\d{3})\b`)
	bareCodeRE   = regexp.MustCompile(`^\d{3}$`)
	codesOnlyRE  = regexp.MustCompile(`^#\s*(\d{3}(\s+\d{3})*)\s*$`)
)

// codes returns the status codes in output: HTTP status lines (curl -i, -D -)
// and lines that are a code alone (curl -w '%{http_code}\n').
func codes(output string) []string {
	var out []string
	for _, line := range strings.Split(output, "\n") {
		line = strings.TrimSpace(line)
		if m := statusLineRE.FindStringSubmatch(line); m != nil {
			out = append(out, m[1])
		} else if bareCodeRE.MatchString(line) {
			out = append(out, line)
		}
	}
	return out
}

// jsonLines returns the lines of output that are JSON objects.
func jsonLines(output string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(output, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var v map[string]any
		if json.Unmarshal([]byte(line), &v) == nil {
			out = append(out, v)
		} else {
			out = append(out, map[string]any{"(not JSON)": line})
		}
	}
	return out
}

func keys(m map[string]any) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

// command is one command of a block, with its documented output.
type command struct {
	run, want string
	json      bool // compare JSON answers too (console blocks show them; sh blocks only in comments)
}

// commands splits a block into its commands: in a console block, each "$ "
// line (with its continuation lines) and the output lines after it; in a sh
// block, the whole script and the codes of its "# 200 429" comment lines.
func commands(b block) []command {
	if b.info != "console" {
		var want []string
		for _, line := range strings.Split(b.text, "\n") {
			if m := codesOnlyRE.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
				want = append(want, strings.Fields(m[1])...)
			}
		}
		return []command{{run: b.text, want: strings.Join(want, "\n") + "\n"}}
	}
	var (
		cmds []command
		cur  *command
		cont bool
	)
	for _, line := range strings.Split(b.text, "\n") {
		switch {
		case cont && cur != nil:
			cur.run += "\n" + line
		case strings.HasPrefix(line, "$ "):
			cmds = append(cmds, command{run: strings.TrimPrefix(line, "$ "), json: true})
			cur = &cmds[len(cmds)-1]
		case cur != nil:
			cur.want += line + "\n"
		}
		cont = strings.HasSuffix(line, "\\")
	}
	return cmds
}

// runAgainstLimiter runs each command of the block against a fresh limiter
// (its addresses put in place of make run's) and checks the documented status
// codes, and that documented JSON answers come back as JSON of the same fields.
func runAgainstLimiter(t *testing.T, b block, policies []string) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("%s: the manual's commands need curl: make deps installs it (%v)", b, err)
	}
	cmds := commands(b)
	if len(cmds) == 0 {
		t.Fatalf("%s: no command in it", b)
	}
	l := startLimiter(t, policies)
	addrs := strings.NewReplacer("127.0.0.1:8080", l.http, "localhost:8080", l.http, "127.0.0.1:8081", l.grpc, "127.0.0.1:8082", l.admin)
	for _, c := range cmds {
		wantCodes, wantJSON := codes(c.want), jsonLines(c.want)
		if len(wantCodes) == 0 && len(wantJSON) == 0 {
			t.Errorf("%s: command %q documents no answer (status codes or JSON) to check", b, c.run)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		sh := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", addrs.Replace(c.run))
		var stdout, stderr bytes.Buffer
		sh.Stdout, sh.Stderr, sh.Dir = &stdout, &stderr, t.TempDir()
		err := sh.Run()
		cancel()
		if err != nil {
			t.Errorf("%s: %q: %v\nstdout:\n%s\nstderr:\n%s\nlimiter:\n%s", b, c.run, err, stdout.String(), stderr.String(), l.logs())
			continue
		}
		out := strings.ReplaceAll(stdout.String(), "\r", "")
		if got := codes(out); strings.Join(got, " ") != strings.Join(wantCodes, " ") {
			t.Errorf("%s: %q answered status codes %v, the manual says %v\noutput:\n%s", b, c.run, got, wantCodes, out)
		}
		if !c.json {
			continue
		}
		gotJSON := jsonLines(out)
		if len(gotJSON) != len(wantJSON) {
			t.Errorf("%s: %q answered %d JSON objects, the manual shows %d\noutput:\n%s", b, c.run, len(gotJSON), len(wantJSON), out)
			continue
		}
		for i := range wantJSON {
			if keys(gotJSON[i]) != keys(wantJSON[i]) {
				t.Errorf("%s: %q answered JSON with fields %s, the manual shows %s\noutput:\n%s", b, c.run, keys(gotJSON[i]), keys(wantJSON[i]), out)
			}
		}
	}
}

// --- The limiter flags reference --------------------------------------------------

// TestLimiterFlagsReference fails when docs/reference/limiter-flags.md and
// the limiter's --help list different flags.
func TestLimiterFlagsReference(t *testing.T) {
	out, _ := exec.Command(limiterBinary(t), "--help").CombinedOutput() // flag's -help exits 0 or 2
	have := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		have[m[1]] = true
	}
	if len(have) < 10 {
		t.Fatalf("limiter --help lists %d flags:\n%s", len(have), out)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "reference", "limiter-flags.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)[ `]").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	for f := range have {
		if !documented[f] {
			t.Errorf("limiter flag --%s is missing from docs/reference/limiter-flags.md", f)
		}
	}
	for f := range documented {
		if !have[f] {
			t.Errorf("docs/reference/limiter-flags.md documents --%s, which the limiter does not have", f)
		}
	}
}
