package shim

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"time"
	"unicode/utf8"

	json "github.com/go-json-experiment/json/v1"
	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

const (
	// imageChecksVersion is the format of an image verdict and its key. The checks' own
	// code is keyed by the shim binary's identity (exeIdentity), so no change to them can
	// be answered by a verdict an older shim gave.
	imageChecksVersion = 1
	// maxImageVerdicts bounds the image verdict cache; the least recently used go first.
	maxImageVerdicts = 1024
	// maxImageVerdictFile bounds a verdict file read back; maxImageMessage its refusal text
	// (the checks' messages are a few hundred bytes).
	maxImageVerdictFile = 16 << 10
	maxImageMessage     = 4 << 10
)

// imageVerdictsDir is the node's image verdict cache, beside the layer verdicts.
func imageVerdictsDir(l hoststate.Layout) string { return filepath.Join(l.State, "image-verdicts") }

// imageKey is everything the image checks' outcome depends on: the image's target digest
// as containerd resolves it (content-addressed: an index digest fixes the manifest chosen
// for a platform, a manifest digest fixes its config), the platform chosen for, the bytes
// of launch.json the config is compared with, and the code that compared them.
type imageKey struct {
	Checks    int    `json:"checks"`
	Shim      string `json:"shim"`
	Platform  string `json:"platform"`
	MediaType string `json:"mediaType"`
	Target    string `json:"target"`
	Launch    string `json:"launch"` // sha256 of launch.json, hex
}

// file names a key's verdict in dir. The key is also stored inside it and compared on
// reading, so a file under the wrong name never answers.
func (k imageKey) file(dir string) string {
	b, _ := json.Marshal(k)
	sum := sha256.Sum256(b)
	return filepath.Join(dir, hex.EncodeToString(sum[:]))
}

// imageVerdict is the remembered outcome of the image checks for one key.
type imageVerdict struct {
	Key     imageKey     `json:"key"`
	OK      bool         `json:"ok,omitempty"`
	Reason  vocab.Reason `json:"reason,omitempty"`
	Message string       `json:"message,omitempty"`
}

// cachedImageReasons are the refusals of the image checks that follow from the key alone
// (the blobs' content, the platform, launch.json, the checks): given again, they would be
// given the same. Anything else (containerd unreachable, a blob missing or unparsable, a
// timeout) is not remembered.
var cachedImageReasons = map[vocab.Reason]bool{
	vocab.ReasonUnsupportedArtifact:  true,
	vocab.ReasonLaunchConfigMismatch: true,
	vocab.ReasonPlatformUnavailable:  true,
}

// imageVerdictOf is what of a check's outcome may be remembered under key: a refusal only
// when it is one of cachedImageReasons and replays exactly (no cause, no wrapping text).
func imageVerdictOf(key imageKey, err error) (imageVerdict, bool) {
	if err == nil {
		return imageVerdict{Key: key, OK: true}, true
	}
	var e *vocab.Error
	if !errors.As(err, &e) || e.Err != nil || err.Error() != e.Error() || !cachedImageReasons[e.Reason] ||
		e.Message == "" || len(e.Message) > maxImageMessage || !utf8.ValidString(e.Message) {
		return imageVerdict{}, false
	}
	return imageVerdict{Key: key, Reason: e.Reason, Message: e.Message}, true
}

// err is the refusal as first reported.
func (v imageVerdict) err() error {
	if v.OK {
		return nil
	}
	return &vocab.Error{Reason: v.Reason, Message: v.Message}
}

// parseImageVerdict reads a verdict strictly and only for want: a file that is not exactly
// one well-formed verdict of that key is no verdict, so the image is checked again.
func parseImageVerdict(b []byte, want imageKey) (imageVerdict, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var v imageVerdict
	if err := dec.Decode(&v); err != nil {
		return imageVerdict{}, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return imageVerdict{}, false // trailing data
	}
	switch {
	case v.Key != want,
		v.OK && (v.Reason != "" || v.Message != ""),
		!v.OK && (!cachedImageReasons[v.Reason] || v.Message == "" || len(v.Message) > maxImageMessage || !utf8.ValidString(v.Message)):
		return imageVerdict{}, false
	}
	return v, true
}

// readImageVerdict answers from the cache in dir when it holds a verdict for key. Only a
// file that root alone could have written is read.
func readImageVerdict(dir string, key imageKey) (imageVerdict, bool) {
	file := key.file(dir)
	b, err := hoststate.ReadPrivateFile(file, maxImageVerdictFile)
	if err != nil {
		return imageVerdict{}, false
	}
	v, ok := parseImageVerdict(b, key)
	if ok {
		now := time.Now()
		_ = os.Chtimes(file, now, now) // recently used: kept longest when pruning
	}
	return v, ok
}

// storeImageVerdict remembers v (written atomically) and keeps the cache bounded.
func storeImageVerdict(dir string, v imageVerdict) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := hoststate.WriteFileAtomic(v.Key.file(dir), b, 0o600); err != nil {
		return err
	}
	return pruneVerdicts(dir, maxImageVerdicts)
}

// imagePlatform is the platform an image index is resolved for on this node.
var imagePlatform = "linux/" + goruntime.GOARCH

// exeIdentity names the running shim binary by its inode, size and times (through
// /proc/self/exe, which stays the running file even after an upgrade replaced its path),
// so that a new shim never reads verdicts an older one gave. "" when it cannot be told:
// then nothing is cached.
var exeIdentity = sync.OnceValue(func() string {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, "/proc/self/exe", 0, unix.STATX_INO|unix.STATX_SIZE|unix.STATX_MTIME|unix.STATX_BTIME, &st); err != nil {
		return ""
	}
	return fmt.Sprintf("dev %d:%d ino %d size %d mtime %d.%09d btime %d.%09d", st.Dev_major, st.Dev_minor, st.Ino, st.Size,
		st.Mtime.Sec, st.Mtime.Nsec, st.Btime.Sec, st.Btime.Nsec)
})
