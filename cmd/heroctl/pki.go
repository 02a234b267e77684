package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/redisacl"
	"github.com/hero-coordinator/hero/lib/tlsx"
)

// pkiCmd runs `heroctl pki init`: the deployment's internal CA and a certificate per
// service (mutual TLS), for the public API, for Redis and for people's tools, and the
// Redis ACL users with their password files (lib/redisacl). It keeps what exists;
// --renew reissues the certificates from the existing CA.
func (c *cli) pkiCmd(ctx context.Context, verb string, args []string) error {
	if verb == "k8s-secrets" {
		return c.pkiK8sCmd(ctx, args)
	}
	if verb != "init" {
		return usageErr("pki init --dir DIR [--api-host H]… [--redis-host H]… [--host H]… [--days N] [--renew], or pki k8s-secrets --prefix NAME … (in a Kubernetes pod)")
	}
	fs := subFlags("pki init")
	dir := fs.String("dir", "", "")
	days := fs.Uint("days", 365, "")
	renew := fs.Bool("renew", false, "")
	var apiHosts, redisHosts, hosts multiFlag
	fs.Var(&apiHosts, "api-host", "")
	fs.Var(&redisHosts, "redis-host", "")
	fs.Var(&hosts, "host", "")
	if _, err := parseSub(fs, args); err != nil {
		return err
	}
	if *dir == "" || *days == 0 {
		return usageErr("pki init --dir DIR (--days must be at least 1)")
	}
	p := &tlsx.PKI{Dir: *dir, APIHosts: splitAll(apiHosts), RedisHosts: splitAll(redisHosts), ExtraHosts: splitAll(hosts),
		Validity: time.Duration(*days) * 24 * time.Hour, Renew: *renew}
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
	if len(wrote) == 0 {
		fmt.Fprintf(c.out, "pki: %s is complete; nothing written (%s rewritten)\n", *dir, redisacl.ACLFile)
		return nil
	}
	fmt.Fprintf(c.out, "pki: wrote %s %s in %s\n", strings.Join(wrote, " "), redisacl.ACLFile, *dir)
	return nil
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
