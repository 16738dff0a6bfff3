package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the user and group the images run as, distroless's "nonroot".
const NonRoot = 65532

// Component is one binary and the image that holds it: a static Go binary
// (one of the project's, or one built elsewhere and given with -binary), or
// executables of this machine with the shared libraries ldd lists.
type Component struct {
	// Package is the main package, relative to the module root; empty for a
	// prebuilt binary (-binary) or host executables.
	Package string
	// HostExecutables are dynamically linked executables of this machine,
	// put in the image at the same paths with every library ldd lists for
	// them (and the dynamic loader), instead of a Go binary.
	HostExecutables []string
	// Image is the image name under the registry, and the archive's name.
	Image string
	// Entrypoint is the binary's path in the image.
	Entrypoint string
	// Description is org.opencontainers.image.description.
	Description string
	// Ports are the TCP ports the binary listens on by default.
	Ports []int
}

var components = map[string]Component{
	"operator": {
		Package: "./cmd/operator", Image: "sluice-operator", Entrypoint: "/operator",
		Description: "Sluice operator: compiles RateLimitPolicies into snapshots and runs LimiterFleets",
		Ports:       []int{8080, 8081}, // metrics, health probes
	},
	"limiter": {
		Package: "./cmd/limiter", Image: "sluice-limiter", Entrypoint: "/limiter",
		Description: "Sluice limiter: Envoy RLS v3 and HTTP rate limit service",
		Ports:       []int{8080, 8081, 8082}, // HTTP, gRPC, admin
	},

	// The load generator, to run in a pod against a fleet's Services
	// (loadgen --allow-remote --addr dns:///<fleet>-limiter-headless...).
	"loadgen": {
		Package: "./cmd/loadgen", Image: "sluice-loadgen", Entrypoint: "/loadgen",
		Description: "Sluice load generator: Envoy RLS v3 load and the decisions/s and latency it gets",
	},

	// The images of the one-node cluster of make e2e (hack/cluster),
	// which pulls nothing: each is made here from a binary of ours, a
	// binary built from the Go module proxy, or a Debian package.
	"pause": {
		Package: "./hack/cluster/pause", Image: "pause", Entrypoint: "/pause",
		Description: "The pod sandbox's process: waits for a signal (hack/cluster)",
	},
	"e2e-client": {
		Package: "./test/e2e/e2eclient", Image: "e2e-client", Entrypoint: "/e2eclient",
		Description: "Client, load generator and test app of the end-to-end tests (test/e2e)",
		Ports:       []int{8000},
	},
	"coredns": {
		Image: "coredns", Entrypoint: "/coredns",
		Description: "CoreDNS, built from the Go module proxy (-binary coredns=PATH)",
		Ports:       []int{53},
	},
	"local-path-provisioner": {
		Image: "local-path-provisioner", Entrypoint: "/local-path-provisioner",
		Description: "rancher's local-path-provisioner, built from the Go module proxy (-binary local-path-provisioner=PATH)",
	},
	"volume-helper": {
		Package: "./hack/cluster/volumehelper", Image: "volume-helper", Entrypoint: "/volume-helper",
		Description: "Makes and removes local-path-provisioner's volume directories (hack/cluster)",
	},
	"redis": {
		HostExecutables: []string{"/usr/bin/redis-server"}, Image: "redis", Entrypoint: "/usr/bin/redis-server",
		Description: "Debian's redis-server and the libraries it links",
		Ports:       []int{6379},
	},
	"nginx": {
		HostExecutables: []string{"/usr/sbin/nginx"}, Image: "nginx", Entrypoint: "/usr/sbin/nginx",
		Description: "Debian's nginx and the libraries it links",
		Ports:       []int{8080},
	},
}

func componentNames() string {
	var names []string
	for n := range components {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// Options say what to build.
type Options struct {
	Component
	// Registry prefixes the image name, such as "ghcr.io/sluice-dev".
	Registry string
	// Version is the tag and org.opencontainers.image.version.
	Version string
	// Revision is the source commit; no revision label when empty.
	Revision string
	// Arch is the GOARCH the binary was built for.
	Arch string
	// Created is the time of every file, layer and the image.
	Created time.Time
	// BinaryFile is the static binary to put at Entrypoint; unused with
	// HostExecutables.
	BinaryFile string
	// CACerts is a CA bundle for /etc/ssl/certs/ca-certificates.crt; none
	// when empty.
	CACerts string
}

// Labels are the image's OCI annotation labels.
func (o Options) Labels() map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       o.Image,
		"org.opencontainers.image.description": o.Description,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.source":      "https://github.com/sluice-dev/sluice",
		"org.opencontainers.image.url":         "https://github.com/sluice-dev/sluice",
	}
	if o.Revision != "" {
		l["org.opencontainers.image.revision"] = o.Revision
	}
	return l
}

// Build returns the image of opts and its tag: two layers on nothing, the
// base (users, /tmp, CA certificates) and the binary.
func Build(opts Options) (v1.Image, name.Tag, error) {
	ref, err := name.NewTag(fmt.Sprintf("%s/%s:%s", opts.Registry, opts.Image, opts.Version), name.StrictValidation)
	if err != nil {
		return nil, ref, err
	}
	base, err := baseLayer(opts)
	if err != nil {
		return nil, ref, err
	}
	binLayer, err := binaryLayer(opts)
	if err != nil {
		return nil, ref, err
	}
	createdBy := fmt.Sprintf("imagebuild: %s (CGO_ENABLED=0 go build %s)", opts.Entrypoint, opts.Package)
	switch {
	case len(opts.HostExecutables) > 0:
		createdBy = fmt.Sprintf("imagebuild: %s and the libraries ldd lists", strings.Join(opts.HostExecutables, ", "))
	case opts.Package == "":
		createdBy = fmt.Sprintf("imagebuild: %s (a prebuilt static binary)", opts.Entrypoint)
	}
	created := v1.Time{Time: opts.Created.UTC()}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "imagebuild: base (nonroot user 65532, /tmp, CA certificates)",
		}},
		mutate.Addendum{Layer: binLayer, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: createdBy,
		}},
	)
	if err != nil {
		return nil, ref, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, ref, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", opts.Arch, created
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	if opts.CACerts != "" {
		env = append(env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
	}
	ports := map[string]struct{}{}
	for _, p := range opts.Ports {
		ports[fmt.Sprintf("%d/tcp", p)] = struct{}{}
	}
	cf.Config = v1.Config{
		Entrypoint:   []string{opts.Entrypoint},
		User:         fmt.Sprintf("%d:%d", NonRoot, NonRoot),
		WorkingDir:   "/",
		Env:          env,
		ExposedPorts: ports,
		Labels:       opts.Labels(),
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, ref, err
	}
	img = mutate.Annotations(img, opts.Labels()).(v1.Image)
	return img, ref, nil
}

// tarEntry is one file or directory of a layer.
type tarEntry struct {
	path     string // relative, directories end in "/"
	mode     int64
	uid      int
	data     []byte
	fromFile string // read data from this file
}

func baseLayer(opts Options) (v1.Layer, error) {
	entries := []tarEntry{
		{path: "etc/", mode: 0o755},
		{path: "etc/passwd", mode: 0o644, data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		// Go's resolver reads it: files before DNS.
		{path: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
	}
	if opts.CACerts != "" {
		entries = append(entries,
			tarEntry{path: "etc/ssl/", mode: 0o755},
			tarEntry{path: "etc/ssl/certs/", mode: 0o755},
			tarEntry{path: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, fromFile: opts.CACerts},
		)
	}
	entries = append(entries,
		tarEntry{path: "home/", mode: 0o755},
		tarEntry{path: "home/nonroot/", mode: 0o700, uid: NonRoot},
		tarEntry{path: "root/", mode: 0o700},
		tarEntry{path: "tmp/", mode: 0o1777},
	)
	return layer(entries, opts.Created)
}

func binaryLayer(opts Options) (v1.Layer, error) {
	if len(opts.HostExecutables) > 0 {
		entries, err := hostEntries(opts.HostExecutables)
		if err != nil {
			return nil, err
		}
		return layer(entries, opts.Created)
	}
	return layer([]tarEntry{{path: strings.TrimPrefix(opts.Entrypoint, "/"), mode: 0o755, fromFile: opts.BinaryFile}}, opts.Created)
}

// hostEntries are the executables and every shared library ldd lists for
// them, each at its path on this machine (symbolic links followed: the
// file's content is stored under the name the program or the loader asks
// for), with their parent directories, sorted and without duplicates.
func hostEntries(executables []string) ([]tarEntry, error) {
	files := map[string]bool{}
	for _, exe := range executables {
		files[exe] = true
		libs, err := lddLibraries(exe)
		if err != nil {
			return nil, err
		}
		for _, l := range libs {
			files[l] = true
		}
	}
	dirs := map[string]bool{}
	for f := range files {
		for d := filepath.Dir(f); d != "/"; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var entries []tarEntry
	for d := range dirs {
		entries = append(entries, tarEntry{path: strings.TrimPrefix(d, "/") + "/", mode: 0o755})
	}
	for f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return nil, err
		}
		entries = append(entries, tarEntry{path: strings.TrimPrefix(f, "/"), mode: int64(fi.Mode().Perm()), fromFile: f})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	return entries, nil
}

// lddLibraries runs ldd on exe and returns the absolute paths it lists:
// each library and the dynamic loader (not the vDSO, which has none).
func lddLibraries(exe string) ([]string, error) {
	out, err := exec.Command("ldd", exe).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %v\n%s", exe, err, out)
	}
	return parseLdd(string(out))
}

// parseLdd reads ldd's output: "libssl.so.3 => /lib/.../libssl.so.3 (0x...)",
// "/lib64/ld-linux-x86-64.so.2 (0x...)" or "linux-vdso.so.1 (0x...)".
func parseLdd(out string) ([]string, error) {
	var paths []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("ldd: %s", line)
		}
		if _, after, ok := strings.Cut(line, "=>"); ok {
			line = strings.TrimSpace(after)
		}
		path, _, _ := strings.Cut(line, " ")
		if strings.HasPrefix(path, "/") {
			paths = append(paths, path)
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("ldd listed no library: %q", out)
	}
	return paths, nil
}

// layer builds a tar of entries, every one owned by root unless it says
// otherwise and dated created, and makes it a gzip OCI layer. It compresses
// once, here (Go's gzip output depends only on its input and level), so
// that digests and archives reuse the bytes.
func layer(entries []tarEntry, created time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name: e.path, Mode: e.mode, Uid: e.uid, Gid: e.uid,
			ModTime: created.UTC(), Format: tar.FormatPAX,
		}
		data := e.data
		if e.fromFile != "" {
			var err error
			if data, err = os.ReadFile(e.fromFile); err != nil {
				return nil, err
			}
		}
		if strings.HasSuffix(e.path, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(buf.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	b := gz.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// WriteArchive writes img as one tar that is both an OCI image layout
// (oci-layout, index.json, blobs/) and a docker save archive (manifest.json
// naming the same blobs), as docker save writes since Docker 25: every
// loader reads it, and each blob is stored once.
func WriteArchive(path string, img v1.Image, ref name.Tag, created time.Time) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	add := func(name string, r io.Reader, size int64) error {
		h := &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: created.UTC(), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	addBytes := func(name string, b []byte) error { return add(name, bytes.NewReader(b), int64(len(b))) }
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

	if err := addBytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	var layerNames []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		err = add(blob(d), rc, size)
		rc.Close()
		if err != nil {
			return err
		}
		layerNames = append(layerNames, blob(d))
	}
	if err := addBytes(blob(configName), config); err != nil {
		return err
	}
	if err := addBytes(blob(digest), manifest); err != nil {
		return err
	}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: mt, Digest: digest, Size: int64(len(manifest)),
			Annotations: map[string]string{
				"org.opencontainers.image.ref.name": ref.TagStr(),
				"io.containerd.image.name":          ref.String(),
			},
		}},
	})
	if err != nil {
		return err
	}
	if err := addBytes("index.json", index); err != nil {
		return err
	}
	dockerManifest, err := json.Marshal([]struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{{Config: blob(configName), RepoTags: []string{ref.String()}, Layers: layerNames}})
	if err != nil {
		return err
	}
	if err := addBytes("manifest.json", dockerManifest); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// buildBinary builds pkg as a static linux/arch binary at out.
func buildBinary(moduleRoot, pkg, arch, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = moduleRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot() (string, error) {
	b, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(b))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside the module")
	}
	return filepath.Dir(gomod), nil
}
