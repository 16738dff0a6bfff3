package server

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	protobuf "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// rlsCodec is gRPC's proto codec, except that a request whose strings are
// not valid UTF-8 is decoded anyway, its strings holding the bytes sent,
// and a response that can't be encoded is encoded with its strings made
// valid. grpc-go's codec answers both with an error (Internal), and Envoy
// fails open on errors: one header byte of 0x80-0xff, which Envoy copies
// into a descriptor value, would skip every limit of the request. The
// service refuses such a value (a denial with its reason, validate.go).
type rlsCodec struct{ encoding.CodecV2 }

func newRLSCodec() rlsCodec { return rlsCodec{encoding.GetCodecV2(proto.Name)} }

func (c rlsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil || !isUTF8Error(err) {
		return err
	}
	m, ok := v.(protobuf.Message)
	if !ok {
		return err
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	msg := m.ProtoReflect()
	protobuf.Reset(m)
	if lerr := unmarshalLenient(buf.ReadOnlyData(), msg, maxLenientDepth); lerr != nil {
		return fmt.Errorf("%w (decoding it with its strings as bytes: %v)", err, lerr)
	}
	return nil
}

func (c rlsCodec) Marshal(v any) (mem.BufferSlice, error) {
	out, err := c.CodecV2.Marshal(v)
	if err == nil || !isUTF8Error(err) {
		return out, err
	}
	m, ok := v.(protobuf.Message)
	if !ok {
		return out, err
	}
	validStrings(m.ProtoReflect(), maxLenientDepth)
	return c.CodecV2.Marshal(v)
}

// isUTF8Error reports whether err is protobuf's error for a string field
// that is not valid UTF-8.
func isUTF8Error(err error) bool {
	return err != nil && strings.Contains(err.Error(), "invalid UTF-8")
}

// maxLenientDepth bounds the nesting unmarshalLenient and validStrings
// follow (an RLS request nests three deep); deeper is an error.
const maxLenientDepth = 16

var errTooDeep = errors.New("messages nested too deep")

// unmarshalLenient decodes b into m as proto.Unmarshal does, except that
// string fields keep their bytes whether or not they are valid UTF-8. A
// string field, or one of a nested message, is decoded here; the rest of
// each message's fields go through proto.Unmarshal (merged), so their
// meaning is protobuf's own.
func unmarshalLenient(b []byte, m protoreflect.Message, depth int) error {
	if depth == 0 {
		return errTooDeep
	}
	fields := m.Descriptor().Fields()
	var rest []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		vn := protowire.ConsumeFieldValue(num, typ, b[n:])
		if vn < 0 {
			return protowire.ParseError(vn)
		}
		field, value := b[:n+vn], b[n:n+vn]
		b = b[n+vn:]
		fd := fields.ByNumber(num)
		if fd == nil || typ != protowire.BytesType || fd.IsMap() ||
			(fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.MessageKind) {
			rest = append(rest, field...)
			continue
		}
		raw, _ := protowire.ConsumeBytes(value)
		if err := setLenient(m, fd, raw, depth); err != nil {
			return err
		}
	}
	if len(rest) == 0 {
		return nil
	}
	return protobuf.UnmarshalOptions{Merge: true}.Unmarshal(rest, m.Interface())
}

// setLenient sets (or appends to) field fd of m from raw, a string's bytes
// or a message's encoding.
func setLenient(m protoreflect.Message, fd protoreflect.FieldDescriptor, raw []byte, depth int) error {
	if fd.Kind() == protoreflect.StringKind {
		v := protoreflect.ValueOfString(string(raw))
		if fd.IsList() {
			m.Mutable(fd).List().Append(v)
		} else {
			m.Set(fd, v)
		}
		return nil
	}
	if fd.IsList() {
		list := m.Mutable(fd).List()
		elem := list.NewElement()
		if err := unmarshalLenient(raw, elem.Message(), depth-1); err != nil {
			return err
		}
		list.Append(elem)
		return nil
	}
	// A message field seen again merges into what is there.
	return unmarshalLenient(raw, m.Mutable(fd).Message(), depth-1)
}

// validStrings replaces each invalid byte sequence of m's strings, and of
// its nested messages', with U+FFFD.
func validStrings(m protoreflect.Message, depth int) {
	if depth == 0 {
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					validStrings(mv.Message(), depth-1)
				}
				return true
			})
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				switch fd.Kind() {
				case protoreflect.StringKind:
					l.Set(i, protoreflect.ValueOfString(strings.ToValidUTF8(l.Get(i).String(), "\uFFFD")))
				case protoreflect.MessageKind:
					validStrings(l.Get(i).Message(), depth-1)
				}
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(strings.ToValidUTF8(v.String(), "\uFFFD")))
		case fd.Kind() == protoreflect.MessageKind:
			validStrings(v.Message(), depth-1)
		}
		return true
	})
}
