package chart

import (
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"brewlet.sh/brewlet/test/kit"
)

// The chart's removal pieces: the pre-delete hook (Job, its own service account allowed
// only to read and delete NodeProfiles and RuntimeImages, all Helm hooks), off with
// uninstall.cleanup=false; and the unbound retirement-evidence ClusterRole.
func TestChartUninstallHookAndRetirementRole(t *testing.T) {
	rc := kit.ChartMustRender(t, kit.ChartNS, chartPools("--set", "uninstall.timeoutMinutes=12")...)
	for _, k := range [][2]string{{"ServiceAccount", "brewlet-uninstall"}, {"ClusterRole", "brewlet-uninstall"},
		{"ClusterRoleBinding", "brewlet-uninstall"}, {"Job", "brewlet-uninstall"}} {
		o := rc.Find(k[0], k[1])
		if o == nil {
			t.Fatalf("%s %s not rendered", k[0], k[1])
		}
		var m struct {
			Metadata struct{ Annotations map[string]string } `json:"metadata"`
		}
		o.DecodeLoose(t, &m)
		if a := m.Metadata.Annotations; a["helm.sh/hook"] != "pre-delete" || a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
			t.Errorf("%s %s hook annotations %v", k[0], k[1], a)
		}
	}
	cr := &rbacv1.ClusterRole{}
	rc.Decode(t, "ClusterRole", "brewlet-uninstall", cr)
	if len(cr.Rules) != 2 || !slices.Equal(cr.Rules[0].Resources, []string{"nodeprofiles", "runtimeimages"}) ||
		!slices.Equal(cr.Rules[0].Verbs, []string{"get", "list", "delete"}) ||
		!slices.Equal(cr.Rules[1].APIGroups, []string{""}) || !slices.Equal(cr.Rules[1].Resources, []string{"nodes"}) ||
		!slices.Equal(cr.Rules[1].Verbs, []string{"list"}) {
		t.Errorf("uninstall ClusterRole rules %+v", cr.Rules)
	}
	job := &batchv1.Job{}
	rc.Decode(t, "Job", "brewlet-uninstall", job)
	ps := job.Spec.Template.Spec
	c := ps.Containers[0]
	if ps.ServiceAccountName != "brewlet-uninstall" || ps.RestartPolicy != corev1.RestartPolicyNever || *job.Spec.BackoffLimit != 0 ||
		!slices.Equal(c.Args, []string{"uninstall", "--timeout=12m"}) || *job.Spec.ActiveDeadlineSeconds != 12*60+120 {
		t.Errorf("uninstall Job: sa %q restart %q backoff %d args %v deadline %d", ps.ServiceAccountName, ps.RestartPolicy, *job.Spec.BackoffLimit, c.Args, *job.Spec.ActiveDeadlineSeconds)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation ||
		ps.SecurityContext == nil || !*ps.SecurityContext.RunAsNonRoot {
		t.Errorf("uninstall Job security context %+v %+v", ps.SecurityContext, sc)
	}
	dep := rc.Find("Deployment", "brewlet-operator")
	var d struct {
		Spec struct {
			Template struct {
				Spec struct{ Containers []struct{ Image string } }
			}
		}
	}
	dep.DecodeLoose(t, &d)
	if c.Image != d.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("uninstall image %q, want the operator's %q", c.Image, d.Spec.Template.Spec.Containers[0].Image)
	}

	ev := &rbacv1.ClusterRole{}
	rc.Decode(t, "ClusterRole", "brewlet-retirement-evidence", ev)
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"node.brewlet.sh"}, Resources: []string{"noderetirementevidences"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
		{APIGroups: []string{"node.brewlet.sh"}, Resources: []string{"nodeprofiles"}, Verbs: []string{"get", "list", "watch"}},
	}
	if !slices.EqualFunc(ev.Rules, want, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs)
	}) {
		t.Errorf("retirement ClusterRole rules %+v", ev.Rules)
	}
	for _, r := range rc {
		if r.Kind == "ClusterRoleBinding" || r.Kind == "RoleBinding" {
			b := &rbacv1.ClusterRoleBinding{}
			r.DecodeInto(t, b)
			if b.RoleRef.Name == "brewlet-retirement-evidence" {
				t.Errorf("%s %s binds the retirement role: it is for administrators to grant", r.Kind, r.Name)
			}
		}
	}

	off := kit.ChartMustRender(t, kit.ChartNS, chartPools("--set", "uninstall.cleanup=false")...)
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"} {
		if off.Has(k, "brewlet-uninstall") {
			t.Errorf("%s brewlet-uninstall rendered with uninstall.cleanup=false", k)
		}
	}
}
