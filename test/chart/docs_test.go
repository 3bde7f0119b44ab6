package chart

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"brewlet.sh/brewlet/test/framework"
)

// The operator's pages name series, reason codes and runbook sections; this keeps them
// true: every series named in the docs, the rules or the dashboard is one the code exports
// (histogram and counter suffixes allowed), every series the code exports is on the
// observability page, every reason code of the vocabulary is explained in the runbook and
// every code its tables name exists, and every alert's runbook link lands on a section.
func TestDocsNameWhatExists(t *testing.T) {
	root := framework.RepoRoot(t)
	exported := exportedSeries(t, root)
	if len(exported) < 15 {
		t.Fatalf("found %d series in the code, want the whole set: %v", len(exported), exported)
	}
	series := regexp.MustCompile(`\bbrewlet_[a-z0-9_]*[a-z0-9]`)
	named := map[string][]string{}
	for _, f := range []string{"docs/observability.md", "docs/runbook.md", "docs/operator.md", "docs/provisioner.md",
		"docs/rotation.md", "docs/install.md", "docs/uninstall.md", "charts/brewlet/files/prometheus-rules.yaml",
		"charts/brewlet/files/dashboard.json", "test/prometheus/rules_test.yaml"} {
		for _, m := range series.FindAllString(read(t, filepath.Join(root, f)), -1) {
			named[m] = append(named[m], f)
		}
	}
	for name, where := range named {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && exported[b] {
				base = b
			}
		}
		if !exported[base] {
			t.Errorf("%s (named in %v) is exported by no code", name, slices.Compact(where))
		}
	}
	obs := read(t, filepath.Join(root, "docs/observability.md"))
	for name := range exported {
		if !strings.Contains(obs, "`"+name+"`") {
			t.Errorf("%s is exported but docs/observability.md does not list it", name)
		}
	}

	reasons := constantsOfType(t, filepath.Join(root, "internal/vocab"), "Reason")
	states := constantsOfType(t, filepath.Join(root, "internal/vocab"), "RuntimeState")
	if len(reasons) < 50 || len(states) < 5 {
		t.Fatalf("found %d reasons and %d states in internal/vocab", len(reasons), len(states))
	}
	runbook := read(t, filepath.Join(root, "docs/runbook.md"))
	rowCode := regexp.MustCompile("(?m)^\\| `([A-Za-z]+)` \\|")
	inTable := map[string]bool{}
	for _, m := range rowCode.FindAllStringSubmatch(runbook, -1) {
		inTable[m[1]] = true
		if !reasons[m[1]] && !states[m[1]] {
			t.Errorf("docs/runbook.md explains %s, which is no reason code or node state of internal/vocab", m[1])
		}
	}
	for _, set := range []map[string]bool{reasons, states} {
		for r := range set {
			if !inTable[r] {
				t.Errorf("%s is not explained in docs/runbook.md's tables", r)
			}
		}
	}

	// Every runbook link of an alert, and every link into the runbook from the docs.
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(runbook, -1) {
		anchors[slug(m[1])] = true
	}
	links := regexp.MustCompile(`runbook\.md#([a-z0-9-]+)`)
	for _, f := range []string{"charts/brewlet/files/prometheus-rules.yaml", "docs/observability.md", "docs/runbook.md"} {
		for _, m := range links.FindAllStringSubmatch(read(t, filepath.Join(root, f)), -1) {
			if !anchors[m[1]] {
				t.Errorf("%s links to runbook section %q, which docs/runbook.md does not have", f, m[1])
			}
		}
	}
	for _, m := range regexp.MustCompile(`\]\(#([a-z0-9-]+)\)`).FindAllStringSubmatch(runbook, -1) {
		if !anchors[m[1]] {
			t.Errorf("docs/runbook.md links to its own section %q, which it does not have", m[1])
		}
	}
}

// exportedSeries are the brewlet_ series names the product's code defines (string literals
// outside tests).
func exportedSeries(t *testing.T, root string) map[string]bool {
	t.Helper()
	lit := regexp.MustCompile(`^brewlet_[a-z0-9_]+$`)
	out := map[string]bool{}
	for _, dir := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if b, ok := n.(*ast.BasicLit); ok && b.Kind == token.STRING {
					if s, err := strconv.Unquote(b.Value); err == nil && lit.MatchString(s) {
						out[s] = true
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// constantsOfType are the values of the string constants of the named type in dir.
func constantsOfType(t *testing.T, dir, typ string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				if id, ok := v.Type.(*ast.Ident); !ok || id.Name != typ {
					continue
				}
				for _, e := range v.Values {
					if b, ok := e.(*ast.BasicLit); ok && b.Kind == token.STRING {
						s, _ := strconv.Unquote(b.Value)
						out[s] = true
					}
				}
			}
		}
	}
	return out
}

// slug is a heading's anchor as Markdown renderers make it.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
