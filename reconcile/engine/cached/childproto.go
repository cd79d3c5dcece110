package cached

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"evals.si/operator/evalsi"
)

// Built-in children (Deployments, Services, ServiceAccounts, NetworkPolicies) are read as
// protobuf, which the API server serves for every built-in kind: a reader of the few fields a
// Child keeps steps over the rest by their lengths, where JSON must be scanned to its end
// (BenchmarkDecodeDeployment). Custom resources (a KEDA ScaledObject) are served as JSON
// whatever is asked first, and decoded as before. The field numbers are those of the API's
// generated.proto files, which Kubernetes never renumbers.

// AcceptChild is the Accept header of requests for children: protobuf where the resource serves
// it, else JSON.
const AcceptChild = "application/vnd.kubernetes.protobuf, application/json"

// protobufMagic starts every object the API server encodes as protobuf, before its
// runtime.Unknown envelope.
var protobufMagic = []byte("k8s\x00")

// DecodeServedChild decodes a child as the API server served it, protobuf or JSON.
func DecodeServedChild(raw []byte) (*Child, error) {
	if !bytes.HasPrefix(raw, protobufMagic) {
		return DecodeChild(raw)
	}
	apiVersion, kind, msg, err := unwrapProtobuf(raw)
	if err != nil {
		return nil, err
	}
	return decodeChildMessage(apiVersion, kind, msg)
}

// decodeServedChildList decodes a list of children as the API server served it, protobuf or
// JSON. A protobuf list's items carry no type: each is its list's kind without "List".
func decodeServedChildList(raw []byte) (*cachedList[*Child], error) {
	if !bytes.HasPrefix(raw, protobufMagic) {
		return decodeChildList(raw)
	}
	apiVersion, kind, msg, err := unwrapProtobuf(raw)
	if err != nil {
		return nil, err
	}
	itemKind := strings.TrimSuffix(kind, "List")
	l := &cachedList[*Child]{}
	err = eachField(msg, func(num protowire.Number, _ uint64, b []byte) error {
		switch num {
		case 1:
			return decodeListMeta(b, &l.ListMeta)
		case 2:
			c, err := decodeChildMessage(apiVersion, itemKind, b)
			if err != nil {
				return err
			}
			l.Items = append(l.Items, c)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decoding a %s: %w", kind, err)
	}
	return l, nil
}

// unwrapProtobuf splits an object encoded as protobuf into its type and its message: after the
// magic, a runtime.Unknown of typeMeta (1: apiVersion 1, kind 2) and raw (2).
func unwrapProtobuf(raw []byte) (apiVersion, kind string, msg []byte, err error) {
	if !bytes.HasPrefix(raw, protobufMagic) {
		return "", "", nil, errors.New("not a protobuf object")
	}
	err = eachField(raw[len(protobufMagic):], func(num protowire.Number, _ uint64, b []byte) error {
		switch num {
		case 1:
			return eachField(b, func(num protowire.Number, _ uint64, b []byte) error {
				switch num {
				case 1:
					apiVersion = string(b)
				case 2:
					kind = string(b)
				}
				return nil
			})
		case 2:
			msg = b
		}
		return nil
	})
	if err != nil {
		return "", "", nil, fmt.Errorf("decoding a protobuf object: %w", err)
	}
	return apiVersion, kind, msg, nil
}

// decodeChildMessage decodes a child's protobuf message (metadata 1; of a Deployment also spec 2
// and status 3) into what the engine keeps of it.
func decodeChildMessage(apiVersion, kind string, msg []byte) (*Child, error) {
	j := childJSON{APIVersion: apiVersion, Kind: kind}
	deployment := kind == "Deployment"
	err := eachField(msg, func(num protowire.Number, _ uint64, b []byte) error {
		switch {
		case num == 1:
			return decodeObjectMeta(b, &j)
		case num == 2 && deployment:
			return eachField(b, func(num protowire.Number, v uint64, _ []byte) error {
				if num == 1 {
					replicas := int64(int32(v))
					j.Spec.Replicas = &replicas
				}
				return nil
			})
		case num == 3 && deployment:
			j.rollout = &rolloutCounts{}
			return decodeRolloutCounts(b, j.rollout)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decoding a %s: %w", kind, err)
	}
	return j.cached()
}

// decodeRolloutCounts decodes the counts of a DeploymentStatus, and its ReplicaFailure.
func decodeRolloutCounts(msg []byte, out *rolloutCounts) error {
	return eachField(msg, func(num protowire.Number, v uint64, b []byte) error {
		switch num {
		case 1:
			out.ObservedGeneration = int64(v)
		case 2:
			out.Replicas = int64(int32(v))
		case 3:
			out.UpdatedReplicas = int64(int32(v))
		case 4:
			out.AvailableReplicas = int64(int32(v))
		case 6:
			return decodeReplicaFailure(b, out)
		case 7:
			out.ReadyReplicas = int64(int32(v))
		}
		return nil
	})
}

// decodeReplicaFailure decodes a DeploymentCondition (type 1, status 2, message 5) into
// out.PodsRefused when it is a True ReplicaFailure; the others (every Deployment has some) cost
// no allocation.
func decodeReplicaFailure(msg []byte, out *rolloutCounts) error {
	var typ, status, message []byte
	err := eachField(msg, func(num protowire.Number, _ uint64, b []byte) error {
		switch num {
		case 1:
			typ = b
		case 2:
			status = b
		case 5:
			message = b
		}
		return nil
	})
	if err == nil && string(typ) == replicaFailure && string(status) == "True" {
		out.PodsRefused = string(message)
	}
	return err
}

// decodeObjectMeta decodes the fields of an ObjectMeta a Child keeps into j.Metadata. Of the
// annotations only those a Child reads are kept.
func decodeObjectMeta(msg []byte, j *childJSON) error {
	m := &j.Metadata
	return eachField(msg, func(num protowire.Number, v uint64, b []byte) error {
		switch num {
		case 1:
			m.Name = string(b)
		case 3:
			m.Namespace = string(b)
		case 5:
			m.UID = types.UID(b)
		case 6:
			m.ResourceVersion = string(b)
		case 7:
			m.Generation = int64(v)
		case 9:
			t, err := decodeTime(b)
			m.DeletionTimestamp = &t
			return err
		case 12:
			return decodeAnnotation(b, m)
		case 13:
			var r metav1.OwnerReference
			if err := decodeOwnerReference(b, &r); err != nil {
				return err
			}
			m.OwnerReferences = append(m.OwnerReferences, r)
		case 17:
			return decodeManagedFields(b, m)
		}
		return nil
	})
}

// decodeAnnotation decodes one entry of an annotations map (key 1, value 2), kept when a Child
// reads it.
func decodeAnnotation(entry []byte, m *childMetadata) error {
	var key, value []byte
	err := eachField(entry, func(num protowire.Number, _ uint64, b []byte) error {
		switch num {
		case 1:
			key = b
		case 2:
			value = b
		}
		return nil
	})
	if err != nil {
		return err
	}
	switch k := string(key); k {
	case evalsi.AnnotationSpecHash, metav1.InitialEventsAnnotationKey:
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[k] = string(value)
	}
	return nil
}

// decodeOwnerReference decodes an OwnerReference.
func decodeOwnerReference(msg []byte, r *metav1.OwnerReference) error {
	return eachField(msg, func(num protowire.Number, v uint64, b []byte) error {
		switch num {
		case 1:
			r.Kind = string(b)
		case 3:
			r.Name = string(b)
		case 4:
			r.UID = types.UID(b)
		case 5:
			r.APIVersion = string(b)
		case 6:
			r.Controller = new(v != 0)
		}
		return nil
	})
}

// decodeManagedFields decodes a ManagedFieldsEntry (manager 1, operation 2, fieldsV1 7 whose raw
// 1 is the field set's JSON, subresource 8); only the operator's applies are kept.
func decodeManagedFields(msg []byte, m *childMetadata) error {
	var e managedFieldsJSON
	err := eachField(msg, func(num protowire.Number, _ uint64, b []byte) error {
		switch num {
		case 1:
			e.Manager = string(b)
		case 2:
			e.Operation = string(b)
		case 7:
			return eachField(b, func(num protowire.Number, _ uint64, raw []byte) error {
				if num == 1 {
					e.FieldsV1 = raw
				}
				return nil
			})
		case 8:
			e.Subresource = string(b)
		}
		return nil
	})
	if err != nil || e.Manager != evalsi.FieldManager {
		return err
	}
	m.ManagedFields = append(m.ManagedFields, e)
	return nil
}

// decodeTime decodes a metav1.Time (seconds 1, nanos 2).
func decodeTime(msg []byte) (metav1.Time, error) {
	var seconds, nanos int64
	err := eachField(msg, func(num protowire.Number, v uint64, _ []byte) error {
		switch num {
		case 1:
			seconds = int64(v)
		case 2:
			nanos = int64(int32(v))
		}
		return nil
	})
	return metav1.NewTime(time.Unix(seconds, nanos).Local()), err
}

// decodeListMeta decodes a ListMeta's resourceVersion (2) and continue (3).
func decodeListMeta(msg []byte, out *metav1.ListMeta) error {
	return eachField(msg, func(num protowire.Number, _ uint64, b []byte) error {
		switch num {
		case 2:
			out.ResourceVersion = string(b)
		case 3:
			out.Continue = string(b)
		}
		return nil
	})
}

// eachField calls field for each field of the protobuf message msg, in order, with its number and
// its value: v for a varint, b for a length-delimited field (a string, bytes or a message).
// Fixed-width fields are stepped over; a field that does not parse ends the message with an
// error.
func eachField(msg []byte, field func(num protowire.Number, v uint64, b []byte) error) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return protowire.ParseError(n)
		}
		msg = msg[n:]
		var v uint64
		var b []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(msg)
		case protowire.BytesType:
			b, n = protowire.ConsumeBytes(msg)
		default:
			n = protowire.ConsumeFieldValue(num, typ, msg)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		msg = msg[n:]
		if typ != protowire.VarintType && typ != protowire.BytesType {
			continue
		}
		if err := field(num, v, b); err != nil {
			return err
		}
	}
	return nil
}
