package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// A hash's DUMP (Redis's serialization of a key's value, as RDB writes it) is how the
// finish script tells an awaited job's end with the job's hash (lua/finish_jobs.lua):
// a DUMP is one string to Lua, where HGETALL makes a Lua string of every field and
// value and cost the script ~5 times as much (~110k instructions a job against ~25k;
// docs/benchmarks.md). HashFromDump reads the two forms a hash takes in Redis 7: a
// listpack (small hashes) and a hash table. Anything else (another type, a later RDB
// format, a payload that does not add up) is an error, and the caller reads the job
// instead.

// RDB object types of a hash (Redis's rdb.h).
const (
	rdbTypeHash         = 4
	rdbTypeHashListpack = 16
)

// HashFromDump reads a hash's DUMP payload into its fields and values, as HGETALL gives
// them (field/value items; a listpack's integers in decimal, as Redis gives them).
func HashFromDump(dump string) ([]string, error) {
	// the object, then its RDB version (2 bytes) and a CRC64 (8 bytes)
	if len(dump) < 1+10 {
		return nil, errors.New("hash dump: too short")
	}
	r := rdbReader{s: dump[1 : len(dump)-10]}
	var out []string
	var err error
	switch dump[0] {
	case rdbTypeHashListpack:
		var lp string
		if lp, err = r.str(); err == nil {
			out, err = listpackItems(lp)
		}
	case rdbTypeHash:
		out, err = r.hashTable()
	default:
		return nil, fmt.Errorf("hash dump: object type %d is not a hash this reader knows", dump[0])
	}
	if err == nil && r.s != "" {
		err = fmt.Errorf("%d bytes left after the hash", len(r.s))
	}
	if err == nil && len(out)%2 != 0 {
		err = fmt.Errorf("%d items: not fields and values", len(out))
	}
	if err != nil {
		return nil, fmt.Errorf("hash dump: %w", err)
	}
	return out, nil
}

// rdbReader reads RDB's lengths and strings from the head of s.
type rdbReader struct{ s string }

var errShort = errors.New("cut short")

func (r *rdbReader) take(n int) (string, error) {
	if n < 0 || n > len(r.s) {
		return "", errShort
	}
	v := r.s[:n]
	r.s = r.s[n:]
	return v, nil
}

// length reads an RDB length; special is true when it is instead the kind of a
// string's special encoding (0-2: an integer of 1, 2 or 4 bytes; 3: LZF).
func (r *rdbReader) length() (n int, special bool, err error) {
	b, err := r.take(1)
	if err != nil {
		return 0, false, err
	}
	c := b[0]
	switch c >> 6 {
	case 0:
		return int(c & 0x3f), false, nil
	case 1:
		next, err := r.take(1)
		if err != nil {
			return 0, false, err
		}
		return int(c&0x3f)<<8 | int(next[0]), false, nil
	case 3:
		return int(c & 0x3f), true, nil
	}
	switch c {
	case 0x80:
		v, err := r.take(4)
		if err != nil {
			return 0, false, err
		}
		return int(binary.BigEndian.Uint32([]byte(v))), false, nil
	case 0x81:
		v, err := r.take(8)
		if err != nil {
			return 0, false, err
		}
		u := binary.BigEndian.Uint64([]byte(v))
		if u > 1<<40 {
			return 0, false, fmt.Errorf("a length of %d", u)
		}
		return int(u), false, nil
	}
	return 0, false, fmt.Errorf("length encoding 0x%02x", c)
}

// str reads an RDB string: plain, an integer, or LZF-compressed.
func (r *rdbReader) str() (string, error) {
	n, special, err := r.length()
	if err != nil || !special {
		if err != nil {
			return "", err
		}
		return r.take(n)
	}
	switch n {
	case 0, 1, 2: // an integer of 1, 2 or 4 bytes, little-endian
		size := 1 << n
		v, err := r.take(size)
		if err != nil {
			return "", err
		}
		var i int64
		switch size {
		case 1:
			i = int64(int8(v[0]))
		case 2:
			i = int64(int16(binary.LittleEndian.Uint16([]byte(v))))
		case 4:
			i = int64(int32(binary.LittleEndian.Uint32([]byte(v))))
		}
		return strconv.FormatInt(i, 10), nil
	case 3:
		clen, sp1, err := r.length()
		if err != nil {
			return "", err
		}
		ulen, sp2, err := r.length()
		if err != nil {
			return "", err
		}
		if sp1 || sp2 {
			return "", errors.New("an LZF string's lengths are not lengths")
		}
		c, err := r.take(clen)
		if err != nil {
			return "", err
		}
		return lzfDecompress(c, ulen)
	}
	return "", fmt.Errorf("string encoding %d", n)
}

// hashTable reads a hash table's pairs: their count, then each field and value.
func (r *rdbReader) hashTable() ([]string, error) {
	n, special, err := r.length()
	if err != nil {
		return nil, err
	}
	if special || n > len(r.s)/2 { // each string takes a byte at least
		return nil, fmt.Errorf("%d pairs where %d bytes are left", n, len(r.s))
	}
	out := make([]string, 2*n)
	for i := range out {
		if out[i], err = r.str(); err != nil {
			return nil, fmt.Errorf("item %d: %w", i+1, err)
		}
	}
	return out, nil
}

// lzfDecompress is LZF's decompression (liblzf's lzf_d.c, which Redis uses) of c into
// exactly n bytes.
func lzfDecompress(c string, n int) (string, error) {
	out := make([]byte, 0, n)
	for i := 0; i < len(c); {
		ctrl := int(c[i])
		i++
		if ctrl < 1<<5 { // a literal run of ctrl+1 bytes
			l := ctrl + 1
			if i+l > len(c) || len(out)+l > n {
				return "", errors.New("LZF: a literal run past the end")
			}
			out = append(out, c[i:i+l]...)
			i += l
			continue
		}
		l := ctrl >> 5 // a back reference of l+2 bytes
		if l == 7 {
			if i >= len(c) {
				return "", errShort
			}
			l += int(c[i])
			i++
		}
		if i >= len(c) {
			return "", errShort
		}
		ref := len(out) - (ctrl&0x1f)<<8 - int(c[i]) - 1
		i++
		if ref < 0 || len(out)+l+2 > n {
			return "", errors.New("LZF: a back reference outside the output")
		}
		for k := 0; k < l+2; k++ { // may overlap what it appends
			out = append(out, out[ref+k])
		}
	}
	if len(out) != n {
		return "", fmt.Errorf("LZF: %d bytes where %d were announced", len(out), n)
	}
	return string(out), nil
}

// listpackItems reads a listpack's entries (Redis's listpack.c): a header (its total
// bytes, 4, and its count of entries, 2, little-endian), the entries, each followed by
// its length backwards (1 to 5 bytes), and 0xff.
func listpackItems(lp string) ([]string, error) {
	if len(lp) < 7 || int(binary.LittleEndian.Uint32([]byte(lp[:4]))) != len(lp) || lp[len(lp)-1] != 0xff {
		return nil, errors.New("listpack: its header or its end is not a listpack's")
	}
	count := int(binary.LittleEndian.Uint16([]byte(lp[4:6])))
	p, end := 6, len(lp)-1
	out := make([]string, 0, count)
	// The integers' decimal texts go into one buffer, made a string once at the end,
	// which each one's item is a part of: one allocation for them all, not one each
	// (a started job's hash has a handful: its times, ids, attempt).
	nums := make([]byte, 0, 160)
	at := make([]int, 0, 32) // per integer: its item's index, its text's end in nums
	integer := func(n int64) {
		nums = strconv.AppendInt(nums, n, 10)
		at = append(at, len(out), len(nums))
	}
	for p < end {
		b := lp[p]
		var v string
		var size int // the entry's encoding and data, without its backlen
		var err error
		need := func(n int) bool { return p+n <= end }
		switch {
		case b&0x80 == 0: // 7-bit unsigned integer
			integer(int64(b & 0x7f))
			size = 1
		case b&0xc0 == 0x80: // string of up to 63 bytes
			l := int(b & 0x3f)
			if !need(1 + l) {
				return nil, errShort
			}
			v, size = lp[p+1:p+1+l], 1+l
		case b&0xe0 == 0xc0: // 13-bit signed integer
			if !need(2) {
				return nil, errShort
			}
			i := int(b&0x1f)<<8 | int(lp[p+1])
			if i >= 1<<12 {
				i -= 1 << 13
			}
			integer(int64(i))
			size = 2
		case b&0xf0 == 0xe0: // string of up to 4095 bytes
			if !need(2) {
				return nil, errShort
			}
			l := int(b&0x0f)<<8 | int(lp[p+1])
			if !need(2 + l) {
				return nil, errShort
			}
			v, size = lp[p+2:p+2+l], 2+l
		case b == 0xf0: // string with a 32-bit length
			if !need(5) {
				return nil, errShort
			}
			l := int(binary.LittleEndian.Uint32([]byte(lp[p+1 : p+5])))
			if !need(5 + l) {
				return nil, errShort
			}
			v, size = lp[p+5:p+5+l], 5+l
		case b >= 0xf1 && b <= 0xf4: // integer of 2, 3, 4 or 8 bytes, little-endian
			n := [...]int{2, 3, 4, 8}[b-0xf1]
			if !need(1 + n) {
				return nil, errShort
			}
			var u uint64
			for k := n - 1; k >= 0; k-- {
				u = u<<8 | uint64(lp[p+1+k])
			}
			shift := 64 - 8*n // sign-extend
			integer(int64(u<<shift) >> shift)
			size = 1 + n
		default:
			err = fmt.Errorf("listpack: entry encoding 0x%02x", b)
		}
		if err != nil {
			return nil, err
		}
		p += size + backlenSize(size)
		if p > end {
			return nil, errShort
		}
		out = append(out, v)
	}
	if len(out) != count && count != 0xffff { // 0xffff: too many to count in the header
		return nil, fmt.Errorf("listpack: %d entries where its header counts %d", len(out), count)
	}
	placeIntegers(out, nums, at)
	return out, nil
}

// placeIntegers sets the items of a listpack's integers (at: each one's item index
// and its text's end in nums) to their texts, parts of one string.
func placeIntegers(out []string, nums []byte, at []int) {
	texts, from := string(nums), 0
	for k := 0; k+1 < len(at); k += 2 {
		out[at[k]] = texts[from:at[k+1]]
		from = at[k+1]
	}
}

// backlenSize is how many bytes a listpack entry's length backwards takes.
func backlenSize(l int) int {
	switch {
	case l <= 127:
		return 1
	case l < 16383:
		return 2
	case l < 2097151:
		return 3
	case l < 268435455:
		return 4
	}
	return 5
}
