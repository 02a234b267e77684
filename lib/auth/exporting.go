package auth

import (
	"context"
	"net"

	"google.golang.org/grpc/credentials"
)

// ExportedTLSInfo is the AuthInfo of a TLS connection whose exporter value
// (Exporter) was derived once, at its handshake, by ExportingTLS: session
// authentication reads it at every call, on the client (GetRequestMetadata) and on the
// server (the binding a signature is checked against). Deriving it per call was a
// sixth of a producer's gRPC cost. It is the connection's own: the value lives in the
// AuthInfo that gRPC keeps with that connection, so no two connections can share it.
type ExportedTLSInfo struct {
	credentials.TLSInfo
	exporter []byte
	err      error
}

// ExportingTLS wraps TLS transport credentials so that each connection's AuthInfo is
// an ExportedTLSInfo. Other credentials' AuthInfo is passed on as it is.
func ExportingTLS(c credentials.TransportCredentials) credentials.TransportCredentials {
	return exportingTLS{c}
}

type exportingTLS struct {
	credentials.TransportCredentials
}

func (e exportingTLS) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := e.TransportCredentials.ClientHandshake(ctx, authority, raw)
	return conn, exported(ai), err
}

func (e exportingTLS) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := e.TransportCredentials.ServerHandshake(raw)
	return conn, exported(ai), err
}

func (e exportingTLS) Clone() credentials.TransportCredentials {
	return exportingTLS{e.TransportCredentials.Clone()}
}

func exported(ai credentials.AuthInfo) credentials.AuthInfo {
	ti, ok := ai.(credentials.TLSInfo)
	if !ok {
		return ai
	}
	ekm, err := Exporter(&ti.State)
	return ExportedTLSInfo{TLSInfo: ti, exporter: ekm, err: err}
}

// TLSInfoOf returns the TLS information of a connection's AuthInfo, whether
// ExportingTLS wrapped its credentials or not; false when it is not TLS.
func TLSInfoOf(ai credentials.AuthInfo) (credentials.TLSInfo, bool) {
	switch ai := ai.(type) {
	case ExportedTLSInfo:
		return ai.TLSInfo, true
	case credentials.TLSInfo:
		return ai, true
	}
	return credentials.TLSInfo{}, false
}

// ConnExporter returns the exporter value of the connection ai describes: the one
// derived at its handshake (ExportedTLSInfo), else derived now. isTLS is false when
// the connection is not TLS (no value, no error).
func ConnExporter(ai credentials.AuthInfo) (ekm []byte, isTLS bool, err error) {
	switch ai := ai.(type) {
	case ExportedTLSInfo:
		return ai.exporter, true, ai.err
	case credentials.TLSInfo:
		ekm, err := Exporter(&ai.State)
		return ekm, true, err
	}
	return nil, false, nil
}
