package runs

import (
	"context"
	"maps"
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

// Follower reads, every poll interval, every run that a running EvalRun follows, in batches (one
// BatchGetRuns call per project and runBatch runs instead of one GetRun per run), keeps what it
// read for the EvalRuns' reconciles, and queues the EvalRuns whose run changed. It only saves
// calls: each running EvalRun still comes back on its own (fallback) and reads its run itself when
// the follower has nothing fresh for it, so a failed or missed batch delays an update by at most
// that fallback and never loses it. A process has one (Options.Follower), whatever shards it
// holds: it sweeps the EvalRuns of every shard's engine together, a batch per project for all of
// them, in one loop that runs while an engine does.
type Follower struct {
	mu     sync.Mutex
	latest map[string]followedRun // by project/id, from the last sweep only
	// joined are the EvalRun controllers of the engines that run; stop ends the loop, which
	// closes ended once its last sweep has returned.
	joined map[*engine.Controller]bool
	stop   context.CancelFunc
	ended  chan struct{}
}

// NewFollower returns a follower that sweeps nothing until an engine's EvalRun controller runs.
func NewFollower() *Follower { return &Follower{joined: map[*engine.Controller]bool{}} }

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

// follow has the follower sweep c's EvalRuns until ctx ends (the kind's Run). The first
// controller to join starts the loop, at its kind's poll interval; the last to leave stops it
// and returns once its sweep has, so that nothing of a stopped engine runs on.
func (er *evalRuns) follow(ctx context.Context, c *engine.Controller) {
	f := er.follower
	f.mu.Lock()
	f.joined[c] = true
	if f.stop == nil {
		var lctx context.Context
		lctx, f.stop = context.WithCancel(context.WithoutCancel(ctx))
		f.ended = make(chan struct{})
		go func(ended chan struct{}) {
			defer close(ended)
			wait.UntilWithContext(lctx, func(ctx context.Context) { er.sweep(ctx) }, er.opts.PollInterval)
		}(f.ended)
	}
	f.mu.Unlock()
	<-ctx.Done()
	f.mu.Lock()
	delete(f.joined, c)
	if len(f.joined) > 0 {
		f.mu.Unlock()
		return
	}
	stop, ended := f.stop, f.ended
	f.stop, f.ended = nil, nil
	f.mu.Unlock()
	stop()
	<-ended // a sweep takes the lock: waited for without it
}

// fresh returns the run project/id as the follower read it within the last two poll intervals.
func (f *Follower) fresh(project, id string, interval time.Duration, now time.Time) (*v1.Run, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.latest[project+"/"+id]
	if !ok || now.Sub(r.at) > 2*interval {
		return nil, false
	}
	return r.run, true
}

// followedBy is a running EvalRun as a sweep reads it: the controller that queues it, its key and
// its status.
type followedBy struct {
	c      *engine.Controller
	key    string
	status map[string]any
}

// sweep reads the runs of the running EvalRuns in the caches of every joined controller that has
// synced, batched by project, replaces what the follower keeps with what it read, and queues each
// EvalRun whose status its run would change, or whose run is gone (its reconcile says so).
func (er *evalRuns) sweep(ctx context.Context) {
	f := er.follower
	f.mu.Lock()
	controllers := slices.Collect(maps.Keys(f.joined))
	f.mu.Unlock()
	if len(controllers) == 0 {
		return
	}
	log := controllers[0].Log()
	byProject := map[string][]string{}
	followed := map[string]followedBy{} // by project/id
	for _, c := range controllers {
		if !c.Synced() {
			continue
		}
		for key, obj := range c.Followed() {
			runID, _, _ := unstructured.NestedString(obj.Object, "status", "runId")
			project, err := c.Project(obj)
			if err != nil {
				continue // its reconcile reports the refusal
			}
			status, _, _ := unstructured.NestedMap(obj.Object, "status")
			byProject[project] = append(byProject[project], runID)
			followed[project+"/"+runID] = followedBy{c, key, status}
		}
	}
	latest := map[string]followedRun{}
	for project, ids := range byProject {
		slices.Sort(ids)
		for chunk := range slices.Chunk(ids, runBatch) {
			resp, err := er.api.Runs.BatchGetRuns(ctx, connect.NewRequest(&v1.BatchGetRunsRequest{Project: project, Ids: chunk}))
			if err != nil {
				// The EvalRuns read their runs themselves at their fallback.
				log.Debug("reading runs in a batch failed", "project", project, "runs", len(chunk), "err", err)
				continue
			}
			now := er.opts.Clock.Now()
			for _, run := range resp.Msg.Runs {
				id := project + "/" + run.Id
				latest[id] = followedRun{run, now}
				if fb, ok := followed[id]; ok && changes(runStatus(run).Fields, fb.status) {
					fb.c.Enqueue(fb.key)
				}
			}
			for _, id := range resp.Msg.Missing {
				if fb, ok := followed[project+"/"+id]; ok {
					fb.c.Enqueue(fb.key)
				}
			}
		}
	}
	f.replace(latest)
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
func (f *Follower) replace(latest map[string]followedRun) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latest = latest
}
