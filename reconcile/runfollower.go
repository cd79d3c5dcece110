package reconcile

import (
	"context"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsi"
	"evals.si/operator/render"
)

// runBatch is how many runs one BatchGetRuns call reads.
const runBatch = 500

// runFollower reads, every poll interval, every run that a running EvalRun follows, in batches
// (one BatchGetRuns call per project and runBatch runs instead of one GetRun per run), keeps what
// it read for the EvalRuns' reconciles, and queues the EvalRuns whose run changed. It only saves
// calls: each running EvalRun still comes back on its own (runFallback) and reads its run itself
// when the follower has nothing fresh for it, so a failed or missed batch delays an update by at
// most that fallback and never loses it.
type runFollower struct {
	mu     sync.Mutex
	latest map[string]followedRun // by project/id, from the last sweep only
}

type followedRun struct {
	run *v1.Run
	at  time.Time
}

// runFallback is how long a running EvalRun waits for its next reconcile when nothing changes:
// a few poll intervals, for the follower to have read its run in between.
func (e *Engine) runFallback() time.Duration { return jitter(3 * e.cfg.RunPollInterval) }

// fresh returns the run project/id as the follower read it within the last two poll intervals.
func (f *runFollower) fresh(project, id string, interval time.Duration) (*v1.Run, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.latest[project+"/"+id]
	if !ok || time.Since(r.at) > 2*interval {
		return nil, false
	}
	return r.run, true
}

// sweepRuns reads the runs of the running EvalRuns in the cache, batched by project, replaces
// what the follower keeps with what it read, and queues each EvalRun whose status its run would
// change, or whose run is gone (its reconcile says so).
func (e *Engine) sweepRuns(ctx context.Context) {
	e.mu.Lock()
	c := e.controllers["evalrun"]
	e.mu.Unlock()
	if c == nil || !c.inf.shared.HasSynced() || e.versionRefusal() != "" {
		return
	}
	type follower struct {
		key    string
		status map[string]any
	}
	byProject := map[string][]string{}
	followers := map[string]follower{} // by project/id
	opts := e.renderOptions()
	for _, o := range c.inf.shared.GetStore().List() {
		obj, err := o.(*cachedOwner).object()
		if err != nil {
			continue // its reconcile reports it
		}
		runID, _, _ := unstructured.NestedString(obj.Object, "status", "runId")
		phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
		if runID == "" || evalsi.TerminalPhase(phase) || obj.GetDeletionTimestamp() != nil {
			continue
		}
		project, err := render.Project(obj, opts)
		if err != nil {
			continue // its reconcile reports the refusal
		}
		key, err := cache.MetaNamespaceKeyFunc(obj)
		if err != nil {
			continue
		}
		byProject[project] = append(byProject[project], runID)
		followers[project+"/"+runID] = follower{key, statusFields(obj)}
	}
	latest := map[string]followedRun{}
	for project, ids := range byProject {
		slices.Sort(ids)
		for chunk := range slices.Chunk(ids, runBatch) {
			resp, err := e.api.Runs.BatchGetRuns(ctx, connect.NewRequest(&v1.BatchGetRunsRequest{Project: project, Ids: chunk}))
			if err != nil {
				// The EvalRuns read their runs themselves at their fallback.
				e.log.Debug("reading runs in a batch failed", "project", project, "runs", len(chunk), "err", err)
				continue
			}
			now := time.Now()
			for _, run := range resp.Msg.Runs {
				id := project + "/" + run.Id
				latest[id] = followedRun{run, now}
				if f, ok := followers[id]; ok && !sameJSON(runStatus(run).Fields, f.status) {
					c.queue.Add(f.key)
				}
			}
			for _, id := range resp.Msg.Missing {
				if f, ok := followers[project+"/"+id]; ok {
					c.queue.Add(f.key)
				}
			}
		}
	}
	e.runs.replace(latest)
}

// replace makes latest what the follower keeps.
func (f *runFollower) replace(latest map[string]followedRun) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latest = latest
}
