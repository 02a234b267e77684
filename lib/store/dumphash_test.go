package store_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hero-coordinator/hero/lib/store"
)

// HashFromDump reads what Redis's DUMP makes of a hash as HGETALL gives it, in both
// of a hash's forms (a listpack: each integer encoding and string length it takes; a
// hash table: plain, integer and LZF-compressed strings), with and without
// rdbcompression.
func TestHashFromDump(t *testing.T) {
	srv.Flush(t)
	ctx := context.Background()
	rc := srv.Client(t, 1)
	conf := func(k, v string) {
		old := rc.ConfigGet(ctx, k).Val()[k]
		if err := rc.ConfigSet(ctx, k, v).Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rc.ConfigSet(ctx, k, old) })
	}
	conf("hash-max-listpack-entries", "128") // Redis's defaults
	conf("hash-max-listpack-value", "64")
	// (compression on, as Redis's default: the test servers run without it, as this
	// stack's deployments do, redistest.RDBCompression)
	conf("rdbcompression", "yes")
	noise := func(n int) string { // incompressible
		r := rand.New(rand.NewPCG(uint64(n), 1))
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return string(b)
	}
	ints := map[string]string{}
	for i, v := range []string{"0", "127", "128", "-1", "-4096", "4095", "4096", "-4097", "32767", "-32768", "32768",
		"8388607", "-8388608", "8388608", "2147483647", "-2147483648", "2147483648", "9223372036854775807", "-9223372036854775808",
		"007", "-0", "1e3", "", "id", "1765000000123456"} {
		ints[fmt.Sprintf("f%d", i)] = v
	}
	cases := map[string]map[string]string{
		"listpack of integers and short strings": ints,
		"listpack of the longest short strings":  {"a": strings.Repeat("a", 63), "b": strings.Repeat("b", 64), "c": "\x00\xff\n="},
		"hash table": {"int": "123", "neg": "-5", "big": "65536", "bigger": "4294967296", "lead": "007", "short": "abc",
			"long": strings.Repeat("compressible ", 400), "noise": noise(300), "empty": ""},
	}
	many := map[string]string{}
	for i := range 200 {
		many[fmt.Sprintf("field%d", i)] = fmt.Sprint(i * 1000)
	}
	cases["hash table of many fields"] = many
	check := func(name string, h map[string]string) {
		t.Helper()
		want := "listpack"
		if strings.HasPrefix(name, "hash table") {
			want = "hashtable"
		}
		key := "h:" + name
		rc.Del(ctx, key)
		if err := rc.HSet(ctx, key, h).Err(); err != nil {
			t.Fatal(err)
		}
		dump, err := rc.Dump(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if enc := rc.ObjectEncoding(ctx, key).Val(); enc != want {
			t.Fatalf("%s is a %s", name, enc)
		}
		items, err := store.HashFromDump(dump)
		if err != nil {
			t.Fatalf("%s (%s): %v", name, rc.ObjectEncoding(ctx, key).Val(), err)
		}
		got := map[string]string{}
		for i := 0; i+1 < len(items); i += 2 {
			got[items[i]] = items[i+1]
		}
		if want := rc.HGetAll(ctx, key).Val(); len(items) != 2*len(want) || !maps.Equal(got, want) {
			t.Errorf("%s (%s): read %d items\n%q\nwant\n%q", name, rc.ObjectEncoding(ctx, key).Val(), len(items), got, want)
		}
	}
	for name, h := range cases {
		check(name, h)
	}
	conf("rdbcompression", "no")
	check("hash table, uncompressed", cases["hash table"])
	check("listpack, uncompressed", ints)
	conf("rdbcompression", "yes")
	conf("hash-max-listpack-value", "100000")
	conf("hash-max-listpack-entries", "100000")
	check("listpack of long strings", map[string]string{"a": strings.Repeat("a", 100), "b": noise(5000), "c": strings.Repeat("c", 70000)})
	check("listpack of many fields", many)
}

// A DUMP that is not a hash's, or that does not add up, is refused, never misread.
func TestHashFromDumpRefuses(t *testing.T) {
	srv.Flush(t)
	ctx := context.Background()
	rc := srv.Client(t, 1)
	rc.Set(ctx, "s", "a string", 0)
	rc.HSet(ctx, "h", "a", "1", "b", strings.Repeat("x", 100)) // a hash table
	rc.HSet(ctx, "l", "a", "1", "b", "two")                    // a listpack
	str, hash, lp := rc.Dump(ctx, "s").Val(), rc.Dump(ctx, "h").Val(), rc.Dump(ctx, "l").Val()
	for name, dump := range map[string]string{
		"a string's":                    str,
		"empty":                         "",
		"a hash table's, cut short":     hash[:len(hash)-14],
		"a listpack's, cut short":       lp[:len(lp)-14],
		"a listpack's, one byte more":   lp[:len(lp)-10] + "x" + lp[len(lp)-10:],
		"a hash table's, one byte more": hash[:len(hash)-10] + "x" + hash[len(hash)-10:],
	} {
		if items, err := store.HashFromDump(dump); err == nil {
			t.Errorf("%s: read %q", name, items)
		}
	}
}

// A started job's hash read from its dump makes its integers' texts in one string:
// its items and that string, not an allocation per integer (a job's times, ids and
// attempt: the claim reads one such hash per started job).
func TestHashFromDumpIntegersTogether(t *testing.T) {
	srv.Flush(t)
	ctx := context.Background()
	rc := srv.Client(t, 1)
	h := map[string]string{"status": "started", "started_at_us": "1765000000123456", "updated_at": "1765000000",
		"dispatched_at_ms": "1765000000123", "attempt": "1", "caller_id": "4096", "flow_id": "-70000", "worker": "runner-1"}
	if err := rc.HSet(ctx, "h", h).Err(); err != nil {
		t.Fatal(err)
	}
	dump := rc.Dump(ctx, "h").Val()
	if n := testing.AllocsPerRun(50, func() {
		if _, err := store.HashFromDump(dump); err != nil {
			t.Fatal(err)
		}
	}); n >= 6 {
		// its items, its integers' texts, the listpack when compressed (more under
		// the race detector, which keeps less on the stack): fewer than one an integer
		t.Fatalf("a listpack of 6 integers read with %.0f allocations, want fewer than one an integer", n)
	}
}
