package protoconv

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// The wire's pieces, read from a string (a message copied once: the strings cut
// from it are its decoded fields'), for the hand-written decoders of the submission
// stream (the Go client's answers, the server's requests). Each returns what it took
// of s, or -1 when s does not hold what proto would decode there (the decoders then
// leave the message to proto.Unmarshal, whose error is the one returned).

// ConsumeTag reads a field's tag.
func ConsumeTag(s string) (protowire.Number, protowire.Type, int) {
	v, n := Varint(s)
	if n < 0 {
		return 0, 0, -1
	}
	num, typ := protowire.DecodeTag(v)
	if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
		return 0, 0, -1 // proto refuses a field number out of range
	}
	return num, typ, n
}

// ConsumeVarint reads a varint field's value (typ: its tag's).
func ConsumeVarint(s string, typ protowire.Type) (uint64, int) {
	if typ != protowire.VarintType {
		return 0, -1
	}
	return Varint(s)
}

// ConsumeBytes reads a length-delimited field's value.
func ConsumeBytes(s string, typ protowire.Type) (string, int) {
	if typ != protowire.BytesType {
		return "", -1
	}
	l, n := Varint(s)
	if n < 0 || l > uint64(len(s)-n) {
		return "", -1
	}
	return s[n : n+int(l)], n + int(l)
}

// ConsumeString is ConsumeBytes of a proto3 string, which proto refuses when it is
// not UTF-8.
func ConsumeString(s string, typ protowire.Type) (string, int) {
	v, n := ConsumeBytes(s, typ)
	if n < 0 || !utf8.ValidString(v) {
		return "", -1
	}
	return v, n
}

// AppendUint32s reads a repeated uint32's element (varint) or packed elements into
// dst (each the value's low 32 bits, as proto takes them).
func AppendUint32s(dst *[]uint32, s string, typ protowire.Type) int {
	if typ == protowire.VarintType {
		v, n := Varint(s)
		if n >= 0 {
			*dst = append(*dst, uint32(v))
		}
		return n
	}
	p, n := ConsumeBytes(s, typ)
	if n < 0 {
		return -1
	}
	for len(p) > 0 {
		v, k := Varint(p)
		if k < 0 {
			return -1
		}
		*dst = append(*dst, uint32(v))
		p = p[k:]
	}
	return n
}

// SkipField takes a field the decoder does not read (-1: a group, or short).
func SkipField(s string, typ protowire.Type) int {
	switch typ {
	case protowire.VarintType:
		_, n := Varint(s)
		return n
	case protowire.Fixed32Type:
		return fixed(s, 4)
	case protowire.Fixed64Type:
		return fixed(s, 8)
	case protowire.BytesType:
		_, n := ConsumeBytes(s, typ)
		return n
	}
	return -1 // groups: proto's way
}

func fixed(s string, n int) int {
	if len(s) < n {
		return -1
	}
	return n
}

// Varint reads a varint at the start of s (-1: none).
func Varint(s string) (uint64, int) {
	var v uint64
	for i := 0; i < len(s) && i < maxVarintLen; i++ {
		c := s[i]
		if i == maxVarintLen-1 && c > 1 {
			return 0, -1 // overflow
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, -1
}

// maxVarintLen is the longest varint (a uint64's).
const maxVarintLen = 10

// EachField reads a message's fields in order: each tag, then field with what follows
// it (s), which returns what it took of s, or -1 when the field is not for the
// hand-written decoder. false: a tag could not be read, or field returned -1.
func EachField(s string, field func(s string, num protowire.Number, typ protowire.Type) int) bool {
	for len(s) > 0 {
		num, typ, n := ConsumeTag(s)
		if n < 0 {
			return false
		}
		s = s[n:]
		if n = field(s, num, typ); n < 0 {
			return false
		}
		s = s[n:]
	}
	return true
}
