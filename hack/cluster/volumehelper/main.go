// Command volume-helper makes and removes the directories of the
// PersistentVolumes that local-path-provisioner provisions in the cluster
// of make e2e (hack/cluster): the provisioner runs it in a helper pod on
// the volume's node, as its setupCommand and teardownCommand, with
//
//	-p PATH -s SIZE_BYTES -m Filesystem|Block -a create|delete
//
// and the environment of its helper pod template: VOL_BASE, the one
// directory whose children it may make or remove, and VOL_OWNER, the uid
// and gid a new directory belongs to (the Redis pods' user). A new
// directory is that user's alone (0700), not the provisioner's default
// 0777. It acts on nothing but a directory pvc-* directly under VOL_BASE:
// a path elsewhere, or one that is a symbolic link, is refused with an
// error naming it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "volume-helper:", err)
		os.Exit(1)
	}
}

func run(args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("volume-helper", flag.ContinueOnError)
	fs.SetOutput(out)
	path := fs.String("p", "", "the volume's directory")
	size := fs.Int64("s", 0, "the claim's size in bytes (not enforced)")
	mode := fs.String("m", "Filesystem", "the volume mode: only Filesystem")
	action := fs.String("a", "", "create or delete")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *mode != "Filesystem" {
		return fmt.Errorf("-m %q: only Filesystem volumes", *mode)
	}
	if *size < 0 {
		return fmt.Errorf("-s %d: a size is not negative", *size)
	}
	base := getenv("VOL_BASE")
	if base == "" || !filepath.IsAbs(base) || filepath.Clean(base) != base || base == "/" {
		return fmt.Errorf("VOL_BASE=%q: want the absolute, clean directory of the volumes", base)
	}
	p := *path
	if p == "" || filepath.Clean(p) != p || filepath.Dir(p) != base || !strings.HasPrefix(filepath.Base(p), "pvc-") {
		return fmt.Errorf("-p %q: want a directory pvc-* directly under VOL_BASE %s", p, base)
	}
	switch *action {
	case "create":
		owner, err := strconv.Atoi(getenv("VOL_OWNER"))
		if err != nil || owner < 0 {
			return fmt.Errorf("VOL_OWNER=%q: want the uid of the volumes' user", getenv("VOL_OWNER"))
		}
		if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s exists and is not a directory (%v)", p, fi.Mode())
		}
		if err := os.Lchown(p, owner, owner); err != nil {
			return err
		}
		return os.Chmod(p, 0o700)
	case "delete":
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory (%v): not removing it", p, fi.Mode())
		}
		return os.RemoveAll(p)
	default:
		return fmt.Errorf("-a %q: want create or delete", *action)
	}
}
