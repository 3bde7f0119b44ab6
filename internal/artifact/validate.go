package artifact

import (
	"context"
	"fmt"
	"io"

	"brewlet.sh/brewlet/internal/vocab"
)

// Validate applies the layer content rules to application layers (lowest first) and
// returns every violation: per-entry rules, then links judged on the composed view. It
// stops with a LimitExceeded refusal when the budget's context ends.
func Validate(b *Budget, layers [][]Entry) ([]Violation, error) {
	var out []Violation
	v := NewView()
	for i, entries := range layers {
		for _, e := range entries {
			if rule, hint := checkEntry(e); rule != "" {
				out = append(out, Violation{Layer: i, Path: e.Path, Rule: rule, Hint: hint})
			}
		}
		v.Apply(i, entries)
		if err := b.Alive(fmt.Sprintf("layer %d", i+1)); err != nil {
			return nil, err
		}
	}
	links, err := v.checkLinks(b)
	if err != nil {
		return nil, err
	}
	return append(out, links...), nil
}

// firstError turns the first violation into a LayerPathViolation refusal.
func firstError(vs []Violation, names []string) error {
	if len(vs) == 0 {
		return nil
	}
	err := vs[0].err(func(i int) string { return layerName(names, i) })
	if len(vs) > 1 {
		return fmt.Errorf("%w (and %d more violations)", err, len(vs)-1)
	}
	return err
}

// ValidateTarLayers is the build-time front end: uncompressed layer tar streams, lowest
// first, with optional names (e.g. digests) for messages.
func ValidateTarLayers(ctx context.Context, layers []io.Reader, names []string, lim Limits) error {
	b := NewBudget(ctx, lim)
	all := make([][]Entry, 0, len(layers))
	var pre []Violation
	for i, r := range layers {
		entries, vs, err := TarEntries(r, b, layerName(names, i))
		if err != nil {
			return readErr(layerName(names, i), err)
		}
		for _, v := range vs {
			v.Layer = i
			pre = append(pre, v)
		}
		all = append(all, entries)
	}
	vs, err := Validate(b, all)
	if err != nil {
		return err
	}
	return firstError(append(pre, vs...), names)
}

// ValidateDirLayers is the run-time front end: unpacked layer directories such as
// containerd's snapshots, lowest first.
func ValidateDirLayers(ctx context.Context, dirs []string, names []string, lim Limits) error {
	b := NewBudget(ctx, lim)
	all := make([][]Entry, 0, len(dirs))
	for i, d := range dirs {
		entries, err := DirEntries(d, b, layerName(names, i))
		if err != nil {
			return readErr(fmt.Sprintf("%s (%s)", layerName(names, i), d), err)
		}
		all = append(all, entries)
	}
	vs, err := Validate(b, all)
	if err != nil {
		return err
	}
	return firstError(vs, names)
}

// readErr keeps a refusal as it is (its message names the layer, and users must see its
// reason first) and says where any other error happened.
func readErr(where string, err error) error {
	if vocab.ReasonOf(err) != "" {
		return err
	}
	return fmt.Errorf("read %s: %w", where, err)
}
