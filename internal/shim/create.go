package shim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	json "github.com/go-json-experiment/json/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/emptypb"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

// layout is the node's host state, relocatable for tests through the shim's environment.
func layout() hoststate.Layout {
	if p := os.Getenv(vocab.EnvHostPrefix); p != "" {
		return hoststate.Under(p)
	}
	return hoststate.DefaultLayout
}

// refusal turns an error into what containerd shows the user: "<Reason>: <message>".
func refusal(err error) error {
	if vocab.ReasonOf(err) != "" {
		return errgrpc.ToGRPCf(errdefs.ErrFailedPrecondition, "%v", err)
	}
	return errgrpc.ToGRPCf(errdefs.ErrInternal, "brewlet shim: %v", err)
}

func reasonOrInternal(err error) vocab.Reason {
	if r := vocab.ReasonOf(err); r != "" {
		return r
	}
	return "Internal"
}

func readSpec(bundle string) (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	var s specs.Spec
	return &s, json.Unmarshal(b, &s)
}

func writeSpec(bundle string, s *specs.Spec) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600)
}

// Create composes an application container; pod sandboxes pass through untouched.
func (s *service) Create(ctx context.Context, r *taskAPI.CreateTaskRequest) (*taskAPI.CreateTaskResponse, error) {
	spec, err := readSpec(r.Bundle)
	if err != nil {
		return nil, refusal(err)
	}
	cgroupsPath := ""
	if spec.Linux != nil {
		cgroupsPath = spec.Linux.CgroupsPath
	}
	if err := normalizeOptions(&r.Options, layout(), cgroupsPath); err != nil {
		return nil, errgrpc.ToGRPCf(errdefs.ErrInvalidArgument, "brewlet shim: %v", err)
	}
	if spec.Annotations[vocab.CRIContainerType] == vocab.CRIContainerTypeSandbox {
		// The pod's containers come next: their image checks find containerd's API
		// connected (containerdconn.go).
		containerdConns.warm(os.Getenv("GRPC_ADDRESS"))
		return s.TTRPCTaskService.Create(ctx, r)
	}
	defer profileCreate(ctx, r.ID)()
	defer releaseMemorySoon()
	l := layout()
	started := time.Now()
	st := newSteps(started)
	// The image is judged while the node-local steps run (image.go, imageCheck); its
	// result is awaited before the application layers are validated and before anything
	// reaches runc.
	img := startImageCheck(ctx, imageVerdictsDir(l), r.ID)
	defer img.stop()
	if err := markBundle(r.Bundle); err != nil {
		return nil, refusal(err)
	}
	leased := false
	unmap := func() {}
	defer func() { unmap() }() // the overlay is mounted, or the create failed
	release := func() {
		if leased {
			_ = l.ReleaseLease(r.ID)
		}
		_ = os.RemoveAll(l.ContainerDir(r.ID))
	}
	if err := s.prepare(ctx, l, r, spec, img, &leased, &unmap, st); err != nil {
		release()
		l.CountLaunch("refused", string(reasonOrInternal(err)))
		return nil, refusal(err)
	}
	resp, err := s.TTRPCTaskService.Create(ctx, r)
	if err != nil {
		release()
		l.CountLaunch("failed", "RuncCreateFailed")
		return resp, err
	}
	l.CountLaunch("started", "")
	st.mark("runc-create", time.Now())
	l.RecordLaunchDuration(st.last.Sub(started))
	if msg := st.slowLaunch(slowLaunchThreshold()); msg != "" {
		log.G(ctx).WithField("container", r.ID).Warn("brewlet: " + msg)
	}
	return resp, nil
}

// prepare runs every check, takes the lease, composes the root filesystem and rewrites
// the spec. Nothing is mounted before every check passed.
func (s *service) prepare(ctx context.Context, l hoststate.Layout, r *taskAPI.CreateTaskRequest, spec *specs.Spec, img *imageCheck, leased *bool, unmap *func(), steps *steps) error {
	ann := spec.Annotations
	id := ann[vocab.AnnotationRuntimeImage]
	if id == "" {
		return vocab.Errorf(vocab.ReasonRuntimeImageRequired,
			"pods with runtimeClassName %s need the annotation %s naming a RuntimeImage (e.g. python-3.12)", vocab.RuntimeClassName, vocab.AnnotationRuntimeImage)
	}
	if err := vocab.ValidateRuntimeID(id); err != nil {
		return err
	}
	launchDir, app, mount, err := snapshotLayers(r.Rootfs)
	if err != nil {
		return err
	}
	launch, launchSum, err := readLaunch(launchDir)
	if err != nil {
		return err
	}
	if err := launch.CheckRuntime(id); err != nil {
		return err
	}
	img.judge(launch, launchSum)
	steps.mark("launch", time.Now())
	if err := checkSpec(spec, readHostFacts(cmp.Or(os.Getenv(vocab.EnvDevRoot), "/dev")), cmp.Or(r.Checkpoint, r.ParentCheckpoint)); err != nil {
		return err
	}
	steps.mark("spec-check", time.Now())
	auth, err := authorized(l, id)
	if err != nil {
		return img.before(err)
	}
	steps.mark("authorization", time.Now())
	lease := hoststate.Lease{ContainerID: r.ID, ID: id,
		PodNamespace: ann[vocab.CRISandboxNamespace], PodName: ann[vocab.CRISandboxName],
		PodUID: ann[vocab.CRISandboxUID], ContainerName: ann[vocab.CRIContainerName]}
	gen, err := l.LeaseCurrent(lease)
	if err == nil {
		*leased = true
	}
	steps.mark("lease", time.Now())
	// The application's layers are node-local too: judged while the image check may still
	// run (the verdict is kept per layer set, refusals included). Its refusal keeps its
	// place below, after the image's and the generation's.
	verr := validateApp(ctx, l, app)
	steps.mark("validate-app", time.Now())
	// Nothing is asked of the agent, and no error about the node is given, for an image
	// that is refused anyway.
	if ierr := img.wait(); ierr != nil {
		return ierr
	}
	steps.mark("image", time.Now())
	if err != nil && auth.OnDemand && vocab.ReasonOf(err) == vocab.ReasonRuntimeImageNotInstalled {
		gen, err = waitOnDemand(l, lease, auth.Epoch)
	}
	if err != nil {
		return err
	}
	*leased = true
	if gen.Epoch != auth.Epoch && auth.OnDemand {
		// The RuntimeImage was recreated while an older epoch stayed installed here (a
		// container still uses it): the new epoch is installed on demand like a first use.
		if gen, err = waitOnDemand(l, lease, auth.Epoch); err != nil {
			return err
		}
	}
	if gen.Epoch != auth.Epoch {
		return vocab.Errorf(vocab.ReasonRuntimeImageEpochMismatch,
			"the installed %s belongs to RuntimeImage %s but the authorization is for %s (the RuntimeImage was recreated); the provisioner installs the new one", id, gen.Epoch, auth.Epoch)
	}
	if err := checkBarrier(ann[vocab.AnnotationRotatedToGeneration], id, gen.Epoch, gen.Generation); err != nil {
		return err
	}
	if err := checkIdentity(spec.Process.User, gen.UID); err != nil {
		return err
	}
	steps.mark("generation", time.Now())
	if verr != nil {
		return verr
	}
	mask, err := appMask(l)
	if err != nil {
		return err
	}
	// The OnDemand wait and validation can take seconds: the fence and the authorization
	// are read again just before anything is handed to runc.
	if err := recheck(l, id, gen); err != nil {
		return err
	}
	steps.mark("recheck", time.Now())
	var rt []string
	for _, d := range gen.Layers {
		rt = append(rt, l.LayerDir(strings.TrimPrefix(d, "sha256:")))
	}
	composeLowerdirs(mount, app, mask, rt)
	keepMountLabel(mount, spec.Linux.MountLabel)
	if *unmap, err = mapLayers(mount, spec, len(app), l.IDMapDir(r.ID)); err != nil {
		return err
	}

	st := &execState{RuntimeID: id, Epoch: gen.Epoch, Generation: gen.Generation,
		UID: spec.Process.User.UID, GID: spec.Process.User.GID, AdditionalGids: spec.Process.User.AdditionalGids,
		HasPath: gen.HasPath, Path: gen.Path, Home: gen.Home}
	for _, kv := range gen.Env {
		if !strings.HasPrefix(kv, "PATH=") {
			st.RuntimeEnv = append(st.RuntimeEnv, kv)
		}
	}
	if err := saveState(l, r.ID, st); err != nil {
		return err
	}
	neutralizeSpec(spec) // first: it recognizes RuntimeDefault by the capabilities asked for
	applyProcessRules(spec.Process, st)
	// Packaged /app is read-only to the process: a read-only bind of the composed /app.
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/app", Type: "bind",
		Source: filepath.Join(r.Bundle, "rootfs", "app"), Options: []string{"rbind", "ro"}})
	if err := writeSpec(r.Bundle, spec); err != nil {
		return err
	}
	steps.mark("compose", time.Now())
	return nil
}

// maxOnDemandWait is the longest a container start waits for an OnDemand install
// (docs/shim.md, "Create"): the kubelet retries, and a create must never hang on a slow registry.
const maxOnDemandWait = 30 * time.Second

// onDemandWait is the configured wait, never above maxOnDemandWait.
func onDemandWait() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(vocab.EnvOnDemandWait)); err == nil && d > 0 {
		return min(d, maxOnDemandWait)
	}
	return maxOnDemandWait
}

// authorized is the node's word on starting a container with id now: the startup fence is
// open and the authorization is valid.
func authorized(l hoststate.Layout, id string) (hoststate.Authorization, error) {
	if err := l.CheckFence(); err != nil {
		return hoststate.Authorization{}, err
	}
	auth, err := l.ReadAuthorization(id)
	if err != nil {
		return auth, err
	}
	return auth, auth.Check(time.Now())
}

// recheck repeats the fence and authorization decisions for the leased generation: a
// revocation, an expiry or an agent restart during the create refuses it.
func recheck(l hoststate.Layout, id string, gen hoststate.Generation) error {
	auth, err := authorized(l, id)
	if err != nil {
		return err
	}
	if auth.Epoch != gen.Epoch {
		return vocab.Errorf(vocab.ReasonRuntimeImageEpochMismatch,
			"%s was recreated while this container was being created (installed epoch %s, authorized %s); the kubelet retries once the provisioner installs the new one", id, gen.Epoch, auth.Epoch)
	}
	return nil
}

// waitOnDemand asks the agent to install an OnDemand runtime of epoch and waits for it,
// bounded; the lease follows current as it moves.
func waitOnDemand(l hoststate.Layout, lease hoststate.Lease, epoch string) (hoststate.Generation, error) {
	if err := l.RequestInstall(lease.ID); err != nil {
		return hoststate.Generation{}, err
	}
	wait := onDemandWait()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		if g, err := l.LeaseCurrent(lease); err == nil && g.Epoch == epoch {
			return g, nil
		}
	}
	return hoststate.Generation{}, vocab.Errorf(vocab.ReasonRuntimeImageInstalling,
		"%s is offered on demand and brewlet-provisioner is installing it on first use (waited %s); the kubelet retries the container", lease.ID, wait)
}

func saveState(l hoststate.Layout, containerID string, st *execState) error {
	dir := l.ContainerDir(containerID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "exec.json"), b, 0o600)
}

func loadState(l hoststate.Layout, containerID string) (*execState, error) {
	b, err := os.ReadFile(filepath.Join(l.ContainerDir(containerID), "exec.json"))
	if err != nil {
		return nil, vocab.Wrap(vocab.ReasonExecStateUnavailable, err,
			"the saved state of container %s is missing, so Brewlet cannot apply its process rules to this exec; restart the container", containerID)
	}
	var st execState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, vocab.Wrap(vocab.ReasonExecStateUnavailable, err, "the saved state of container %s is unreadable; restart the container", containerID)
	}
	return &st, nil
}

// Exec gives exec sessions, exec probes and hooks the container's identity and rules.
func (s *service) Exec(ctx context.Context, r *taskAPI.ExecProcessRequest) (*emptypb.Empty, error) {
	st, err := loadState(layout(), r.ID)
	if err != nil {
		return nil, refusal(err)
	}
	v, err := typeurl.UnmarshalAny(r.Spec)
	if err != nil {
		return nil, refusal(fmt.Errorf("decode exec process: %w", err))
	}
	p, ok := v.(*specs.Process)
	if !ok {
		return nil, refusal(fmt.Errorf("exec process has type %T", v))
	}
	if why := processPrivilege(p); why != "" {
		return nil, refusal(vocab.Errorf(vocab.ReasonPrivilegeNotSupported, "exec %s in container %s: %s", r.ExecID, r.ID, why))
	}
	// Whatever the request asks for, the session runs as the container does.
	p.User = specs.User{UID: st.UID, GID: st.GID, AdditionalGids: st.AdditionalGids}
	applyProcessRules(p, st)
	a, err := typeurl.MarshalAnyToProto(p)
	if err != nil {
		return nil, refusal(err)
	}
	r.Spec = a
	return s.TTRPCTaskService.Exec(ctx, r)
}

// recordFailedStart records a container that exited with an error within
// hoststate.FailedStartWindow of its create, unasked (killedAt: when a Kill for it came,
// zero if none), with the lease it ran on: the agent reports it, and the rotation's health
// gate counts it against the generation (docs/rotation.md, "Rollback"). A Kill after the
// exit asked nothing: containerd's CRI kills a container that exited on its own before
// deleting it. The lease is read only for an error exit nobody asked for; a container
// without one ran no Brewlet runtime.
func recordFailedStart(l hoststate.Layout, id string, resp *taskAPI.DeleteResponse, killedAt time.Time) error {
	if resp == nil || resp.ExitedAt == nil || resp.ExitStatus == 0 {
		return nil
	}
	exited := resp.ExitedAt.AsTime()
	killed := !killedAt.IsZero() && !killedAt.After(exited)
	if killed {
		return nil
	}
	ls, err := l.Lease(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !hoststate.IsFailedStart(resp.ExitStatus, ls.CreatedAt, exited, killed) {
		return nil
	}
	return l.RecordFailedStart(hoststate.FailedStart{Lease: ls, ExitCode: resp.ExitStatus, ExitedAt: exited})
}

// Delete releases the container's lease once the init process, its execs and its mounts
// are gone (the runc code unmounts the root filesystem inside Delete).
func (s *service) Delete(ctx context.Context, r *taskAPI.DeleteRequest) (*taskAPI.DeleteResponse, error) {
	resp, err := s.TTRPCTaskService.Delete(ctx, r)
	if err == nil && r.ExecID == "" {
		var killedAt time.Time
		if v, ok := s.killed.LoadAndDelete(r.ID); ok {
			killedAt = v.(time.Time)
		}
		if ferr := recordFailedStart(layout(), r.ID, resp, killedAt); ferr != nil {
			log.G(ctx).WithError(ferr).Warn("brewlet: a failed start not recorded")
		}
		if rerr := releaseContainer(layout(), bundleOf(r.ID), r.ID); rerr != nil {
			log.G(ctx).WithError(rerr).Warn("brewlet: lease kept after delete; GC keeps its generation")
		}
		// A deleted container is usually followed by its replacement in the same pod (a
		// restart), whose image check then finds containerd's API connected; after the
		// sandbox's delete the shim exits and the connection with it.
		containerdConns.warm(os.Getenv("GRPC_ADDRESS"))
	}
	return resp, err
}
