package shim

import (
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"brewlet.sh/brewlet/internal/vocab"
)

func TestMergeEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   execState
		cri  []string
		want []string
	}{
		{"runtime PATH replaces CRI's and the pod's",
			execState{HasPath: true, Path: "/usr/bin", RuntimeEnv: []string{"LANG=C.UTF-8"}},
			[]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH=/app/src", "PATH=/pod"},
			[]string{"LANG=C.UTF-8", "PYTHONPATH=/app/src", "PATH=/usr/bin"}},
		{"CRI env overrides runtime Env", execState{RuntimeEnv: []string{"LANG=C", "TZ=UTC"}}, []string{"LANG=de_DE.UTF-8"},
			[]string{"TZ=UTC", "LANG=de_DE.UTF-8"}},
		{"no PATH at all without one in the runtime", execState{}, []string{"PATH=/usr/bin", "A=1"}, []string{"A=1"}},
		{"HOME from account files when unset", execState{Home: "/home/app"}, []string{"A=1"}, []string{"A=1", "HOME=/home/app"}},
		{"pod HOME wins", execState{Home: "/home/app"}, []string{"HOME=/data"}, []string{"HOME=/data"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mergeEnv(&tc.st, tc.cri); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestProcessRules(t *testing.T) {
	adj := -998
	p := &specs.Process{OOMScoreAdj: &adj, Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_NET_RAW"}, Effective: []string{"CAP_NET_RAW"}}}
	applyProcessRules(p, &execState{})
	if *p.OOMScoreAdj != 0 || !p.NoNewPrivileges || len(p.Capabilities.Bounding)+len(p.Capabilities.Effective) != 0 {
		t.Fatalf("process after rules: %+v caps %+v", p, p.Capabilities)
	}
	for _, u := range []specs.User{{UID: 0, GID: 1}, {UID: 1, GID: 0}, {UID: 1, GID: 1, AdditionalGids: []uint32{5, 0}}} {
		if err := checkIdentity(u, 10001); vocab.ReasonOf(err) != vocab.ReasonRootNotSupported {
			t.Errorf("identity %+v: %v", u, err)
		}
	}
	if err := checkIdentity(specs.User{UID: 10001, GID: 10001, AdditionalGids: []uint32{10001}}, 10001); err != nil {
		t.Fatal(err)
	}
}

func TestCheckBarrier(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want vocab.Reason
	}{
		{"", ""},
		{`{"id":"py","epoch":"e1","generation":2}`, ""},
		{`{"id":"py","epoch":"e1","generation":3}`, vocab.ReasonRuntimeImageUpdating},
		{`{"id":"py","epoch":"old","generation":9}`, ""},
		{`{"id":"other","epoch":"e1","generation":9}`, ""},
		{`not json`, vocab.ReasonRuntimeImageUpdating},
	} {
		if got := vocab.ReasonOf(checkBarrier(tc.raw, "py", "e1", 2)); got != tc.want {
			t.Errorf("barrier %q: %q, want %q", tc.raw, got, tc.want)
		}
	}
}
