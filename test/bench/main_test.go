//go:build bench

package bench

import (
	"testing"

	"brewlet.sh/brewlet/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
