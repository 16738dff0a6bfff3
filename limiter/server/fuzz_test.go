package server

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// FuzzDecodeCheckRequest feeds arbitrary bodies to the HTTP check decoder.
// It must never panic; whatever it accepts must pass the service's
// validation and survive a JSON round trip unchanged. The seeds in
// testdata/fuzz/FuzzDecodeCheckRequest run with every `go test`.
func FuzzDecodeCheckRequest(f *testing.F) {
	m := memory.New(memory.Options{SweepInterval: -1})
	f.Cleanup(func() { _ = m.Close() })
	svc := service.New(m, service.Options{})
	validate := func(req *rlsv3.RateLimitRequest) error { return validateRLS(svc, req) }

	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeCheckRequest(body, validate)
		if err != nil {
			if req != nil {
				t.Fatalf("error %v with a request", err)
			}
			if err.Error() == "" || strings.HasPrefix(err.Error(), "proto:") {
				t.Fatalf("error %q: want a message of our own", err)
			}
			return
		}
		if err := validate(req); err != nil {
			t.Fatalf("accepted a request the service rejects: %v", err)
		}
		again, err := protojson.Marshal(req)
		if err != nil {
			t.Fatalf("re-encoding an accepted request: %v", err)
		}
		req2, err := decodeCheckRequest(again, validate)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", again, err)
		}
		if !proto.Equal(req, req2) {
			t.Fatalf("round trip changed the request: %v became %v", req, req2)
		}
	})
}

// TestFuzzSeeds keeps the seed corpus meaningful: seeds named valid-*
// decode and seeds named invalid-* don't. The valid-refused-* ones decode,
// and the service refuses them: a denial, never an error (a gateway fails
// open on errors).
func TestFuzzSeeds(t *testing.T) {
	m := memory.New(memory.Options{SweepInterval: -1})
	defer m.Close()
	svc := service.New(m, service.Options{})
	files, err := filepath.Glob("testdata/fuzz/FuzzDecodeCheckRequest/*")
	if err != nil || len(files) < 8 {
		t.Fatalf("%d seeds (%v), want at least 8", len(files), err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		_, err := decodeCheckRequest(readSeed(t, f), func(req *rlsv3.RateLimitRequest) error { return validateRLS(svc, req) })
		switch {
		case strings.HasPrefix(name, "valid-") && err != nil:
			t.Errorf("seed %s: %v, want it accepted", name, err)
		case strings.HasPrefix(name, "invalid-") && err == nil:
			t.Errorf("seed %s accepted, want an error", name)
		case !strings.HasPrefix(name, "valid-") && !strings.HasPrefix(name, "invalid-"):
			t.Errorf("seed %s: name it valid-* or invalid-*", name)
		default:
			t.Logf("seed %s: %v", name, err)
		}
	}
}

// readSeed reads a "go test fuzz v1" file holding one []byte.
func readSeed(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(b), "\n", 2)
	if len(lines) != 2 || lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a go test fuzz v1 file", path)
	}
	v := strings.TrimSpace(lines[1])
	if !strings.HasPrefix(v, "[]byte(") || !strings.HasSuffix(v, ")") {
		t.Fatalf("%s: want one []byte value", path)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(v, "[]byte("), ")"))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return []byte(s)
}
