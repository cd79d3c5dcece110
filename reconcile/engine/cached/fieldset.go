package cached

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unique"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/unstructuredjson"
)

// fieldSet is a FieldsV1 field set (the fields one manager owns) parsed for the drift check:
// each entry by its kind of key, and each list element's key fields decoded once.
type fieldSet struct {
	// whole is set when nothing is under the entry, or only ".": it holds the whole value (an
	// atomic list or map, or a scalar).
	whole   bool
	fields  map[string]*fieldSet // "f:name", by name
	byIndex map[int]*fieldSet    // "i:N", a list element by its index
	byValue map[string]*fieldSet // "v:JSON", a set element by its JSON
	byKey   []keyedFields        // "k:{...}", a list element by its key fields, in the order of their JSON
}

// keyedFields is a list element's entry in a field set: its key fields and what it owns.
type keyedFields struct {
	key map[string]any
	sub *fieldSet
}

// parseFieldSet parses a FieldsV1 JSON object.
func parseFieldSet(raw string) (*fieldSet, error) {
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil, fmt.Errorf("decoding a field set: %w", err)
	}
	return fieldSetOf(m)
}

// fieldSetOf parses a decoded FieldsV1 object.
func fieldSetOf(m map[string]any) (*fieldSet, error) {
	fs := &fieldSet{whole: len(m) == 0 || len(m) == 1 && m["."] != nil}
	if fs.whole {
		return fs, nil
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		subMap, _ := m[k].(map[string]any)
		sub, err := fieldSetOf(subMap)
		if err != nil {
			return nil, err
		}
		kind, rest, _ := strings.Cut(k, ":")
		switch kind {
		case "f":
			if fs.fields == nil {
				fs.fields = map[string]*fieldSet{}
			}
			fs.fields[rest] = sub
		case "i":
			i, err := strconv.Atoi(rest)
			if err != nil {
				return nil, fmt.Errorf("field set entry %q: %w", k, err)
			}
			if fs.byIndex == nil {
				fs.byIndex = map[int]*fieldSet{}
			}
			fs.byIndex[i] = sub
		case "v":
			if fs.byValue == nil {
				fs.byValue = map[string]*fieldSet{}
			}
			fs.byValue[rest] = sub
		case "k":
			var key map[string]any
			if err := json.Unmarshal([]byte(rest), &key); err != nil {
				return nil, fmt.Errorf("field set entry %q: %w", k, err)
			}
			fs.byKey = append(fs.byKey, keyedFields{key: key, sub: sub})
		}
	}
	return fs, nil
}

// maxParsedFieldSets bounds parsedFieldSets. Children rendered alike share one interned field
// set, so a cluster has a few of them per kind and rendering shape; past the bound (renderings
// that differ in list keys, say) the cache starts over rather than grow.
const maxParsedFieldSets = 1024

// parsedFieldSets holds the parsed form of each interned field set (unique.Handle[string] to
// *fieldSet), so that a drift check parses a shape once, not once per child.
var parsedFieldSets struct {
	sync.Map
	n atomic.Int64
}

// parsedFieldSet returns the parsed form of the interned field set h.
func parsedFieldSet(h unique.Handle[string]) (*fieldSet, error) {
	if fs, ok := parsedFieldSets.Load(h); ok {
		return fs.(*fieldSet), nil
	}
	fs, err := parseFieldSet(h.Value())
	if err != nil {
		return nil, err
	}
	// Only a new entry counts: two reconciles may parse the same shape at once.
	if _, loaded := parsedFieldSets.LoadOrStore(h, fs); !loaded && parsedFieldSets.n.Add(1) > maxParsedFieldSets {
		parsedFieldSets.Clear()
		parsedFieldSets.n.Store(0)
	}
	return fs, nil
}

// unowned returns the first field that want sets and the operator's apply no longer owns (another
// writer changed it, which moves its ownership to that writer), or "" when it owns them all.
// Server-side apply keeps a field's value while its owner does, so ownership is the drift check:
// it needs no copy of the values, and a value the API server normalizes is not drift.
func (c *Child) Unowned(want *unstructured.Unstructured) string {
	if c.owned == (unique.Handle[string]{}) {
		return "."
	}
	fs, err := parsedFieldSet(c.owned)
	if err != nil {
		return "."
	}
	// The type and the name identify the object; field sets do not list them.
	top := maps.Clone(want.Object)
	delete(top, "apiVersion")
	delete(top, "kind")
	if meta, ok := top["metadata"].(map[string]any); ok {
		meta = maps.Clone(meta)
		delete(meta, "name")
		delete(meta, "namespace")
		top["metadata"] = meta
	}
	return ownership{owner: string(ControllerOf(c).UID)}.uncovered(fs, top)
}

// ownership holds a rendering to a field set whose controller owner's UID is ownerPlaceholder:
// owner is the UID it stands for.
type ownership struct{ owner string }

// uncovered returns the path of the first field of v (in key order) that fs does not hold, or "".
// Empty values are not compared (an apply of an empty list or map may leave no field). The path
// is built only for the field found.
func (o ownership) uncovered(fs *fieldSet, v any) string {
	if fs.whole {
		return ""
	}
	switch w := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(w)) {
			if empty(w[k]) {
				continue
			}
			sub := fs.fields[k]
			if sub == nil {
				return "." + k
			}
			if p := o.uncovered(sub, w[k]); p != "" {
				return "." + k + p
			}
		}
	case []any:
		for i, el := range w {
			sub := o.element(fs, el, i)
			if sub == nil {
				return "[" + strconv.Itoa(i) + "]"
			}
			if p := o.uncovered(sub, el); p != "" {
				return "[" + strconv.Itoa(i) + "]" + p
			}
		}
	}
	return ""
}

// element returns the field set of list element el (the i-th), or nil when fs has none: by its
// index, a scalar by its value, an object by its key fields.
func (o ownership) element(fs *fieldSet, el any, i int) *fieldSet {
	if sub := fs.byIndex[i]; sub != nil {
		return sub
	}
	m, isMap := el.(map[string]any)
	if !isMap {
		raw, _ := unstructuredjson.Marshal(el)
		value := string(raw)
		if o.owner != "" {
			value = strings.ReplaceAll(value, o.owner, ownerPlaceholder)
		}
		return fs.byValue[value]
	}
	for _, k := range fs.byKey {
		if o.keyMatches(k.key, m) {
			return k.sub
		}
	}
	return nil
}

// keyMatches reports whether element m has the values of keyFields, for the key fields it sets
// (a key field the API server defaulted, such as a port's protocol, is not in the rendering).
func (o ownership) keyMatches(keyFields, m map[string]any) bool {
	matched := 0
	for f, kv := range keyFields {
		ev, ok := m[f]
		if !ok {
			continue
		}
		if kv == ownerPlaceholder && o.owner != "" {
			kv = o.owner
		}
		if en, ok := unstructuredjson.Number(ev); ok {
			if kn, _ := unstructuredjson.Number(kv); kn != en {
				return false
			}
		} else if ev != kv {
			return false
		}
		matched++
	}
	return matched > 0
}

// empty reports whether v is nil or an empty map or list.
func empty(v any) bool {
	switch w := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(w) == 0
	case []any:
		return len(w) == 0
	}
	return false
}
