package vocab

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestValidateRuntimeID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"python-3.12", true},
		{"a", true},
		{"jre-21.debian.bookworm", true},
		{strings.Repeat("a", 55), true},
		{strings.Repeat("a", 56), false},
		{"", false},
		{"Python", false},
		{"-python", false},
		{"python-", false},
		{"python..3", false},
		{"python@sha256", false},
		{"python:3.12", false},
		{"registry/python", false},
		{"python 3", false},
	} {
		err := ValidateRuntimeID(tc.id)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateRuntimeID(%q) = %v, want ok=%v", tc.id, err, tc.ok)
		}
		if err != nil && ReasonOf(err) != ReasonInvalidRuntimeImageID {
			t.Errorf("ValidateRuntimeID(%q) reason = %q", tc.id, ReasonOf(err))
		}
	}
}

func TestReasonOfWrapped(t *testing.T) {
	base := Errorf(ReasonRuntimeImageRevoked, "python-3.12 was revoked on n1")
	err := fmt.Errorf("create container c1: %w", base)
	if got := ReasonOf(err); got != ReasonRuntimeImageRevoked {
		t.Fatalf("ReasonOf = %q", got)
	}
	if !strings.HasPrefix(base.Error(), "RuntimeImageRevoked: ") {
		t.Fatalf("message %q does not start with the reason", base.Error())
	}
	if ReasonOf(errors.New("plain")) != "" {
		t.Fatal("plain error has a reason")
	}
	w := Wrap(ReasonDigestMismatch, errors.New("sha256 differs"), "blob of %s", "x")
	if !strings.Contains(w.Error(), "sha256 differs") || ReasonOf(w) != ReasonDigestMismatch {
		t.Fatalf("wrap lost its cause or reason: %v", w)
	}
}

func FuzzValidateRuntimeID(f *testing.F) {
	for _, s := range []string{"python-3.12", "", "a.b", "A", "x@y", strings.Repeat("z", 60)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := ValidateRuntimeID(id)
		if err == nil {
			if len(id) == 0 || len(id) > MaxRuntimeIDLength || strings.ContainsAny(id, "@:/ ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
				t.Fatalf("accepted %q", id)
			}
		} else if ReasonOf(err) != ReasonInvalidRuntimeImageID {
			t.Fatalf("refusal without reason: %v", err)
		}
	})
}
