package hero

import (
	"crypto/tls"
	"fmt"
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

// ConfigFromEnv reads the environment heroctl reads: HERO_ADDR, HERO_API_URL,
// HERO_ACTOR, HERO_KEY (default: the actor's key in the config directory,
// <config dir>/keys/actor-<id>.pem), HERO_CONTEXT, HERO_ADMIN_SECRET, HERO_TLS_CA,
// HERO_TLS_CERT, HERO_TLS_KEY, HERO_PLAINTEXT=1 and HERO_SIGN_EACH_CALL=1.
func ConfigFromEnv() (Config, error) {
	cfg := Config{Addr: os.Getenv("HERO_ADDR"), APIURL: os.Getenv("HERO_API_URL"), AdminSecret: os.Getenv("HERO_ADMIN_SECRET"),
		KeyFile: os.Getenv("HERO_KEY"), Plaintext: os.Getenv("HERO_PLAINTEXT") == "1",
		SignEachCall: os.Getenv("HERO_SIGN_EACH_CALL") == "1"}
	var err error
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
