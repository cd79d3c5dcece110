package bench

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"

	operatorprocess "evals.si/operator/reconcile/process"
	"evals.si/operator/shard"
)

// auditPolicy logs, for the controllers' service account only, each request that writes, once
// it completed: the API server's own record of what a contender wrote; a Lease's writes with
// their bodies, which say who holds each shard (BenchmarkShards' double writers). An access
// review (the operator asks whether it may watch a kind before it starts its controller) is a
// question, not a write, and is not logged.
var auditPolicy = fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  resources: [{group: authorization.k8s.io}]
- level: Request
  users: [%q]
  resources: [{group: coordination.k8s.io, resources: [leases]}]
  verbs: [create, update, patch]
- level: Metadata
  users: [%q]
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`, "system:serviceaccount:"+controllerNamespace+":"+controllerAccount, "system:serviceaccount:"+controllerNamespace+":"+controllerAccount)

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
	events, err := auditEvents(from, to)
	if err != nil {
		return nil, err
	}
	out := writeCount{}
	for _, ev := range events {
		r := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			r += "/" + ev.ObjectRef.Subresource
		}
		if c := ev.ResponseStatus.Code; c >= 400 {
			r += fmt.Sprintf(" refused %d", c)
		}
		out[r]++
	}
	return out, nil
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

// auditEvent is what the benchmarks read of one audit event.
type auditEvent struct {
	UserAgent string    `json:"userAgent"`
	Verb      string    `json:"verb"`
	Received  time.Time `json:"requestReceivedTimestamp"`
	// Completed is when the API server answered (the events are logged at ResponseComplete).
	Completed time.Time `json:"stageTimestamp"`
	ObjectRef struct {
		Resource, Namespace, Name, Subresource string
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	// RequestObject is the body of a write logged at level Request (a Lease's).
	RequestObject json.RawMessage `json:"requestObject"`
}

// auditEvents reads the events logged between from and to.
func auditEvents(from, to auditMark) ([]auditEvent, error) {
	f, err := os.Open(env.AuditLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.NewSectionReader(f, int64(from), int64(to-from)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var out []auditEvent
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("reading the audit log: %w", err)
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}

// leaseWrite is one successful write of a shard Lease, as the audit log holds it: when the API
// server completed it, the holder it named ("" for released), and the shard.
type leaseWrite struct {
	at     time.Time
	holder string
	shard  shard.Shard
}

// shardLeases are the writes of each shard Lease, by name, in the order the API server completed
// them.
type shardLeases map[string][]leaseWrite

// leaseHolders reads the successful writes of the shard Leases of the operator named name in
// namespace ns from events: the Lease's name gives its shard's index (process.ShardLease), its
// label the number of shards (process.LabelShards), its body the holder.
func leaseHolders(events []auditEvent, ns, name string) shardLeases {
	out := shardLeases{}
	for _, ev := range events {
		r := ev.ObjectRef
		if r.Resource != "leases" || r.Namespace != ns || r.Subresource != "" || ev.ResponseStatus.Code >= 300 || len(ev.RequestObject) == 0 {
			continue
		}
		var l coordinationv1.Lease
		if err := json.Unmarshal(ev.RequestObject, &l); err != nil {
			continue
		}
		count, err := strconv.Atoi(cmp.Or(l.Labels[operatorprocess.LabelShards], "1"))
		if err != nil {
			continue
		}
		index := 0
		if count > 1 {
			i, ok := strings.CutPrefix(r.Name, name+"-shard-")
			if index, err = strconv.Atoi(i); !ok || err != nil {
				continue // a member slot or the standby
			}
		} else if r.Name != name {
			continue
		}
		out[r.Name] = append(out[r.Name], leaseWrite{at: ev.Completed, holder: ptr.Deref(l.Spec.HolderIdentity, ""), shard: shard.Shard{Index: index, Count: count}})
	}
	for _, writes := range out {
		slices.SortStableFunc(writes, func(a, b leaseWrite) int { return a.at.Compare(b.at) })
	}
	return out
}

// heldBy reports whether replica id held, at t, the shard Lease of the owner uid: the last write
// of a Lease whose shard holds uid completed before t named id.
func (l shardLeases) heldBy(id, uid string, t time.Time) bool {
	for _, writes := range l {
		last := -1
		for i, w := range writes {
			if !w.at.Before(t) {
				break
			}
			last = i
		}
		if last >= 0 && writes[last].holder == id && writes[last].shard.Contains(uid) {
			return true
		}
	}
	return false
}
