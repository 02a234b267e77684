// Package protorand fills protobuf messages with random values, and writes encodings
// proto accepts but does not write itself, for tests that hold a hand-written encoder
// or decoder to what proto makes of the same message.
package protorand

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Fill sets every field of m (and of its messages, maps and lists) to a random value
// that is not its zero, but those named in skip (of m itself).
func Fill(t testing.TB, r *rand.Rand, m protoreflect.Message, skip map[protoreflect.FieldNumber]bool) {
	t.Helper()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if skip[f.Number()] {
			continue
		}
		switch {
		case f.IsMap():
			mp := m.Mutable(f).Map()
			for k := range 1 + r.IntN(3) {
				mp.Set(protoreflect.ValueOfString(String(r)+string(rune('a'+k))).MapKey(), protoreflect.ValueOfString(String(r)))
			}
		case f.IsList():
			l := m.Mutable(f).List()
			for range 1 + r.IntN(3) {
				l.Append(Scalar(t, r, f))
			}
		case f.Kind() == protoreflect.MessageKind:
			Fill(t, r, m.Mutable(f).Message(), nil)
		default:
			m.Set(f, Scalar(t, r, f))
		}
	}
}

// Scalar is a random value of f's kind that is not its zero. A kind it does not know
// fails the test, naming it (a field of a new kind added to a message: teach it here).
func Scalar(t testing.TB, r *rand.Rand, f protoreflect.FieldDescriptor) protoreflect.Value {
	t.Helper()
	switch f.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(String(r))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(1 + r.Uint32()>>uint(r.IntN(32)))
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32(int32(r.Uint32()>>uint(r.IntN(32))) | 1)
	case protoreflect.Uint64Kind:
		return protoreflect.ValueOfUint64(1 + r.Uint64()>>uint(r.IntN(64)))
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(int64(r.Uint64()>>uint(r.IntN(64))) | 1)
	}
	t.Fatalf("protorand: a field of kind %s: teach Scalar it", f.Kind())
	return protoreflect.Value{}
}

// String is one of a few strings: plain, multi-byte UTF-8, and JSON texts.
func String(r *rand.Rand) string {
	return []string{"x", "sh", "go#noop", "dispatched", "héro ☃", `{"a":1}`, "[1,2]"}[r.IntN(7)]
}

// UnusualJob is the wire encoding of a hero.v1.Job, id 7, in the forms a hand-written
// decoder must read as proto does: its dependends unpacked (one above 32 bits, whose
// low bits proto keeps), and fields this version does not know, of each wire type.
func UnusualJob() []byte {
	job := protowire.AppendTag(nil, 1, protowire.VarintType)
	job = protowire.AppendVarint(job, 7)
	for _, d := range []uint64{3, 1 << 33, 5} {
		job = protowire.AppendTag(job, 11, protowire.VarintType)
		job = protowire.AppendVarint(job, d)
	}
	job = protowire.AppendTag(job, 99, protowire.BytesType)
	job = protowire.AppendString(job, "later")
	job = protowire.AppendTag(job, 98, protowire.Fixed64Type)
	job = protowire.AppendFixed64(job, 1)
	job = protowire.AppendTag(job, 97, protowire.Fixed32Type)
	return protowire.AppendFixed32(job, 1)
}
