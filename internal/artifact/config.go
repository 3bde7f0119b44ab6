package artifact

import (
	"fmt"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"brewlet.sh/brewlet/internal/vocab"
)

// ImageConfig is the image config that mirrors a launch descriptor, so that CRI's ordinary
// merge with a pod spec gives plain Kubernetes semantics for command, args, env and
// workingDir.
func ImageConfig(l *Launch) v1.Config {
	c := v1.Config{
		Entrypoint: slices.Clone(l.Process.Entrypoint),
		Cmd:        slices.Clone(l.Process.Args),
		WorkingDir: l.Process.WorkingDir,
	}
	for _, e := range l.Process.Env {
		c.Env = append(c.Env, e.Name+"="+e.Value)
	}
	return c
}

// CheckConfigMirror refuses an image config that differs from launch.json or sets what an
// artifact must leave empty (User, ExposedPorts, Volumes, Healthcheck).
func CheckConfigMirror(l *Launch, c v1.Config) error {
	want := ImageConfig(l)
	mismatch := func(field string, got, exp any) error {
		return vocab.Errorf(vocab.ReasonLaunchConfigMismatch,
			"image config %s is %v but launch.json implies %v; rebuild the artifact with 'brewlet push' so both agree", field, got, exp)
	}
	switch {
	case !slices.Equal(c.Entrypoint, want.Entrypoint):
		return mismatch("Entrypoint", fmt.Sprintf("%q", c.Entrypoint), fmt.Sprintf("%q", want.Entrypoint))
	case !slices.Equal(c.Cmd, want.Cmd):
		return mismatch("Cmd", fmt.Sprintf("%q", c.Cmd), fmt.Sprintf("%q", want.Cmd))
	case c.WorkingDir != want.WorkingDir:
		return mismatch("WorkingDir", fmt.Sprintf("%q", c.WorkingDir), fmt.Sprintf("%q", want.WorkingDir))
	case !slices.Equal(c.Env, want.Env):
		return mismatch("Env", fmt.Sprintf("%q", c.Env), fmt.Sprintf("%q", want.Env))
	case c.User != "":
		return mismatch("User", fmt.Sprintf("%q", c.User), `"" (the runtime defines the user)`)
	case len(c.ExposedPorts) > 0:
		return mismatch("ExposedPorts", c.ExposedPorts, "none")
	case len(c.Volumes) > 0:
		return mismatch("Volumes", c.Volumes, "none")
	case c.Healthcheck != nil:
		return mismatch("Healthcheck", "set", "none")
	}
	return nil
}
