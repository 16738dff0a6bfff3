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
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
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
	)
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
		bin := filepath.Join(work, name)
		if err := buildBinary(root, c.Package, *arch, bin); err != nil {
			fatal(err)
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

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "imagebuild:", err)
	os.Exit(1)
}
