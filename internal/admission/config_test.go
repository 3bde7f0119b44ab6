package admission

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// config/webhook/mutating-webhook.yaml is the constructor's object, written out for
// kubectl and the chart; they must not drift.
func TestConfigurationYAML(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "config", "webhook", "mutating-webhook.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	got := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(got); err != nil {
		t.Fatal(err)
	}
	want := Configuration(ClientConfig{ServiceNamespace: "brewlet-system", ServiceName: ServiceName})
	want.APIVersion, want.Kind = "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("config/webhook/mutating-webhook.yaml differs from Configuration():\n got %+v\nwant %+v", got, want)
	}
	u := Configuration(ClientConfig{URL: "https://127.0.0.1:1/x", CABundle: []byte("ca")}).Webhooks[0].ClientConfig
	if u.Service != nil || *u.URL != "https://127.0.0.1:1/x" || string(u.CABundle) != "ca" {
		t.Fatalf("URL client config %+v", u)
	}
}
