package hoststate

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// InstallRequests are the shim's requests for OnDemand installs, served by the agent. Its
// methods are promoted to Layout.
type InstallRequests struct{ Roots }

// Install requests: the shim asks for an OnDemand runtime by creating a file named after
// the ID; the agent installs it and removes the request.

func (l InstallRequests) requestsDir() string { return filepath.Join(l.State, "requests") }

// RequestInstall records that a container waits for an OnDemand runtime.
func (l InstallRequests) RequestInstall(id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := os.MkdirAll(l.requestsDir(), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(l.requestsDir(), id), nil, 0o644)
}

// InstallRequested reports whether a container asked for id.
func (l InstallRequests) InstallRequested(id string) bool {
	_, err := os.Stat(filepath.Join(l.requestsDir(), id))
	return err == nil
}

// PendingRequests reports whether any request waits.
func (l InstallRequests) PendingRequests() bool {
	ents, err := os.ReadDir(l.requestsDir())
	return err == nil && len(ents) > 0
}

// ClearRequest removes the request for id.
func (l InstallRequests) ClearRequest(id string) {
	if err := os.Remove(filepath.Join(l.requestsDir(), id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return
	}
}

// Requests lists the IDs containers are waiting for (files that are not valid IDs are
// ignored: the shim only writes valid ones).
func (l InstallRequests) Requests() []string {
	ents, err := os.ReadDir(l.requestsDir())
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if checkID(e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	return out
}
