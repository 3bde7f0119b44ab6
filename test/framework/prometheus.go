package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Prometheus is a real Prometheus server (the pinned build, tool "prometheus") in an
// instance of its own: configuration, rule files and data in the instance's directory, the
// HTTP API on a free loopback port.
type Prometheus struct {
	*Instance
	URL string
	API promv1.API
}

// StartPrometheus writes files (name -> content) into a fresh instance directory, then the
// configuration config(dir) returns (it may name those files by absolute path), and starts
// Prometheus with fast evaluation; it returns once Prometheus says it is ready.
func StartPrometheus(t TB, files map[string][]byte, config func(dir string) string) *Prometheus {
	t.Helper()
	in := NewInstance(t, "prometheus")
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(in.Dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(in.Dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config(in.Dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	port := FreePort(t)
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	p, err := in.Start("prometheus", nil, Tool(t, "prometheus"), "--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(in.Dir, "data"), "--web.listen-address=127.0.0.1:"+strconv.Itoa(port),
		"--log.level=info")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(60*time.Second, func(ctx context.Context) error {
		return HTTPOK(ctx, insecureClient, url+"/-/ready")
	}); err != nil {
		t.Fatalf("prometheus: %v\n%s", err, p.Tail(30))
	}
	c, err := promapi.NewClient(promapi.Config{Address: url})
	if err != nil {
		t.Fatal(err)
	}
	return &Prometheus{Instance: in, URL: url, API: promv1.NewAPI(c)}
}

// Query evaluates expr now; an expression Prometheus refuses is an error.
func (p *Prometheus) Query(ctx context.Context, expr string) (model.Vector, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, _, err := p.API.Query(ctx, expr, time.Now())
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %q: a %s, want a vector", expr, v.Type())
	}
	return vec, nil
}

// Alerts are the alerts pending or firing now.
func (p *Prometheus) Alerts(ctx context.Context) ([]promv1.Alert, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	r, err := p.API.Alerts(ctx)
	return r.Alerts, err
}

// Evaluated reports whether every alerting rule was evaluated after since (judged on data
// scraped by then) and none failed to evaluate.
func (p *Prometheus) Evaluated(ctx context.Context, since time.Time) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	r, err := p.API.Rules(ctx, nil)
	if err != nil || len(r.Groups) == 0 {
		return false, err
	}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			a, ok := rule.(promv1.AlertingRule)
			if !ok {
				continue
			}
			if a.LastError != "" {
				return false, fmt.Errorf("rule %s: %s", a.Name, a.LastError)
			}
			if a.LastEvaluation.Before(since) {
				return false, nil
			}
		}
	}
	return true, nil
}
