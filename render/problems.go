package render

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"evals.si/operator/schemas"
)

// pointer is the JSON pointer of a field, such as /spec/env/0/name: the form every error of
// validation and rendering names its field in.
type pointer string

// at is the pointer of p's member name.
func (p pointer) at(name string) pointer {
	return p + "/" + pointer(schemas.EscapePointer(name))
}

// index is the pointer of p's element i.
func (p pointer) index(i int) pointer { return p + "/" + pointer(strconv.Itoa(i)) }

// specPointer is where every spec field is.
const specPointer pointer = "/spec"

// problems collects what is wrong with a spec, each with its field.
type problems schemas.Errors

// add records a problem of the field at p.
func (ps *problems) add(p pointer, format string, args ...any) {
	*ps = append(*ps, schemas.FieldError{Pointer: string(p), Message: fmt.Sprintf(format, args...)})
}

// addAll records each message of a Kubernetes validation helper (which returns sentences
// without the field) as a problem of the field at p.
func (ps *problems) addAll(p pointer, messages []string) {
	for _, m := range messages {
		ps.add(p, "%s", m)
	}
}

// err returns the problems as schemas.Errors in pointer order, or nil when there are none.
func (ps problems) err() error {
	if len(ps) == 0 {
		return nil
	}
	out := slices.Clone(schemas.Errors(ps))
	slices.SortStableFunc(out, func(a, b schemas.FieldError) int { return strings.Compare(a.Pointer, b.Pointer) })
	return out
}
