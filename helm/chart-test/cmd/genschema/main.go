// Command genschema writes helm/hero/values.schema.json from
// schema/values.schema.src.yaml. Run it from helm/chart-test:
//
//	go run ./cmd/genschema
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/hero-coordinator/hero/helm/chart-test/schemagen"
)

func main() {
	src := flag.String("src", "schema/values.schema.src.yaml", "schema source")
	out := flag.String("out", "../hero/values.schema.json", "generated schema")
	flag.Parse()
	in, err := os.ReadFile(*src)
	if err != nil {
		fmt.Fprintln(os.Stderr, "genschema:", err)
		os.Exit(1)
	}
	js, err := schemagen.Generate(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "genschema:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, js, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "genschema:", err)
		os.Exit(1)
	}
	fmt.Printf("genschema: wrote %s (%d bytes)\n", *out, len(js))
}
