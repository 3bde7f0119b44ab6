// Package artifact defines Brewlet's application artifact: the launch descriptor, the image
// config that mirrors it, and the layer content rules that keep application bytes inside
// /app. The CLI uses it at build time and the node at container create, so both give the
// same verdicts with the same reason codes.
package artifact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"strings"

	"brewlet.sh/brewlet/internal/vocab"
)

// LaunchFile is the only entry of the launch layer, at the archive root.
const LaunchFile = "launch.json"

// LaunchSchemaVersion is the launch.json schema this release reads.
const LaunchSchemaVersion = 2

// MaxLaunchSize bounds launch.json; a descriptor is a few hundred bytes.
const MaxLaunchSize = 64 << 10

// DefaultWorkingDir is the process's working directory when launch.json names none.
const DefaultWorkingDir = "/app"

// Launch is launch.json: how the application starts and which runtimes it was tested on.
type Launch struct {
	SchemaVersion int       `json:"schemaVersion"`
	Process       Process   `json:"process"`
	Requires      *Requires `json:"requires,omitempty"`
}

// Process is the application's process.
type Process struct {
	Entrypoint []string `json:"entrypoint"`
	Args       []string `json:"args,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	Env        []EnvVar `json:"env,omitempty"`
}

// EnvVar is one environment variable; order is kept.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Requires lists the runtime IDs the artifact was tested on (an allow-list).
type Requires struct {
	RuntimeImages []string `json:"runtimeImages,omitempty"`
}

func launchErr(format string, args ...any) error {
	return vocab.Errorf(vocab.ReasonInvalidLaunchConfig, "launch.json: "+format, args...)
}

// ParseLaunch decodes launch.json strictly: one JSON object, no unknown or duplicate
// fields, and every rule of the schema. The result has WorkingDir filled in.
func ParseLaunch(b []byte) (*Launch, error) {
	if len(b) > MaxLaunchSize {
		return nil, launchErr("%d bytes; a descriptor may have at most %d", len(b), MaxLaunchSize)
	}
	if err := rejectDuplicateKeys(b); err != nil {
		return nil, launchErr("%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var l Launch
	if err := dec.Decode(&l); err != nil {
		return nil, launchErr("%v; see docs/artifacts.md for the schema", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, launchErr("trailing data after the JSON object")
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &l, nil
}

// Validate checks the schema rules and fills in defaults.
func (l *Launch) Validate() error {
	if l.SchemaVersion != LaunchSchemaVersion {
		return launchErr("schemaVersion is %d; this release reads schemaVersion %d", l.SchemaVersion, LaunchSchemaVersion)
	}
	p := &l.Process
	if len(p.Entrypoint) == 0 {
		return launchErr("process.entrypoint is empty; name the program to run, e.g. [\"python\"]")
	}
	for i, s := range p.Entrypoint {
		if s == "" || strings.ContainsRune(s, 0) {
			return launchErr("process.entrypoint[%d] is empty or contains NUL", i)
		}
	}
	for i, s := range p.Args {
		if strings.ContainsRune(s, 0) {
			return launchErr("process.args[%d] contains NUL", i)
		}
	}
	if p.WorkingDir == "" {
		p.WorkingDir = DefaultWorkingDir
	}
	if !path.IsAbs(p.WorkingDir) || path.Clean(p.WorkingDir) != p.WorkingDir {
		return launchErr("process.workingDir %q must be an absolute, clean path such as /app", p.WorkingDir)
	}
	seen := map[string]int{}
	for i, e := range p.Env {
		switch {
		case e.Name == "" || strings.ContainsAny(e.Name, "=\x00"):
			return launchErr("process.env[%d].name %q is empty or contains '=' or NUL", i, e.Name)
		case e.Name == "PATH":
			return launchErr("process.env[%d] sets PATH; the runtime owns PATH, set entrypoint to a command on it or an absolute path", i)
		case strings.ContainsRune(e.Value, 0):
			return launchErr("process.env[%d].value contains NUL", i)
		}
		if j, dup := seen[e.Name]; dup {
			return launchErr("process.env[%d] repeats %s from process.env[%d]; names must be unique", i, e.Name, j)
		}
		seen[e.Name] = i
	}
	if l.Requires != nil {
		ids := map[string]bool{}
		for i, id := range l.Requires.RuntimeImages {
			if err := vocab.ValidateRuntimeID(id); err != nil {
				return launchErr("requires.runtimeImages[%d]: %v", i, err)
			}
			if ids[id] {
				return launchErr("requires.runtimeImages repeats %q", id)
			}
			ids[id] = true
		}
	}
	return nil
}

// Allows reports whether the artifact may run on runtime ID id: true when it names no
// requirement or lists id.
func (l *Launch) Allows(id string) bool {
	if l.Requires == nil || len(l.Requires.RuntimeImages) == 0 {
		return true
	}
	for _, r := range l.Requires.RuntimeImages {
		if r == id {
			return true
		}
	}
	return false
}

// CheckRuntime refuses a runtime ID outside the artifact's allow-list.
func (l *Launch) CheckRuntime(id string) error {
	if l.Allows(id) {
		return nil
	}
	return vocab.Errorf(vocab.ReasonRuntimeImageIncompatible,
		"the artifact was tested on runtime images %v, not %q; set the pod's %s annotation to one of them or rebuild the artifact with --requires-runtime %s",
		l.Requires.RuntimeImages, id, vocab.AnnotationRuntimeImage, id)
}

// Marshal renders launch.json canonically (stable field order, no HTML escaping).
func (l *Launch) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(l); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// rejectDuplicateKeys walks the JSON tokens and refuses an object with a repeated key,
// which encoding/json would silently resolve to the last value.
func rejectDuplicateKeys(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var walk func(where string) error
	walk = func(where string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		d, ok := tok.(json.Delim)
		if !ok {
			return nil
		}
		switch d {
		case '{':
			keys := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				k, _ := kt.(string)
				if keys[k] {
					return fmt.Errorf("%s has the key %q twice", where, k)
				}
				keys[k] = true
				if err := walk(where + "." + k); err != nil {
					return err
				}
			}
		case '[':
			for i := 0; dec.More(); i++ {
				if err := walk(fmt.Sprintf("%s[%d]", where, i)); err != nil {
					return err
				}
			}
		}
		_, err = dec.Token() // closing delimiter
		return err
	}
	return walk("$")
}
