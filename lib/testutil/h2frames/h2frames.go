// Package h2frames reads what one side of an HTTP/2 connection announces about its
// flow-control windows, for tests of a server's or a client's window settings.
package h2frames

import (
	"fmt"

	"golang.org/x/net/http2"
)

// Windows reads frames from fr until it has seen the peer's initial stream window
// (SETTINGS_INITIAL_WINDOW_SIZE of a SETTINGS frame that is not an ack) and the
// increment of its first WINDOW_UPDATE of the connection (stream 0). A SETTINGS
// frame without the initial window size is an error: the peer kept gRPC's default
// of 64 KiB, which it would then grow from its bandwidth estimate.
func Windows(fr *http2.Framer) (stream, conn uint32, err error) {
	for stream == 0 || conn == 0 {
		f, err := fr.ReadFrame()
		if err != nil {
			return stream, conn, fmt.Errorf("read the peer's frames (stream window %d, connection window update %d so far): %w", stream, conn, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			v, ok := f.Value(http2.SettingInitialWindowSize)
			if !ok {
				return stream, conn, fmt.Errorf("the peer's SETTINGS hold no initial window size (gRPC's default, with its estimate)")
			}
			stream = v
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				conn = f.Increment
			}
		}
	}
	return stream, conn, nil
}
