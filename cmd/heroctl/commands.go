package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"sort"
	"strings"
	"text/tabwriter"

	hero "github.com/hero-coordinator/hero/sdk/go"
)

// command is one heroctl subcommand: `heroctl <name> [flags] <args>`.
type command struct {
	name     string // "flow submit"
	args     string // the positional arguments, for the usage line ("FILE.yaml")
	summary  string
	example  string
	operator bool // it needs the operator secret
	// define declares the command's flags on fs and returns what runs it with the
	// positional arguments.
	define func(c *cli, fs *flag.FlagSet) action
}

type action func(ctx context.Context, pos []string) error

// commands is every subcommand, in the order `heroctl help` lists them.
func commands() []command {
	var all []command
	for _, group := range [][]command{keyCommands(), actorCommands(), secretCommands(), apiCommands(), pkiCommands(),
		contextCommands(), runnerCommands(), jobCommands(), flowCommands(), dlqCommands(), scheduleCommands(), queueCommands(), eventsCommands(),
		dispatcherCommands(), consoleCommands(), toolCommands()} {
		all = append(all, group...)
	}
	return all
}

// findCommand picks the command that args name ("flow submit …", "events …").
func findCommand(args []string) (command, []string, error) {
	all := commands()
	if len(args) > 1 {
		for _, cmd := range all {
			if cmd.name == args[0]+" "+args[1] {
				return cmd, args[2:], nil
			}
		}
	}
	var verbs []string
	for _, cmd := range all {
		if cmd.name == args[0] {
			return cmd, args[1:], nil
		}
		if obj, verb, ok := strings.Cut(cmd.name, " "); ok && obj == args[0] {
			verbs = append(verbs, verb)
		}
	}
	if len(verbs) == 0 {
		return command{}, nil, usageErr("unknown command %q (heroctl help lists them)", args[0])
	}
	if len(args) > 1 {
		return command{}, nil, usageErr("%s: unknown verb %q: want %s", args[0], args[1], strings.Join(verbs, "|"))
	}
	return command{}, nil, usageErr("%s %s (heroctl %s VERB --help)", args[0], strings.Join(verbs, "|"), args[0])
}

// dispatch runs the command that args name; --help prints its help.
func (c *cli) dispatch(ctx context.Context, args []string) error {
	defer c.close()
	cmd, rest, err := findCommand(args)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	act := cmd.define(c, fs)
	pos, err := parseSub(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		return printHelp(c.out, cmd, fs)
	}
	if err != nil {
		return usageErr("%s: %v (heroctl %s --help)", cmd.name, errors.Unwrap(err), cmd.name)
	}
	c.operator = cmd.operator
	return act(ctx, pos)
}

// parseSub parses flags; positional arguments may come before, between or after them.
func parseSub(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, fmt.Errorf("%w", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// usageLine is `heroctl <name> <args> [flags]`.
func usageLine(cmd command) string {
	s := "heroctl " + cmd.name
	if cmd.args != "" {
		s += " " + cmd.args
	}
	return s + " [flags]"
}

// wrongArgs is the usage error of a command given the wrong positional arguments.
func wrongArgs(name string) error {
	for _, cmd := range commands() {
		if cmd.name == name {
			return usageErr("%s %s (heroctl %s --help)", cmd.name, cmd.args, cmd.name)
		}
	}
	return usageErr("%s", name)
}

// printHelp prints a command's usage, its flags with their defaults, and an example.
func printHelp(w io.Writer, cmd command, fs *flag.FlagSet) error {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", usageLine(cmd), cmd.summary)
	if cmd.operator {
		fmt.Fprintln(w, "It needs the operator secret (HERO_ADMIN_SECRET).")
	}
	fmt.Fprintln(w, "\nFlags:")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		typ, use := flag.UnquoteUsage(f)
		name := flagName(f.Name)
		if typ != "" {
			name += " " + typ
		}
		fmt.Fprintf(tw, "  %s\t%s (default %s)\n", name, use, defaultText(f))
	})
	if n == 0 {
		fmt.Fprintln(tw, "  (none but the global flags: heroctl help)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nExample:\n  %s\n", strings.ReplaceAll(cmd.example, "\n", "\n  "))
	return err
}

// flagName is how help and completion spell a flag: -f, --name.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func defaultText(f *flag.Flag) string {
	switch f.DefValue {
	case "", "[]":
		return "none"
	}
	return f.DefValue
}

// printUsage is `heroctl help`: the global flags, then every command.
func printUsage(w io.Writer) {
	fmt.Fprint(w, usageHead)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, cmd := range commands() {
		fmt.Fprintf(tw, "  %s %s\t%s\n", cmd.name, cmd.args, cmd.summary)
	}
	_ = tw.Flush()
	fmt.Fprint(w, usageTail)
}

func toolCommands() []command {
	return []command{
		{name: "version", summary: "Print heroctl's version: its git revision and build date.", example: "heroctl version",
			define: (*cli).versionCmd},
		{name: "completion", args: "bash|zsh|fish", summary: "Print a shell completion script.",
			example: "heroctl completion bash > ~/.local/share/bash-completion/completions/heroctl\nheroctl completion fish > ~/.config/fish/completions/heroctl.fish",
			define:  (*cli).completionCmd},
	}
}

// The build's revision and date, set by the linker: the Makefile's and the
// Dockerfile's -ldflags "-X main.revision=… -X main.buildDate=…". Empty when the build
// did not say (go build, go install): version then reads what Go recorded.
var (
	revision  string
	buildDate string
)

// version is heroctl's module version, revision and build date.
func version() string {
	info, _ := debug.ReadBuildInfo()
	return versionOf(revision, buildDate, info)
}

// versionOf says "heroctl <module version> revision <rev> built <date> <go version>":
// the revision and date the linker was given, else the VCS revision and commit time
// go build recorded (it records none in workspace mode or without .git), else
// "unknown".
func versionOf(rev, date string, info *debug.BuildInfo) string {
	mod, goVersion := "(devel)", "unknown"
	if info != nil {
		mod, goVersion = cmp.Or(info.Main.Version, mod), info.GoVersion
	}
	if rev == "" && info != nil {
		vcs := map[string]string{}
		for _, s := range info.Settings {
			vcs[s.Key] = s.Value
		}
		rev = vcs["vcs.revision"]
		if rev != "" && vcs["vcs.modified"] == "true" {
			rev += "-dirty"
		}
		if date == "" && vcs["vcs.time"] != "" {
			date = vcs["vcs.time"] + " (its commit's time)"
		}
	}
	return fmt.Sprintf("heroctl %s revision %s built %s %s", mod, cmp.Or(rev, "unknown"), cmp.Or(date, "unknown"), goVersion)
}

func (c *cli) versionCmd(fs *flag.FlagSet) action {
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 0 {
			return wrongArgs("version")
		}
		_, err := fmt.Fprintln(c.out, version())
		return err
	}
}

func (c *cli) completionCmd(fs *flag.FlagSet) action {
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 1 {
			return wrongArgs("completion")
		}
		switch pos[0] {
		case "bash":
			return writeBash(c.out, "")
		case "zsh":
			return writeBash(c.out, "autoload -U +X bashcompinit && bashcompinit\n")
		case "fish":
			return writeFish(c.out)
		}
		return usageErr("completion %q: want bash, zsh or fish", pos[0])
	}
}

// tree is the command table for completion: objects, their verbs, each command's flags.
func tree() (objs []string, verbs map[string][]string, flags map[string][]string) {
	verbs, flags = map[string][]string{}, map[string][]string{}
	for _, cmd := range commands() {
		obj, verb, _ := strings.Cut(cmd.name, " ")
		if _, seen := verbs[obj]; !seen {
			objs = append(objs, obj)
			verbs[obj] = nil
		}
		if verb != "" {
			verbs[obj] = append(verbs[obj], verb)
		}
		fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
		cmd.define(&cli{g: &globals{}}, fs)
		fs.VisitAll(func(f *flag.Flag) { flags[cmd.name] = append(flags[cmd.name], flagName(f.Name)) })
	}
	sort.Strings(objs)
	return objs, verbs, flags
}

func writeBash(w io.Writer, prelude string) error {
	objs, verbs, flags := tree()
	var b strings.Builder
	b.WriteString("# heroctl completion (heroctl completion bash|zsh)\n" + prelude)
	b.WriteString("_heroctl() {\n  local cur=\"${COMP_WORDS[COMP_CWORD]}\" obj=\"\" verb=\"\" w words i\n")
	b.WriteString("  for ((i = 1; i < COMP_CWORD; i++)); do\n    w=${COMP_WORDS[i]}\n")
	b.WriteString("    case \"$w\" in -*) ;; *) if [ -z \"$obj\" ]; then obj=$w; elif [ -z \"$verb\" ]; then verb=$w; fi ;; esac\n  done\n")
	fmt.Fprintf(&b, "  case \"$obj\" in\n    \"\") words=%q ;;\n", strings.Join(objs, " "))
	for _, o := range objs {
		if len(verbs[o]) > 0 {
			fmt.Fprintf(&b, "    %s) [ -z \"$verb\" ] && words=%q ;;\n", o, strings.Join(verbs[o], " "))
		}
	}
	b.WriteString("  esac\n  if [[ \"$cur\" == -* ]]; then\n    case \"$obj $verb\" in\n")
	names := make([]string, 0, len(flags))
	for n := range flags {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		key := n
		if !strings.Contains(n, " ") {
			key = n + " *"
			fmt.Fprintf(&b, "      \"%s \"*) words=%q ;;\n", n, strings.Join(flags[n], " "))
			continue
		}
		fmt.Fprintf(&b, "      %q) words=%q ;;\n", key, strings.Join(flags[n], " "))
	}
	b.WriteString("    esac\n  fi\n  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n}\ncomplete -F _heroctl heroctl\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func writeFish(w io.Writer) error {
	objs, verbs, flags := tree()
	var b strings.Builder
	b.WriteString("# heroctl completion (heroctl completion fish)\ncomplete -c heroctl -f\n")
	fmt.Fprintf(&b, "complete -c heroctl -n __fish_use_subcommand -a %q\n", strings.Join(objs, " "))
	for _, o := range objs {
		if len(verbs[o]) > 0 {
			fmt.Fprintf(&b, "complete -c heroctl -n '__fish_seen_subcommand_from %s; and not __fish_seen_subcommand_from %s' -a %q\n",
				o, strings.Join(verbs[o], " "), strings.Join(verbs[o], " "))
		}
	}
	names := make([]string, 0, len(flags))
	for n := range flags {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		cond := "__fish_seen_subcommand_from " + n
		if obj, verb, ok := strings.Cut(n, " "); ok {
			cond = fmt.Sprintf("__fish_seen_subcommand_from %s; and __fish_seen_subcommand_from %s", obj, verb)
		}
		for _, f := range flags[n] {
			opt := "-l " + strings.TrimPrefix(f, "--")
			if !strings.HasPrefix(f, "--") {
				opt = "-s " + strings.TrimPrefix(f, "-")
			}
			fmt.Fprintf(&b, "complete -c heroctl -n '%s' %s\n", cond, opt)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// bound says how long a command's calls may take.
type bound bool

const (
	perCall bound = true  // each call at most --timeout
	waits   bound = false // the command's own wait bounds it (flow wait, logs -f, …)
)

// clientCall is the body of a command: its calls, made with the client.
type clientCall func(ctx context.Context, hc *hero.Client) error

// withClient runs fn with the client, ctx bounded as b says.
func (c *cli) withClient(ctx context.Context, b bound, fn clientCall) error {
	hc, err := c.client()
	if err != nil {
		return err
	}
	if b == perCall {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.g.timeout)
		defer cancel()
	}
	return fn(ctx, hc)
}

// noArgs is the action of a command without positional arguments.
func (c *cli) noArgs(name string, b bound, fn clientCall) action {
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 0 {
			return wrongArgs(name)
		}
		return c.withClient(ctx, b, fn)
	}
}

// byID is the action of a command whose one argument is an id (what: "flow id").
func (c *cli) byID(name, what string, b bound, fn func(ctx context.Context, hc *hero.Client, id uint32) error) action {
	return func(ctx context.Context, pos []string) error {
		id, err := oneID(name, what, pos)
		if err != nil {
			return err
		}
		return c.withClient(ctx, b, func(ctx context.Context, hc *hero.Client) error { return fn(ctx, hc, id) })
	}
}

// byJob is the action of a command on one job: ID [--caller N].
func (c *cli) byJob(ref *jobRef, b bound, fn func(ctx context.Context, hc *hero.Client, caller, id uint32) error) action {
	return func(ctx context.Context, pos []string) error {
		caller, id, err := ref.parse(c, pos)
		if err != nil {
			return err
		}
		return c.withClient(ctx, b, func(ctx context.Context, hc *hero.Client) error { return fn(ctx, hc, caller, id) })
	}
}
