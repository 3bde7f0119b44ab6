package hoststate

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRemoveTornLeases: what a crash can leave of an unsynced lease (nothing, half, garbage)
// goes once it predates the boot; a torn-looking file of this boot, a readable lease of an
// earlier boot, temporary files and symlinks stay.
func TestRemoveTornLeases(t *testing.T) {
	l, id := busyboxInstalled(t)
	boot := time.Now().Add(-time.Hour)
	before, after := boot.Add(-time.Minute), boot.Add(time.Minute)
	if _, err := l.LeaseCurrent(Lease{ContainerID: "readable-old", ID: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.LeaseCurrent(Lease{ContainerID: "readable-new", ID: id}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(l.State, "leases")
	full, err := os.ReadFile(filepath.Join(dir, "readable-new.json"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		content []byte // nil: the file exists already
		mtime   time.Time
		remain  bool
	}{
		{"empty-old.json", []byte{}, before, false},
		{"half-old.json", full[:len(full)/2], before, false},
		{"zeros-old.json", make([]byte, len(full)), before, false},
		{"unknown-field-old.json", []byte(`{"containerID":"x","extra":1}`), before, false},
		{"empty-new.json", []byte{}, after, true}, // cannot be torn within a boot: not ours to judge
		{"readable-old.json", nil, before, true},  // the task reconcile releases it
		{"readable-new.json", nil, after, true},
		{".tmp-empty-old.json-1", []byte{}, before, true}, // RemoveStaleLeaseTemps' job
		{"bad id!.json", []byte{}, before, true},          // no lease file name
		{"notes.txt", []byte{}, before, true},
	}
	for _, c := range cases {
		p := filepath.Join(dir, c.name)
		if c.content != nil {
			if err := os.WriteFile(p, c.content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(p, c.mtime, c.mtime); err != nil {
			t.Fatal(err)
		}
	}
	// A symlink named like a lease, pointing at an old torn file elsewhere: never followed.
	target := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(target, before, before)
	if err := os.Symlink(target, filepath.Join(dir, "link-old.json")); err != nil {
		t.Fatal(err)
	}
	// The exec state of a torn lease's container goes with it.
	if err := os.MkdirAll(l.ContainerDir("empty-old"), 0o755); err != nil {
		t.Fatal(err)
	}

	n, err := l.RemoveTornLeases(boot)
	if err == nil {
		t.Error("no error for the symlink named like a lease")
	}
	if n != 4 {
		t.Errorf("removed %d, want 4", n)
	}
	for _, c := range cases {
		if _, err := os.Lstat(filepath.Join(dir, c.name)); (err == nil) != c.remain {
			t.Errorf("%s: present=%v, want %v", c.name, err == nil, c.remain)
		}
	}
	if _, err := os.Stat(target); err != nil {
		t.Errorf("the symlink's target was touched: %v", err)
	}
	if _, err := os.Stat(l.ContainerDir("empty-old")); !os.IsNotExist(err) {
		t.Errorf("exec state of a torn lease kept: %v", err)
	}
	for _, name := range []string{"link-old.json", "empty-new.json", "bad id!.json"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// With the torn files gone, every lease reads again (what GC and the report need).
	if ls, err := l.Leases(); err != nil || len(ls) != 2 {
		t.Errorf("leases %d, %v; want the two readable ones", len(ls), err)
	}
}

func TestBootTime(t *testing.T) {
	bt, err := BootTime()
	if err != nil || !bt.Before(time.Now()) {
		t.Errorf("this machine's boot time %v, %v", bt, err)
	}
}
