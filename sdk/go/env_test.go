package hero

import (
	"strings"
	"testing"
)

// The ports docker-compose.yml publishes the API on (HERO_HTTP_PORT, HERO_GRPC_PORT)
// move the client too; HERO_ADDR and HERO_API_URL still say it exactly.
func TestConfigFromEnvPorts(t *testing.T) {
	for _, tc := range []struct {
		env          map[string]string
		addr, apiURL string
		err          string
	}{
		{env: map[string]string{}, addr: "", apiURL: ""},
		{env: map[string]string{"HERO_GRPC_PORT": "19653", "HERO_HTTP_PORT": "19652"}, addr: "127.0.0.1:19653", apiURL: "https://127.0.0.1:19652/"},
		{env: map[string]string{"HERO_ADDR": "api.example:443", "HERO_HTTP_PORT": "8443"}, addr: "api.example:443", apiURL: "https://api.example:8443/"},
		{env: map[string]string{"HERO_HTTP_PORT": "19652", "HERO_PLAINTEXT": "1"}, addr: "", apiURL: "http://127.0.0.1:19652/"},
		{env: map[string]string{"HERO_GRPC_PORT": "19653", "HERO_ADDR": "10.0.0.1:9653", "HERO_HTTP_PORT": "19652", "HERO_API_URL": "https://api/"},
			addr: "10.0.0.1:9653", apiURL: "https://api/"},
		{env: map[string]string{"HERO_GRPC_PORT": "nine"}, err: `HERO_GRPC_PORT="nine" is not a port`},
		{env: map[string]string{"HERO_HTTP_PORT": "70000"}, err: `HERO_HTTP_PORT="70000" is not a port`},
	} {
		for _, k := range []string{"HERO_ADDR", "HERO_API_URL", "HERO_GRPC_PORT", "HERO_HTTP_PORT", "HERO_PLAINTEXT", "HERO_ACTOR", "HERO_TLS_CA"} {
			t.Setenv(k, tc.env[k])
		}
		cfg, err := ConfigFromEnv()
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want %q", tc.env, err, tc.err)
			}
		case err != nil:
			t.Errorf("%v: %v", tc.env, err)
		case cfg.Addr != tc.addr || cfg.APIURL != tc.apiURL:
			t.Errorf("%v: Addr %q, APIURL %q; want %q, %q", tc.env, cfg.Addr, cfg.APIURL, tc.addr, tc.apiURL)
		}
	}
}
