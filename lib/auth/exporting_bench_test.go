package auth

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/hero-coordinator/hero/lib/tlsx"
)

// BenchmarkSessionMetadata is a client's per-call cost of a session signature on one
// TLS connection: with the exporter value derived at every call (plain TLS
// credentials) and at the handshake (ExportingTLS).
func BenchmarkSessionMetadata(b *testing.B) {
	pki := &tlsx.PKI{Dir: b.TempDir()}
	if _, err := pki.Init(); err != nil {
		b.Fatal(err)
	}
	scfg, err := tlsx.ServerConfig(pki.Files("api"), false, "api", nil)
	if err != nil {
		b.Fatal(err)
	}
	ccfg, err := tlsx.ClientConfig(tlsx.Files{CA: pki.Files("api").CA}, "", "api", nil)
	if err != nil {
		b.Fatal(err)
	}
	_, priv, _ := GenerateKey()
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
	}{
		{"per-call", credentials.NewTLS(ccfg)},
		{"at-handshake", ExportingTLS(credentials.NewTLS(ccfg))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			go func() {
				if sside, err := ln.Accept(); err == nil {
					_, _, _ = credentials.NewTLS(scfg).ServerHandshake(sside)
				}
			}()
			cside, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer cside.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, ai, err := tc.creds.ClientHandshake(ctx, "localhost", cside)
			if err != nil {
				b.Fatal(err)
			}
			sa := NewSessionAuth(&Signer{Actor: 9, Key: priv}, time.Hour)
			callCtx := credentials.NewContextWithRequestInfo(context.Background(), credentials.RequestInfo{AuthInfo: ai})
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := sa.GetRequestMetadata(callCtx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
