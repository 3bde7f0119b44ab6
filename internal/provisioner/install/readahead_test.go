package install

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
	"time"
)

// The read-ahead yields exactly the source's bytes in order, then the source's error (after
// the bytes read before it), however the source and the reader cut the stream.
func TestReadAheadKeepsTheStream(t *testing.T) {
	data := make([]byte, 3*raChunk+12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		src     func() io.Reader
		want    []byte
		wantErr error
	}{
		{"whole", func() io.Reader { return bytes.NewReader(data) }, data, nil},
		{"source gives one byte at a time", func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data[:5000])) }, data[:5000], nil},
		{"source gives halves", func() io.Reader { return iotest.HalfReader(bytes.NewReader(data)) }, data, nil},
		{"empty", func() io.Reader { return bytes.NewReader(nil) }, nil, nil},
		{"exactly one chunk", func() io.Reader { return bytes.NewReader(data[:raChunk]) }, data[:raChunk], nil},
		{"error after bytes", func() io.Reader {
			return io.MultiReader(bytes.NewReader(data[:raChunk+10]), iotest.ErrReader(boom))
		}, data[:raChunk+10], boom},
		{"error at once", func() io.Reader { return iotest.ErrReader(boom) }, nil, boom},
	} {
		for _, reader := range []struct {
			name string
			wrap func(io.Reader) io.Reader
		}{{"large reads", func(r io.Reader) io.Reader { return r }}, {"one byte reads", iotest.OneByteReader}} {
			t.Run(tc.name+"/"+reader.name, func(t *testing.T) {
				ra := newReadAhead(tc.src())
				defer func() { _ = ra.Close() }()
				var got bytes.Buffer
				_, err := io.Copy(&got, reader.wrap(ra))
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				if !bytes.Equal(got.Bytes(), tc.want) {
					t.Fatalf("read %d bytes, want %d (or different content)", got.Len(), len(tc.want))
				}
				if _, err := ra.Read(make([]byte, 1)); err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
					t.Fatalf("read after the end: %v", err)
				}
			})
		}
	}
}

// Close stops the goroutine wherever it is (waiting to hand a chunk over, or for a buffer)
// and returns only once it no longer touches the source; reading stops there.
func TestReadAheadCloseStopsTheReader(t *testing.T) {
	src := &countingSource{}
	ra := newReadAhead(src)
	if _, err := ra.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the goroutine fills what it may and blocks
	done := make(chan struct{})
	go func() { _ = ra.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	n := src.n
	if max := int64((raDepth + 2) * raChunk); n > max {
		t.Errorf("read %d bytes ahead; the bound is %d", n, max)
	}
	_ = ra.Close() // twice is fine
}

// countingSource is an endless stream; n is read only after Close returned.
type countingSource struct{ n int64 }

func (c *countingSource) Read(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}
