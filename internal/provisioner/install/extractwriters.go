package install

import (
	"bytes"
	"io"
	"os"
	"path"
	"sync"

	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/artifact"
)

// Small regular files are created on goroutines of their own: creating a file is most of
// an extraction's time for a runtime's thousands of small files (an inode, a directory
// entry, journal credits), and the kernel creates them side by side.
const (
	fileWriters     = 2
	maxQueuedFile   = 64 << 10 // larger files are written in place, in order
	fileWriterQueue = 32       // with maxQueuedFile, bounds the memory held: 2 MiB
)

// writers create queued files in the background while the extractor goes on in stream
// order. Order still holds where it matters: before an entry that could touch a queued
// file or one of its parent directories (the same path again, a path below a queued file,
// a non-directory replacing a directory that has queued files below it, any hard link),
// the extractor waits for every queued file (drain). So a queued file's parent
// directories, which the extractor checked to be real directories when it queued the file,
// are still those directories when a writer creates it, and a writer opens only new
// names, with O_EXCL and O_NOFOLLOW.
type writers struct {
	x     *extractor
	jobs  chan fileJob
	work  sync.WaitGroup // queued files not yet written
	quit  sync.WaitGroup // the goroutines
	mu    sync.Mutex
	err   error // the first failure
	state writersState
}

// writersState is the extractor goroutine's own bookkeeping of queued paths.
type writersState struct {
	queued map[string]bool // layer paths of queued files
	below  map[string]int  // directories with queued files below them, and how many
}

type fileJob struct {
	name string // host path
	data []byte
	e    artifact.Entry
}

func newWriters(x *extractor) *writers {
	w := &writers{x: x, jobs: make(chan fileJob, fileWriterQueue),
		state: writersState{queued: map[string]bool{}, below: map[string]int{}}}
	w.quit.Add(fileWriters)
	for range fileWriters {
		go w.run()
	}
	return w
}

func (w *writers) run() {
	defer w.quit.Done()
	for j := range w.jobs {
		err := createFile(j.name, bytes.NewReader(j.data))
		if err == nil {
			err = w.x.attributes(j.name, j.e)
		}
		if err != nil {
			w.mu.Lock()
			if w.err == nil {
				w.err = err
			}
			w.mu.Unlock()
		}
		w.work.Done()
	}
}

// failed is the first failure of a queued file, if any.
func (w *writers) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// conflicts reports whether e may touch a queued file or a directory above one.
func (s *writersState) conflicts(e artifact.Entry) bool {
	if len(s.queued) == 0 {
		return false
	}
	if e.Type == artifact.TypeHardlink || s.queued[e.Path] || (e.Type != artifact.TypeDir && s.below[e.Path] > 0) {
		return true
	}
	for p := path.Dir(e.Path); p != "."; p = path.Dir(p) {
		if s.queued[p] {
			return true
		}
	}
	return false
}

func (s *writersState) add(p string) {
	s.queued[p] = true
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		s.below[d]++
	}
}

// settle waits for the queued files when e may touch one (see writers).
func (w *writers) settle(e artifact.Entry) error {
	if w.state.conflicts(e) {
		return w.drain()
	}
	return w.failed()
}

// drain waits for every queued file and returns the first failure.
func (w *writers) drain() error {
	w.work.Wait()
	clear(w.state.queued)
	clear(w.state.below)
	return w.failed()
}

// queue hands a file to the writers; name's parent directories are checked and no entry
// exists at name.
func (w *writers) queue(name string, data []byte, e artifact.Entry) {
	w.state.add(e.Path)
	w.work.Add(1)
	w.jobs <- fileJob{name: name, data: data, e: e}
}

// close waits for the queued files, stops the goroutines and returns the first failure.
func (w *writers) close() error {
	err := w.drain()
	close(w.jobs)
	w.quit.Wait()
	return err
}

// createFile creates a new regular file (never through a symlink, never over an entry)
// holding what r yields.
func createFile(name string, r io.Reader) error {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
