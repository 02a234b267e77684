package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	hero "github.com/hero-coordinator/hero/sdk/go"
)

func keyCommands() []command {
	return []command{
		{name: "key generate", summary: "Make an actor key (Ed25519, PKCS#8 PEM) and print its public key.",
			example: "heroctl --actor 1 key generate   # into <config dir>/keys/actor-1.pem", define: (*cli).keyGenerate},
		{name: "key pubkey", summary: "Print the public key of --key (HERO_KEY), else of HERO_ACTOR's key.", example: "heroctl --actor 1 key pubkey", define: (*cli).keyPubkey},
	}
}

// keyGenerate runs `heroctl key generate`: actor keys are Ed25519 PKCS#8 PEM files.
func (c *cli) keyGenerate(fs *flag.FlagSet) action {
	out := fs.String("out", "", "the key file (default: HERO_ACTOR's in the config directory)")
	force := fs.Bool("force", false, "replace an existing file")
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 0 {
			return wrongArgs("key generate")
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
	}
}

func (c *cli) keyPubkey(fs *flag.FlagSet) action {
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 0 {
			return wrongArgs("key pubkey")
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
		return c.printJSON(map[string]string{"pubkey": auth.PublicKeyHex(pub), "file": path})
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
func (c *cli) actorUpdate(fs *flag.FlagSet) action {
	id := fs.Uint("id", 0, "the actor (default: HERO_ACTOR)")
	pubkey := fs.String("pubkey", "", "its new public key (hex)")
	gen := fs.Bool("generate-key", false, "make a new key in the config directory and register it")
	var addr multiFlag
	fs.Var(&addr, "address", "its Mycelium `address`es (repeatable; replace the old ones)")
	return func(ctx context.Context, pos []string) error {
		if *id == 0 {
			*id = uint(c.g.actor)
		}
		if len(pos) != 0 || *id == 0 || *id > 1<<32-1 {
			return usageErr("actor update --id N (or HERO_ACTOR) (--pubkey HEX | --generate-key) [--address A]…")
		}
		if *gen && *pubkey != "" {
			return usageErr("actor update: --pubkey and --generate-key exclude each other")
		}
		// Another actor's key is changed by the operator; one's own with the current key.
		c.operator = uint32(*id) != c.g.actor
		req := &herov1.UpdateActorRequest{Id: uint32(*id)}
		var k *newKey
		if *gen {
			var err error
			if k, err = makeNewKey(uint32(*id)); err != nil {
				return err
			}
			req.Pubkey = &k.pub
		} else if *pubkey != "" {
			req.Pubkey = pubkey
		}
		if len(addr) > 0 {
			req.Address = &herov1.StringList{Values: addr}
		}
		return c.sendActorUpdate(ctx, req, k)
	}
}

// newKey is a key made for actor update, beside the old one until the server took it.
type newKey struct{ path, newPath, pub string }

func makeNewKey(id uint32) (*newKey, error) {
	p, err := auth.ActorKeyPath(id)
	if err != nil {
		return nil, err
	}
	pub, priv, err := auth.GenerateKey()
	if err != nil {
		return nil, err
	}
	k := &newKey{path: p, newPath: p + ".new", pub: auth.PublicKeyHex(pub)}
	return k, auth.WritePrivateKey(k.newPath, priv, true)
}

func (c *cli) sendActorUpdate(ctx context.Context, req *herov1.UpdateActorRequest, k *newKey) error {
	var r *herov1.UpdateActorResponse
	err := c.withClient(ctx, perCall, func(ctx context.Context, hc *hero.Client) (err error) {
		r, err = hc.API().UpdateActor(ctx, req)
		return err
	})
	if err != nil {
		if k != nil {
			_ = os.Remove(k.newPath)
		}
		return err
	}
	if k != nil {
		if err := os.Rename(k.newPath, k.path); err != nil {
			return fmt.Errorf("the server has the new key, but moving it into place failed (it is in %s): %v", k.newPath, err)
		}
		fmt.Fprintf(c.errw, "key: %s (replaced; the old key is no longer accepted)\n", k.path)
	}
	return c.showActor(r.Actor)
}

func secretCommands() []command {
	return []command{
		{name: "secret list", summary: "List the operator secrets by fingerprint, with their source and revocation.", example: "heroctl secret list", operator: true, define: (*cli).secretList},
		{name: "secret create", summary: "Create an operator secret; it is printed this once.", example: "heroctl secret create", operator: true, define: (*cli).secretCreate},
		{name: "secret revoke", args: "FINGERPRINT", summary: "Revoke an operator secret (the last accepted one cannot be).", example: "heroctl secret revoke 3f2a…", operator: true, define: (*cli).secretRevoke},
	}
}

// secretView is an operator secret as the JSON-RPC API gives it.
type secretView = model.OperatorSecret

func viewSecret(s *herov1.OperatorSecret) secretView {
	return secretView{Fingerprint: s.Fingerprint, Source: s.Source, CreatedAtMs: s.CreatedAtMs, RevokedAtMs: s.RevokedAtMs, Reason: s.Reason, Current: s.Current}
}

func (c *cli) secretList(fs *flag.FlagSet) action {
	return c.noArgs("secret list", perCall, func(ctx context.Context, hc *hero.Client) error {
		r, err := hc.API().ListOperatorSecrets(ctx, &herov1.ListOperatorSecretsRequest{})
		if err != nil {
			return err
		}
		out := struct {
			Items []secretView `json:"items"`
		}{[]secretView{}}
		for _, s := range r.Items {
			out.Items = append(out.Items, viewSecret(s))
		}
		return c.show(out, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "FINGERPRINT\tSOURCE\tCREATED\tREVOKED\tTHIS ONE")
			for _, s := range out.Items {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", s.Fingerprint, s.Source, msTime(s.CreatedAtMs), msTime(s.RevokedAtMs), map[bool]string{true: "yes", false: "-"}[s.Current])
			}
		})
	})
}

func (c *cli) secretCreate(fs *flag.FlagSet) action {
	return c.noArgs("secret create", perCall, func(ctx context.Context, hc *hero.Client) error {
		r, err := hc.API().CreateOperatorSecret(ctx, &herov1.CreateOperatorSecretRequest{})
		if err != nil {
			return err
		}
		if c.g.output == "json" {
			return c.printJSON(map[string]string{"fingerprint": r.Fingerprint, "secret": r.Secret})
		}
		fmt.Fprintln(c.out, r.Secret)
		fmt.Fprintf(c.errw, "fingerprint: %s (the secret is shown only this once)\n", r.Fingerprint)
		return nil
	})
}

func (c *cli) secretRevoke(fs *flag.FlagSet) action {
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 1 {
			return wrongArgs("secret revoke")
		}
		return c.withClient(ctx, perCall, func(ctx context.Context, hc *hero.Client) error {
			r, err := hc.API().RevokeOperatorSecret(ctx, &herov1.RevokeOperatorSecretRequest{Fingerprint: pos[0]})
			if err != nil {
				return err
			}
			return c.done(r.Secret.Fingerprint+" revoked", viewSecret(r.Secret))
		})
	}
}

func msTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).Format(time.RFC3339)
}

// operatorMethods need the operator secret (api call picks it for them).
var operatorMethods = map[string]bool{"actor.create": true, "context.create": true}

func apiCommands() []command {
	return []command{{name: "api call", args: "METHOD ['{\"json\": \"params\"}']", summary: "Call any JSON-RPC method, signed like every other command, and print its result as JSON.",
		example: `heroctl api call flow.load '{"context_id": 1, "id": 3}'`, define: (*cli).apiCall}}
}

// apiCall runs `heroctl api call METHOD ['JSON params']`.
func (c *cli) apiCall(fs *flag.FlagSet) action {
	return func(ctx context.Context, pos []string) error {
		if len(pos) < 1 || len(pos) > 2 {
			return wrongArgs("api call")
		}
		method, params := pos[0], json.RawMessage("{}")
		if len(pos) == 2 {
			if !json.Valid([]byte(pos[1])) {
				return usageErr("api call: the params are not valid JSON: %s", pos[1])
			}
			params = json.RawMessage(pos[1])
		}
		c.operator = operatorMethods[method] || strings.HasPrefix(method, "secret.") || strings.HasPrefix(method, "dispatcher.")
		hc, err := c.client()
		if err != nil {
			return err
		}
		res, err := hc.Call(ctx, method, params)
		var rpcErr *hero.RPCError
		if errors.As(err, &rpcErr) {
			return &exitError{code: 1, msg: c.describe(rpcErr)}
		}
		if err != nil {
			return err
		}
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, res, "", "  "); err != nil {
			return err
		}
		fmt.Fprintln(c.out, pretty.String())
		return nil
	}
}
