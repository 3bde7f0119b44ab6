package install

import (
	"io"
	"sync"
)

// Read-ahead sizes: a layer's stream is decompressed and hashed this far ahead of the
// extractor, in chunks of this size. Memory per layer is bounded by (raDepth+2) chunks.
const (
	raChunk = 128 << 10
	raDepth = 4
)

// readAhead reads its source in a goroutine of its own, so a layer's decompression and
// hashing (one core) run beside the extractor's file system calls (mostly another) instead
// of taking turns with them. What it reads is exactly what the source yields, in order;
// the source's error comes after the bytes read before it.
//
// Close must be called, and only after it returns has the goroutine stopped touching the
// source (the install's budget and hash are read after it).
type readAhead struct {
	full   chan raChunkBuf // chunks read, in order
	free   chan []byte     // buffers to read into
	stop   chan struct{}
	done   sync.WaitGroup
	cur    raChunkBuf
	closed bool
}

type raChunkBuf struct {
	b   []byte
	off int
	err error
}

func newReadAhead(src io.Reader) *readAhead {
	ra := &readAhead{full: make(chan raChunkBuf, raDepth), free: make(chan []byte, raDepth+2), stop: make(chan struct{})}
	for range raDepth + 2 {
		ra.free <- make([]byte, raChunk)
	}
	ra.done.Add(1)
	go ra.fill(src)
	return ra
}

func (ra *readAhead) fill(src io.Reader) {
	defer ra.done.Done()
	for {
		var buf []byte
		select {
		case buf = <-ra.free:
		case <-ra.stop:
			return
		}
		n, err := io.ReadFull(src, buf)
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		select {
		case ra.full <- raChunkBuf{b: buf[:n], err: err}:
		case <-ra.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

func (ra *readAhead) Read(p []byte) (int, error) {
	for ra.cur.off == len(ra.cur.b) {
		if ra.cur.err != nil {
			return 0, ra.cur.err
		}
		if ra.cur.b != nil {
			ra.free <- ra.cur.b[:cap(ra.cur.b)]
		}
		ra.cur = <-ra.full
	}
	n := copy(p, ra.cur.b[ra.cur.off:])
	ra.cur.off += n
	return n, nil
}

// Close stops the goroutine and waits for it.
func (ra *readAhead) Close() error {
	if !ra.closed {
		ra.closed = true
		close(ra.stop)
		ra.done.Wait()
	}
	return nil
}
