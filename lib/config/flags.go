// Package config gives every binary the same command line: each flag has an
// environment twin (--redis-url / REDIS_URL), a documented default, and --help that
// lists all three. Precedence: flag, then environment, then default.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// ErrHelp is returned by Parse when --help was asked for (usage already printed).
var ErrHelp = flag.ErrHelp

// FlagSet wraps flag.FlagSet with environment twins.
type FlagSet struct {
	fs      *flag.FlagSet
	name    string
	summary string
	env     map[string]string // flag name → env var
	lookup  func(string) (string, bool)
}

// NewFlagSet returns a FlagSet for the named program; summary heads --help.
func NewFlagSet(name, summary string) *FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &FlagSet{fs: fs, name: name, summary: summary, env: map[string]string{}, lookup: os.LookupEnv}
}

// SetEnvLookup replaces os.LookupEnv (tests).
func (f *FlagSet) SetEnvLookup(fn func(string) (string, bool)) { f.lookup = fn }

// EnvName derives the environment twin of a flag: "redis-url" → "REDIS_URL".
func EnvName(flagName string) string {
	return strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (f *FlagSet) register(name, env string) {
	if env == "" {
		env = EnvName(name)
	}
	f.env[name] = env
}

// StringVar defines a string flag; env "" derives the twin from the name.
func (f *FlagSet) StringVar(p *string, name, env, def, usage string) {
	f.fs.StringVar(p, name, def, usage)
	f.register(name, env)
}

// IntVar defines an int flag.
func (f *FlagSet) IntVar(p *int, name, env string, def int, usage string) {
	f.fs.IntVar(p, name, def, usage)
	f.register(name, env)
}

// Uint32Var defines a uint32 flag.
func (f *FlagSet) Uint32Var(p *uint32, name, env string, def uint32, usage string) {
	*p = def
	f.fs.Func(name, usage, func(s string) error {
		var v uint64
		if _, err := fmt.Sscanf(s, "%d", &v); err != nil || v > 1<<32-1 || fmt.Sprint(v) != strings.TrimSpace(s) {
			return fmt.Errorf("%q is not an unsigned 32-bit integer", s)
		}
		*p = uint32(v)
		return nil
	})
	f.fs.Lookup(name).DefValue = fmt.Sprint(def)
	f.register(name, env)
}

// Float64Var defines a float64 flag.
func (f *FlagSet) Float64Var(p *float64, name, env string, def float64, usage string) {
	f.fs.Float64Var(p, name, def, usage)
	f.register(name, env)
}

// BoolVar defines a bool flag.
func (f *FlagSet) BoolVar(p *bool, name, env string, def bool, usage string) {
	f.fs.BoolVar(p, name, def, usage)
	f.register(name, env)
}

// DurationVar defines a duration flag ("10s", "250ms").
func (f *FlagSet) DurationVar(p *time.Duration, name, env string, def time.Duration, usage string) {
	f.fs.DurationVar(p, name, def, usage)
	f.register(name, env)
}

// Parse parses args, then fills flags not given on the command line from their
// environment twins. Errors are one line and name the flag or variable.
func (f *FlagSet) Parse(args []string, stdout io.Writer) error {
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.PrintUsage(stdout)
			return ErrHelp
		}
		return fmt.Errorf("%v (see %s --help)", err, f.name)
	}
	if f.fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see %s --help)", f.fs.Arg(0), f.name)
	}
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var err error
	f.fs.VisitAll(func(fl *flag.Flag) {
		if err != nil || set[fl.Name] {
			return
		}
		env := f.env[fl.Name]
		if v, ok := f.lookup(env); ok {
			if serr := fl.Value.Set(v); serr != nil {
				err = fmt.Errorf("environment variable %s=%q: %v", env, v, serr)
			}
		}
	})
	return err
}

// PrintUsage writes the help text: every flag, its env twin and its default.
func (f *FlagSet) PrintUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s [flags]\n", f.name)
	if f.summary != "" {
		fmt.Fprintf(w, "\n%s\n", f.summary)
	}
	fmt.Fprintf(w, "\nFlags (each can also be set by the environment variable shown):\n")
	var all []*flag.Flag
	f.fs.VisitAll(func(fl *flag.Flag) { all = append(all, fl) })
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, fl := range all {
		def := fl.DefValue
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "  --%s\t$%s\t(default %s)\t%s\n", fl.Name, f.env[fl.Name], def, fl.Usage)
	}
	_ = tw.Flush()
}
