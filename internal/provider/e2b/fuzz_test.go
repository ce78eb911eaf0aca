package e2b

import (
	"bytes"
	"testing"
)

// FuzzProcessStream: what envd's Start stream answers is parsed without
// panic, bounded, and a stream that ends without a start event is an
// error.
func FuzzProcessStream(f *testing.F) {
	var ok bytes.Buffer
	writeFrame(&ok, 0, []byte(`{"event":{"start":{"pid":7}}}`))
	f.Add(ok.Bytes())
	var end bytes.Buffer
	writeFrame(&end, flagEndStream, []byte(`{"error":{"code":"resource_exhausted","message":"too many"}}`))
	f.Add(end.Bytes())
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{1, 0, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for range 64 {
			flags, msg, err := readFrame(r)
			if err != nil {
				return
			}
			if len(msg) > maxFrame {
				t.Fatalf("a frame of %d bytes", len(msg))
			}
			if flags&flagEndStream != 0 {
				if endStreamError(msg) == nil {
					t.Fatal("an end of stream before the start event is no error")
				}
				return
			}
		}
	})
}
