package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/limiter/compiled"
)

// LoadPath reads what `limiter --policies PATH` names: a policy file, an
// envoyproxy/ratelimit (ERL) configuration file, or a directory of either
// kind, told apart by their shape (an ERL file is a map with a domain, a
// policy file's documents have apiVersion and kind). In a directory, every
// regular file (or symlink to one, as a ConfigMap volume holds) whose name
// does not start with '.' is read, in name order; subdirectories are not.
// The policy files' documents are compiled together (at most one
// LimiterFleet among them), and each ERL file's domain is added to the
// snapshot, answered as ERL answers (compiled.ERLTree). A domain in two
// ERL files, or in an ERL file and a policy, is refused, naming both.
func LoadPath(path string) (*Snapshot, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		data, err := readBounded(path)
		if err != nil {
			return nil, err
		}
		if !isERL(data) {
			return Parse(path, data)
		}
		return loadFiles([]string{path}, map[string][]byte{path: data})
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var names []string
	contents := map[string][]byte{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		name := filepath.Join(path, e.Name())
		fi, err := os.Stat(name) // follows a symlink
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		data, err := readBounded(name)
		if err != nil {
			return nil, err
		}
		names = append(names, name)
		contents[name] = data
	}
	slices.Sort(names)
	return loadFiles(names, contents)
}

// readBounded reads a file of at most maxFileSize bytes.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: larger than %d MiB", path, maxFileSize>>20)
	}
	return data, nil
}

// loadFiles compiles the named files, policy files and ERL files.
func loadFiles(names []string, contents map[string][]byte) (*Snapshot, error) {
	var policies []Source
	var fleet *fileFleet
	var erls []*erlFile
	h := sha256.New()
	for _, name := range names {
		data := contents[name]
		if isERL(data) {
			f, err := parseERL(name, data)
			if err != nil {
				return nil, err
			}
			erls = append(erls, f)
			fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(name), len(data))
			h.Write(data)
			continue
		}
		ps, fl, err := decode(name, data)
		if err != nil {
			return nil, err
		}
		if fl != nil {
			if fleet != nil {
				return nil, fmt.Errorf("%s: a second LimiterFleet (%s/%s), after %s (%s/%s): the policy files hold at most one",
					fl.where, fl.Namespace, fl.Name, fleet.where, fleet.Namespace, fleet.Name)
			}
			fleet = fl
		}
		policies = append(policies, ps...)
	}
	snap, err := CompileSources(policies)
	if err != nil {
		return nil, err
	}
	if fleet != nil {
		if err := applyFleet(snap, &fleet.LimiterFleet, fleet.where); err != nil {
			return nil, err
		}
	}
	if len(erls) == 0 {
		return snap, nil
	}
	return withERL(snap, policies, erls, hex.EncodeToString(h.Sum(nil)))
}

// withERL is snap with the ERL files' domains added.
func withERL(snap *Snapshot, policies []Source, erls []*erlFile, erlHash string) (*Snapshot, error) {
	files := map[string]string{}
	for _, f := range erls {
		if other, ok := files[f.domain]; ok {
			return nil, fmt.Errorf("%s: duplicate domain '%s' in config file (also in %s)", f.name, f.domain, other)
		}
		files[f.domain] = f.name
		for i := range policies {
			if p := &policies[i]; p.Spec.Domain == f.domain {
				return nil, fmt.Errorf("%s: domain '%s' is an ERL file's and RateLimitPolicy %s/%s's: a domain is answered by one or the other",
					f.name, f.domain, p.Namespace, p.Name)
			}
		}
	}
	all := slices.Clone(snap.Policies)
	for _, f := range erls {
		all = append(all, f.policies...)
	}
	out := compiled.New(all)
	for _, f := range erls {
		out.SetERL(f.domain, f.tree)
	}
	out.Enforcement, out.Pods, out.ForwardAuth, out.Budgets, out.Source = snap.Enforcement, snap.Pods, snap.ForwardAuth, snap.Budgets, snap.Source
	out.Version = snap.Version + "+erl-" + erlHash[:16]
	return out, nil
}
