package agent

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/vocab"
)

// A pass handles each target in three steps: it reads what the node holds (Facts), decides
// with pure functions (PlanRevocation, or PlanInstall then PlanEntry), and then writes what
// the plan says (apply). Only the writes can still change the outcome: a failed write is
// reported on the entry, and a lost writer lease ends the pass.

// Facts is what one pass reads about a target before it decides anything.
type Facts struct {
	// Known: the previous pass reported the ID.
	Known bool
	// Current is the generation the node serves, when HasCurrent.
	Current    hoststate.Ref
	HasCurrent bool
	// Digest of the current generation, read when it is of the target's epoch; DigestErr
	// when that record cannot be read.
	Digest    string
	DigestErr error
	// Auth is the authorization on disk (AuthErr when unreadable or absent; AuthExists
	// whether its file exists at all).
	Auth       hoststate.Authorization
	AuthErr    error
	AuthExists bool
	// Running: an install of exactly the target's request runs. LastErr and LastAt are the
	// last finished install of that request (HasLast).
	Running bool
	HasLast bool
	LastErr error
	LastAt  time.Time
	// Requested: a shim asked for the ID's install (OnDemand).
	Requested bool
}

// ofEpoch reports whether the node serves a generation of t's epoch.
func (f Facts) ofEpoch(t Target) bool { return f.HasCurrent && f.Current.Epoch == t.Epoch }

// otherEpochAuthorized reports whether an unrevoked authorization of another epoch is on
// disk: nothing of an old epoch is trusted for a new one.
func (f Facts) otherEpochAuthorized(t Target) bool {
	return f.AuthErr == nil && f.AuthExists && f.Auth.Epoch != t.Epoch && !f.Auth.Revoked
}

// Revocation is the plan for a target the node must no longer serve.
type Revocation struct {
	Entry brewletv1.NodeRuntimeEntry
	// Write: a revoked authorization with Entry.Message as its reason is written (none on
	// disk yet with that reason; an unreadable one is replaced).
	Write bool
	// Report: the status lists the ID (the node knew it or has an authorization for it).
	Report bool
}

// PlanRevocation decides a revoked target: the revocation is written once, and the entry
// says Revoked, or Installing while a new epoch's first generation is still to come.
func PlanRevocation(t Target, f Facts) Revocation {
	e := entryOf(t)
	e.State, e.Reason, e.Message = string(vocab.StateRevoked), string(t.Reason), t.Message
	if t.Reason != vocab.ReasonRuntimeImageRevoked && t.Reason != vocab.ReasonUnknownRuntimeImage {
		e.State = string(vocab.StateInstalling)
	}
	had := f.AuthExists
	write := had && (f.AuthErr != nil || !f.Auth.Revoked || f.Auth.Reason != t.Message)
	return Revocation{Entry: e, Write: write, Report: f.Known || had}
}

// InstallStep is what a pass does about a target's install.
type InstallStep struct {
	// Request is the install the target needs, nil when none does (the generation is
	// served, or a rollout wave holds the node back). Any other install of the ID stops.
	Request *install.Request
	// Start: the install is started now (none runs, it is wanted and a retry is due).
	Start bool
}

// PlanInstall decides whether a target needs an install and whether to start it now.
func PlanInstall(t Target, f Facts, now time.Time, retryPause time.Duration) InstallStep {
	served := f.ofEpoch(t) && f.Current.Generation >= t.Generation
	if served || t.Image == "" {
		return InstallStep{}
	}
	req := requestOf(t)
	wanted := t.Install != string(vocab.InstallOnDemand) || f.Requested
	due := !f.HasLast || RetryDue(f.LastErr, f.LastAt, now, retryPause)
	return InstallStep{Request: &req, Start: !f.Running && wanted && due}
}

// Entry is the plan for a target the node serves or installs.
type Entry struct {
	// Entry is the state reported if every write below succeeds.
	Entry brewletv1.NodeRuntimeEntry
	// Withdraw: an authorization of another epoch is revoked first.
	Withdraw bool
	// Authorize, when set, is renewed (its ConfirmedAt, ExpiresAt and Node are the
	// writer's to fill).
	Authorize *hoststate.Authorization
}

// PlanEntry decides what a target's entry says and which authorization to write, once its
// install has been handled: installing (the install runs or asked for) reports whether an
// install of the target is running after this pass's start. authorizedUntil is when an
// authorization written now expires.
func PlanEntry(t Target, f Facts, step InstallStep, running bool, authorizedUntil time.Time) Entry {
	e := entryOf(t)
	var failed *brewletv1.NodeRuntimeEntry
	if step.Request != nil && !running && f.HasLast && f.LastErr != nil {
		reason := string(reasonOr(f.LastErr, vocab.ReasonRuntimeImagePullFailed))
		var failedGen int64
		if install.Refused(f.LastErr) {
			failedGen = t.Generation
		}
		if !f.ofEpoch(t) {
			e.State, e.Reason, e.Message, e.FailedGeneration = string(vocab.StateFailed), reason, f.LastErr.Error(), failedGen
			return Entry{Entry: e, Withdraw: f.otherEpochAuthorized(t)}
		}
		// The refused generation never becomes current; the one in use stays served.
		failed = &brewletv1.NodeRuntimeEntry{Reason: reason, FailedGeneration: failedGen,
			Message: fmt.Sprintf("generation %d refused, generation %d stays in use: %v", t.Generation, f.Current.Generation, f.LastErr)}
	}
	if !f.ofEpoch(t) { // nothing of this epoch installed yet
		p := Entry{Withdraw: f.otherEpochAuthorized(t)}
		if t.Install != string(vocab.InstallOnDemand) {
			e.State = string(vocab.StateInstalling)
			p.Entry = e
			return p
		}
		// Offered on first use: authorize the ID so the shim may ask for the install.
		e.State = string(vocab.StateAvailable)
		p.Entry = e
		p.Authorize = &hoststate.Authorization{ID: t.ID, Epoch: t.Epoch, Generation: t.Generation, OnDemand: true}
		return p
	}
	if f.DigestErr != nil {
		e.State, e.Reason, e.Message = string(vocab.StateFailed), string(vocab.ReasonRuntimeImageNotInstalled), f.DigestErr.Error()
		return Entry{Entry: e}
	}
	until := metav1.NewTime(authorizedUntil.Truncate(time.Second))
	e.State, e.Generation, e.Digest, e.AuthorizedUntil = string(vocab.StateReady), f.Current.Generation, f.Digest, &until
	if failed != nil {
		e.Reason, e.Message, e.FailedGeneration = failed.Reason, failed.Message, failed.FailedGeneration
	}
	return Entry{Entry: e, Authorize: &hoststate.Authorization{ID: t.ID, Epoch: f.Current.Epoch, Generation: f.Current.Generation, Digest: f.Digest}}
}

// requestOf is the install a target asks for.
func requestOf(t Target) install.Request {
	return install.Request{ID: t.ID, Epoch: t.Epoch, Generation: t.Generation, Image: t.Image, UID: t.UID, GID: t.GID,
		Verification: t.Verification, AcceptBreaking: t.AcceptBreaking, Rollback: t.Rollback}
}

// entryOf is a target's entry before any decision.
func entryOf(t Target) brewletv1.NodeRuntimeEntry {
	return brewletv1.NodeRuntimeEntry{ID: t.ID, Epoch: types.UID(t.Epoch), Generation: t.Generation}
}
