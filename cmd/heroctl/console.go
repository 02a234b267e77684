package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	hero "github.com/hero-coordinator/hero/sdk/go"
)

func consoleCommands() []command {
	return []command{
		{name: "console login", summary: "Print a one-time link that signs a browser in to the web console as you (made by a signed request; valid 2 minutes, once).",
			example: "heroctl console login", define: (*cli).consoleLogin},
	}
}

// consoleLink is console.link's answer with the link made of it.
type consoleLink struct {
	Token       string `json:"token"`
	Path        string `json:"path"`
	ExpiresAtMs int64  `json:"expires_at_ms"`
	URL         string `json:"url"`
}

// consoleLogin asks the API for a one-time sign-in link (console.link, signed as
// every call: the key stays here) and prints it on the API's origin.
func (c *cli) consoleLogin(_ *flag.FlagSet) action {
	return c.noArgs("console login", perCall, func(ctx context.Context, hc *hero.Client) error {
		raw, err := hc.Call(ctx, "console.link", map[string]any{})
		if err != nil {
			return err
		}
		var l consoleLink
		if err := json.Unmarshal(raw, &l); err != nil || l.Path == "" {
			return fmt.Errorf("console.link answered %s: no link in it", raw)
		}
		base, err := hc.APIURL()
		if err != nil {
			return err
		}
		l.URL = strings.TrimSuffix(base, "/") + l.Path
		if c.g.output == "json" {
			return c.printJSON(&l)
		}
		_, err = fmt.Fprintf(c.out, "%s\n(open it in a browser: it signs in once, until %s)\n", l.URL, time.UnixMilli(l.ExpiresAtMs).UTC().Format(time.TimeOnly+" UTC"))
		return err
	})
}
