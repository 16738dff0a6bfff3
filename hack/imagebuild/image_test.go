package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImages builds the Go images from the real binaries, writes their
// archives, reads each back as a docker save archive and as an OCI layout,
// and checks what a runtime would run: the entrypoint, the user, the labels,
// and that the binary layer holds a static executable.
func TestImages(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []string{"operator", "limiter", "loadgen", "pause"} {
		t.Run(c, func(t *testing.T) {
			t.Parallel()
			comp := components[c]
			dir := t.TempDir()
			bin := filepath.Join(dir, c)
			if err := buildBinary(root, comp.Package, runtime.GOARCH, bin); err != nil {
				t.Fatal(err)
			}
			opts := Options{
				Component: comp, Registry: "ghcr.io/sluice-dev", Version: "1.2.3",
				Revision: "0123456789abcdef0123456789abcdef01234567", Arch: runtime.GOARCH,
				Created: created, BinaryFile: bin, CACerts: caBundle(t),
			}
			img, ref, err := Build(opts)
			if err != nil {
				t.Fatal(err)
			}
			archive := filepath.Join(dir, comp.Image+".tar")
			if err := WriteArchive(archive, img, ref, created); err != nil {
				t.Fatal(err)
			}

			// docker load's view: manifest.json.
			tag, _ := name.NewTag("ghcr.io/sluice-dev/" + comp.Image + ":1.2.3")
			loaded, err := tarball.ImageFromPath(archive, &tag)
			if err != nil {
				t.Fatalf("reading %s as a docker archive: %v", archive, err)
			}
			checkConfig(t, loaded, opts)
			checkLayers(t, loaded, opts)

			// An OCI runtime's view: the image layout, the same blobs.
			ociImg := readLayout(t, archive, tag.String())
			checkConfig(t, ociImg, opts)
			want, _ := img.Digest()
			if got, _ := ociImg.Digest(); got != want {
				t.Errorf("OCI layout image digest %s, want %s", got, want)
			}
			if mt, _ := ociImg.MediaType(); mt != "application/vnd.oci.image.manifest.v1+json" {
				t.Errorf("manifest media type %s, want OCI", mt)
			}
		})
	}
}

// TestReproducible builds an image twice from the same inputs and gets the
// same digest, and a different one for a different time. (A small stand-in
// binary keeps it quick under -race; TestImages covers the real ones.)
func TestReproducible(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "operator")
	data := bytes.Repeat([]byte("\x7fELF sluice "), 100_000)
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Component: components["operator"], Registry: "ghcr.io/sluice-dev", Version: "1.2.3",
		Arch: "amd64", Created: time.Unix(1700000000, 0), BinaryFile: bin, CACerts: caBundle(t),
	}
	digest := func(o Options) v1.Hash {
		img, ref, err := Build(o)
		if err != nil {
			t.Fatal(err)
		}
		// Through an archive too, as make images writes it.
		path := filepath.Join(t.TempDir(), "image.tar")
		if err := WriteArchive(path, img, ref, o.Created); err != nil {
			t.Fatal(err)
		}
		loaded := readLayout(t, path, ref.String())
		d, err := loaded.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first, second := digest(opts), digest(opts)
	if first != second {
		t.Errorf("two builds of the same inputs: %s and %s", first, second)
	}
	later := opts
	later.Created = opts.Created.Add(time.Second)
	if digest(later) == first {
		t.Error("a different SOURCE_DATE_EPOCH gave the same digest")
	}
}

func checkConfig(t *testing.T, img v1.Image, opts Options) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.Config.Entrypoint; len(got) != 1 || got[0] != opts.Entrypoint {
		t.Errorf("entrypoint %q, want [%s]", got, opts.Entrypoint)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (nonroot)", cf.Config.User)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.title":    opts.Image,
		"org.opencontainers.image.version":  "1.2.3",
		"org.opencontainers.image.revision": opts.Revision,
		"org.opencontainers.image.created":  "2025-01-02T03:04:05Z",
		"org.opencontainers.image.source":   "https://github.com/sluice-dev/sluice",
	} {
		if got := cf.Config.Labels[k]; got != v {
			t.Errorf("label %s = %q, want %q", k, got, v)
		}
	}
	if cf.Config.Labels["org.opencontainers.image.description"] == "" {
		t.Error("no org.opencontainers.image.description label")
	}
	for _, p := range opts.Ports {
		if _, ok := cf.Config.ExposedPorts[itoa(p)+"/tcp"]; !ok {
			t.Errorf("port %d/tcp not exposed: %v", p, cf.Config.ExposedPorts)
		}
	}
	if !cf.Created.Time.Equal(opts.Created) {
		t.Errorf("created %v, want %v", cf.Created.Time, opts.Created)
	}
}

// checkLayers checks the base layer's users and directories, and that the
// binary layer holds the entrypoint as a static linux executable.
func checkLayers(t *testing.T, img v1.Image, opts Options) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want 2 (base, binary)", len(layers))
	}
	base := files(t, layers[0])
	if passwd := string(base["etc/passwd"].data); !strings.Contains(passwd, "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", passwd)
	}
	if h := base["tmp/"].hdr; h == nil || h.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp missing or not 1777: %+v", h)
	}
	if h := base["home/nonroot/"].hdr; h == nil || h.Uid != 65532 {
		t.Errorf("/home/nonroot missing or not owned by 65532: %+v", h)
	}
	if !bytes.Contains(base["etc/ssl/certs/ca-certificates.crt"].data, []byte("BEGIN CERTIFICATE")) {
		t.Error("no CA certificates in /etc/ssl/certs/ca-certificates.crt")
	}

	bin := files(t, layers[1])
	f, ok := bin[strings.TrimPrefix(opts.Entrypoint, "/")]
	if !ok || len(bin) != 1 {
		t.Fatalf("binary layer holds %v, want only %s", keys(bin), opts.Entrypoint)
	}
	if f.hdr.Mode&0o111 == 0 || f.hdr.Uid != 0 {
		t.Errorf("%s: mode %o uid %d, want an executable owned by root", opts.Entrypoint, f.hdr.Mode, f.hdr.Uid)
	}
	onDisk, err := os.ReadFile(opts.BinaryFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.data, onDisk) {
		t.Errorf("%s in the image differs from the built binary", opts.Entrypoint)
	}
	exe, err := elf.NewFile(bytes.NewReader(f.data))
	if err != nil {
		t.Fatalf("%s is not an ELF executable: %v", opts.Entrypoint, err)
	}
	for _, p := range exe.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked; the base layer has no libc", opts.Entrypoint)
		}
	}
}

type file struct {
	hdr  *tar.Header
	data []byte
}

func files(t *testing.T, l v1.Layer) map[string]file {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]file{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = file{hdr: h, data: data}
	}
}

// readLayout extracts archive and reads it as an OCI image layout, finding
// the image by its containerd name annotation.
func readLayout(t *testing.T, archive, ref string) v1.Image {
	t.Helper()
	dir := t.TempDir()
	a, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tr := tar.NewReader(a)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("reading %s as an OCI layout: %v", archive, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations["io.containerd.image.name"] != ref {
		t.Fatalf("index.json manifests %+v, want one named %s", m.Manifests, ref)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// caBundle is the machine's CA bundle, which make images puts in the base
// layer too.
func caBundle(t *testing.T) string {
	const path = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s: %v (install Debian's ca-certificates)", path, err)
	}
	return path
}

// TestDockerfile checks that the Dockerfile, for those with a Docker daemon,
// builds what imagebuild builds: the same entrypoints and user.
func TestDockerfile(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for c, comp := range components {
		stage := regexp.MustCompile(`(?ms)^FROM \S+ AS ` + c + `\n(.*?)(^FROM |\z)`).FindStringSubmatch(text)
		if stage == nil {
			t.Errorf("Dockerfile has no final stage %q", c)
			continue
		}
		for _, want := range []string{
			`ENTRYPOINT ["` + comp.Entrypoint + `"]`,
			"USER 65532:65532",
			`org.opencontainers.image.title="` + comp.Image + `"`,
		} {
			if !strings.Contains(stage[1], want) {
				t.Errorf("Dockerfile stage %s lacks %s", c, want)
			}
		}
	}
}

func keys(m map[string]file) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}

func itoa(i int) string { return strconv.Itoa(i) }
