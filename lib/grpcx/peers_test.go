package grpcx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// as is a call's context from a peer whose verified certificate names service ("":
// a plaintext peer).
func as(service string) context.Context {
	p := &peer.Peer{}
	if service != "" {
		cert := &x509.Certificate{DNSNames: []string{service + ".hero.internal"}}
		p.AuthInfo = credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}}
	}
	return peer.NewContext(context.Background(), p)
}

// Each method admits the services named for it and no other, although those others
// may call its neighbours on the same server; a method named for none admits only the
// operator; health and reflection admit any service of the CA.
func TestPeersPerMethod(t *testing.T) {
	check := peerCheck(map[string][]string{
		"/hero.v1.Scheduler/JobsDone":    {"router"},
		"/hero.v1.Scheduler/CancelFlow":  {"supervisor-daemon"},
		"/hero.v1.RunnerControl/StopJob": nil,
	}, zerolog.Nop())
	for _, tc := range []struct {
		service, method string
		want            codes.Code
	}{
		{"router", "/hero.v1.Scheduler/JobsDone", codes.OK},
		{"router", "/hero.v1.Scheduler/CancelFlow", codes.PermissionDenied}, // the scheduler's, but not the router's to call
		{"supervisor-daemon", "/hero.v1.Scheduler/CancelFlow", codes.OK},
		{"supervisor-daemon", "/hero.v1.Scheduler/JobsDone", codes.PermissionDenied},
		{"scheduler", "/hero.v1.RunnerControl/StopJob", codes.PermissionDenied},
		{"supervisor-daemon", "/hero.v1.RunnerControl/StopJob", codes.PermissionDenied},
		{"operator", "/hero.v1.RunnerControl/StopJob", codes.OK},
		{"operator", "/hero.v1.Scheduler/JobsDone", codes.OK},
		{"runner", "/hero.v1.Scheduler/Unknown", codes.PermissionDenied},
		{"runner", "/grpc.health.v1.Health/Check", codes.OK},
		{"", "/hero.v1.Scheduler/JobsDone", codes.Unauthenticated},
	} {
		if got := status.Code(check(as(tc.service), tc.method)); got != tc.want {
			t.Errorf("%q calling %s: %v, want %v", tc.service, tc.method, got, tc.want)
		}
	}
}
