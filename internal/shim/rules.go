package shim

import (
	"strings"

	json "github.com/go-json-experiment/json/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"brewlet.sh/brewlet/internal/vocab"
)

// execState is what a container's exec sessions need from its create: the identity and
// environment the runtime generation prescribed. It is saved per container.
type execState struct {
	RuntimeID      string   `json:"runtimeID"`
	Epoch          string   `json:"epoch"`
	Generation     int64    `json:"generation"`
	UID            uint32   `json:"uid"`
	GID            uint32   `json:"gid"`
	AdditionalGids []uint32 `json:"additionalGids,omitempty"`
	RuntimeEnv     []string `json:"runtimeEnv,omitempty"` // the runtime config Env, PATH excluded
	HasPath        bool     `json:"hasPath"`
	Path           string   `json:"path,omitempty"`
	Home           string   `json:"home,omitempty"`
}

// checkIdentity refuses root as user, primary group or supplementary group.
func checkIdentity(u specs.User, runtimeUID int64) error {
	if u.UID == 0 {
		return vocab.Errorf(vocab.ReasonRootNotSupported,
			"the container would run as uid 0; Brewlet runs applications as non-root: set securityContext.runAsUser (the runtime's user is %d)", runtimeUID)
	}
	if u.GID == 0 {
		return vocab.Errorf(vocab.ReasonRootNotSupported, "the container's primary group is 0; set securityContext.runAsGroup to a non-root group")
	}
	for _, g := range u.AdditionalGids {
		if g == 0 {
			return vocab.Errorf(vocab.ReasonRootNotSupported, "the container has supplementary group 0; remove it from securityContext.supplementalGroups")
		}
	}
	return nil
}

// applyProcessRules makes a process (the container's init, an exec session, a probe or a
// hook) follow Brewlet's rules: no capabilities, no privilege escalation, the runtime's
// PATH only, runtime Env lowest in precedence, HOME from the account files when unset, and
// no negative oom_score_adj.
func applyProcessRules(p *specs.Process, st *execState) {
	p.Capabilities = &specs.LinuxCapabilities{
		Bounding: []string{}, Effective: []string{}, Inheritable: []string{}, Permitted: []string{}, Ambient: []string{},
	}
	p.NoNewPrivileges = true
	p.Env = mergeEnv(st, p.Env)
	if p.OOMScoreAdj != nil && *p.OOMScoreAdj < 0 {
		zero := 0
		p.OOMScoreAdj = &zero
	}
}

// mergeEnv: runtime Env first (overridden by CRI's same-named entries), then CRI's env
// (image config mirror and pod env) without PATH, then the runtime's PATH, then HOME.
func mergeEnv(st *execState, cri []string) []string {
	name := func(kv string) string { n, _, _ := strings.Cut(kv, "="); return n }
	criNames := map[string]bool{}
	for _, kv := range cri {
		criNames[name(kv)] = true
	}
	var out []string
	for _, kv := range st.RuntimeEnv {
		if n := name(kv); n != "PATH" && !criNames[n] {
			out = append(out, kv)
		}
	}
	hasHome := false
	for _, kv := range cri {
		switch name(kv) {
		case "PATH":
			continue // CRI's or the pod's PATH is discarded: the runtime owns PATH
		case "HOME":
			hasHome = true
		}
		out = append(out, kv)
	}
	for _, kv := range st.RuntimeEnv {
		if name(kv) == "HOME" {
			hasHome = true
		}
	}
	if st.HasPath {
		out = append(out, "PATH="+st.Path)
	}
	if !hasHome && st.Home != "" {
		out = append(out, "HOME="+st.Home)
	}
	return out
}

// barrier is the pod-template annotation a rotation restart sets.
type barrier struct {
	ID         string `json:"id"`
	Epoch      string `json:"epoch"`
	Generation int64  `json:"generation"`
}

// checkBarrier refuses a start on a generation older than the barrier of the same epoch.
func checkBarrier(raw, id, epoch string, generation int64) error {
	if raw == "" {
		return nil
	}
	var b barrier
	if err := json.Unmarshal([]byte(raw), &b); err != nil {
		return vocab.Errorf(vocab.ReasonRuntimeImageUpdating, "annotation %s is not valid JSON {id, epoch, generation}: %v", vocab.AnnotationRotatedToGeneration, err)
	}
	if b.ID != id || b.Epoch != epoch {
		return nil // another ID, or a barrier from an older epoch: nothing to wait for
	}
	if b.Generation > generation {
		return vocab.Errorf(vocab.ReasonRuntimeImageUpdating,
			"the pod requires %s generation %d or newer, and this node has generation %d; it is still installing the rotation (the kubelet retries)", id, b.Generation, generation)
	}
	return nil
}
