// Command imagebuild builds the Sluice container images without a Docker
// daemon and without pulling anything: static Go binaries (CGO_ENABLED=0)
// on a base layer made here (a nonroot user 65532, /tmp, CA certificates),
// written as OCI image archives that docker load, podman load,
// kind load image-archive, skopeo and crane push all read.
//
//	go run ./hack/imagebuild -out dist/images -version 0.1.0 operator limiter
//
// `make images` runs it. The same inputs give the same image digest:
// timestamps come from SOURCE_DATE_EPOCH (0 when unset).
//
// It also makes the images of the one-node cluster that make e2e runs
// (hack/cluster/build.sh), none of which is pulled: the pod sandbox's
// pause and the tests' client (Go binaries of this module), CoreDNS (a
// binary built elsewhere: -binary coredns=PATH), and Debian's redis-server
// and nginx with the shared libraries ldd lists:
//
//	go run ./hack/imagebuild -out bin/cluster/images -registry e2e.sluice.local -version 7.0.15 redis
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	var (
		out      = flag.String("out", "dist/images", "`directory` for the image archives")
		registry = flag.String("registry", "ghcr.io/sluice-dev", "image `prefix`: images are <registry>/sluice-<component>:<version>")
		version  = flag.String("version", "", "release `version`: the image tag and org.opencontainers.image.version (required)")
		revision = flag.String("revision", "", "source `commit`, for org.opencontainers.image.revision")
		arch     = flag.String("arch", runtime.GOARCH, "target `GOARCH` (the OS is linux)")
		caCerts  = flag.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle `file` to put in the base layer (empty: none)")
		binaries = binaryFlag{}
	)
	flag.Var(binaries, "binary", "`component=path` of a prebuilt static binary, for a component that is not built here (coredns); repeatable")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: imagebuild [flags] component...   (components: %s)\n", componentNames())
		flag.PrintDefaults()
	}
	flag.Parse()
	if *version == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	created := time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fatal(fmt.Errorf("SOURCE_DATE_EPOCH: %w", err))
		}
		created = time.Unix(sec, 0).UTC()
	}
	root, err := moduleRoot()
	if err != nil {
		fatal(err)
	}
	work, err := os.MkdirTemp("", "imagebuild-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(work)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fatal(err)
	}

	for _, name := range flag.Args() {
		c, ok := components[name]
		if !ok {
			fatal(fmt.Errorf("unknown component %q (want one of %s)", name, componentNames()))
		}
		bin := binaries[name]
		switch {
		case len(c.HostExecutables) > 0:
			if *arch != runtime.GOARCH {
				fatal(fmt.Errorf("%s: made of this machine's executables, which are %s, not %s", name, runtime.GOARCH, *arch))
			}
		case bin != "":
		case c.Package == "":
			fatal(fmt.Errorf("%s is not built here: give its binary with -binary %s=PATH", name, name))
		default:
			bin = filepath.Join(work, name)
			if err := buildBinary(root, c.Package, *arch, bin); err != nil {
				fatal(err)
			}
		}
		opts := Options{
			Component: c, Registry: *registry, Version: *version, Revision: *revision,
			Arch: *arch, Created: created, BinaryFile: bin, CACerts: *caCerts,
		}
		img, ref, err := Build(opts)
		if err != nil {
			fatal(fmt.Errorf("%s: %w", name, err))
		}
		path := filepath.Join(*out, c.Image+".tar")
		if err := WriteArchive(path, img, ref, created); err != nil {
			fatal(fmt.Errorf("%s: %w", name, err))
		}
		digest, err := img.Digest()
		if err != nil {
			fatal(err)
		}
		fmt.Printf("%s  %s  %s\n", path, ref, digest)
	}
}

// binaryFlag maps components to prebuilt binaries: -binary name=path.
type binaryFlag map[string]string

func (b binaryFlag) String() string { return fmt.Sprint(map[string]string(b)) }

func (b binaryFlag) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("want component=path, got %q", v)
	}
	b[name] = path
	return nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "imagebuild:", err)
	os.Exit(1)
}
