package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	hero "github.com/hero-coordinator/hero/sdk/go"
)

func actorCommands() []command {
	return []command{
		{name: "actor create", summary: "Create an actor; without --pubkey its key is the one in the config directory, made if missing.",
			example: "heroctl actor create --id 1", operator: true, define: (*cli).actorCreate},
		{name: "actor update", summary: "Rotate an actor's key (the old one is refused from then on) or change its addresses.",
			example: "heroctl --actor 1 actor update --generate-key", define: (*cli).actorUpdate},
		{name: "actor get", args: "ID", summary: "Show an actor.", example: "heroctl actor get 1", define: (*cli).actorGet},
	}
}

func printActor(w *tabwriter.Writer, a *model.Actor) {
	fmt.Fprintf(w, "actor\t%d\npubkey\t%s\naddress\t%s\ncreated\t%s\n", a.ID, dash(a.Pubkey), dash(strings.Join(a.Address, ", ")), ts(a.CreatedAt))
}

func (c *cli) showActor(a *herov1.Actor) error {
	m := hero.ActorOf(a)
	return c.show(m, func(w *tabwriter.Writer) { printActor(w, m) })
}

func (c *cli) actorCreate(fs *flag.FlagSet) action {
	id := fs.Uint("id", 0, "the actor's id")
	pubkey := fs.String("pubkey", "", "its Ed25519 public key (hex); none: the key in the config directory")
	noKey := fs.Bool("no-key", false, "create it without a key (it cannot sign until actor update gives it one)")
	var addr multiFlag
	fs.Var(&addr, "address", "a Mycelium `address` of the actor (repeatable)")
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 0 {
			return wrongArgs("actor create")
		}
		if *id > 1<<32-1 {
			return usageErr("actor create: --id %d is not a 32-bit id", *id)
		}
		// Without --pubkey the actor's key is the one in the config directory, made
		// now when there is none: the actor can sign at once (export HERO_ACTOR=N).
		keyFile, created := "", false
		if *pubkey == "" && !*noKey {
			if *id == 0 {
				return usageErr("actor create: give --id N to keep its key in the config directory, or --pubkey HEX (or --no-key)")
			}
			var err error
			if *pubkey, keyFile, created, err = c.ensureActorKey(uint32(*id)); err != nil {
				return err
			}
		}
		err := c.withClient(ctx, perCall, func(ctx context.Context, hc *hero.Client) error {
			r, err := hc.API().CreateActor(ctx, &herov1.CreateActorRequest{Actor: &herov1.Actor{Id: uint32(*id), Pubkey: *pubkey, Address: addr}})
			if err != nil {
				return err
			}
			if keyFile != "" {
				fmt.Fprintf(c.errw, "key: %s\n", keyFile)
			}
			return c.showActor(r.Actor)
		})
		if err != nil && created {
			_ = os.Remove(keyFile)
		}
		return err
	}
}

func (c *cli) actorGet(fs *flag.FlagSet) action {
	return c.byID("actor get", "actor id", perCall, func(ctx context.Context, hc *hero.Client, id uint32) error {
		r, err := hc.API().GetActor(ctx, &herov1.GetActorRequest{Id: id})
		if err != nil {
			return err
		}
		return c.showActor(r.Actor)
	})
}

// oneID is the one positional id of a command.
func oneID(name, what string, pos []string) (uint32, error) {
	if len(pos) != 1 {
		return 0, wrongArgs(name)
	}
	return parseID(what, pos[0])
}

func contextCommands() []command {
	return []command{
		{name: "context create", args: "ID", summary: "Create a context (its id is its Redis database) with its permission lists.",
			example: "heroctl context create 1 --admins 1 --executors 2 --job-defaults memory=512MiB,pids=64", operator: true, define: (*cli).contextCreate},
		{name: "context update", args: "[ID]", summary: "Change a context's lists, retention, allowed sources, job limits or claim order (a flag given empty clears it; --job-max, --weight: operators).",
			example: "heroctl context update 1 --readers 3,4 --retention 24h --priority-age 5s", define: (*cli).contextUpdate},
		{name: "context get", args: "[ID]", summary: "Show a context (default: HERO_CONTEXT).", example: "heroctl context get 1", define: (*cli).contextGet},
		{name: "context delete", args: "ID", summary: "Delete a context and everything in it; refused while flows run unless --force.",
			example: "heroctl context delete 7 --force", define: (*cli).contextDelete},
	}
}

// contextFlags are the flags that describe a context.
type contextFlags struct {
	admins, readers, executors, sources, jobDefaults, jobMax *string
	retention, priorityAge                                   *time.Duration
	weight                                                   *uint
}

func addContextFlags(fs *flag.FlagSet) *contextFlags {
	return &contextFlags{
		admins:      fs.String("admins", "", "actor ids that administer the context (comma-separated)"),
		readers:     fs.String("readers", "", "actor ids that may read it"),
		executors:   fs.String("executors", "", "actor ids that may run jobs and flows"),
		retention:   fs.Duration("retention", 0, "how long ended flows and jobs are kept (0: the scheduler's default)"),
		sources:     fs.String("allowed-sources", "", "Mycelium public keys allowed to send jobs in (comma-separated)"),
		jobDefaults: fs.String("job-defaults", "", "limits a job gets unless it asks ("+limitsUsage+")"),
		jobMax:      fs.String("job-max", "", "the most a job may ask for (operators only)"),
		priorityAge: fs.Duration("priority-age", 0, "a job's wait per step of a better priority (0: 10s; docs/scheduling.md)"),
		weight:      fs.Uint("weight", 0, "its claims per round on a runner it shares (0 or 1: one; operators only)"),
	}
}

func (f *contextFlags) context(id uint32) (*herov1.Context, error) {
	if *f.weight > model.MaxWeight {
		return nil, usageErr("--weight %d: at most %d", *f.weight, model.MaxWeight)
	}
	x := &herov1.Context{Id: id, RetentionSeconds: int64(f.retention.Seconds()), PriorityAgeMs: f.priorityAge.Milliseconds(), Weight: uint32(*f.weight)}
	if *f.sources != "" {
		x.AllowedSources = strings.Split(*f.sources, ",")
	}
	var err error
	for _, l := range []struct {
		name string
		val  string
		into *[]uint32
	}{{"admins", *f.admins, &x.Admins}, {"readers", *f.readers, &x.Readers}, {"executors", *f.executors, &x.Executors}} {
		if *l.into, err = parseIDList("--"+l.name, l.val); err != nil {
			return nil, err
		}
	}
	if x.JobDefaults, err = parseLimits("--job-defaults", *f.jobDefaults); err != nil {
		return nil, err
	}
	if x.JobMax, err = parseLimits("--job-max", *f.jobMax); err != nil {
		return nil, err
	}
	return x, nil
}

func printContext(w *tabwriter.Writer, x *model.Context) {
	fmt.Fprintf(w, "context\t%d\nadmins\t%s\nreaders\t%s\nexecutors\t%s\ncreated\t%s\n", x.ID, ids(x.Admins), ids(x.Readers), ids(x.Executors), ts(x.CreatedAt))
	if len(x.AllowedSources) > 0 {
		fmt.Fprintf(w, "allowed sources\t%s\n", strings.Join(x.AllowedSources, ", "))
	}
	if t := limitsText(x.JobDefaults); t != "" {
		fmt.Fprintf(w, "job defaults\t%s\n", t)
	}
	if t := limitsText(x.JobMax); t != "" {
		fmt.Fprintf(w, "job max\t%s\n", t)
	}
	if x.PriorityAgeMs != 0 {
		fmt.Fprintf(w, "priority age\t%s\n", time.Duration(x.PriorityAgeMs)*time.Millisecond)
	}
	if x.Weight > 1 {
		fmt.Fprintf(w, "weight\t%d\n", x.Weight)
	}
}

func (c *cli) showContext(x *herov1.Context) error {
	m := hero.ContextOf(x)
	return c.show(m, func(w *tabwriter.Writer) { printContext(w, m) })
}

func (c *cli) contextCreate(fs *flag.FlagSet) action {
	f := addContextFlags(fs)
	return c.byID("context create", "context id", perCall, func(ctx context.Context, hc *hero.Client, id uint32) error {
		x, err := f.context(id)
		if err != nil {
			return err
		}
		r, err := hc.API().CreateContext(ctx, &herov1.CreateContextRequest{Context: x})
		if err != nil {
			return err
		}
		return c.showContext(r.Context)
	})
}

func (c *cli) contextUpdate(fs *flag.FlagSet) action {
	f := addContextFlags(fs)
	return func(ctx context.Context, pos []string) error {
		if len(pos) > 1 {
			return wrongArgs("context update")
		}
		req := &herov1.UpdateContextRequest{Id: c.g.context}
		var err error
		if len(pos) == 1 {
			if req.Id, err = parseID("context id", pos[0]); err != nil {
				return err
			}
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if len(set) == 0 {
			return usageErr("context update: nothing to change; give --admins, --readers, --executors, --retention, --allowed-sources, --job-defaults, --job-max, --priority-age or --weight")
		}
		if err := f.update(req, set); err != nil {
			return err
		}
		c.operator = set["job-max"] || set["weight"]
		return c.withClient(ctx, perCall, func(ctx context.Context, hc *hero.Client) error {
			r, err := hc.API().UpdateContext(ctx, req)
			if err != nil {
				return err
			}
			return c.showContext(r.Context)
		})
	}
}

// update fills an update request with the flags given (set).
func (f *contextFlags) update(req *herov1.UpdateContextRequest, set map[string]bool) error {
	x, err := f.context(req.Id)
	if err != nil {
		return err
	}
	for _, l := range []struct {
		name string
		ids  []uint32
		into **herov1.IdList
	}{{"admins", x.Admins, &req.Admins}, {"readers", x.Readers, &req.Readers}, {"executors", x.Executors, &req.Executors}} {
		if set[l.name] {
			*l.into = &herov1.IdList{Ids: l.ids}
		}
	}
	if set["retention"] {
		req.RetentionSeconds = &x.RetentionSeconds
	}
	if set["allowed-sources"] {
		req.AllowedSources = &herov1.StringList{Values: x.AllowedSources}
	}
	if set["job-defaults"] {
		req.JobDefaults = x.JobDefaults
	}
	if set["job-max"] {
		req.JobMax = x.JobMax
	}
	if set["priority-age"] {
		req.PriorityAgeMs = &x.PriorityAgeMs
	}
	if set["weight"] {
		req.Weight = &x.Weight
	}
	return nil
}

func (c *cli) contextGet(fs *flag.FlagSet) action {
	return func(ctx context.Context, pos []string) error {
		id := c.g.context
		var err error
		switch len(pos) {
		case 0:
		case 1:
			if id, err = parseID("context id", pos[0]); err != nil {
				return err
			}
		default:
			return wrongArgs("context get")
		}
		return c.withClient(ctx, perCall, func(ctx context.Context, hc *hero.Client) error {
			r, err := hc.API().GetContext(ctx, &herov1.GetContextRequest{Id: id})
			if err != nil {
				return err
			}
			return c.showContext(r.Context)
		})
	}
}

func (c *cli) contextDelete(fs *flag.FlagSet) action {
	force := fs.Bool("force", false, "delete it even while flows run")
	return c.byID("context delete", "context id", perCall, func(ctx context.Context, hc *hero.Client, id uint32) error {
		if _, err := hc.API().DeleteContext(ctx, &herov1.DeleteContextRequest{Id: id, Force: *force}); err != nil {
			return err
		}
		return c.done(fmt.Sprintf("context %d deleted", id), deleted)
	})
}

// deleted is the API's answer to a delete.
var deleted = map[string]bool{"deleted": true}

func runnerCommands() []command {
	return []command{
		{name: "runner create", args: "[ID]", summary: "Register a runner in the context (local by default; --remote for another node's).",
			example: "heroctl runner create 1 --script-types python,sh", define: (*cli).runnerCreate},
		{name: "runner get", args: "ID", summary: "Show a runner with its live processes.", example: "heroctl runner get 1", define: (*cli).runnerGet},
		{name: "runner list", summary: "List the context's runners, newest first.", example: "heroctl runner list --limit 20", define: (*cli).runnerList},
		{name: "runner delete", args: "ID", summary: "Delete a runner with its heartbeats and pinned queues.", example: "heroctl runner delete 1", define: (*cli).runnerDelete},
	}
}

func printRunner(w *tabwriter.Writer, r *model.Runner) {
	types := make([]string, 0, len(r.ScriptTypes))
	for _, t := range r.ScriptTypes {
		types = append(types, string(t))
	}
	served := dash(strings.Join(types, ","))
	if r.Local && len(types) == 0 {
		served += " (none announced: no runner process serves it yet)"
	}
	fmt.Fprintf(w, "runner\t%d\nlocal\t%v\ntopic\t%s\npubkey\t%s\naddress\t%s\nscript types\t%s\n", r.ID, r.Local, r.Topic, dash(r.Pubkey), dash(r.Address), served)
	for _, p := range r.Processes {
		fmt.Fprintf(w, "process\t%s (heartbeat %s ago)\n", p.ID, time.Since(time.UnixMilli(p.LastHeartbeat)).Round(time.Second))
	}
}

func (c *cli) showRunner(r *herov1.Runner) error {
	m := hero.RunnerOf(r)
	return c.show(m, func(w *tabwriter.Writer) { printRunner(w, m) })
}

func (c *cli) runnerCreate(fs *flag.FlagSet) action {
	remote := fs.Bool("remote", false, "a runner on another node (give --pubkey or --address)")
	pubkey := fs.String("pubkey", "", "the remote runner's Mycelium public key")
	address := fs.String("address", "", "the remote runner's Mycelium address")
	topic := fs.String("topic", "", "the Mycelium topic it listens on")
	types := fs.String("script-types", "", "the script types it serves (comma-separated; default: what its processes announce)")
	return func(ctx context.Context, pos []string) error {
		rn := &herov1.Runner{Local: !*remote, Pubkey: *pubkey, Address: *address, Topic: *topic}
		var err error
		switch len(pos) {
		case 0:
		case 1:
			if rn.Id, err = parseID("runner id", pos[0]); err != nil {
				return err
			}
		default:
			return wrongArgs("runner create")
		}
		if *types != "" {
			rn.ScriptTypes = strings.Split(*types, ",")
		}
		return c.withClient(ctx, perCall, func(ctx context.Context, hc *hero.Client) error {
			r, err := hc.API().CreateRunner(ctx, &herov1.CreateRunnerRequest{ContextId: c.g.context, Runner: rn})
			if err != nil {
				return err
			}
			if r.Runner.Local && len(r.Runner.ScriptTypes) == 0 {
				r.Runner = c.awaitScriptTypes(ctx, hc, r.Runner)
			}
			return c.showRunner(r.Runner)
		})
	}
}

// announceWait bounds how long runner create waits for a runner process to announce
// the script types it serves.
const announceWait = 5 * time.Second

// awaitScriptTypes reads a new local runner again until a runner process serving it
// announced its script types (at once when one runs: the record's creation wakes it),
// for at most announceWait; without one it is shown as it was created.
func (c *cli) awaitScriptTypes(ctx context.Context, hc *hero.Client, r *herov1.Runner) *herov1.Runner {
	ctx, cancel := context.WithTimeout(ctx, announceWait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return r
		case <-tick.C:
		}
		got, err := hc.API().GetRunner(ctx, &herov1.GetRunnerRequest{ContextId: c.g.context, Id: r.Id})
		if err != nil {
			return r
		}
		if len(got.Runner.ScriptTypes) > 0 {
			return got.Runner
		}
	}
}

func (c *cli) runnerGet(fs *flag.FlagSet) action {
	return c.byID("runner get", "runner id", perCall, func(ctx context.Context, hc *hero.Client, id uint32) error {
		r, err := hc.API().GetRunner(ctx, &herov1.GetRunnerRequest{ContextId: c.g.context, Id: id})
		if err != nil {
			return err
		}
		return c.showRunner(r.Runner)
	})
}

func (c *cli) runnerList(fs *flag.FlagSet) action {
	page := addPageFlags(fs, false)
	return c.noArgs("runner list", perCall, func(ctx context.Context, hc *hero.Client) error {
		r, err := hc.API().ListRunners(ctx, &herov1.ListRunnersRequest{ContextId: c.g.context, Limit: page.limit(), Cursor: *page.cursor})
		if err != nil {
			return err
		}
		out := &hero.Page[*model.Runner]{Items: []*model.Runner{}, NextCursor: r.NextCursor}
		for _, x := range r.Runners {
			out.Items = append(out.Items, hero.RunnerOf(x))
		}
		return c.show(out, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "ID\tLOCAL\tTOPIC\tSCRIPT TYPES\tPROCESSES")
			for _, x := range r.Runners {
				fmt.Fprintf(w, "%d\t%v\t%s\t%s\t%d\n", x.Id, x.Local, dash(x.Topic), dash(strings.Join(x.ScriptTypes, ",")), len(x.Processes))
			}
			moreLine(w, r.NextCursor)
		})
	})
}

func (c *cli) runnerDelete(fs *flag.FlagSet) action {
	force := fs.Bool("force", false, "delete it even while its processes are alive")
	return c.byID("runner delete", "runner id", perCall, func(ctx context.Context, hc *hero.Client, id uint32) error {
		if _, err := hc.API().DeleteRunner(ctx, &herov1.DeleteRunnerRequest{ContextId: c.g.context, Id: id, Force: *force}); err != nil {
			return err
		}
		return c.done(fmt.Sprintf("runner %d deleted", id), deleted)
	})
}

// pageFlags are a list's --limit and --cursor (and --status).
type pageFlags struct {
	status, cursor *string
	lim            *uint
}

func addPageFlags(fs *flag.FlagSet, withStatus bool) *pageFlags {
	p := &pageFlags{lim: fs.Uint("limit", 100, "at most this many"), cursor: fs.String("cursor", "", "the page after this cursor (from a previous list's last line)")}
	empty := ""
	p.status = &empty
	if withStatus {
		p.status = fs.String("status", "", "only those in this status")
	}
	return p
}

func (p *pageFlags) limit() uint32 { return uint32(*p.lim) }

func (p *pageFlags) options() hero.ListOptions {
	return hero.ListOptions{Status: *p.status, Limit: p.limit(), Cursor: *p.cursor}
}

func moreLine(w *tabwriter.Writer, cursor string) {
	if cursor != "" {
		fmt.Fprintf(w, "(more: --cursor %s)\n", cursor)
	}
}
