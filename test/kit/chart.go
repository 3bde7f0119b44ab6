package kit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

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
	ChartNS          = "brewlet-system"
	chartKubeVersion = "1.37.2"
	ChartPool        = `[{"key":"node-restriction.kubernetes.io/pool","values":["general","batch"]}]`
	ChartDigest      = "sha256:" + "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
)

// chartObject is one object of a helm template output.
type chartObject struct {
	Kind, Name, Namespace string
	JSON                  []byte
}

type ChartObjects []chartObject

// Find returns the object of kind and name, or nil.
func (rc ChartObjects) Find(kind, name string) *chartObject {
	for i := range rc {
		if rc[i].Kind == kind && rc[i].Name == name {
			return &rc[i]
		}
	}
	return nil
}

func (rc ChartObjects) Has(kind, name string) bool { return rc.Find(kind, name) != nil }

// findIn returns the object of kind and name in namespace ns, or nil.
func (rc ChartObjects) findIn(kind, ns, name string) *chartObject {
	for i := range rc {
		if rc[i].Kind == kind && rc[i].Namespace == ns && rc[i].Name == name {
			return &rc[i]
		}
	}
	return nil
}

// Decode fills obj from the object of kind and name, refusing fields the type lacks.
func (rc ChartObjects) Decode(t *testing.T, kind, name string, obj any) {
	t.Helper()
	r := rc.Find(kind, name)
	if r == nil {
		t.Fatalf("chart chartObject no %s %s; it has %v", kind, name, rc.Names())
	}
	r.DecodeInto(t, obj)
}

// DecodeIn is Decode for the object of kind and name in namespace ns.
func (rc ChartObjects) DecodeIn(t *testing.T, kind, ns, name string, obj any) {
	t.Helper()
	r := rc.findIn(kind, ns, name)
	if r == nil {
		t.Fatalf("chart renders no %s %s/%s; it has %v", kind, ns, name, rc.Names())
	}
	r.DecodeInto(t, obj)
}

func (r *chartObject) DecodeInto(t *testing.T, obj any) {
	t.Helper()
	kind, name := r.Kind, r.Name
	dec := json.NewDecoder(bytes.NewReader(r.JSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		t.Fatalf("%s %s does not decode strictly into %T: %v", kind, name, obj, err)
	}
}

// DecodeLoose fills obj from the object, ignoring fields obj does not have.
func (r *chartObject) DecodeLoose(t *testing.T, obj any) {
	t.Helper()
	if err := json.Unmarshal(r.JSON, obj); err != nil {
		t.Fatalf("%s %s: %v", r.Kind, r.Name, err)
	}
}

func (rc ChartObjects) Names() []string {
	var out []string
	for _, r := range rc {
		out = append(out, r.Kind+"/"+r.Name)
	}
	return out
}

func ChartDir(t *testing.T) string { return filepath.Join(framework.RepoRoot(t), "charts", "brewlet") }

// chartAPIVersions are the kinds a chartKubeVersion cluster announces that the chart asks
// about (helm template alone announces group versions only, no kinds; a cluster's
// discovery announces both).
var chartAPIVersions = []string{"--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
	"--api-versions", "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration"}

// ChartTemplate renders the chart with args (values flags) into namespace ns, as for a
// chartKubeVersion cluster.
func ChartTemplate(t *testing.T, ns string, args ...string) (ChartObjects, string, error) {
	t.Helper()
	return ChartTemplateRaw(t, ns, append(slices.Clone(chartAPIVersions), args...)...)
}

// ChartTemplateRaw renders the chart with args only: no kinds announced unless args do.
func ChartTemplateRaw(t *testing.T, ns string, args ...string) (ChartObjects, string, error) {
	t.Helper()
	cmd := exec.Command(framework.Tool(t, "helm"), append([]string{"template", "brewlet", ChartDir(t),
		"--namespace", ns, "--kube-version", chartKubeVersion}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, string(out) + stderr.String(), err
	}
	rc, err := ChartSplit(out)
	return rc, string(out), err
}

func ChartSplit(b []byte) (ChartObjects, error) {
	var rc ChartObjects
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

func ChartMustRender(t *testing.T, ns string, args ...string) ChartObjects {
	t.Helper()
	rc, out, err := ChartTemplate(t, ns, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, out)
	}
	return rc
}

// Rotation restarts give the operator rights on workloads: the renders prove those rights
// appear only when asked for, only where asked for, and with the admission policy that
// bounds them wherever the cluster can have it.

// ChartRestartsName names the rotation restarts' RBAC objects and admission policy.
const ChartRestartsName = "brewlet-operator-restarts"
