package hoststate

import (
	"errors"
	"io/fs"
	"os"

	"brewlet.sh/brewlet/internal/vocab"
)

// FenceFiles are the startup fence: closed until the agent re-validated state since boot.
// Its methods are promoted to Layout.
type FenceFiles struct{ Roots }

// The startup fence: /run is emptied by a reboot, so "validated" missing means the agent has
// not re-validated on-disk state against the cluster since boot (or since it closed the
// fence on start). No container starts until it has.

// CloseFence blocks new containers until OpenFence.
func (l FenceFiles) CloseFence() error {
	if err := os.MkdirAll(l.Run, 0o755); err != nil {
		return err
	}
	if err := os.Remove(l.FenceCleared()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.WriteFile(l.FenceFile(), []byte("closed\n"), 0o644)
}

// OpenFence records that the agent re-validated on-disk state.
func (l FenceFiles) OpenFence() error {
	if err := os.MkdirAll(l.Run, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(l.FenceCleared(), []byte("validated\n"), 0o644); err != nil {
		return err
	}
	if err := os.Remove(l.FenceFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// CheckFence refuses new containers while the fence is closed or was never opened.
func (l FenceFiles) CheckFence() error {
	if _, err := os.Stat(l.FenceFile()); err == nil {
		return vocab.Errorf(vocab.ReasonNodeNotReady, "brewlet-provisioner on this node is re-validating runtimes after a start or reboot; new containers wait until it has (check its logs if this persists)")
	}
	if _, err := os.Stat(l.FenceCleared()); err != nil {
		return vocab.Errorf(vocab.ReasonNodeNotReady, "brewlet-provisioner has not validated this node's runtimes since boot; check that it runs on this node")
	}
	return nil
}

// RemoveFence removes the fence's files, for a node that serves Brewlet no more (the
// directory stays: it may be a mount point). Without them the fence counts as never
// opened, as after a reboot: the agent opens it again once a profile selects the node.
func (l FenceFiles) RemoveFence() error {
	for _, f := range l.fenceFiles() {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// HasFenceFiles reports whether either fence file exists (or cannot be told apart from
// existing).
func (l FenceFiles) HasFenceFiles() bool {
	for _, f := range l.fenceFiles() {
		if _, err := os.Lstat(f); !errors.Is(err, fs.ErrNotExist) {
			return true
		}
	}
	return false
}

func (l FenceFiles) fenceFiles() []string { return []string{l.FenceFile(), l.FenceCleared()} }
