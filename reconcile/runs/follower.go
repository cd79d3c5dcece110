package runs

import (
	"context"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
)

// runBatch is how many runs one BatchGetRuns call reads.
const runBatch = 500

// follower reads, every poll interval, every run that a running EvalRun follows, in batches (one
// BatchGetRuns call per project and runBatch runs instead of one GetRun per run), keeps what it
// read for the EvalRuns' reconciles, and queues the EvalRuns whose run changed. It only saves
// calls: each running EvalRun still comes back on its own (fallback) and reads its run itself when
// the follower has nothing fresh for it, so a failed or missed batch delays an update by at most
// that fallback and never loses it.
type follower struct {
	mu     sync.Mutex
	latest map[string]followedRun // by project/id, from the last sweep only
}

type followedRun struct {
	run *v1.Run
	at  time.Time
}

// running reports whether obj follows a run that has not ended (the kind's Followed): only those
// are decoded for a sweep.
func running(obj *unstructured.Unstructured) bool {
	runID, _, _ := unstructured.NestedString(obj.Object, "status", "runId")
	phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
	return runID != "" && !evalsi.TerminalPhase(phase) && obj.GetDeletionTimestamp() == nil
}

// follow sweeps the runs every poll interval until ctx ends.
func (er *evalRuns) follow(ctx context.Context, c *engine.Controller) {
	wait.UntilWithContext(ctx, func(ctx context.Context) { er.sweep(ctx, c) }, er.opts.PollInterval)
}

// fresh returns the run project/id as the follower read it within the last two poll intervals.
func (f *follower) fresh(project, id string, interval time.Duration, now time.Time) (*v1.Run, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.latest[project+"/"+id]
	if !ok || now.Sub(r.at) > 2*interval {
		return nil, false
	}
	return r.run, true
}

// sweep reads the runs of the running EvalRuns in the cache, batched by project, replaces what the
// follower keeps with what it read, and queues each EvalRun whose status its run would change, or
// whose run is gone (its reconcile says so).
func (er *evalRuns) sweep(ctx context.Context, c *engine.Controller) {
	if !c.Synced() {
		return
	}
	type watched struct {
		key    string
		status map[string]any
	}
	byProject := map[string][]string{}
	followed := map[string]watched{} // by project/id
	for key, obj := range c.Followed() {
		runID, _, _ := unstructured.NestedString(obj.Object, "status", "runId")
		project, err := c.Project(obj)
		if err != nil {
			continue // its reconcile reports the refusal
		}
		status, _, _ := unstructured.NestedMap(obj.Object, "status")
		byProject[project] = append(byProject[project], runID)
		followed[project+"/"+runID] = watched{key, status}
	}
	latest := map[string]followedRun{}
	for project, ids := range byProject {
		slices.Sort(ids)
		for chunk := range slices.Chunk(ids, runBatch) {
			resp, err := er.api.Runs.BatchGetRuns(ctx, connect.NewRequest(&v1.BatchGetRunsRequest{Project: project, Ids: chunk}))
			if err != nil {
				// The EvalRuns read their runs themselves at their fallback.
				c.Log().Debug("reading runs in a batch failed", "project", project, "runs", len(chunk), "err", err)
				continue
			}
			now := er.opts.Clock.Now()
			for _, run := range resp.Msg.Runs {
				id := project + "/" + run.Id
				latest[id] = followedRun{run, now}
				if f, ok := followed[id]; ok && changes(runStatus(run).Fields, f.status) {
					c.Enqueue(f.key)
				}
			}
			for _, id := range resp.Msg.Missing {
				if f, ok := followed[project+"/"+id]; ok {
					c.Enqueue(f.key)
				}
			}
		}
	}
	er.follower.replace(latest)
}

// changes reports whether fields would change status, a status map.
func changes(fields, status map[string]any) bool {
	for k, v := range fields {
		if !engine.SameJSON(v, status[k]) {
			return true
		}
	}
	return false
}

// replace makes latest what the follower keeps.
func (f *follower) replace(latest map[string]followedRun) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latest = latest
}
