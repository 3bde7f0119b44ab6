package hoststate

import (
	"errors"
	"io/fs"
	"time"

	"brewlet.sh/brewlet/internal/vocab"
)

// AuthorizationStore is the node-local authorization of each runtime ID: written by the
// agent, read by the shim. Its methods are promoted to Layout.
type AuthorizationStore struct{ Roots }

// Authorization is the node-local permission to start containers on one runtime ID. The
// provisioner renews it only after confirming with the API server that the RuntimeImage is
// approved with this epoch and a NodeProfile offers the ID on this node.
type Authorization struct {
	ID          string    `json:"id"`
	Epoch       string    `json:"epoch"`
	Generation  int64     `json:"generation"`
	Digest      string    `json:"digest"`
	ConfirmedAt time.Time `json:"confirmedAt"`
	ExpiresAt   time.Time `json:"expiresAt"`
	Revoked     bool      `json:"revoked"`
	// OnDemand: offered but installed on first use; the shim requests the install.
	OnDemand bool   `json:"onDemand,omitempty"`
	Reason   string `json:"reason,omitempty"` // why it was revoked
	Node     string `json:"node,omitempty"`   // for messages
}

// WriteAuthorization replaces the authorization of a runtime ID atomically.
func (l AuthorizationStore) WriteAuthorization(a Authorization) error {
	if err := checkID(a.ID); err != nil {
		return err
	}
	return writeJSON(l.AuthorizationFile(a.ID), a)
}

// ReadAuthorization returns the authorization of a runtime ID; a missing one is
// RuntimeImageNotInstalled.
func (l AuthorizationStore) ReadAuthorization(id string) (Authorization, error) {
	var a Authorization
	if err := checkID(id); err != nil {
		return a, err
	}
	err := readJSON(l.AuthorizationFile(id), &a)
	if errors.Is(err, fs.ErrNotExist) {
		return a, vocab.Errorf(vocab.ReasonRuntimeImageNotInstalled,
			"runtime image %q is not offered on this node; check the NodeProfile for this node's pool and the pod's %s annotation", id, vocab.AnnotationRuntimeImage)
	}
	if err == nil && a.ID != id {
		return a, vocab.Errorf(vocab.ReasonRuntimeImageNotInstalled, "authorization file of %q names %q; the provisioner will rewrite it", id, a.ID)
	}
	return a, err
}

// Check decides whether a container may start now. It is the shim's whole authorization
// decision, so it is pure and fails closed.
func (a Authorization) Check(now time.Time) error {
	node := a.Node
	if node == "" {
		node = "this node"
	}
	switch {
	case a.Revoked:
		why := a.Reason
		if why == "" {
			why = "the RuntimeImage was deleted, unapproved or removed from this node's profile"
		}
		return vocab.Errorf(vocab.ReasonRuntimeImageRevoked, "runtime image %q is revoked on %s: %s", a.ID, node, why)
	case a.ExpiresAt.IsZero() || !now.Before(a.ExpiresAt):
		return vocab.Errorf(vocab.ReasonRuntimeImageAuthorizationExpired,
			"%s has not confirmed %s with the API server since %s (authorization expired %s); check brewlet-provisioner logs on %s",
			node, a.ID, a.ConfirmedAt.UTC().Format(time.RFC3339), a.ExpiresAt.UTC().Format(time.RFC3339), node)
	case a.Generation < 1 || a.Epoch == "":
		return vocab.Errorf(vocab.ReasonRuntimeImageNotInstalled, "runtime image %q has no installed generation on %s yet", a.ID, node)
	}
	return nil
}
