package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch timing: a burst of events (an editor's write-rename-chmod, a
// ConfigMap's symlink swap) is loaded once, watchDebounce after its last
// event, and at most watchMaxDelay after its first.
const (
	watchDebounce = 50 * time.Millisecond
	watchMaxDelay = 500 * time.Millisecond
)

// Watch hot-reloads the policy file at path until ctx ends. path may be
// a directory of policy files and ERL files (see LoadPath): then the
// directory itself is watched, and any change in it reloads every file.
//
// It watches the file's directory rather than the file, so that every way of
// replacing a file is seen: writing it in place, renaming a new file over it
// (editors, atomic writers), and swapping the "..data" symlink that a
// Kubernetes ConfigMap volume points the file through. When path is a
// symlink into another directory, that directory is watched too.
//
// Once the watch is in place, Watch loads the file and calls onLoad (or
// onError), so that a change between the caller's own first load and the
// watch is never missed. After that, each burst of events is debounced and
// the file re-read with LoadFile: onLoad is called only when the snapshot's
// Version differs from the last one passed to onLoad, and onError when the
// file can't be read or is invalid. A bad file is never half-applied: the
// caller keeps the snapshot it has. After an onError, the next good load is
// passed to onLoad even when its version is the one the caller has, so that
// the caller learns the file is good again. onLoad and onError are called from one
// goroutine, never concurrently.
//
// Watch returns nil when ctx ends, or an error when the directory can't be
// watched.
func Watch(ctx context.Context, path string, onLoad func(*Snapshot), onError func(error)) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	defer w.Close()
	dir := filepath.Dir(abs)
	isDir := false
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		dir, isDir = abs, true
	}
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch %s: directory %s: %w", path, dir, err)
	}
	fw := &fileWatch{path: abs, dir: dir, w: w, isDir: isDir}
	var version string
	load := func() {
		if !fw.isDir {
			fw.follow()
		}
		snap, err := LoadPath(path)
		if err != nil {
			version = "" // the next good load is news, even if unchanged
			onError(err)
			return
		}
		if snap.Version != version {
			version = snap.Version
			onLoad(snap)
		}
	}
	load()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var first time.Time // first event of the pending burst; zero when none
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if !fw.relevant(ev) {
				continue
			}
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			timer.Reset(min(watchDebounce, watchMaxDelay-now.Sub(first)))
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost: re-read to be sure.
				first = time.Now()
				timer.Reset(watchDebounce)
				continue
			}
			onError(fmt.Errorf("watch %s: %w", path, err))
		case <-timer.C:
			first = time.Time{}
			load()
		}
	}
}

// fileWatch tracks which events concern one file.
type fileWatch struct {
	path string // absolute, as given
	dir  string // directory of path, always watched
	real string // resolved path, when path is a symlink
	// extra is the resolved file's directory when it is neither dir nor a
	// hidden Kubernetes "..timestamp" directory (those are replaced whole and
	// announced by the "..data" swap in dir).
	extra string
	w     *fsnotify.Watcher
	// isDir: path is a directory, every file of which counts.
	isDir bool
}

// follow resolves path's symlinks and watches the target's directory.
func (f *fileWatch) follow() {
	real, err := filepath.EvalSymlinks(f.path)
	if err != nil {
		real = "" // missing: a later Create in dir brings it back
	}
	f.real = real
	extra := ""
	if real != "" {
		if d := filepath.Dir(real); d != f.dir && filepath.Dir(d) != f.dir {
			extra = d
		}
	}
	if extra == f.extra {
		return
	}
	if f.extra != "" {
		_ = f.w.Remove(f.extra) // it may be gone already
	}
	f.extra = ""
	if extra != "" && f.w.Add(extra) == nil {
		f.extra = extra
	}
}

// relevant reports whether ev may have changed the file's content.
func (f *fileWatch) relevant(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	if f.isDir {
		return filepath.Dir(name) == f.dir
	}
	switch {
	case name == f.path, name == f.real:
		return true
	case filepath.Dir(name) == f.dir && strings.HasPrefix(filepath.Base(name), ".."):
		// Kubernetes' atomic writer: "..data" and "..<timestamp>" entries.
		return true
	}
	return false
}
