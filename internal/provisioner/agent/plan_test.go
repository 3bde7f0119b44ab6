package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

var (
	t0      = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	pause   = 30 * time.Second
	eager   = Target{ID: "py", Install: string(vocab.InstallEager), Epoch: "e1", Generation: 2, Image: "reg/py@sha256:2"}
	lazy    = Target{ID: "py", Install: string(vocab.InstallOnDemand), Epoch: "e1", Generation: 2, Image: "reg/py@sha256:2"}
	serving = Facts{Current: hoststate.Ref{Epoch: "e1", Generation: 1}, HasCurrent: true, Digest: "sha256:1"}
	errPull = errors.New("connection reset")
	refusal = vocab.Errorf(vocab.ReasonLayerPathViolation, "entry ../x")
)

func TestPlanRevocation(t *testing.T) {
	revoked := Target{ID: "py", Revoke: true, Reason: vocab.ReasonRuntimeImageRevoked, Message: "removed from the profile"}
	newEpoch := revoked
	newEpoch.Reason, newEpoch.Message = vocab.ReasonRuntimeImageInstalling, "recreated"
	for _, c := range []struct {
		name          string
		t             Target
		f             Facts
		write, report bool
		state         vocab.RuntimeState
	}{
		{"never authorized, never known", revoked, Facts{}, false, false, vocab.StateRevoked},
		{"never authorized, known", revoked, Facts{Known: true}, false, true, vocab.StateRevoked},
		{"authorized", revoked, Facts{AuthExists: true, Auth: hoststate.Authorization{ID: "py"}}, true, true, vocab.StateRevoked},
		{"already revoked for this reason", revoked, Facts{AuthExists: true, Auth: hoststate.Authorization{Revoked: true, Reason: "removed from the profile"}}, false, true, vocab.StateRevoked},
		{"revoked for another reason", revoked, Facts{AuthExists: true, Auth: hoststate.Authorization{Revoked: true, Reason: "old"}}, true, true, vocab.StateRevoked},
		{"unreadable authorization is replaced", revoked, Facts{AuthExists: true, AuthErr: errors.New("bad json")}, true, true, vocab.StateRevoked},
		{"a new epoch still to come reads Installing", newEpoch, Facts{AuthExists: true, Auth: hoststate.Authorization{ID: "py"}}, true, true, vocab.StateInstalling},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := PlanRevocation(c.t, c.f)
			if p.Write != c.write || p.Report != c.report || p.Entry.State != string(c.state) {
				t.Fatalf("plan %+v, want write %v report %v state %s", p, c.write, c.report, c.state)
			}
			if p.Entry.Message != c.t.Message || p.Entry.Reason != string(c.t.Reason) {
				t.Fatalf("entry %+v does not carry the target's reason", p.Entry)
			}
		})
	}
}

func TestPlanInstall(t *testing.T) {
	served := serving
	served.Current.Generation = 2
	held := eager
	held.Image = "" // a rollout wave holds this node back
	for _, c := range []struct {
		name           string
		t              Target
		f              Facts
		request, start bool
	}{
		{"generation served", eager, served, false, false},
		{"held back by the rollout", held, serving, false, false},
		{"eager, nothing ran yet", eager, serving, true, true},
		{"eager, already running", eager, Facts{Running: true}, true, false},
		{"on demand, not asked for", lazy, Facts{}, true, false},
		{"on demand, asked for", lazy, Facts{Requested: true}, true, true},
		{"pull failed, pause not over", eager, Facts{HasLast: true, LastErr: errPull, LastAt: t0.Add(-pause / 2)}, true, false},
		{"pull failed, pause over", eager, Facts{HasLast: true, LastErr: errPull, LastAt: t0.Add(-pause)}, true, true},
		{"content refused: never again", eager, Facts{HasLast: true, LastErr: refusal, LastAt: t0.Add(-time.Hour)}, true, false},
		{"cancelled: at once", eager, Facts{HasLast: true, LastErr: context.Canceled, LastAt: t0}, true, true},
		{"other epoch installed", eager, Facts{Current: hoststate.Ref{Epoch: "e0", Generation: 9}, HasCurrent: true}, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := PlanInstall(c.t, c.f, t0, pause)
			if (s.Request != nil) != c.request || s.Start != c.start {
				t.Fatalf("step %+v, want request %v start %v", s, c.request, c.start)
			}
			if s.Request != nil && (s.Request.Generation != c.t.Generation || s.Request.Image != c.t.Image || s.Request.Epoch != c.t.Epoch) {
				t.Fatalf("request %+v is not the target's", s.Request)
			}
		})
	}
}

func TestPlanEntry(t *testing.T) {
	until := t0.Add(5 * time.Minute)
	need := PlanInstall(eager, serving, t0, pause)
	otherEpoch := Facts{AuthExists: true, Auth: hoststate.Authorization{ID: "py", Epoch: "e0"}}
	failedFresh := Facts{HasLast: true, LastErr: refusal, AuthExists: true, Auth: hoststate.Authorization{Epoch: "e0"}}
	failedServing := serving
	failedServing.HasLast, failedServing.LastErr = true, errPull
	unreadable := serving
	unreadable.DigestErr = errors.New("generation record unreadable")
	for _, c := range []struct {
		name      string
		t         Target
		f         Facts
		running   bool
		state     vocab.RuntimeState
		reason    vocab.Reason
		failedGen int64
		withdraw  bool
		authorize string // "", "ondemand" or "current"
	}{
		{"installing, nothing of the epoch", eager, Facts{}, true, vocab.StateInstalling, "", 0, false, ""},
		{"installing withdraws another epoch", eager, otherEpoch, true, vocab.StateInstalling, "", 0, true, ""},
		{"on demand is authorized to be asked for", lazy, Facts{}, false, vocab.StateAvailable, "", 0, false, "ondemand"},
		{"serving renews the current generation", eager, serving, true, vocab.StateReady, "", 0, false, "current"},
		{"first install refused", eager, failedFresh, false, vocab.StateFailed, vocab.ReasonLayerPathViolation, 2, true, ""},
		{"update failed to pull: the current one stays", eager, failedServing, false, vocab.StateReady, vocab.ReasonRuntimeImagePullFailed, 0, false, "current"},
		{"a failure while a retry runs is not reported", eager, failedServing, true, vocab.StateReady, "", 0, false, "current"},
		{"generation record unreadable", eager, unreadable, true, vocab.StateFailed, vocab.ReasonRuntimeImageNotInstalled, 0, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			step := PlanInstall(c.t, c.f, t0, pause)
			if c.t.Install == string(vocab.InstallEager) && c.f.HasCurrent && step.Request == nil {
				step = need
			}
			p := PlanEntry(c.t, c.f, step, c.running, until)
			e := p.Entry
			if e.State != string(c.state) || e.Reason != string(c.reason) || e.FailedGeneration != c.failedGen || p.Withdraw != c.withdraw {
				t.Fatalf("plan %+v, want %s %s failed %d withdraw %v", p, c.state, c.reason, c.failedGen, c.withdraw)
			}
			switch a := p.Authorize; c.authorize {
			case "":
				if a != nil {
					t.Fatalf("authorizes %+v", a)
				}
			case "ondemand":
				if a == nil || !a.OnDemand || a.Epoch != c.t.Epoch || a.Generation != c.t.Generation {
					t.Fatalf("authorizes %+v, want the target on demand", a)
				}
			case "current":
				if a == nil || a.OnDemand || a.Generation != c.f.Current.Generation || a.Digest != c.f.Digest {
					t.Fatalf("authorizes %+v, want the current generation", a)
				}
				if e.AuthorizedUntil == nil || !e.AuthorizedUntil.Time.Equal(until) || e.Generation != c.f.Current.Generation || e.Digest != c.f.Digest {
					t.Fatalf("entry %+v, want generation %d until %s", e, c.f.Current.Generation, until)
				}
			}
		})
	}
}
