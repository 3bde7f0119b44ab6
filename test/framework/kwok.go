package framework

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"brewlet.sh/brewlet/internal/vocab"
)

// kwokAnnotation marks the fake nodes kwok manages; real nodes never carry it.
const kwokAnnotation = "kwok.x-k8s.io/node"

func (cp *ControlPlane) startKwok(t TB, nodes int) error {
	bin, port := Tool(t, "kwok"), FreePort(t)
	stages := filepath.Join(ToolsBin(), "kwok-stages.yaml")
	p, err := cp.Start("kwok", nil, bin, "--kubeconfig="+cp.Kubeconfig, "--config="+stages,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector="+kwokAnnotation+"=fake",
		"--node-lease-duration-seconds=40", "--cidr=10.244.0.0/16", "--node-ip=127.0.0.2",
		"--server-address=127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	if err := p.WaitReady(60*time.Second, func(ctx context.Context) error {
		return HTTPOK(ctx, insecureClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
	}); err != nil {
		return err
	}
	for i := 0; i < nodes; i++ {
		if err := cp.AddFakeNode(context.Background(), fmt.Sprintf("kwok-node-%d", i), nil); err != nil {
			return err
		}
	}
	return nil
}

// AddFakeNode creates a Node that kwok keeps Ready.
func (cp *ControlPlane) AddFakeNode(ctx context.Context, name string, labels map[string]string) error {
	l := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok",
		// The fleet's pool: a key no kubelet could set, as every pool key.
		vocab.NodeRestrictionPrefix + "pool": "kwok"}
	for k, v := range labels {
		l[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110"),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l,
			Annotations: map[string]string{kwokAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"}},
		Status: corev1.NodeStatus{Allocatable: capacity, Capacity: capacity},
	}
	return cp.Client.Create(ctx, n)
}
