package tasks

import (
	"os"
	"strings"
	"testing"

	eventtypes "github.com/containerd/containerd/api/events"
	"google.golang.org/protobuf/proto"

	"brewlet.sh/brewlet/internal/hoststate"
)

func mustMarshal(t testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestContainerOf(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name, topic string
		body        []byte
		want        string
	}{
		{"a task starts", "/tasks/start", mustMarshal(t, &eventtypes.TaskStart{ContainerID: id, Pid: 7}), id},
		{"its init exits", "/tasks/exit", mustMarshal(t, &eventtypes.TaskExit{ContainerID: id, ID: id, ExitStatus: 137}), id},
		{"an exec exits (a probe)", "/tasks/exit", mustMarshal(t, &eventtypes.TaskExit{ContainerID: id, ID: "exec-1"}), ""},
		{"other topics", "/tasks/delete", mustMarshal(t, &eventtypes.TaskDelete{ContainerID: id}), ""},
		{"a path in the ID", "/tasks/start", mustMarshal(t, &eventtypes.TaskStart{ContainerID: "../../etc/passwd"}), ""},
		{"an empty ID", "/tasks/start", mustMarshal(t, &eventtypes.TaskStart{}), ""},
		{"an ID too long", "/tasks/start", mustMarshal(t, &eventtypes.TaskStart{ContainerID: strings.Repeat("a", 77)}), ""},
		{"not protobuf", "/tasks/exit", []byte{0xff, 0xff, 0xff}, ""},
	} {
		if got := containerOf(tc.topic, tc.body); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestTaskEventsLeased(t *testing.T) {
	l := hoststate.Under(t.TempDir())
	if err := os.MkdirAll(l.State+"/leases", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.LeaseFile("c1"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := Events{Layout: l}
	if !e.leased("c1") || e.leased("c2") {
		t.Fatalf("leased(c1)=%v leased(c2)=%v", e.leased("c1"), e.leased("c2"))
	}
}

// Events come from containerd's socket: whatever they hold, containerOf returns an ID that
// is safe to join to a path, or nothing.
func FuzzContainerOf(f *testing.F) {
	f.Add("/tasks/start", mustMarshal(f, &eventtypes.TaskStart{ContainerID: "abc", Pid: 1}))
	f.Add("/tasks/exit", mustMarshal(f, &eventtypes.TaskExit{ContainerID: "abc", ID: "abc"}))
	f.Add("/tasks/exit", []byte("\x0a\x05../..\x12\x05../.."))
	f.Fuzz(func(t *testing.T, topic string, body []byte) {
		id := containerOf(topic, body)
		if id != "" && (!containerIDPattern.MatchString(id) || strings.Contains(id, "/") || id == "." || id == "..") {
			t.Fatalf("unsafe container ID %q", id)
		}
	})
}
