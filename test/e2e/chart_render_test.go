package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"

	"brewlet.sh/brewlet/test/framework"
)

// The Helm chart charts/brewlet: helm lint, helm template for every value combination that
// changes a template (decoded strictly into Kubernetes types: a misspelt field fails), the
// rendered chart validated and installed by a real API server, and the chart's provisioner
// RBAC together with its node-scope policy judged by that API server. Every chart test
// renders through this file, so that all of them see the chart as a chartKubeVersion
// cluster would.

const (
	chartNS          = "brewlet-system"
	chartKubeVersion = "1.37.2"
	chartPool        = `[{"key":"node-restriction.kubernetes.io/pool","values":["general","batch"]}]`
	chartDigest      = "sha256:" + "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
)

// chartObject is one object of a helm template output.
type chartObject struct {
	Kind, Name, Namespace string
	JSON                  []byte
}

type chartObjects []chartObject

// find returns the object of kind and name, or nil.
func (rc chartObjects) find(kind, name string) *chartObject {
	for i := range rc {
		if rc[i].Kind == kind && rc[i].Name == name {
			return &rc[i]
		}
	}
	return nil
}

func (rc chartObjects) has(kind, name string) bool { return rc.find(kind, name) != nil }

// findIn returns the object of kind and name in namespace ns, or nil.
func (rc chartObjects) findIn(kind, ns, name string) *chartObject {
	for i := range rc {
		if rc[i].Kind == kind && rc[i].Namespace == ns && rc[i].Name == name {
			return &rc[i]
		}
	}
	return nil
}

// decode fills obj from the object of kind and name, refusing fields the type lacks.
func (rc chartObjects) decode(t *testing.T, kind, name string, obj any) {
	t.Helper()
	r := rc.find(kind, name)
	if r == nil {
		t.Fatalf("chart chartObject no %s %s; it has %v", kind, name, rc.names())
	}
	r.decodeInto(t, obj)
}

// decodeIn is decode for the object of kind and name in namespace ns.
func (rc chartObjects) decodeIn(t *testing.T, kind, ns, name string, obj any) {
	t.Helper()
	r := rc.findIn(kind, ns, name)
	if r == nil {
		t.Fatalf("chart renders no %s %s/%s; it has %v", kind, ns, name, rc.names())
	}
	r.decodeInto(t, obj)
}

func (r *chartObject) decodeInto(t *testing.T, obj any) {
	t.Helper()
	kind, name := r.Kind, r.Name
	dec := json.NewDecoder(bytes.NewReader(r.JSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		t.Fatalf("%s %s does not decode strictly into %T: %v", kind, name, obj, err)
	}
}

// decodeLoose fills obj from the object, ignoring fields obj does not have.
func (r *chartObject) decodeLoose(t *testing.T, obj any) {
	t.Helper()
	if err := json.Unmarshal(r.JSON, obj); err != nil {
		t.Fatalf("%s %s: %v", r.Kind, r.Name, err)
	}
}

func (rc chartObjects) names() []string {
	var out []string
	for _, r := range rc {
		out = append(out, r.Kind+"/"+r.Name)
	}
	return out
}

func chartDir(t *testing.T) string { return filepath.Join(framework.RepoRoot(t), "charts", "brewlet") }

// chartAPIVersions are the kinds a chartKubeVersion cluster announces that the chart asks
// about (helm template alone announces group versions only, no kinds; a cluster's
// discovery announces both).
var chartAPIVersions = []string{"--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
	"--api-versions", "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration"}

// chartTemplate renders the chart with args (values flags) into namespace ns, as for a
// chartKubeVersion cluster.
func chartTemplate(t *testing.T, ns string, args ...string) (chartObjects, string, error) {
	t.Helper()
	return chartTemplateRaw(t, ns, append(slices.Clone(chartAPIVersions), args...)...)
}

// chartTemplateRaw renders the chart with args only: no kinds announced unless args do.
func chartTemplateRaw(t *testing.T, ns string, args ...string) (chartObjects, string, error) {
	t.Helper()
	cmd := exec.Command(framework.Tool(t, "helm"), append([]string{"template", "brewlet", chartDir(t),
		"--namespace", ns, "--kube-version", chartKubeVersion}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, string(out) + stderr.String(), err
	}
	rc, err := chartSplit(out)
	return rc, string(out), err
}

func chartSplit(b []byte) (chartObjects, error) {
	var rc chartObjects
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return rc, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := k8syaml.ToJSON(doc)
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(j)) == 0 || string(bytes.TrimSpace(j)) == "null" {
			continue
		}
		var head struct {
			metav1.TypeMeta   `json:",inline"`
			metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(j, &head); err != nil {
			return nil, err
		}
		rc = append(rc, chartObject{Kind: head.Kind, Name: head.Name, Namespace: head.Namespace, JSON: j})
	}
}

func chartMustRender(t *testing.T, ns string, args ...string) chartObjects {
	t.Helper()
	rc, out, err := chartTemplate(t, ns, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, out)
	}
	return rc
}

// chartPools are the values flags of a render the chart accepts (it refuses one without
// pools), followed by extra.
func chartPools(extra ...string) []string {
	return append([]string{"--set-json", "provisioner.pools=" + chartPool}, extra...)
}

// chartPolicyFromConfig reads the policy and binding named name from config/policy/file.
func chartPolicyFromConfig(t *testing.T, file, name string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(t), "config", "policy", file))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := chartSplit(b)
	if err != nil {
		t.Fatal(err)
	}
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	rc.decode(t, "ValidatingAdmissionPolicy", name, vap)
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	rc.decode(t, "ValidatingAdmissionPolicyBinding", name, binding)
	return vap, binding
}
