// Package chart proves the Helm chart charts/brewlet with helm alone: lint, renders for
// every value combination that changes a manifest, the CRDs against the generated ones, the
// uninstall hook and the restart policies kept in step. It starts no component.
package chart

import (
	"testing"

	"brewlet.sh/brewlet/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
