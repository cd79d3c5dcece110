// Package unstructuredjson encodes unstructured content (the trees of maps, lists and scalars
// that k8s.io/apimachinery's unstructured objects hold) into exactly the bytes encoding/json
// writes for them, a few times faster: a type switch, where encoding/json goes through
// reflection and sorts each map's keys through reflected values. The operator encodes every
// rendering at least twice (its spec hash and the apply's body), so this is on its hottest path.
package unstructuredjson

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Marshal returns the JSON encoding of v, byte for byte what json.Marshal returns, in a slice
// of its own length (callers keep some in caches).
func Marshal(v any) ([]byte, error) {
	buf := buffers.Get().(*[]byte)
	b, err := appendValue((*buf)[:0], v)
	var out []byte
	if err == nil {
		out = bytes.Clone(b)
	}
	if cap(b) <= maxPooledBuffer {
		*buf = b
		buffers.Put(buf)
	}
	return out, err
}

// maxPooledBuffer is the largest buffer kept for the next Marshal: an object of megabytes is
// rare, and its buffer is not kept.
const maxPooledBuffer = 1 << 20

// buffers are the buffers Marshal encodes into.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// appendValue appends the JSON encoding of v to b. Values other than unstructured content's (nil,
// string, bool, int64, int32, int, float64, map[string]any, []any) are encoded by encoding/json.
func appendValue(b []byte, v any) ([]byte, error) {
	switch w := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendString(b, w), nil
	case bool:
		return strconv.AppendBool(b, w), nil
	case int64:
		return strconv.AppendInt(b, w, 10), nil
	case int32:
		return strconv.AppendInt(b, int64(w), 10), nil
	case int:
		return strconv.AppendInt(b, int64(w), 10), nil
	case float64:
		return appendFloat(b, w)
	case map[string]any:
		return appendObject(b, w)
	case []any:
		return appendArray(b, w)
	}
	raw, err := json.Marshal(v)
	return append(b, raw...), err
}

// appendObject appends m with its keys in order, as encoding/json does.
func appendObject(b []byte, m map[string]any) ([]byte, error) {
	if m == nil {
		return append(b, "null"...), nil
	}
	// Objects rarely have more than 16 fields: their keys are sorted on the stack.
	var room [16]string
	keys := room[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	var err error
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		if b, err = appendValue(b, m[k]); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

// appendArray appends l.
func appendArray(b []byte, l []any) ([]byte, error) {
	if l == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	var err error
	for i, el := range l {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendValue(b, el); err != nil {
			return b, err
		}
	}
	return append(b, ']'), nil
}

// appendFloat appends f as encoding/json does: the shortest representation that reads back the
// same, in exponent form below 1e-6 and from 1e21 (with "e-07" written "e-7"). NaN and the
// infinities are encoding/json's error.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		_, err := json.Marshal(f)
		return b, err
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1]
		b = b[:n-1]
	}
	return b, nil
}

const hexDigits = "0123456789abcdef"

// appendString appends s quoted as encoding/json does by default: '"' and '\\' escaped, the
// control characters as \b, \f, \n, \r, \t or \u00XX, '<', '>' and '&' as \u00XX (HTML-safe),
// invalid UTF-8 as \ufffd, and U+2028 and U+2029 as \u2028 and \u2029.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Number returns v as a float64 when it is a JSON number (int64 or float64 in unstructured
// content).
func Number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}
