package admission

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/utils/ptr"

	"brewlet.sh/brewlet/internal/vocab"
)

// FuzzAdmit: any pod JSON never panics Admit, and an admitted pod never runs a process
// as root (user, group, fsGroup or supplementary group) or with privileges, passes Pod
// Security restricted on every field Admit owns, always carries the runtime affinity in
// every term, and is a fixed point of Admit.
func FuzzAdmit(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"spec":{"containers":[{"name":"a"}]}}`,
		`{"spec":{"securityContext":{"runAsUser":0},"containers":[{"name":"a","securityContext":{"runAsUser":5}}]}}`,
		`{"spec":{"containers":[{"name":"a","securityContext":{"privileged":true,"capabilities":{"add":["SYS_ADMIN"]}}}]}}`,
		`{"spec":{"hostNetwork":true,"initContainers":[{"name":"i","env":[{"name":"PATH","value":"/x"}]}]}}`,
		`{"spec":{"securityContext":{"fsGroup":0,"supplementalGroups":[0]},"ephemeralContainers":[{"name":"d","securityContext":{"runAsGroup":0,"procMount":"Unmasked"}}]}}`,
		`{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{},{"matchFields":[{"key":"metadata.name","operator":"In","values":["n"]}]}]}}}}}`,
		`{"metadata":{"annotations":{"brewlet.sh/runtime-image":"ruby"}},"spec":{"runtimeClassName":"brewlet"}}`,
		`{"spec":{"securityContext":{"runAsNonRoot":false,"seccompProfile":{"type":"Unconfined"}},"containers":[{"name":"a","securityContext":{"runAsNonRoot":true,"capabilities":{"drop":["NET_RAW"]}}}]}}`,
		`{"spec":{"securityContext":{"seccompProfile":{"type":"Localhost","localhostProfile":"p.json"}},"initContainers":[{"name":"i","securityContext":{"seccompProfile":{"type":"Unconfined"},"allowPrivilegeEscalation":false}}],"ephemeralContainers":[{"name":"d","securityContext":{"capabilities":{"add":["NET_BIND_SERVICE"]}}}]}}`,
		`{"spec":{"securityContext":{"seccompProfile":{}},"containers":[{"name":"a","securityContext":{"seccompProfile":{"type":"x"}}}]}}`,
		`{"spec":{"os":{"name":"windows"},"hostUsers":false,"containers":[{"name":"a","securityContext":{"capabilities":{"drop":["ALL"]},"runAsNonRoot":false}}]}}`,
	} {
		f.Add([]byte(seed), true, int64(10001))
		f.Add([]byte(seed), false, int64(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, brewlet bool, uid int64) {
		pod := &corev1.Pod{}
		if json.Unmarshal(data, pod) != nil {
			return
		}
		if brewlet {
			pod.Spec.RuntimeClassName = ptr.To(vocab.RuntimeClassName)
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[vocab.AnnotationRuntimeImage] = "python-3.12"
		}
		ri := approvedRI("python-3.12")
		ri.Spec.User.UID = uid
		before := pod.DeepCopy()
		d := Admit(pod, ri, testPools)
		if !reflect.DeepEqual(before, pod) {
			t.Fatal("Admit modified its input")
		}
		if !d.Allowed() {
			if d.Pod != nil || d.Message() == "" {
				t.Fatalf("denied with pod %v or without message", d.Pod != nil)
			}
			return
		}
		checkAdmitted(t, d.Pod)
		if again := Admit(d.Pod, ri, testPools); !again.Allowed() || !reflect.DeepEqual(again.Pod, d.Pod) {
			t.Fatalf("not a fixed point: %s", again.Message())
		}
	})
}

func checkAdmitted(t *testing.T, p *corev1.Pod) {
	t.Helper()
	s := &p.Spec
	if s.HostNetwork || s.HostPID || s.HostIPC {
		t.Fatal("admitted with a host namespace")
	}
	psc := s.SecurityContext
	if psc == nil || psc.RunAsUser == nil || psc.RunAsGroup == nil {
		t.Fatal("admitted without a pod-level identity")
	}
	if (psc.FSGroup != nil && *psc.FSGroup == 0) || slices.Contains(psc.SupplementalGroups, 0) {
		t.Fatal("admitted with a root group")
	}
	for _, c := range containers(p) {
		uid, gid := *psc.RunAsUser, *psc.RunAsGroup
		if sc := c.sc; sc != nil {
			if sc.RunAsUser != nil {
				uid = *sc.RunAsUser
			}
			if sc.RunAsGroup != nil {
				gid = *sc.RunAsGroup
			}
			if (sc.Privileged != nil && *sc.Privileged) || (sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation) ||
				(sc.Capabilities != nil && len(sc.Capabilities.Add) > 0) || (sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount) {
				t.Fatalf("%s admitted with privileges", c.path)
			}
		}
		if uid == 0 || gid == 0 {
			t.Fatalf("%s admitted as %d:%d", c.path, uid, gid)
		}
	}
	if v := podSecurity(t, p, api.LevelRestricted, true); len(v) != 0 {
		t.Fatalf("admitted pod violates Pod Security restricted: %q", v)
	}
	terms := s.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		t.Fatal("no required node affinity")
	}
	for i, term := range terms {
		if !slices.ContainsFunc(term.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
			return reflect.DeepEqual(r, runtimeReq())
		}) {
			t.Fatalf("term %d lacks the runtime requirement", i)
		}
	}
}
