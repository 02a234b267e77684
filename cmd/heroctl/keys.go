package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hero-coordinator/hero/lib/auth"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// keyCmd runs `heroctl key generate|pubkey`: actor keys are Ed25519 PKCS#8 PEM files.
func (c *cli) keyCmd(verb string, args []string) error {
	switch verb {
	case "generate":
		fs := subFlags("key generate")
		out := fs.String("out", "", "")
		force := fs.Bool("force", false, "")
		if _, err := parseSub(fs, args); err != nil {
			return err
		}
		path := *out
		if path == "" {
			if c.g.actor == 0 {
				return usageErr("key generate --out FILE (or --actor N: into the config directory)")
			}
			p, err := auth.ActorKeyPath(c.g.actor)
			if err != nil {
				return err
			}
			path = p
		}
		pub, priv, err := auth.GenerateKey()
		if err != nil {
			return err
		}
		if err := auth.WritePrivateKey(path, priv, *force); err != nil {
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("%s exists: keep it, or --force to replace it", path)
			}
			return err
		}
		return c.printKey(path, pub)
	case "pubkey":
		if _, err := parseSub(subFlags("key pubkey"), args); err != nil {
			return err
		}
		path, err := c.keyPath()
		if err != nil {
			return err
		}
		k, err := auth.LoadPrivateKey(path)
		if err != nil {
			return err
		}
		return c.printKey(path, k.Public().(ed25519.PublicKey))
	}
	return usageErr("key generate [--out FILE] [--force] | key pubkey")
}

// keyPath is the key file of the command: --key, else HERO_ACTOR's in the config dir.
func (c *cli) keyPath() (string, error) {
	if c.g.keyFile != "" {
		return c.g.keyFile, nil
	}
	if c.g.actor == 0 {
		return "", usageErr("set --key FILE (HERO_KEY) or --actor N (HERO_ACTOR)")
	}
	return auth.ActorKeyPath(c.g.actor)
}

func (c *cli) printKey(path string, pub ed25519.PublicKey) error {
	if c.g.output == "json" {
		b, err := json.MarshalIndent(map[string]string{"pubkey": auth.PublicKeyHex(pub), "file": path}, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(c.out, string(b))
		return err
	}
	fmt.Fprintln(c.out, auth.PublicKeyHex(pub))
	fmt.Fprintf(c.errw, "key: %s\n", path)
	return nil
}

// ensureActorKey returns the pubkey for `actor create --id N` without --pubkey: the
// key of N in the config directory, generated there when it does not exist yet.
// created says the file is new (the caller removes it if the actor is not created).
func (c *cli) ensureActorKey(id uint32) (pubkey, path string, created bool, err error) {
	path, err = auth.ActorKeyPath(id)
	if err != nil {
		return "", "", false, err
	}
	if k, err := auth.LoadPrivateKey(path); err == nil {
		return auth.PublicKeyHex(k.Public().(ed25519.PublicKey)), path, false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", "", false, err
	}
	pub, priv, err := auth.GenerateKey()
	if err != nil {
		return "", "", false, err
	}
	if err := auth.WritePrivateKey(path, priv, false); err != nil {
		return "", "", false, err
	}
	return auth.PublicKeyHex(pub), path, true, nil
}

// actorUpdate runs `heroctl actor update [--id N] (--pubkey HEX | --generate-key)
// [--address A]…`. With --generate-key the new key is kept beside the old one until
// the server took it, then replaces it.
func (c *cli) actorUpdate(ctx context.Context, args []string) error {
	fs := subFlags("actor update")
	id := fs.Uint("id", uint(c.g.actor), "")
	pubkey := fs.String("pubkey", "", "")
	gen := fs.Bool("generate-key", false, "")
	var addr multiFlag
	fs.Var(&addr, "address", "")
	if _, err := parseSub(fs, args); err != nil {
		return err
	}
	if *id == 0 || *id > 1<<32-1 {
		return usageErr("actor update --id N (or HERO_ACTOR) (--pubkey HEX | --generate-key) [--address A]…")
	}
	if *gen && *pubkey != "" {
		return usageErr("actor update: --pubkey and --generate-key exclude each other")
	}
	// Another actor's key is changed by the operator; one's own with the current key.
	c.operator = uint32(*id) != c.g.actor
	req := &herov1.UpdateActorRequest{Id: uint32(*id)}
	var newPath, keyPath string
	if *gen {
		p, err := auth.ActorKeyPath(uint32(*id))
		if err != nil {
			return err
		}
		pub, priv, err := auth.GenerateKey()
		if err != nil {
			return err
		}
		keyPath, newPath = p, p+".new"
		if err := auth.WritePrivateKey(newPath, priv, true); err != nil {
			return err
		}
		hexKey := auth.PublicKeyHex(pub)
		req.Pubkey = &hexKey
	} else if *pubkey != "" {
		req.Pubkey = pubkey
	}
	if len(addr) > 0 {
		req.Address = &herov1.StringList{Values: addr}
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := api.UpdateActor(cctx, req)
	if err != nil {
		if newPath != "" {
			_ = os.Remove(newPath)
		}
		return err
	}
	if newPath != "" {
		if err := os.Rename(newPath, keyPath); err != nil {
			return fmt.Errorf("the server has the new key, but moving it into place failed (it is in %s): %v", newPath, err)
		}
		fmt.Fprintf(c.errw, "key: %s (replaced; the old key is no longer accepted)\n", keyPath)
	}
	return c.show(r.Actor, func(w *tabwriter.Writer) { printActor(w, r.Actor) })
}

// secretCmd runs `heroctl secret list|create|revoke FINGERPRINT` (operator).
func (c *cli) secretCmd(ctx context.Context, verb string, args []string) error {
	pos, err := parseSub(subFlags("secret "+verb), args)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	switch verb {
	case "list":
		r, err := api.ListOperatorSecrets(cctx, &herov1.ListOperatorSecretsRequest{})
		if err != nil {
			return err
		}
		return c.show(r, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "FINGERPRINT\tSOURCE\tCREATED\tREVOKED\t")
			for _, s := range r.Items {
				cur := ""
				if s.Current {
					cur = "(this one)"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", s.Fingerprint, s.Source, msTime(s.CreatedAtMs), msTime(s.RevokedAtMs), cur)
			}
		})
	case "create":
		r, err := api.CreateOperatorSecret(cctx, &herov1.CreateOperatorSecretRequest{})
		if err != nil {
			return err
		}
		if c.g.output == "json" {
			return c.show(r, nil)
		}
		fmt.Fprintln(c.out, r.Secret)
		fmt.Fprintf(c.errw, "fingerprint: %s (the secret is shown only this once)\n", r.Fingerprint)
		return nil
	case "revoke":
		if len(pos) != 1 {
			return usageErr("secret revoke FINGERPRINT")
		}
		r, err := api.RevokeOperatorSecret(cctx, &herov1.RevokeOperatorSecretRequest{Fingerprint: pos[0]})
		if err != nil {
			return err
		}
		if c.g.output == "json" {
			return c.show(r.Secret, nil)
		}
		fmt.Fprintf(c.out, "%s revoked\n", r.Secret.Fingerprint)
		return nil
	}
	return usageErr("secret list|create|revoke FINGERPRINT")
}

func msTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).Format(time.RFC3339)
}

// operatorMethods need the operator secret (api call picks it for them).
var operatorMethods = map[string]bool{"actor.create": true, "context.create": true}

// apiCmd runs `heroctl api call METHOD ['JSON params']`: any JSON-RPC method, signed
// like every other command, and prints the result (or the error) as JSON.
func (c *cli) apiCmd(ctx context.Context, verb string, args []string) error {
	pos, err := parseSub(subFlags("api "+verb), args)
	if err != nil {
		return err
	}
	if verb != "call" || len(pos) < 1 || len(pos) > 2 {
		return usageErr("api call METHOD ['{\"json\": \"params\"}']")
	}
	method, params := pos[0], json.RawMessage("{}")
	if len(pos) == 2 {
		if !json.Valid([]byte(pos[1])) {
			return usageErr("api call: the params are not valid JSON: %s", pos[1])
		}
		params = json.RawMessage(pos[1])
	}
	c.operator = operatorMethods[method] || strings.HasPrefix(method, "secret.") || strings.HasPrefix(method, "dispatcher.")
	cred, err := c.credential()
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		return err
	}
	url, err := c.apiURL()
	if err != nil {
		return err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if cred.signer != nil {
		cr, err := cred.signer.Sign(auth.JSONRPCTarget, auth.Digest(body))
		if err != nil {
			return err
		}
		req.Header.Set(auth.HeaderActor, cr.Actor)
		req.Header.Set(auth.HeaderTimestamp, cr.Timestamp)
		req.Header.Set(auth.HeaderNonce, cr.Nonce)
		req.Header.Set(auth.HeaderSignature, cr.Signature)
	} else {
		req.Header.Set("Authorization", "Bearer "+cred.secret)
		if cred.actor != 0 {
			req.Header.Set(auth.HeaderActor, strconv.FormatUint(uint64(cred.actor), 10))
		}
	}
	hc := http.DefaultClient
	if t, err := c.tlsConfig(); err != nil {
		return err
	} else if t != nil {
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: t}}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the JSON-RPC API at %s (set HERO_API_URL): %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	var r struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int             `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("%s answered %s: %s", url, resp.Status, strings.TrimSpace(string(raw)))
	}
	if r.Error != nil {
		return &exitError{code: 1, msg: fmt.Sprintf("%s: error %d: %s", method, r.Error.Code, r.Error.Message)}
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, r.Result, "", "  "); err != nil {
		return err
	}
	fmt.Fprintln(c.out, pretty.String())
	return nil
}

// apiURL is the JSON-RPC endpoint: HERO_API_URL, else HERO_ADDR's host on port 9652;
// an http:// URL only with --plaintext.
func (c *cli) apiURL() (string, error) {
	if c.g.apiURL != "" {
		if strings.HasPrefix(strings.ToLower(c.g.apiURL), "http://") && !c.g.plain {
			return "", fmt.Errorf("--api-url %s is plaintext: use https:// (or --plaintext for an API without TLS)", c.g.apiURL)
		}
		return c.g.apiURL, nil
	}
	host, _, err := net.SplitHostPort(c.g.addr)
	if err != nil {
		return "", fmt.Errorf("--addr %q is not host:port (or set HERO_API_URL)", c.g.addr)
	}
	scheme := "https"
	if c.g.plain {
		scheme = "http"
	}
	return scheme + "://" + net.JoinHostPort(host, "9652") + "/", nil
}
