// Package eventnote gives the operator's controllers their event recorder, one whose notes
// always fit the API, and the cut every other bounded text of theirs uses (Cut). events.k8s.io refuses an Event whose note is longer than 1 KiB, and
// the recorder drops a refused event for good: a rollback's or a halt's message naming
// five workloads and two digests is easily longer, and the one event an on-call human
// alerts on must not be the one lost.
package eventnote

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// MaxNote is the API's bound on an Event's note, in bytes.
const MaxNote = 1024

// Component is the reporting controller of every event the operator writes.
const Component = "brewlet-operator"

// For returns the operator's event recorder from mgr, bounding every note.
func For(mgr manager.Manager) events.EventRecorder { return Bounded(mgr.GetEventRecorder(Component)) }

// Bounded wraps r so that every note is cut to MaxNote bytes (nil stays nil).
func Bounded(r events.EventRecorder) events.EventRecorder {
	if r == nil {
		return nil
	}
	return bounded{r}
}

type bounded struct{ events.EventRecorder }

func (b bounded) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	b.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", Note(fmt.Sprintf(note, args...)))
}

// Note cuts s to MaxNote bytes (Cut).
func Note(s string) string { return Cut(s, MaxNote) }

// Cut returns s, or its first bytes up to a character boundary marked with "…", at most limit
// bytes in all: the one cut of every text the operator writes within an API bound (event
// notes, status messages, what it quotes of a node's report).
func Cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	const mark = "…"
	return strings.ToValidUTF8(s[:max(0, limit-len(mark))], "") + mark
}
