package shim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"

	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	contentapi "github.com/containerd/containerd/api/services/content/v1"
	imagesapi "github.com/containerd/containerd/api/services/images/v1"
	apitypes "github.com/containerd/containerd/api/types"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/vocab"
)

const testLaunch = `{"schemaVersion": 2,
 "process": {"entrypoint": ["python"], "args": ["-m", "app"], "workingDir": "/app"},
 "requires": {"runtimeImages": ["python-3.12"]}}`

// fakeContainerd serves the three containerd services checkImage uses, from maps, and
// counts the blobs read.
type fakeContainerd struct {
	mu          sync.Mutex
	images      map[string]*apitypes.Descriptor // container ID -> image target
	blobs       map[string][]byte
	reads, gets int
}

type fakeContainers struct {
	*fakeContainerd
	containersapi.UnimplementedContainersServer
}

func (f fakeContainers) Get(_ context.Context, r *containersapi.GetContainerRequest) (*containersapi.GetContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	if _, ok := f.images[r.ID]; !ok {
		return nil, status.Error(codes.NotFound, "no such container")
	}
	return &containersapi.GetContainerResponse{Container: &containersapi.Container{ID: r.ID, Image: "image-of-" + r.ID}}, nil
}

type fakeImages struct {
	*fakeContainerd
	imagesapi.UnimplementedImagesServer
}

func (f fakeImages) Get(_ context.Context, r *imagesapi.GetImageRequest) (*imagesapi.GetImageResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.images[strings.TrimPrefix(r.Name, "image-of-")]
	return &imagesapi.GetImageResponse{Image: &imagesapi.Image{Name: r.Name, Target: d}}, nil
}

type fakeContent struct {
	*fakeContainerd
	contentapi.UnimplementedContentServer
}

func (f fakeContent) Read(r *contentapi.ReadContentRequest, s contentapi.Content_ReadServer) error {
	f.mu.Lock()
	b, ok := f.blobs[r.Digest]
	f.reads++
	f.mu.Unlock()
	if !ok {
		return status.Error(codes.NotFound, "no such blob")
	}
	return s.Send(&contentapi.ReadContentResponse{Data: b})
}

// blob stores v as JSON and returns its descriptor.
func (f *fakeContainerd) blob(t *testing.T, mt types.MediaType, v any) v1.Descriptor {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	d := v1.Descriptor{MediaType: mt, Size: int64(len(b)), Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}}
	f.mu.Lock()
	f.blobs[d.Digest.String()] = b
	f.mu.Unlock()
	return d
}

// artifactImage stores an artifact's config and manifest (in an index when indexed) and
// names it the image of container id.
func (f *fakeContainerd) artifactImage(t *testing.T, id string, cfg v1.Config, version string, indexed bool) {
	t.Helper()
	c := f.blob(t, types.OCIConfigJSON, v1.ConfigFile{Architecture: goruntime.GOARCH, OS: "linux", Config: cfg})
	layer := func(role string) v1.Descriptor {
		return v1.Descriptor{MediaType: types.OCILayer, Size: 1, Digest: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%064x", len(role))},
			Annotations: map[string]string{vocab.AnnotationLayer: role}}
	}
	m := f.blob(t, types.OCIManifestSchema1, v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: c,
		Layers: []v1.Descriptor{layer(vocab.LayerApp), layer(vocab.LayerLaunch)}, Annotations: map[string]string{vocab.AnnotationArtifactVersion: version}})
	if indexed {
		m.Platform = &v1.Platform{OS: "linux", Architecture: goruntime.GOARCH}
		m = f.blob(t, types.OCIImageIndex, v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{m}})
	}
	f.mu.Lock()
	f.images[id] = &apitypes.Descriptor{MediaType: string(m.MediaType), Digest: m.Digest.String(), Size: m.Size}
	f.mu.Unlock()
}

func (f *fakeContainerd) counts() (reads, gets int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, g := f.reads, f.gets
	f.reads, f.gets = 0, 0
	return r, g
}

// startFakeContainerd serves a fakeContainerd at GRPC_ADDRESS for the test.
func startFakeContainerd(t *testing.T) *fakeContainerd {
	t.Helper()
	f := &fakeContainerd{images: map[string]*apitypes.Descriptor{}, blobs: map[string][]byte{}}
	sock := filepath.Join(t.TempDir(), "containerd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	containersapi.RegisterContainersServer(s, fakeContainers{fakeContainerd: f})
	imagesapi.RegisterImagesServer(s, fakeImages{fakeContainerd: f})
	contentapi.RegisterContentServer(s, fakeContent{fakeContainerd: f})
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	t.Setenv("GRPC_ADDRESS", sock)
	return f
}

func launchOf(t *testing.T, b string) (*artifact.Launch, string) {
	t.Helper()
	l, err := artifact.ParseLaunch([]byte(b))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(b))
	return l, hex.EncodeToString(sum[:])
}

// A create whose image was already checked on the node reads no blob; anything the verdict
// depends on that differs reads them again.
func TestCheckImageCache(t *testing.T) {
	if exeIdentity() == "" {
		t.Fatal("no identity of the test binary (/proc/self/exe): the cache would never be used")
	}
	ctx := context.Background()
	f := startFakeContainerd(t)
	launch, sum := launchOf(t, testLaunch)
	good := artifact.ImageConfig(launch)
	mismatch := good
	mismatch.Entrypoint = []string{"other"}
	f.artifactImage(t, "plain", good, vocab.ArtifactVersion, false)
	f.artifactImage(t, "indexed", good, vocab.ArtifactVersion, true)
	f.artifactImage(t, "mismatch", mismatch, vocab.ArtifactVersion, false)
	f.artifactImage(t, "unversioned", good, "", false)
	other := good
	other.Env = []string{"A=b"}
	f.artifactImage(t, "missing-config", other, vocab.ArtifactVersion, false)
	f.mu.Lock()
	var m v1.Manifest
	_ = json.Unmarshal(f.blobs[f.images["missing-config"].Digest], &m)
	delete(f.blobs, m.Config.Digest.String())
	f.mu.Unlock()
	cache := filepath.Join(t.TempDir(), "image-verdicts")
	for _, tc := range []struct {
		name      string
		container string
		launchSum string
		reads     int
		reason    vocab.Reason
		internal  bool // an error without a reason
	}{
		{"first check reads manifest and config", "plain", sum, 2, "", false},
		{"checked again from the cache", "plain", sum, 0, "", false},
		{"another launch.json reads again", "plain", strings.Repeat("0", 64), 2, "", false},
		{"an index is read for the platform's manifest", "indexed", sum, 3, "", false},
		{"index cached too", "indexed", sum, 0, "", false},
		{"refusal", "mismatch", sum, 2, vocab.ReasonLaunchConfigMismatch, false},
		{"refusal replayed from the cache", "mismatch", sum, 0, vocab.ReasonLaunchConfigMismatch, false},
		{"unversioned manifest", "unversioned", sum, 1, vocab.ReasonUnsupportedArtifact, false},
		{"unversioned refusal cached", "unversioned", sum, 0, vocab.ReasonUnsupportedArtifact, false},
		{"a missing blob is not remembered", "missing-config", sum, 2, "", true},
		{"and is read again", "missing-config", sum, 2, "", true},
		{"an unknown container", "gone", sum, 0, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkImage(ctx, cache, tc.container, launch, tc.launchSum)
			reads, gets := f.counts()
			if reads != tc.reads {
				t.Errorf("%d blob reads, want %d", reads, tc.reads)
			}
			if gets != 1 {
				t.Errorf("container looked up %d times; it is asked every time", gets)
			}
			switch {
			case tc.internal && (err == nil || vocab.ReasonOf(err) != ""):
				t.Fatalf("want an error without a reason: %v", err)
			case !tc.internal && vocab.ReasonOf(err) != tc.reason:
				t.Fatalf("want reason %q: %v", tc.reason, err)
			}
		})
	}
	// A re-pointed image (the same container now naming another digest) is checked anew.
	f.artifactImage(t, "plain", mismatch, vocab.ArtifactVersion, true)
	if err := checkImage(ctx, cache, "plain", launch, sum); vocab.ReasonOf(err) != vocab.ReasonLaunchConfigMismatch {
		t.Fatalf("re-pointed image answered from the old digest's verdict: %v", err)
	}
	if reads, _ := f.counts(); reads != 3 {
		t.Fatalf("re-pointed image: %d reads", reads)
	}
}

// A cache entry that is damaged, planted under another key's name, or writable by others
// is a miss: the blobs are read and checked again, and a refusal still refuses.
func TestCheckImageCacheDistrust(t *testing.T) {
	if exeIdentity() == "" {
		t.Fatal("no identity of the test binary (/proc/self/exe): the cache would never be used")
	}
	ctx := context.Background()
	f := startFakeContainerd(t)
	launch, sum := launchOf(t, testLaunch)
	bad := artifact.ImageConfig(launch)
	bad.User = "0"
	f.artifactImage(t, "c", bad, vocab.ArtifactVersion, false)
	cache := filepath.Join(t.TempDir(), "image-verdicts")
	if err := checkImage(ctx, cache, "c", launch, sum); vocab.ReasonOf(err) != vocab.ReasonLaunchConfigMismatch {
		t.Fatal(err)
	}
	f.counts()
	ents, err := os.ReadDir(cache)
	if err != nil || len(ents) != 1 {
		t.Fatalf("one verdict stored: %v %v", err, ents)
	}
	file := filepath.Join(cache, ents[0].Name())
	stored, _ := os.ReadFile(file)
	var v imageVerdict
	if err := json.Unmarshal(stored, &v); err != nil {
		t.Fatal(err)
	}
	pass := func(mut func(*imageVerdict)) []byte {
		p := imageVerdict{Key: v.Key, OK: true}
		mut(&p)
		b, _ := json.Marshal(p)
		return b
	}
	for _, tc := range []struct {
		name  string
		plant func()
	}{
		{"torn", func() { _ = os.WriteFile(file, stored[:len(stored)/2], 0o600) }},
		{"a pass for another digest", func() {
			_ = os.WriteFile(file, pass(func(p *imageVerdict) { p.Key.Target = "sha256:" + strings.Repeat("a", 64) }), 0o600)
		}},
		{"a pass by another shim", func() { _ = os.WriteFile(file, pass(func(p *imageVerdict) { p.Key.Shim = "other" }), 0o600) }},
		{"a pass with trailing data", func() { _ = os.WriteFile(file, append(pass(func(*imageVerdict) {}), []byte(`{"ok":false}`)...), 0o600) }},
		{"a pass others could have written", func() {
			_ = os.WriteFile(file, pass(func(*imageVerdict) {}), 0o600)
			_ = os.Chmod(file, 0o666)
		}},
		{"a pass in a directory others can write", func() {
			_ = os.WriteFile(file, pass(func(*imageVerdict) {}), 0o600)
			_ = os.Chmod(cache, 0o777)
		}},
		{"a symlink to a pass", func() {
			p := filepath.Join(t.TempDir(), "pass")
			_ = os.WriteFile(p, pass(func(*imageVerdict) {}), 0o600)
			_ = os.Remove(file)
			_ = os.Symlink(p, file)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.plant()
			defer func() { _ = os.Chmod(cache, 0o700) }()
			if err := checkImage(ctx, cache, "c", launch, sum); vocab.ReasonOf(err) != vocab.ReasonLaunchConfigMismatch {
				t.Fatalf("damaged entry answered: %v", err)
			}
			if reads, _ := f.counts(); reads != 2 {
				t.Fatalf("%d reads: the entry was not treated as a miss", reads)
			}
		})
	}
	// The genuine pass is honored (so the planted ones above were refused for their flaw).
	_ = os.Remove(file)
	_ = os.WriteFile(file, pass(func(*imageVerdict) {}), 0o600)
	if err := checkImage(ctx, cache, "c", launch, sum); err != nil {
		t.Fatalf("well-formed entry for the key not honored: %v", err)
	}
}

func TestImageVerdictOf(t *testing.T) {
	key := imageKey{Checks: imageChecksVersion, Shim: "s", Platform: "linux/amd64", Target: "sha256:x", Launch: "y"}
	for _, tc := range []struct {
		name string
		err  error
		keep bool
	}{
		{"pass", nil, true},
		{"manifest refusal", vocab.Errorf(vocab.ReasonUnsupportedArtifact, "no"), true},
		{"config refusal", vocab.Errorf(vocab.ReasonLaunchConfigMismatch, "no"), true},
		{"platform refusal", vocab.Errorf(vocab.ReasonPlatformUnavailable, "no"), true},
		{"a reason the image checks do not give", vocab.Errorf(vocab.ReasonNodeNotReady, "no"), false},
		{"wrapped: would not replay as given", fmt.Errorf("ctx: %w", vocab.Errorf(vocab.ReasonUnsupportedArtifact, "no")), false},
		{"with a cause", vocab.Wrap(vocab.ReasonUnsupportedArtifact, os.ErrNotExist, "no"), false},
		{"I/O", os.ErrNotExist, false},
		{"empty message", vocab.Errorf(vocab.ReasonUnsupportedArtifact, ""), false},
		{"huge message", vocab.Errorf(vocab.ReasonUnsupportedArtifact, "%s", strings.Repeat("x", maxImageMessage+1)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, keep := imageVerdictOf(key, tc.err)
			if keep != tc.keep {
				t.Fatalf("kept %v, want %v", keep, tc.keep)
			}
			if !keep {
				return
			}
			if v.err() == nil != (tc.err == nil) || (tc.err != nil && v.err().Error() != tc.err.Error()) {
				t.Fatalf("replayed as %v, given as %v", v.err(), tc.err)
			}
			b, _ := json.Marshal(v)
			if back, ok := parseImageVerdict(b, key); !ok || back != v {
				t.Fatalf("stored verdict does not read back: %s", b)
			}
		})
	}
}

func TestParseImageVerdict(t *testing.T) {
	key := imageKey{Checks: imageChecksVersion, Shim: "s", Platform: "linux/amd64", MediaType: "m", Target: "sha256:x", Launch: "y"}
	k, _ := json.Marshal(key)
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"pass", `{"key":` + string(k) + `,"ok":true}`, true},
		{"refusal", `{"key":` + string(k) + `,"reason":"LaunchConfigMismatch","message":"m"}`, true},
		{"no key", `{"ok":true}`, false},
		{"other key", strings.Replace(`{"key":`+string(k)+`,"ok":true}`, `"sha256:x"`, `"sha256:z"`, 1), false},
		{"neither pass nor refusal", `{"key":` + string(k) + `}`, false},
		{"both", `{"key":` + string(k) + `,"ok":true,"reason":"LaunchConfigMismatch","message":"m"}`, false},
		{"pass with a message", `{"key":` + string(k) + `,"ok":true,"message":"m"}`, false},
		{"refusal without message", `{"key":` + string(k) + `,"reason":"LaunchConfigMismatch"}`, false},
		{"reason not from the image checks", `{"key":` + string(k) + `,"reason":"NodeNotReady","message":"m"}`, false},
		{"unknown field", `{"key":` + string(k) + `,"ok":true,"extra":1}`, false},
		{"trailing value", `{"key":` + string(k) + `,"ok":true} {}`, false},
		{"trailing garbage", `{"key":` + string(k) + `,"ok":true}]`, false},
		{"not JSON", `ok`, false},
		{"empty", ``, false},
		{"ok as a string", `{"key":` + string(k) + `,"ok":"true"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := parseImageVerdict([]byte(tc.in), key); ok != tc.ok {
				t.Fatalf("parsed %v, want %v", ok, tc.ok)
			}
		})
	}
}

// Whatever a cache file holds, it answers only for its own key, as exactly one of a pass
// or a refusal the image checks give, and it reads back as stored.
func FuzzParseImageVerdict(f *testing.F) {
	key := imageKey{Checks: imageChecksVersion, Shim: "s", Platform: "linux/amd64", MediaType: "m", Target: "sha256:x", Launch: "y"}
	k, _ := json.Marshal(key)
	f.Add([]byte(`{"key":` + string(k) + `,"ok":true}`))
	f.Add([]byte(`{"key":` + string(k) + `,"reason":"UnsupportedArtifact","message":"m"}`))
	f.Add([]byte(`{"key":{},"ok":true}`))
	f.Add([]byte(`{"key":` + string(k) + `,"ok":true}{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, ok := parseImageVerdict(b, key)
		if !ok {
			return
		}
		if v.Key != key || v.OK == (v.Reason != "") || (!v.OK && !cachedImageReasons[v.Reason]) {
			t.Fatalf("accepted %q as %+v", b, v)
		}
		again, _ := json.Marshal(v)
		if back, ok := parseImageVerdict(again, key); !ok || back != v {
			t.Fatalf("%+v does not survive a round trip", v)
		}
	})
}

// The image check runs beside the node-local steps, but its refusal is the one a create
// reports, as when it ran first; abandoning it returns at once.
func TestImageCheckRefusalComesFirst(t *testing.T) {
	t.Setenv("GRPC_ADDRESS", "") // checkImage refuses without containerd's address
	c := startImageCheck(context.Background(), t.TempDir(), "c1")
	c.judge(nil, "")
	nodeErr := errors.New("the node refused")
	if err := c.before(nodeErr); err == nil || err == nodeErr || !strings.Contains(err.Error(), "GRPC_ADDRESS") {
		t.Errorf("before(node refusal) = %v, want the image check's refusal", err)
	}
	c.stop()

	t.Setenv("GRPC_ADDRESS", filepath.Join(t.TempDir(), "no-containerd.sock"))
	c = startImageCheck(context.Background(), t.TempDir(), "c1")
	c.stop() // cancelled, never judged: the goroutine is gone when stop returns
	select {
	case <-c.done:
	default:
		t.Fatal("stop returned before the check ended")
	}
}
