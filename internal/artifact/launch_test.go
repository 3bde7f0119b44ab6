package artifact

import (
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"brewlet.sh/brewlet/internal/vocab"
)

const goodLaunch = `{"schemaVersion": 2,
 "process": {"entrypoint": ["python"], "args": ["-m", "app"], "workingDir": "/app",
             "env": [{"name": "PYTHONPATH", "value": "/app/src"}]},
 "requires": {"runtimeImages": ["python-3.12"]}}`

func TestParseLaunch(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string // want: "" accepts, else a substring of the refusal
	}{
		{"good", goodLaunch, ""},
		{"minimal, default workdir", `{"schemaVersion":2,"process":{"entrypoint":["/app/run"]}}`, ""},
		{"unknown field", `{"schemaVersion":2,"process":{"entrypoint":["x"],"user":"root"}}`, `unknown field "user"`},
		{"unknown top field", `{"schemaVersion":2,"process":{"entrypoint":["x"]},"extra":1}`, `unknown field "extra"`},
		{"duplicate key", `{"schemaVersion":2,"process":{"entrypoint":["x"],"entrypoint":["y"]}}`, `key "entrypoint" twice`},
		{"wrong schema", `{"schemaVersion":1,"process":{"entrypoint":["x"]}}`, "schemaVersion is 1"},
		{"empty entrypoint", `{"schemaVersion":2,"process":{"entrypoint":[]}}`, "entrypoint is empty"},
		{"empty entrypoint word", `{"schemaVersion":2,"process":{"entrypoint":[""]}}`, "entrypoint[0] is empty"},
		{"relative workdir", `{"schemaVersion":2,"process":{"entrypoint":["x"],"workingDir":"app"}}`, "absolute, clean path"},
		{"unclean workdir", `{"schemaVersion":2,"process":{"entrypoint":["x"],"workingDir":"/app/../etc"}}`, "absolute, clean path"},
		{"PATH forbidden", `{"schemaVersion":2,"process":{"entrypoint":["x"],"env":[{"name":"PATH","value":"/x"}]}}`, "runtime owns PATH"},
		{"duplicate env", `{"schemaVersion":2,"process":{"entrypoint":["x"],"env":[{"name":"A","value":"1"},{"name":"A","value":"2"}]}}`, "repeats A"},
		{"bad env name", `{"schemaVersion":2,"process":{"entrypoint":["x"],"env":[{"name":"A=B","value":"1"}]}}`, "contains '='"},
		{"bad runtime id", `{"schemaVersion":2,"process":{"entrypoint":["x"]},"requires":{"runtimeImages":["Python:3"]}}`, "InvalidRuntimeImageID"},
		{"duplicate runtime id", `{"schemaVersion":2,"process":{"entrypoint":["x"]},"requires":{"runtimeImages":["a","a"]}}`, `repeats "a"`},
		{"trailing data", `{"schemaVersion":2,"process":{"entrypoint":["x"]}} {}`, "trailing data"},
		{"not json", `schemaVersion: 2`, "invalid character"},
		{"too big", `{"schemaVersion":2,"process":{"entrypoint":["` + strings.Repeat("x", MaxLaunchSize) + `"]}}`, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := ParseLaunch([]byte(tc.in))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if l.Process.WorkingDir == "" {
					t.Fatal("workingDir default not applied")
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want refusal with %q", tc.want)
			}
			if vocab.ReasonOf(err) != vocab.ReasonInvalidLaunchConfig || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refusal %q (reason %q) lacks %q", err, vocab.ReasonOf(err), tc.want)
			}
		})
	}
}

func TestConfigMirror(t *testing.T) {
	l, err := ParseLaunch([]byte(goodLaunch))
	if err != nil {
		t.Fatal(err)
	}
	c := ImageConfig(l)
	if err := CheckConfigMirror(l, c); err != nil {
		t.Fatalf("own mirror refused: %v", err)
	}
	for name, mutate := range map[string]func(*v1.Config){
		"Entrypoint": func(c *v1.Config) { c.Entrypoint = []string{"sh"} },
		"Cmd":        func(c *v1.Config) { c.Cmd = nil },
		"WorkingDir": func(c *v1.Config) { c.WorkingDir = "/" },
		"Env":        func(c *v1.Config) { c.Env = append(c.Env, "X=1") },
		"User":       func(c *v1.Config) { c.User = "0" },
		"Volumes":    func(c *v1.Config) { c.Volumes = map[string]struct{}{"/data": {}} },
	} {
		bad := ImageConfig(l)
		mutate(&bad)
		err := CheckConfigMirror(l, bad)
		if vocab.ReasonOf(err) != vocab.ReasonLaunchConfigMismatch || !strings.Contains(err.Error(), name) {
			t.Errorf("%s change: got %v", name, err)
		}
	}
	if err := l.CheckRuntime("python-3.12"); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckRuntime("python-3.13"); vocab.ReasonOf(err) != vocab.ReasonRuntimeImageIncompatible {
		t.Fatalf("incompatible runtime: %v", err)
	}
	b, err := l.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseLaunch(b); err != nil {
		t.Fatalf("marshalled launch.json does not parse back: %v", err)
	}
}

func FuzzParseLaunch(f *testing.F) {
	f.Add([]byte(goodLaunch))
	f.Add([]byte(`{"schemaVersion":2,"process":{"entrypoint":["x"],"env":[{"name":"PATH","value":"/x"}]}}`))
	f.Add([]byte(`{"schemaVersion":2,"process":{"entrypoint":["x"],"entrypoint":["y"]}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseLaunch(b)
		if err != nil {
			if vocab.ReasonOf(err) != vocab.ReasonInvalidLaunchConfig {
				t.Fatalf("refusal without InvalidLaunchConfig: %v", err)
			}
			return
		}
		// Whatever is accepted obeys the schema and survives a round trip.
		if len(l.Process.Entrypoint) == 0 || !strings.HasPrefix(l.Process.WorkingDir, "/") {
			t.Fatalf("accepted invalid launch: %+v", l)
		}
		for _, e := range l.Process.Env {
			if e.Name == "PATH" {
				t.Fatal("accepted PATH")
			}
		}
		out, err := l.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseLaunch(out); err != nil {
			t.Fatalf("round trip refused: %v\n%s", err, out)
		}
	})
}
