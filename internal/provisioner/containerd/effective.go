package containerd

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"brewlet.sh/brewlet/internal/vocab"
)

// onlyHandlerChanged compares two `containerd config dump` outputs, before and after a
// change: the brewlet handler must be registered in after exactly when want, and nothing
// else of the effective config may differ. The second rule is what keeps a node working
// when a file is read differently than expected (a drop-in of another config version makes
// containerd 2.0–2.2 skip migrating the main config's CRI settings; a rewrite could lose a
// table): such a change is refused and rolled back before containerd is restarted.
func onlyHandlerChanged(before, after string, want bool) error {
	b, err := parseDump(before)
	if err != nil {
		return err
	}
	a, err := parseDump(after)
	if err != nil {
		return err
	}
	if got := handlerRegistered(a); got != want {
		return fmt.Errorf("the effective config does not match the change (brewlet handler wanted: %v, found: %v)", want, got)
	}
	stripHandler(a)
	stripHandler(b)
	pruneEmpty(a)
	pruneEmpty(b)
	if key, ok := firstDifference(b, a, ""); !ok {
		return fmt.Errorf("the change would alter containerd's effective config beyond the brewlet handler (first difference at %s)", key)
	}
	return nil
}

func parseDump(s string) (map[string]any, error) {
	var m map[string]any
	if err := toml.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("containerd config dump is not TOML: %v", err)
	}
	return m, nil
}

// runtimesOf returns the runtimes table of the CRI plugin in each layout a dump may use.
func runtimesOf(cfg map[string]any) []map[string]any {
	var out []map[string]any
	plugins, _ := cfg["plugins"].(map[string]any)
	for _, p := range []string{criRuntimePlugin, legacyCRIPlugin} {
		plugin, _ := plugins[p].(map[string]any)
		ctd, _ := plugin["containerd"].(map[string]any)
		if rt, ok := ctd["runtimes"].(map[string]any); ok {
			out = append(out, rt)
		}
	}
	return out
}

func handlerRegistered(cfg map[string]any) bool {
	for _, rt := range runtimesOf(cfg) {
		h, _ := rt[vocab.RuntimeClassName].(map[string]any)
		if t, _ := h["runtime_type"].(string); t == vocab.ShimRuntimeType {
			return true
		}
	}
	return false
}

// stripHandler removes what a registration changes: the handler, and the list of files
// imported (a drop-in appears in it).
func stripHandler(cfg map[string]any) {
	for _, rt := range runtimesOf(cfg) {
		delete(rt, vocab.RuntimeClassName)
	}
	delete(cfg, "imports")
}

// pruneEmpty drops empty tables, which containerd reads as absent ones (a rewrite may
// create the tables that lead to the handler).
func pruneEmpty(m map[string]any) {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			pruneEmpty(sub)
			if len(sub) == 0 {
				delete(m, k)
			}
		}
	}
}

// firstDifference reports whether a and b are equal and, if not, the first key (in sorted
// order) where they differ.
func firstDifference(a, b map[string]any, prefix string) (string, bool) {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		path := strings.TrimPrefix(prefix+"."+k, ".")
		av, aok := a[k]
		bv, bok := b[k]
		if aok != bok {
			return path, false
		}
		am, amap := av.(map[string]any)
		bm, bmap := bv.(map[string]any)
		if amap && bmap {
			if key, ok := firstDifference(am, bm, path); !ok {
				return key, false
			}
			continue
		}
		if !reflect.DeepEqual(av, bv) {
			return path, false
		}
	}
	return "", true
}
