package hero

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/tlsx"
)

// TLSConfig is the API's TLS from PEM files: the CA that issued the API's certificate
// ("" for the system's roots) and, when the API asks for one, a client certificate
// and its key.
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	f := tlsx.Files{CA: caFile, Cert: certFile, Key: keyFile}
	if err := f.Validate("tls", false); err != nil {
		return nil, err
	}
	return tlsx.ClientConfig(f, "", "api", nil)
}

// ConfigFromEnv reads the environment heroctl reads: HERO_ADDR (default
// 127.0.0.1:$HERO_GRPC_PORT, see EnvAddr), HERO_API_URL (default: see EnvAPIURL),
// HERO_ACTOR, HERO_KEY (default: the actor's key in the config directory,
// <config dir>/keys/actor-<id>.pem), HERO_CONTEXT, HERO_ADMIN_SECRET, HERO_TLS_CA,
// HERO_TLS_CERT, HERO_TLS_KEY, HERO_PLAINTEXT=1 and HERO_SIGN_EACH_CALL=1.
func ConfigFromEnv() (Config, error) {
	cfg := Config{AdminSecret: os.Getenv("HERO_ADMIN_SECRET"),
		KeyFile: os.Getenv("HERO_KEY"), Plaintext: os.Getenv("HERO_PLAINTEXT") == "1",
		SignEachCall: os.Getenv("HERO_SIGN_EACH_CALL") == "1"}
	var err error
	if cfg.Addr, err = EnvAddr(); err != nil {
		return cfg, err
	}
	if cfg.APIURL, err = EnvAPIURL(cfg.Addr, cfg.Plaintext); err != nil {
		return cfg, err
	}
	if cfg.Actor, err = envID("HERO_ACTOR"); err != nil {
		return cfg, err
	}
	if cfg.Context, err = envID("HERO_CONTEXT"); err != nil {
		return cfg, err
	}
	if cfg.KeyFile == "" && cfg.Actor != 0 {
		p, err := auth.ActorKeyPath(cfg.Actor)
		if err != nil {
			return cfg, err
		}
		if _, err := os.Stat(p); err == nil || cfg.AdminSecret == "" {
			cfg.KeyFile = p
		}
	}
	if !cfg.Plaintext {
		if cfg.TLS, err = TLSConfig(os.Getenv("HERO_TLS_CA"), os.Getenv("HERO_TLS_CERT"), os.Getenv("HERO_TLS_KEY")); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

func envID(name string) (uint32, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s=%q is not an id (a number from 1)", name, v)
	}
	return uint32(n), nil
}

// The API's default ports: JSON-RPC and gRPC. docker-compose.yml publishes them on the
// host ports HERO_HTTP_PORT and HERO_GRPC_PORT, and scripts/local-stack.sh serves
// them there: the clients follow the same two variables.
const (
	defaultHTTPPort = "9652"
	defaultGRPCPort = "9653"
)

// EnvAddr is the API's gRPC address the environment names: HERO_ADDR, else
// 127.0.0.1 on HERO_GRPC_PORT, else "" (Config's default, 127.0.0.1:9653).
func EnvAddr() (string, error) {
	if a := os.Getenv("HERO_ADDR"); a != "" {
		return a, nil
	}
	port, err := envPort("HERO_GRPC_PORT")
	if port == "" || err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", port), nil
}

// EnvAPIURL is the JSON-RPC endpoint the environment names: HERO_API_URL, else
// addr's host (127.0.0.1 when addr is "") on HERO_HTTP_PORT, else "" (Config's
// default: addr's host on 9652).
func EnvAPIURL(addr string, plaintext bool) (string, error) {
	if u := os.Getenv("HERO_API_URL"); u != "" {
		return u, nil
	}
	port, err := envPort("HERO_HTTP_PORT")
	if port == "" || err != nil {
		return "", err
	}
	host := "127.0.0.1"
	if addr != "" {
		if host, _, err = net.SplitHostPort(addr); err != nil {
			return "", fmt.Errorf("HERO_ADDR %q is not host:port", addr)
		}
	}
	return apiURL(host, port, plaintext), nil
}

// apiURL is the JSON-RPC endpoint on host and port.
func apiURL(host, port string, plaintext bool) string {
	scheme := "https"
	if plaintext {
		scheme = "http"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/"
}

// envPort reads a port number from the environment ("" when unset).
func envPort(name string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", nil
	}
	if n, err := strconv.ParseUint(v, 10, 16); err != nil || n == 0 {
		return "", fmt.Errorf("%s=%q is not a port (a number from 1 to 65535)", name, v)
	}
	return v, nil
}
