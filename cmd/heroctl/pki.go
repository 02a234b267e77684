package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/redisacl"
	"github.com/hero-coordinator/hero/lib/tlsx"
)

func pkiCommands() []command {
	return []command{
		{name: "pki init", summary: "Make the internal CA and certificates (mutual TLS between services, the API's TLS), the Redis ACL users and the operator secrets' HMAC key in a directory; keeps what exists.",
			example: "heroctl pki init --dir ./pki --api-host api.example.com --redis-host redis", define: (*cli).pkiInit},
		{name: "pki k8s-secrets", summary: "In a Kubernetes pod: make what pki init makes and store it in Secrets of the namespace, creating only the missing ones.",
			example: "heroctl pki k8s-secrets --prefix hero --label app=hero", define: (*cli).pkiK8s},
	}
}

// hostFlags are the certificates' host names (pki init, pki k8s-secrets).
type hostFlags struct {
	days                       *uint
	apiHosts, redisHosts, more multiFlag
}

func addHostFlags(fs *flag.FlagSet) *hostFlags {
	h := &hostFlags{days: fs.Uint("days", 365, "the certificates' validity in days")}
	fs.Var(&h.apiHosts, "api-host", "a `host` name of the API's certificate (repeatable, or comma-separated)")
	fs.Var(&h.redisHosts, "redis-host", "a `host` name of Redis's certificate")
	fs.Var(&h.more, "host", "a `host` name for every service certificate")
	return h
}

func (h *hostFlags) pki(dir string, renew bool) tlsx.PKI {
	return tlsx.PKI{Dir: dir, APIHosts: splitAll(h.apiHosts), RedisHosts: splitAll(h.redisHosts), ExtraHosts: splitAll(h.more),
		Validity: time.Duration(*h.days) * 24 * time.Hour, Renew: renew}
}

// pkiInit runs `heroctl pki init`: the deployment's internal CA and a certificate per
// service (mutual TLS), for the public API, for Redis and for people's tools, the
// Redis ACL users with their password files, and the operator secrets' HMAC key
// (lib/redisacl). It keeps what exists;
// --renew reissues the certificates from the existing CA.
func (c *cli) pkiInit(fs *flag.FlagSet) action {
	dir := fs.String("dir", "", "the directory to write to (required)")
	renew := fs.Bool("renew", false, "reissue the certificates from the existing CA")
	hosts := addHostFlags(fs)
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 0 || *dir == "" || *hosts.days == 0 {
			return usageErr("pki init --dir DIR (--days must be at least 1)")
		}
		p := hosts.pki(*dir, *renew)
		wrote, err := p.Init()
		if err != nil {
			return fmt.Errorf("pki init: %v", err)
		}
		users, err := redisacl.Init(*dir)
		if err != nil {
			return fmt.Errorf("pki init: redis users: %v", err)
		}
		for _, u := range users {
			wrote = append(wrote, redisacl.PasswordFile(u))
		}
		if made, err := redisacl.InitOperatorKey(*dir); err != nil {
			return fmt.Errorf("pki init: operator key: %v", err)
		} else if made {
			wrote = append(wrote, redisacl.OperatorKeyFile)
		}
		if len(wrote) == 0 {
			fmt.Fprintf(c.out, "pki: %s is complete; nothing written (%s rewritten)\n", *dir, redisacl.ACLFile)
			return nil
		}
		fmt.Fprintf(c.out, "pki: wrote %s %s in %s\n", strings.Join(wrote, " "), redisacl.ACLFile, *dir)
		return nil
	}
}

// splitAll splits repeated, comma-separated values.
func splitAll(list []string) []string {
	var out []string
	for _, v := range list {
		for _, x := range strings.Split(v, ",") {
			if x = strings.TrimSpace(x); x != "" {
				out = append(out, x)
			}
		}
	}
	return out
}
