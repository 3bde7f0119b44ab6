package cgroupv2

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// guestTests are the node tier's tests that run in the guest: installs and a rotation, the
// data path (create, exec, leases across a containerd restart, failed starts, delete), the
// whole-spec rules (devices, namespaces), seccomp, generations and GC, user-namespaced pods,
// and the shim's per-create profiles and memory.
var guestTests = []string{
	"TestNodeRunsPodsThroughCRI",
	"TestDataPathRunsAppOnRuntime",
	"TestShimConfinesTheWholeSpec",
	"TestShimSeccompForNoCapabilities",
	"TestInstallGenerations",
	"TestUserNamespacedPods",
	"TestDataPathShimProfiles",
}

// guestTimeout bounds the whole guest run: boot, the tests under emulation, power-off.
const guestTimeout = 45 * time.Minute

func TestNodeTierOnCgroupV2(t *testing.T) {
	framework.RequireRoot(t)
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		framework.Unavailable(t, "qemu-system-x86_64 (Debian package qemu-system-x86): %v", err)
	}
	kernel, initrd, image := framework.Tool(t, "guest-vmlinuz"), framework.Tool(t, "guest-initrd.img"), framework.Tool(t, "guest-root.img")
	repo := framework.RepoRoot(t)
	job := framework.NewInstance(t, "guest").Dir
	for _, d := range []string{"bin", "tmp"} {
		if err := os.MkdirAll(filepath.Join(job, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// The runtime images the node tests use, built here: the guest has no network.
	artifacts := os.Getenv(kit.ArtifactsEnv)
	if artifacts == "" {
		artifacts = filepath.Join(job, "artifacts")
		t.Setenv(kit.ArtifactsEnv, artifacts)
	}
	kit.BuildRuntimes(t, framework.StartRegistry(t).Addr, "python")

	// Everything the harness would build with go, built here.
	build := func(env []string, args ...string) {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = repo, append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	bin := filepath.Join(job, "bin")
	build(nil, "test", "-c", "-o", filepath.Join(job, "node.test"), "./test/node")
	build(nil, "build", "-o", bin+"/", "./cmd/containerd-shim-brewlet-v2", "./cmd/brewlet")
	build([]string{"CGO_ENABLED=0"}, "build", "-o", bin+"/", "./test/pause")
	build([]string{"CGO_ENABLED=0"}, "build", "-o", filepath.Join(bin, "compat32"), "./test/node/testdata/compat32")

	tools := filepath.Dir(framework.ToolsBin())
	run := fmt.Sprintf(`#!/bin/sh
J=%[1]s
stat -fc %%T /sys/fs/cgroup > $J/cgroup
mkdir -p /var/tmp/brewlet-e2e /var/tmp/artifacts
cp -a /brewlet-artifacts/. /var/tmp/artifacts/
export HOME=/root CI=true BREWLET_E2E_DIR=/var/tmp/brewlet-e2e BREWLET_TEST_ARTIFACTS=/var/tmp/artifacts
export %[2]s=%[3]s %[4]s=$J/bin BREWLET_TOOLS_CACHE=%[5]s
cd %[3]s/test/node
$J/node.test -test.run '^(%[6]s)$' -test.v -test.timeout 40m > $J/node.log 2>&1
echo $? > $J/status
`, job, framework.RepoRootEnv, repo, framework.PrebuiltEnv, tools, strings.Join(guestTests, "|"))
	if err := os.WriteFile(filepath.Join(job, "run"), []byte(run), 0o755); err != nil {
		t.Fatal(err)
	}

	shares := []struct{ tag, path string }{{"repo", repo}, {"tools", tools}, {"artifacts", artifacts}, {"job", job}}
	var mounts []string
	args := []string{"-machine", "q35", "-accel", "tcg,thread=multi", "-cpu", "max", "-smp", "2", "-m", "6144",
		"-display", "none", "-no-reboot", "-nic", "none", "-serial", "file:" + filepath.Join(job, "console.log"),
		"-kernel", kernel, "-initrd", initrd,
		"-drive", "file=" + image + ",if=virtio,format=raw,snapshot=on"}
	for _, s := range shares {
		where := s.path
		if s.tag == "artifacts" {
			where = "/brewlet-artifacts"
		}
		mounts = append(mounts, s.tag+":"+where)
		ro := ",readonly=on"
		if s.tag == "job" {
			ro = ""
		}
		args = append(args, "-virtfs", "local,path="+s.path+",mount_tag="+s.tag+",security_model=none"+ro)
	}
	args = append(args, "-append", "root=/dev/vda rw console=ttyS0 panic=-1 quiet init=/sbin/brewlet-guest-init cgroup_no_v1=all brewlet.share="+
		strings.Join(mounts, ",")+" brewlet.job="+filepath.Join(job, "run"))

	ctx, cancel := context.WithTimeout(context.Background(), guestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Join(job, "tmp")) // the disk snapshot's file
	started := time.Now()
	out, err := cmd.CombinedOutput()
	console, _ := os.ReadFile(filepath.Join(job, "console.log"))
	log, _ := os.ReadFile(filepath.Join(job, "node.log"))
	t.Logf("guest ran %s; qemu: %v %s", time.Since(started).Round(time.Second), err, out)
	t.Logf("node tier in the guest:\n%s", summary(string(log)))
	if ctx.Err() != nil {
		t.Fatalf("the guest did not finish within %s; console:\n%s", guestTimeout, tail(string(console), 40))
	}
	status, _ := os.ReadFile(filepath.Join(job, "status"))
	cg, _ := os.ReadFile(filepath.Join(job, "cgroup"))
	if strings.TrimSpace(string(cg)) != "cgroup2fs" {
		t.Errorf("the guest's /sys/fs/cgroup is %q, not cgroup2fs; console:\n%s", cg, tail(string(console), 40))
	}
	if strings.TrimSpace(string(status)) != "0" {
		t.Fatalf("the node tier failed in the guest (status %q):\n%s\nconsole:\n%s", status, tail(string(log), 120), tail(string(console), 20))
	}
	for _, name := range guestTests {
		if !regexp.MustCompile(`(?m)^--- PASS: ` + name + ` `).Match(log) {
			t.Errorf("%s did not pass in the guest", name)
		}
	}
}

// summary keeps the top-level results and the failures of a verbose test log.
func summary(log string) string {
	var keep []string
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "    --- FAIL") || strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "FAIL") || strings.HasPrefix(l, "PASS") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
