package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/provisioner/writer"
	"brewlet.sh/brewlet/internal/vocab"
)

// apply authorizes one target, or revokes it, starts or follows its install, and returns
// its state; report is false for an ID the node never authorized (a directory a shim made
// for an unknown ID), which the status does not list. The error is a revocation (or
// writer check) that failed: the pass must not open the fence. acted records IDs whose
// OnDemand request an install answers.
func (a *Agent) apply(ctx context.Context, t Target, confirmed time.Time, acted map[string]bool) (e brewletv1.NodeRuntimeEntry, report bool, err error) {
	e = brewletv1.NodeRuntimeEntry{ID: t.ID, Epoch: types.UID(t.Epoch), Generation: t.Generation}
	if t.Revoke {
		a.jobs.cancel(t.ID, nil) // a revoked ID's install stops
		_, known := a.states[t.ID]
		written, err := a.revoke(t.ID, t.Message)
		e.State, e.Reason, e.Message = string(vocab.StateRevoked), string(t.Reason), t.Message
		if t.Reason != vocab.ReasonRuntimeImageRevoked && t.Reason != vocab.ReasonUnknownRuntimeImage {
			e.State = string(vocab.StateInstalling)
		}
		return e, known || written, err
	}
	cur, cerr := a.Layout.Current(t.ID)
	have := cerr == nil && cur.Epoch == t.Epoch && cur.Generation >= t.Generation
	onDemand := t.Install == string(vocab.InstallOnDemand)
	var failed *brewletv1.NodeRuntimeEntry
	if have || t.Image == "" {
		a.jobs.cancel(t.ID, nil) // nothing to install (a held-back rollout wave, or done)
	} else {
		req := install.Request{ID: t.ID, Epoch: t.Epoch, Generation: t.Generation, Image: t.Image, UID: t.UID, GID: t.GID, Verification: t.Verification}
		a.jobs.cancel(t.ID, &req) // an install of another generation is superseded
		running, last := a.jobs.state(req)
		wanted := !onDemand || a.Layout.InstallRequested(t.ID)
		if !running && wanted && (last == nil || RetryDue(last.err, last.at, time.Now(), a.retryPause())) {
			if err := a.mayWrite(); err != nil {
				return e, true, err
			}
			running = a.jobs.start(ctx, req, a.install)
		}
		acted[t.ID] = running
		if !running && last != nil && last.err != nil {
			reason := string(reasonOr(last.err, vocab.ReasonRuntimeImagePullFailed))
			if cerr != nil || cur.Epoch != t.Epoch {
				e.State, e.Reason, e.Message = string(vocab.StateFailed), reason, last.err.Error()
				if install.Refused(last.err) {
					e.FailedGeneration = t.Generation
				}
				return e, true, a.withdrawIfOtherEpoch(t)
			}
			// The refused generation never becomes current; the one in use stays served.
			failed = &brewletv1.NodeRuntimeEntry{Reason: reason,
				Message: fmt.Sprintf("generation %d refused, generation %d stays in use: %v", t.Generation, cur.Generation, last.err)}
			if install.Refused(last.err) {
				failed.FailedGeneration = t.Generation
			}
		}
	}
	if cerr != nil || cur.Epoch != t.Epoch { // nothing of this epoch installed yet
		if err := a.withdrawIfOtherEpoch(t); err != nil {
			return e, true, err
		}
		if !onDemand {
			e.State = string(vocab.StateInstalling)
			return e, true, nil
		}
		// Offered on first use: authorize the ID so the shim may ask for the install.
		e.State = string(vocab.StateAvailable)
		if err := a.authorize(hoststate.Authorization{ID: t.ID, Epoch: t.Epoch, Generation: t.Generation, OnDemand: true}, confirmed); err != nil {
			e.State, e.Reason, e.Message = string(vocab.StateFailed), string(vocab.ReasonRuntimeImageNotInstalled), err.Error()
			return e, true, notWriter(err)
		}
		return e, true, nil
	}
	g, err := a.Layout.ReadGeneration(t.ID, cur)
	if err != nil {
		e.State, e.Reason, e.Message = string(vocab.StateFailed), string(vocab.ReasonRuntimeImageNotInstalled), err.Error()
		return e, true, nil
	}
	auth := hoststate.Authorization{ID: t.ID, Epoch: cur.Epoch, Generation: cur.Generation, Digest: g.Digest}
	if err := a.authorize(auth, confirmed); err != nil {
		e.State, e.Reason, e.Message = string(vocab.StateFailed), string(vocab.ReasonRuntimeImageNotInstalled), err.Error()
		return e, true, notWriter(err)
	}
	until := metav1.NewTime(confirmed.Add(a.ttl()).Truncate(time.Second))
	e.State, e.Generation, e.Digest, e.AuthorizedUntil = string(vocab.StateReady), cur.Generation, g.Digest, &until
	if failed != nil {
		e.Reason, e.Message, e.FailedGeneration = failed.Reason, failed.Message, failed.FailedGeneration
	}
	return e, true, nil
}

// notWriter passes a lost lease on to the pass; other write failures are reported per ID.
func notWriter(err error) error {
	if errors.Is(err, writer.ErrNotWriter) {
		return err
	}
	return nil
}

// ttl is the authorization lifetime, never above MaxAuthTTL whatever the caller set.
func (a *Agent) ttl() time.Duration { return min(a.AuthTTL, MaxAuthTTL) }

// retryPause is how long a failed pull waits before it is tried again.
func (a *Agent) retryPause() time.Duration { return max(a.Period, minRetryPause) }

// authorize renews an authorization for AuthTTL from the confirmation time.
func (a *Agent) authorize(auth hoststate.Authorization, confirmed time.Time) error {
	if err := a.mayWrite(); err != nil {
		return err
	}
	auth.ConfirmedAt, auth.ExpiresAt, auth.Node = confirmed, confirmed.Add(a.ttl()), a.NodeName
	return a.Layout.WriteAuthorization(auth)
}

// revoke writes a revoked authorization for an ID that has one, once: a revocation already
// on disk with the same reason is left as it is (no rewrite every pass). An unreadable
// authorization is replaced by a revocation. written reports whether the ID had one.
func (a *Agent) revoke(id, why string) (written bool, err error) {
	old, rerr := a.Layout.ReadAuthorization(id)
	if rerr != nil {
		if _, serr := os.Lstat(a.Layout.AuthorizationFile(id)); errors.Is(serr, fs.ErrNotExist) {
			return false, nil // never authorized here: nothing to withdraw
		}
	} else if old.Revoked && old.Reason == why {
		return true, nil
	}
	if err := a.mayWrite(); err != nil {
		return true, err
	}
	if err := a.Layout.WriteAuthorization(hoststate.Authorization{ID: id, Revoked: true, Reason: why, Node: a.NodeName}); err != nil {
		return true, fmt.Errorf("revoke %s: %w", id, err)
	}
	return true, nil
}

// withdrawIfOtherEpoch revokes an authorization left from an older epoch: nothing of an old
// epoch is trusted for the new one.
func (a *Agent) withdrawIfOtherEpoch(t Target) error {
	if old, err := a.Layout.ReadAuthorization(t.ID); err == nil && old.Epoch != t.Epoch && !old.Revoked {
		if err := a.mayWrite(); err != nil {
			return err
		}
		return a.Layout.WriteAuthorization(hoststate.Authorization{ID: t.ID, Revoked: true, Node: a.NodeName,
			Reason: "the RuntimeImage was recreated (new epoch) and its first generation is not installed yet"})
	}
	return nil
}

func installOutcome(err error) string {
	switch vocab.ReasonOf(err) {
	case "":
		if err == nil {
			return "success"
		}
		return "failed"
	case vocab.ReasonRuntimeImagePullFailed, vocab.ReasonRegistryCertificateInvalid, vocab.ReasonRegistryCredentialsRefused:
		return "failed"
	default:
		return "refused"
	}
}

func reasonOr(err error, r vocab.Reason) vocab.Reason {
	if got := vocab.ReasonOf(err); got != "" {
		return got
	}
	return r
}

// install is one install worker: it holds the layer cache shared for the whole install, so
// garbage collection (exclusive) never removes a layer this install decided to reuse, nor
// sees its generation half written; it checks the writer lease before starting and its
// context ends when the lease is lost.
func (a *Agent) install(ctx context.Context, req install.Request) error {
	if err := a.mayWrite(); err != nil {
		return err
	}
	unlock, err := a.Layout.LockLayerCache(ctx, false, true)
	if err != nil {
		return err
	}
	defer unlock()
	if err := a.mayWrite(); err != nil {
		return err
	}
	a.logf("installing %s generation %d from %s", req.ID, req.Generation, req.Image)
	start := time.Now()
	res, err := a.Installer.Install(ctx, req)
	a.Metrics.ObserveInstall(req.ID, installOutcome(err), time.Since(start))
	if err != nil {
		a.logf("install %s generation %d: %v", req.ID, req.Generation, err)
	} else {
		a.logf("installed %s generation %d: %d layers fetched, %d reused (%s)", req.ID, req.Generation, res.LayersFetched, res.LayersReused, res.Phases)
	}
	if a.mayWrite() == nil {
		a.Layout.ClearRequest(req.ID) // answered; a new container asks again
	}
	return err
}
