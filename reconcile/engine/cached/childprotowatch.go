package cached

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// maxWatchFrame bounds a protobuf watch event's length: an object is at most a few MiB (etcd's
// request limit), so a larger frame is a broken stream, not an allocation to make.
const maxWatchFrame = 64 << 20

// childEventReader returns the reader of a child watch's events from body: protobuf frames when
// the API server chose protobuf (a frame starts with its 4-byte length, a zero byte for any
// frame under 16 MiB), else a JSON stream (which starts with "{").
func childEventReader(body io.Reader) eventReader {
	r := bufio.NewReader(body)
	first, err := r.Peek(1)
	if err != nil {
		return func() (watch.Event, error) { return watch.Event{}, err }
	}
	if first[0] != 0 {
		dec := json.NewDecoder(r)
		return func() (watch.Event, error) { return decodeChildEvent(dec) }
	}
	frames := &protobufFrames{r: r}
	return frames.next
}

// protobufFrames reads a protobuf watch stream: each event a 4-byte big-endian length and a
// metav1.WatchEvent (type 1, object 2) whose object is an encoded child (or a Status).
type protobufFrames struct {
	r     *bufio.Reader
	frame bytes.Buffer // reused: a decoded Child copies what it keeps
}

// next decodes the stream's next event.
func (p *protobufFrames) next() (watch.Event, error) {
	var size [4]byte
	if _, err := io.ReadFull(p.r, size[:]); err != nil {
		return watch.Event{}, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > maxWatchFrame {
		return watch.Event{}, fmt.Errorf("a watch event of %d bytes", n)
	}
	// The buffer grows with what arrives, not to what the length claims.
	p.frame.Reset()
	if read, err := p.frame.ReadFrom(io.LimitReader(p.r, int64(n))); err != nil || read != int64(n) {
		return watch.Event{}, io.ErrUnexpectedEOF
	}
	frame := p.frame.Bytes()
	var typ watch.EventType
	var object []byte
	err := eachField(frame, func(num protowire.Number, _ uint64, b []byte) error {
		switch num {
		case 1:
			typ = watch.EventType(b)
		case 2:
			return eachField(b, func(num protowire.Number, _ uint64, raw []byte) error {
				if num == 1 {
					object = raw
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return undecodable(fmt.Errorf("decoding a watch event: %w", err)), nil
	}
	switch typ {
	case watch.Error:
		return watch.Event{Type: watch.Error, Object: decodeStatusProto(object)}, nil
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		c, err := DecodeServedChild(object)
		if err != nil {
			return undecodable(err), nil
		}
		return watch.Event{Type: typ, Object: c}, nil
	}
	return watch.Event{Type: typ}, nil
}

// decodeStatusProto decodes the Status of a watch's ERROR event (its code, reason and message);
// one that does not decode is a failure carrying why.
func decodeStatusProto(raw []byte) *metav1.Status {
	s := &metav1.Status{Status: metav1.StatusFailure}
	_, _, msg, err := unwrapProtobuf(raw)
	if err == nil {
		err = eachField(msg, func(num protowire.Number, v uint64, b []byte) error {
			switch num {
			case 3:
				s.Message = string(b)
			case 4:
				s.Reason = metav1.StatusReason(b)
			case 6:
				s.Code = int32(v)
			}
			return nil
		})
	}
	if err != nil {
		s.Message = "decoding an error event: " + err.Error()
	}
	return s
}
