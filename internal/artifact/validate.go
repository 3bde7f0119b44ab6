package artifact

import (
	"fmt"
	"io"
)

// Validate applies the layer content rules to application layers (lowest first) and
// returns every violation: per-entry rules, then links judged on the composed view.
func Validate(layers [][]Entry) []Violation {
	var out []Violation
	v := NewView()
	for i, entries := range layers {
		for _, e := range entries {
			if rule, hint := checkEntry(e); rule != "" {
				out = append(out, Violation{Layer: i, Path: e.Path, Rule: rule, Hint: hint})
			}
		}
		v.Apply(i, entries)
	}
	return append(out, v.checkLinks()...)
}

// firstError turns the first violation into a LayerPathViolation refusal.
func firstError(vs []Violation, names []string) error {
	if len(vs) == 0 {
		return nil
	}
	name := func(i int) string {
		if i < len(names) && names[i] != "" {
			return names[i]
		}
		return fmt.Sprintf("application layer %d", i+1)
	}
	err := vs[0].err(name)
	if len(vs) > 1 {
		return fmt.Errorf("%w (and %d more violations)", err, len(vs)-1)
	}
	return err
}

// ValidateTarLayers is the build-time front end: uncompressed layer tar streams, lowest
// first, with optional names (e.g. digests) for messages.
func ValidateTarLayers(layers []io.Reader, names []string) error {
	all := make([][]Entry, 0, len(layers))
	var pre []Violation
	for i, r := range layers {
		entries, vs, err := TarEntries(r)
		if err != nil {
			return fmt.Errorf("read layer %d: %w", i+1, err)
		}
		for _, v := range vs {
			v.Layer = i
			pre = append(pre, v)
		}
		all = append(all, entries)
	}
	return firstError(append(pre, Validate(all)...), names)
}

// ValidateDirLayers is the run-time front end: unpacked layer directories such as
// containerd's snapshots, lowest first.
func ValidateDirLayers(dirs []string, names []string) error {
	all := make([][]Entry, 0, len(dirs))
	for i, d := range dirs {
		entries, err := DirEntries(d)
		if err != nil {
			return fmt.Errorf("read layer %d (%s): %w", i+1, d, err)
		}
		all = append(all, entries)
	}
	return firstError(Validate(all), names)
}
