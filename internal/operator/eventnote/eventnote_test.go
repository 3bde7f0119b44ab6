package eventnote

import (
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
)

func TestNote(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
	}{
		{"short", "generation 3 failed"},
		{"exactly the bound", strings.Repeat("a", MaxNote)},
		{"long", strings.Repeat("a", 3000)},
		{"a multi-byte character across the cut", strings.Repeat("a", MaxNote-2) + "é€" + strings.Repeat("b", 10)},
	} {
		got := Note(tc.in)
		if len(got) > MaxNote || !utf8.ValidString(got) {
			t.Errorf("%s: %d bytes, valid UTF-8 %v", tc.name, len(got), utf8.ValidString(got))
		}
		if len(tc.in) <= MaxNote && got != tc.in {
			t.Errorf("%s: a note within the bound changed", tc.name)
		}
		if len(tc.in) > MaxNote && (!strings.HasSuffix(got, "…") || !strings.HasPrefix(tc.in, strings.TrimSuffix(got, "…"))) {
			t.Errorf("%s: the cut is not marked or not a prefix: %q", tc.name, got[len(got)-10:])
		}
	}
}

type capture struct{ notes []string }

func (c *capture) Eventf(_, _ runtime.Object, _, _, _, note string, args ...any) {
	c.notes = append(c.notes, note)
	if len(args) == 1 {
		c.notes[len(c.notes)-1] = args[0].(string)
	}
}

func TestBoundedRecorder(t *testing.T) {
	c := &capture{}
	Bounded(c).Eventf(nil, nil, "Warning", "RolledBack", "Reconcile", "%s and %d more", strings.Repeat("x", 2000), 3)
	if len(c.notes) != 1 || len(c.notes[0]) > MaxNote {
		t.Fatalf("notes %d, first %d bytes", len(c.notes), len(c.notes[0]))
	}
	if Bounded(nil) != nil {
		t.Fatal("a nil recorder became a recorder")
	}
}
