package artifact

import (
	"bytes"
	"errors"

	"golang.org/x/sys/unix"
)

// maxLabel bounds the label read from one file; real labels are under a hundred bytes.
const maxLabel = 4096

// tooLongLabel stands for a label over maxLabel: it matches no node's label.
const tooLongLabel = "(a label longer than 4096 bytes)"

// ReadLabel returns the SELinux label of path (not following a link), "" when it has none
// or the filesystem keeps none.
func ReadLabel(path string) (string, error) {
	l, err := labelOf(path)
	if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP) {
		return "", nil
	}
	return l, err
}

func labelOf(p string) (string, error) {
	for size := 256; ; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Lgetxattr(p, SELinuxXattr, buf)
		switch {
		case errors.Is(err, unix.ERANGE) && size < maxLabel:
			continue
		case errors.Is(err, unix.ERANGE):
			return tooLongLabel, nil
		case err != nil:
			return "", err
		}
		// The kernel hands labels back NUL-terminated; tar archives usually do not.
		return string(bytes.TrimRight(buf[:n], "\x00")), nil
	}
}
