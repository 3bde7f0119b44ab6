package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

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
// OnDemand request an install answers. The decisions are plan.go's; apply reads and writes.
func (a *Agent) apply(ctx context.Context, t Target, confirmed time.Time, acted map[string]bool) (e brewletv1.NodeRuntimeEntry, report bool, err error) {
	f := a.facts(t)
	if t.Revoke {
		a.jobs.cancel(t.ID, nil) // a revoked ID's install stops
		p := PlanRevocation(t, f)
		if p.Write {
			err = a.writeRevocation(t.ID, t.Message)
		}
		return p.Entry, p.Report, err
	}
	step := PlanInstall(t, f, time.Now(), a.retryPause())
	a.jobs.cancel(t.ID, step.Request) // an install of another generation, or none wanted, stops
	running := f.Running
	if step.Start {
		if err := a.mayWrite(); err != nil {
			return entryOf(t), true, err
		}
		running = a.jobs.start(ctx, *step.Request, a.install)
	}
	if step.Request != nil {
		acted[t.ID] = running
	}
	p := PlanEntry(t, f, step, running, confirmed.Add(a.ttl()))
	if p.Withdraw {
		if err := a.withdraw(t.ID); err != nil {
			if p.Entry.State != string(vocab.StateFailed) {
				p.Entry.State, p.Entry.Reason, p.Entry.Message = string(vocab.StateFailed), string(vocab.ReasonRuntimeImageNotInstalled), err.Error()
				p.Entry.AuthorizedUntil = nil
			}
			return p.Entry, true, err
		}
	}
	if p.Authorize != nil {
		if err := a.authorize(*p.Authorize, confirmed); err != nil {
			e := entryOf(t)
			e.State, e.Reason, e.Message = string(vocab.StateFailed), string(vocab.ReasonRuntimeImageNotInstalled), err.Error()
			return e, true, notWriter(err)
		}
	}
	return p.Entry, true, nil
}

// facts reads what the node holds about t: its current generation, authorization, install
// request and the install worker's state.
func (a *Agent) facts(t Target) Facts {
	f := Facts{}
	_, f.Known = a.states[t.ID]
	if cur, err := a.Layout.Current(t.ID); err == nil {
		f.Current, f.HasCurrent = cur, true
		if cur.Epoch == t.Epoch {
			if g, err := a.Layout.ReadGeneration(t.ID, cur); err != nil {
				f.DigestErr = err
			} else {
				f.Digest = g.Digest
			}
		}
	}
	f.Auth, f.AuthErr = a.Layout.ReadAuthorization(t.ID)
	f.AuthExists = f.AuthErr == nil
	if f.AuthErr != nil {
		_, serr := os.Lstat(a.Layout.AuthorizationFile(t.ID))
		f.AuthExists = !errors.Is(serr, fs.ErrNotExist)
	}
	if !t.Revoke && t.Image != "" {
		running, last := a.jobs.state(requestOf(t))
		f.Running = running
		if last != nil {
			f.HasLast, f.LastErr, f.LastAt = true, last.err, last.at
		}
	}
	f.Requested = t.Install == string(vocab.InstallOnDemand) && a.Layout.InstallRequested(t.ID)
	return f
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

// writeRevocation writes a revoked authorization for id with reason why.
func (a *Agent) writeRevocation(id, why string) error {
	if err := a.mayWrite(); err != nil {
		return err
	}
	if err := a.Layout.WriteAuthorization(hoststate.Authorization{ID: id, Revoked: true, Reason: why, Node: a.NodeName}); err != nil {
		return fmt.Errorf("revoke %s: %w", id, err)
	}
	return nil
}

// withdraw revokes an authorization left from an older epoch: nothing of an old epoch is
// trusted for the new one.
func (a *Agent) withdraw(id string) error {
	if err := a.mayWrite(); err != nil {
		return err
	}
	return a.Layout.WriteAuthorization(hoststate.Authorization{ID: id, Revoked: true, Node: a.NodeName,
		Reason: "the RuntimeImage was recreated (new epoch) and its first generation is not installed yet"})
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
	} else if res.Reinstated > 0 {
		a.logf("installed %s generation %d from generation %d's layers on this node (the same digest): 0 layers fetched, %d reused (%s)", req.ID, req.Generation, res.Reinstated, res.LayersReused, res.Phases)
	} else {
		a.logf("installed %s generation %d: %d layers fetched, %d reused (%s)", req.ID, req.Generation, res.LayersFetched, res.LayersReused, res.Phases)
	}
	if a.mayWrite() == nil {
		a.Layout.ClearRequest(req.ID) // answered; a new container asks again
	}
	return err
}
