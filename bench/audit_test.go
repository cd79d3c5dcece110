package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

// auditPolicy logs, for the controllers' service account only, each request that writes, once
// it completed: the API server's own record of what a contender wrote. An access review (the
// operator asks whether it may watch a kind before it starts its controller) is a question, not
// a write, and is not logged.
var auditPolicy = fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  resources: [{group: authorization.k8s.io}]
- level: Metadata
  users: [%q]
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`, "system:serviceaccount:"+controllerNamespace+":"+controllerAccount)

// auditMark is a position in the audit log.
type auditMark int64

// mark returns the audit log's current end.
func mark() auditMark {
	fi, err := os.Stat(env.AuditLog)
	if err != nil {
		return 0
	}
	return auditMark(fi.Size())
}

// writes counts the writes logged between from and to, by resource ("deployments",
// "evaluators/status", ...); a write the API server refused counts apart, under its resource and
// status code ("evaluators/status refused 409"), since it cost the server a request all the same.
func writes(from, to auditMark) (writeCount, error) {
	f, err := os.Open(env.AuditLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.NewSectionReader(f, int64(from), int64(to-from)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	out := writeCount{}
	for sc.Scan() {
		var ev struct {
			ObjectRef struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("reading the audit log: %w", err)
		}
		r := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			r += "/" + ev.ObjectRef.Subresource
		}
		if c := ev.ResponseStatus.Code; c >= 400 {
			r += fmt.Sprintf(" refused %d", c)
		}
		out[r]++
	}
	return out, sc.Err()
}

// writeCount is a number of writes by resource.
type writeCount map[string]int

func (w writeCount) total() int {
	n := 0
	for _, v := range w {
		n += v
	}
	return n
}

// String lists the counts by resource, sorted.
func (w writeCount) String() string {
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(w)) {
		parts = append(parts, fmt.Sprintf("%s %d", r, w[r]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
