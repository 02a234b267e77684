// Command luagen generates, from the declared interface in the header of each Lua
// script of a directory, the Lua prologue in each script file and one Go file of
// typed calls (package luagen). Run by make lua-gen; with -check it changes nothing
// and fails when a generated part is not what it would write (make lint).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hero-coordinator/hero/lib/internal/luagen"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "luagen:", err)
		os.Exit(1)
	}
}

func run(argv []string) error {
	fs := flag.NewFlagSet("luagen", flag.ContinueOnError)
	dir := fs.String("dir", "", "the directory of the .lua files")
	out := fs.String("out", "", "the Go file to write")
	opt := luagen.GoOptions{Command: "lib/internal/luagen/cmd/luagen"}
	fs.StringVar(&opt.Package, "package", "", "the Go package's name")
	fs.StringVar(&opt.Call, "call", "Call", "the package's type of one script run (fields Script, Keys, Args)")
	fs.StringVar(&opt.NewScript, "new", "luaScript", "the package's func(name string, libs ...string) that makes a script")
	fs.StringVar(&opt.Runner, "runner", "luaRunner", "the package's interface with runLua(context.Context, <call>) (any, error)")
	fs.StringVar(&opt.Conv, "conv", luagen.ConvPath, "the import path of the conversions the generated code uses (package luaconv)")
	check := fs.Bool("check", false, "change nothing; fail when a generated part is stale")
	counts := fs.String("counts", "", "the name of the table of small counts the scripts see (luagen.PrologueCounts); none when empty")
	if err := fs.Parse(argv); err != nil {
		return err
	}
	if *dir == "" || *out == "" || opt.Package == "" {
		return fmt.Errorf("-dir, -out and -package are needed")
	}
	files, err := filepath.Glob(filepath.Join(*dir, "*.lua"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	var scripts []*luagen.Script
	writes := map[string][]byte{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		sc, err := luagen.Parse(filepath.Base(f), string(src))
		if err != nil {
			return err
		}
		if sc == nil {
			continue
		}
		scripts = append(scripts, sc)
		writes[f] = []byte(luagen.WithPrologue(string(src), luagen.PrologueCounts(sc, *counts)))
	}
	code, err := luagen.Go(opt, scripts)
	if err != nil {
		return err
	}
	writes[*out] = code
	return apply(writes, *check)
}

// apply writes each changed file, or with check lists the stale ones as an error.
func apply(writes map[string][]byte, check bool) error {
	var stale []string
	for f, want := range writes {
		have, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		if bytes.Equal(have, want) {
			continue
		}
		if check {
			stale = append(stale, f)
			continue
		}
		if err := os.WriteFile(f, want, 0o644); err != nil {
			return err
		}
	}
	if len(stale) > 0 {
		sort.Strings(stale)
		return fmt.Errorf("generated code is stale (run make lua-gen): %s", strings.Join(stale, ", "))
	}
	return nil
}
