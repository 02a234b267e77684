package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/mycelium"
	"github.com/hero-coordinator/hero/lib/testutil/myceliumemu"
)

func TestRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--nodes", "a=127.0.0.1:0, b", "--seed", "t"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	var out output
	if err := json.Unmarshal(line, &out); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	if out.Seed != "t" || len(out.Nodes) != 2 || out.Nodes[0].Name != "a" || out.Nodes[1].Name != "b" {
		t.Fatalf("output %s", line)
	}
	for _, nd := range out.Nodes {
		if want := myceliumemu.DeriveIdentity("t", nd.Name); nd.Identity != want {
			t.Fatalf("identity %+v, want %+v", nd.Identity, want)
		}
	}
	a, b := out.Nodes[0], out.Nodes[1]
	ca, _ := mycelium.New(mycelium.Config{BaseURL: a.URL})
	cb, _ := mycelium.New(mycelium.Config{BaseURL: b.URL})
	tctx, tcancel := context.WithTimeout(ctx, time.Minute)
	defer tcancel()
	if info, err := cb.Info(tctx); err != nil || info.NodePubkey != b.PK {
		t.Fatalf("info %+v %v", info, err)
	}
	if _, err := ca.Push(tctx, mycelium.ToPK(b.PK), []byte("x."), []byte("hi"), nil); err != nil {
		t.Fatal(err)
	}
	if m, err := cb.Pop(tctx, []byte("x."), time.Second, false); err != nil || m == nil || m.SrcPK != a.PK {
		t.Fatalf("pop %+v %v", m, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not return after cancellation")
	}
	if _, err := cb.Info(context.Background()); err == nil {
		t.Fatal("still serving after stop")
	}
}

func TestPrintIdentities(t *testing.T) {
	var buf bytes.Buffer
	if err := run(context.Background(), []string{"--print-identities", "--nodes", "gw1=:8989,gw2=:8990"}, &buf, io.Discard); err != nil {
		t.Fatal(err)
	}
	var out output
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.Seed != defaultSeed || len(out.Nodes) != 2 || out.Nodes[1].Identity != myceliumemu.DeriveIdentity(defaultSeed, "gw2") ||
		out.Nodes[0].URL != "" {
		t.Fatalf("%s", buf.Bytes())
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--nodes", "a,a"},
		{"--nodes", "=x"},
		{"--nodes", "a", "--topic-match", "suffix"},
		{"--nodes", "a", "--drop-rate", "2"},
		{"--nodes", "a", "--seed", ""},
		{"--nodes", "a", "extra"},
		{"--nodes", "a=256.0.0.1:1"},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
