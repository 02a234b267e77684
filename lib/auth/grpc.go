package auth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A gRPC call is signed over its request message exactly as sent. The client
// serializes the message once, signs those bytes, and sends the same bytes (the
// codec below passes them through); the server hashes the bytes it received before
// decoding them (DigestCodec).

// encoded is a request message already serialized by the signing interceptor.
type encoded struct{ b []byte }

// clientCodec is the proto codec that sends pre-serialized messages as they are.
type clientCodec struct{ proto encoding.CodecV2 }

func (c clientCodec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*encoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(e.b)}, nil
	}
	return c.proto.Marshal(v)
}

func (c clientCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }
func (c clientCodec) Name() string                                { return c.proto.Name() }

// DialOptions make every call of a client connection signed by s.
func DialOptions(s *Signer) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(clientCodec{proto: encoding.GetCodecV2("proto")})),
		grpc.WithChainUnaryInterceptor(s.unaryInterceptor),
		grpc.WithChainStreamInterceptor(s.streamInterceptor),
	}
}

// sign serializes msg and returns a context carrying its credentials, and the bytes.
func (s *Signer) sign(ctx context.Context, method string, msg any) (context.Context, *encoded, error) {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, nil, fmt.Errorf("sign %s: %T is not a protobuf message", method, msg)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, nil, fmt.Errorf("sign %s: %w", method, err)
	}
	c, err := s.Sign(method, Digest(b))
	if err != nil {
		return nil, nil, err
	}
	return metadata.AppendToOutgoingContext(ctx,
		MetadataActor, c.Actor, MetadataTimestamp, c.Timestamp, MetadataNonce, c.Nonce, MetadataSignature, c.Signature), &encoded{b}, nil
}

func (s *Signer) unaryInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx, enc, err := s.sign(ctx, method, req)
	if err != nil {
		return err
	}
	return invoker(ctx, method, enc, reply, cc, opts...)
}

// streamInterceptor opens the stream when its first message is sent: the credentials
// travel in the stream's headers and cover that opening message.
func (s *Signer) streamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return &lazyStream{ctx: ctx, open: func(msg any) (grpc.ClientStream, any, error) {
		sctx, enc, err := s.sign(ctx, method, msg)
		if err != nil {
			return nil, nil, err
		}
		cs, err := streamer(sctx, desc, cc, method, opts...)
		return cs, enc, err
	}}, nil
}

// lazyStream is a client stream whose real stream opens at the first SendMsg.
type lazyStream struct {
	ctx  context.Context
	open func(msg any) (grpc.ClientStream, any, error)
	cs   grpc.ClientStream
}

func (l *lazyStream) SendMsg(m any) error {
	if l.cs != nil {
		return l.cs.SendMsg(m)
	}
	cs, enc, err := l.open(m)
	if err != nil {
		return err
	}
	l.cs = cs
	return cs.SendMsg(enc)
}

func (l *lazyStream) RecvMsg(m any) error {
	if l.cs == nil {
		return fmt.Errorf("signed stream: receive before the opening message was sent")
	}
	return l.cs.RecvMsg(m)
}

func (l *lazyStream) Header() (metadata.MD, error) {
	if l.cs == nil {
		return nil, nil
	}
	return l.cs.Header()
}

func (l *lazyStream) Trailer() metadata.MD {
	if l.cs == nil {
		return nil
	}
	return l.cs.Trailer()
}

func (l *lazyStream) CloseSend() error {
	if l.cs == nil {
		return io.EOF
	}
	return l.cs.CloseSend()
}

func (l *lazyStream) Context() context.Context {
	if l.cs == nil {
		return l.ctx
	}
	return l.cs.Context()
}

// DigestCodec is the server's proto codec: it decodes as the proto codec does and
// remembers the SHA-256 of each received message of the packages it is told to
// watch, for the authentication interceptor to take (TakeDigest).
type DigestCodec struct {
	proto    encoding.CodecV2
	packages []protoreflect.FullName
	digests  sync.Map // message pointer → [32]byte
}

// NewDigestCodec returns a codec that records the digests of messages of the given
// proto packages ("hero.v1").
func NewDigestCodec(packages ...string) *DigestCodec {
	c := &DigestCodec{proto: encoding.GetCodecV2("proto")}
	for _, p := range packages {
		c.packages = append(c.packages, protoreflect.FullName(p))
	}
	return c
}

// Encoded is a message already in its wire encoding, which DigestCodec sends as it
// is (a server's answers written without their message in between: a submission
// stream's). B is the codec's once sent: it is not to be changed.
type Encoded struct{ B []byte }

func (c *DigestCodec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*Encoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(e.B)}, nil
	}
	return c.proto.Marshal(v)
}
func (c *DigestCodec) Name() string { return c.proto.Name() }

// WireMessage is a request message its server decodes itself from the bytes as
// received (a submission stream's, field by field), which DigestCodec hands it. Its
// digest is recorded over those same bytes when it asks for it (Digested: a stream's
// opening message, which the authentication interceptor checks); a message that does
// not ask has none, and an interceptor that looks for it refuses the call.
type WireMessage interface {
	// DecodeWire decodes the message's bytes (s: a copy of its own, which the
	// decoded strings may keep).
	DecodeWire(s string) error
	// Digested: record the message's digest for TakeDigest.
	Digested() bool
}

func (c *DigestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if w, ok := v.(WireMessage); ok {
		return c.unmarshalWire(data, w)
	}
	if err := c.proto.Unmarshal(data, v); err != nil {
		return err
	}
	if m, ok := v.(proto.Message); ok && c.watched(m) {
		c.digests.Store(v, digestOf(data))
	}
	return nil
}

// unmarshalWire decodes a WireMessage from data, and records the digest of the same
// bytes when it asks for it.
func (c *DigestCodec) unmarshalWire(data mem.BufferSlice, w WireMessage) error {
	var s string
	if len(data) == 1 {
		s = string(data[0].ReadOnlyData()) // the one copy
	} else {
		s = string(data.Materialize())
	}
	if err := w.DecodeWire(s); err != nil {
		return err
	}
	if w.Digested() {
		c.digests.Store(w, Digest([]byte(s)))
	}
	return nil
}

// digestOf is the SHA-256 of a message's bytes.
func digestOf(data mem.BufferSlice) [32]byte {
	h := sha256.New()
	for _, b := range data {
		_, _ = h.Write(b.ReadOnlyData())
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

func (c *DigestCodec) watched(m proto.Message) bool {
	pkg := m.ProtoReflect().Descriptor().ParentFile().Package()
	for _, p := range c.packages {
		if pkg == p {
			return true
		}
	}
	return false
}

// TakeDigest returns (and forgets) the digest of a message this codec decoded.
func (c *DigestCodec) TakeDigest(msg any) ([32]byte, bool) {
	d, ok := c.digests.LoadAndDelete(msg)
	if !ok {
		return [32]byte{}, false
	}
	return d.([32]byte), true
}

// Forget drops a recorded digest (a decoded message whose call never reached the
// interceptor that takes it).
func (c *DigestCodec) Forget(msg any) { c.digests.Delete(msg) }
